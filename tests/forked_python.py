"""``python -m MODULE ARGS`` and ``python -c CODE ARGS`` for the tests, each in its own process
forked from a server that has already imported the harness (the test suite's start-up saving).

A fresh ``python -m viking_eval`` spends 3-4 s of CPU importing Hydra, scipy, matplotlib,
faiss and the harness before it reads its first argument; the suite starts the CLI a few hundred
times. A pytest worker starts a server (:func:`run_python`, on first use), a plain Python
process that imports :data:`PRELOAD` and then forks one child per command. A child is a separate
process as ``subprocess.run`` would start: its own process group (a time-out kills it and
whatever it started), the command's working folder, environment, ``sys.argv`` and ``sys.path``,
stdin from ``/dev/null``, stdout and stderr in files read back as text, and the exit status a
fresh interpreter would give (``SystemExit``'s code, 1 and the traceback on an uncaught
exception, minus the signal number when killed). What it cannot give is a fresh interpreter's
start-up state.

Each start-up environment gets its own server (every variable but the harness's own,
``VIKING_EVAL_*``, ``HYDRA_FULL_ERROR``, read when an error is printed, and pytest's
``PYTEST_CURRENT_TEST``: none is read by name when the harness or :data:`PRELOAD` is imported,
tests/test_forked_python.py; a library may read any other when it is imported: ``PYTHONPATH``,
``HOME``, ``HF_*``, ``NUMBA_*``, thread counts, and matplotlib reads ``XDG_DATA_HOME``), at most
:data:`MAX_SERVERS` at once. A command runs in a fresh interpreter (``subprocess.run``) when:

- the caller asks for ``fresh=True``: two runs compared byte for byte, which must not share
  one string-hash seed (a fresh interpreter draws its own), or a test of start-up itself;
- ``os.fork`` is missing (not POSIX).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: what the server imports before it forks (each saves its import in every child that uses it)
PRELOAD = (
    # the harness and what a smoke run, a sweep and a report import (measured: sys.modules after one)
    "viking_eval.cli",
    "viking_eval.run.experiment",
    "viking_eval.report",
    "viking_eval.report.sweep_plots",
    "viking_eval.sweep",
    "viking_eval.sweep.summary",
    "viking_eval.gate",
    "viking_eval.benchmark.run",
    "retrievers.run_file",
    "hydra_plugins.viking_optuna_sweeper.sweeper",
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher",
    "hydra._internal.core_plugins.basic_launcher",
    "hydra._internal.core_plugins.basic_sweeper",
    "hydra._internal.core_plugins.file_config_source",
    "hydra._internal.core_plugins.importlib_resources_config_source",
    "hydra._internal.core_plugins.structured_config_source",
    "optuna",
    "scipy.stats",
    "matplotlib.pyplot",
    "matplotlib.backends.backend_agg",
    "PIL.PngImagePlugin",
    "faiss",
    "sklearn.decomposition",
    "sklearn.feature_extraction.text",
    "pytrec_eval",
    "bm25s",
)
#: environment variables a child may set differently from the server (read when used)
CHILD_PREFIXES = ("VIKING_EVAL_",)
CHILD_NAMES = frozenset({"HYDRA_FULL_ERROR", "PYTEST_CURRENT_TEST"})


def _may_differ(name: str) -> bool:
    return name in CHILD_NAMES or name.startswith(CHILD_PREFIXES)


def _startup(environment: Mapping[str, str]) -> dict[str, str]:
    """The variables a process's start-up may read: every one but those a child may change."""
    return {name: value for name, value in environment.items() if not _may_differ(name)}


class _Server:
    """One forking server process (this worker's), its request and reply pipes."""

    def __init__(self, environment: Mapping[str, str]) -> None:
        self.startup = _startup(environment)
        self.served = 0  #: commands run
        request_read, self._request = os.pipe()
        self._reply, reply_write = os.pipe()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import forked_python; forked_python.serve({request_read}, {reply_write})",
            ],
            env=dict(environment),
            cwd=Path(__file__).resolve().parent,
            pass_fds=(request_read, reply_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        os.close(request_read)
        os.close(reply_write)
        self._buffer = b""
        ready = self._read(None)
        if ready != {"ready": True}:
            raise RuntimeError(f"the forking test server did not start: {ready}")

    def _read(self, timeout: float | None) -> dict[str, Any] | None:
        """The server's next reply line, or None when ``timeout`` seconds pass without one."""
        while b"\n" not in self._buffer:
            readable, _, _ = select.select([self._reply], [], [], timeout)
            if not readable:
                return None
            chunk = os.read(self._reply, 65536)
            if not chunk:
                raise RuntimeError(f"the forking test server stopped (exit {self.process.wait()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(
        self, argv: list[str], cwd: str, environment: dict[str, str], timeout: float | None
    ) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory(prefix="forked-") as folder:
            out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
            request = {"argv": argv, "cwd": cwd, "env": environment, "stdout": out, "stderr": err}
            os.write(self._request, json.dumps(request).encode() + b"\n")
            started = self._read(None)
            assert started is not None and "pid" in started, started
            finished = self._read(timeout)
            if finished is None:  # as subprocess.run: kill it (and what it started), then raise
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(started["pid"], signal.SIGKILL)
                self._read(None)
                raise subprocess.TimeoutExpired([sys.executable, *argv], timeout or 0, _text(out), _text(err))
            return subprocess.CompletedProcess(
                [sys.executable, *argv], finished["status"], _text(out), _text(err)
            )

    def close(self) -> None:
        os.close(self._request)  # the server stops at the end of its requests
        self.process.wait(timeout=60)
        os.close(self._reply)


def _text(path: str) -> str:
    """A child's output as ``subprocess.run(..., text=True)`` gives it (universal newlines)."""
    with open(path, encoding="utf-8", errors="replace") as stream:
        return stream.read()


#: this worker's servers, one per start-up environment (at most :data:`MAX_SERVERS`)
_SERVERS: list[_Server] = []
#: servers kept at once: the one that served most stays, a test's own environment gets the other
MAX_SERVERS = 2
#: fork children (``FORKED_PYTHON=0``: every command in a fresh interpreter, to compare)
FORK = hasattr(os, "fork") and os.environ.get("FORKED_PYTHON", "1") != "0"


def server_pid(env: Mapping[str, str]) -> int | None:
    """The process id of the server whose children get the environment ``env`` (None: none yet)."""
    startup = _startup(env)
    return next((server.process.pid for server in _SERVERS if server.startup == startup), None)


def _server(env: Mapping[str, str]) -> _Server:
    """The server started with ``env``'s start-up variables, started now if there is none; when
    :data:`MAX_SERVERS` run, the one that served fewer commands stops first."""
    startup = _startup(env)
    for server in _SERVERS:
        if server.startup == startup:
            return server
    if len(_SERVERS) >= MAX_SERVERS:
        _SERVERS.sort(key=lambda server: server.served)
        _SERVERS.pop(0).close()
    server = _Server(env)
    _SERVERS.append(server)
    return server


@atexit.register
def _close_servers() -> None:
    while _SERVERS:
        _SERVERS.pop().close()


def run_python(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float | None = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` (``-m MODULE ...`` or ``-c CODE ...``) in ``cwd`` with exactly the
    environment ``env``, output captured as text: in a child of the worker's forking server for
    ``env``'s start-up variables, or in a fresh interpreter (module docstring: when)."""
    argv = list(argv)
    if not (FORK and not fresh and len(argv) >= 2 and argv[0] in ("-m", "-c")):
        return subprocess.run(
            [sys.executable, *argv], cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout
        )
    server = _server(env)
    server.served += 1
    return server.run(argv, str(cwd), dict(env), timeout)


# -- the server --------------------------------------------------------------------------------


def serve(request_fd: int, reply_fd: int) -> None:
    """Import :data:`PRELOAD`, then fork one child per request line until the pipe closes."""
    for module in PRELOAD:
        importlib.import_module(module)
    requests = os.fdopen(request_fd, "rb", buffering=0)

    def reply(message: dict[str, Any]) -> None:
        os.write(reply_fd, json.dumps(message).encode() + b"\n")

    reply({"ready": True})
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = requests.read(65536)
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            os.close(reply_fd)
            _child(request)  # never returns: the child ends by SystemExit
        reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        reply({"status": os.waitstatus_to_exitcode(status)})


def _child(request: dict[str, Any]) -> None:
    """Become the command's process, run it, and exit as a fresh ``python`` would."""
    import runpy

    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for source, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
        os.close(source)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    option, target, *rest = request["argv"]
    if option == "-m":
        # run as __main__ from its source, not found already imported (a fresh interpreter has not
        # imported it: runpy would warn that it has)
        sys.modules.pop(target, None)
        sys.argv = [target, *rest]  # runpy sets argv[0] to the module's file
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *rest]
        sys.path[0] = ""
        main = sys.modules["__main__"]
        for name in [name for name in vars(main) if not name.startswith("__")]:
            delattr(main, name)
        exec(compile(target, "<string>", "exec"), vars(main))
    raise SystemExit(0)
