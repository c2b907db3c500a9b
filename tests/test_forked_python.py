"""The tests' forking server (tests/forked_python.py) gives what a fresh interpreter gives, and
the variables a forked child may change are never read when the harness is imported."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import child_environment
from forked_python import CHILD_NAMES, CHILD_PREFIXES, PRELOAD, run_python, server_pid

REPO = Path(__file__).resolve().parents[1]

#: prints what a process sees of its start: argv, folder, one variable, sys.path's head, __name__
REPORT = textwrap.dedent(
    """
    import json, os, sys
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "value": os.environ.get("VIKING_EVAL_PROBE"),
                      "path0": sys.path[0], "name": __name__, "parent": os.getppid()}))
    print("to stderr", file=sys.stderr)
    raise SystemExit(int(sys.argv[-1]))
    """
)


def _environment(**extra: str) -> dict[str, str]:
    return child_environment(extra)


@pytest.mark.parametrize("status", [0, 3])
def test_a_forked_child_sees_what_a_fresh_interpreter_sees(tmp_path: Path, status: int) -> None:
    environment = _environment(VIKING_EVAL_PROBE="probe")
    argv = ["-c", REPORT, "word with spaces", str(status)]
    forked = run_python(argv, cwd=tmp_path, env=environment)
    fresh = run_python(argv, cwd=tmp_path, env=environment, fresh=True)
    assert json.loads(forked.stdout)["parent"] == server_pid(environment)  # forked, not started afresh
    assert json.loads(fresh.stdout)["parent"] == os.getpid()
    for done in (forked, fresh):
        assert done.returncode == status
        assert done.stderr == "to stderr\n"
        seen = json.loads(done.stdout)
        del seen["parent"]
        assert seen == {
            "argv": ["-c", "word with spaces", str(status)],
            "cwd": str(tmp_path),
            "value": "probe",
            "path0": "",
            "name": "__main__",
        }


def test_a_module_run_with_dash_m_gets_its_file_as_argv0_and_the_folder_on_the_path(tmp_path: Path) -> None:
    (tmp_path / "probe_module.py").write_text(REPORT, encoding="utf-8")
    environment = _environment()
    forked = run_python(["-m", "probe_module", "x", "0"], cwd=tmp_path, env=environment)
    fresh = run_python(["-m", "probe_module", "x", "0"], cwd=tmp_path, env=environment, fresh=True)
    assert forked.returncode == fresh.returncode == 0, forked.stderr
    seen, expected = json.loads(forked.stdout), json.loads(fresh.stdout)
    assert seen.pop("parent") == server_pid(environment) and expected.pop("parent") == os.getpid()
    assert seen == expected
    assert json.loads(forked.stdout)["argv"] == [str(tmp_path / "probe_module.py"), "x", "0"]


def test_an_uncaught_exception_prints_its_traceback_and_exits_1(tmp_path: Path) -> None:
    done = run_python(["-c", "raise ValueError('boom')"], cwd=tmp_path, env=_environment())
    assert done.returncode == 1
    assert "Traceback" in done.stderr and done.stderr.rstrip().endswith("ValueError: boom")


def test_a_time_out_kills_the_child_and_everything_it_started(tmp_path: Path) -> None:
    run_python(["-c", "pass"], cwd=tmp_path, env=_environment())  # the server is started
    marker = tmp_path / "grandchild.pid"
    code = (
        "import os, subprocess, sys, time\n"
        f"assert os.getppid() == {server_pid(_environment())}, 'not forked'\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(["-c", code], cwd=tmp_path, env=_environment(), timeout=8)
    assert marker.exists(), "the child did not start its own child within the 8 s time-out"
    grandchild = int(marker.read_text())
    try:  # the whole process group was killed: the grandchild ends (its pidfd turns readable)
        handle = os.pidfd_open(grandchild)
    except ProcessLookupError:
        return  # already gone
    try:
        readable, _, _ = select.select([handle], [], [], 30)
    finally:
        os.close(handle)
    assert readable, f"process {grandchild}, started by the timed-out child, is still running"


def test_the_server_keeps_serving_after_a_child_fails(tmp_path: Path) -> None:
    environment = _environment()
    assert run_python(["-c", "import os; os._exit(7)"], cwd=tmp_path, env=environment).returncode == 7
    done = run_python(
        ["-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], cwd=tmp_path, env=environment
    )
    assert done.returncode == -15
    assert run_python(["-c", "print('still here')"], cwd=tmp_path, env=environment).stdout == "still here\n"


#: imports every module of the three packages with os.environ recording each name read (by
#: name: not the reads of a loop over every variable, which libraries run to find their own prefix)
IMPORT_ALL = textwrap.dedent(
    """
    import importlib, json, os, pkgutil, sys
    read = set()
    environ_type = type(os.environ)
    getitem, contains = environ_type.__getitem__, environ_type.__contains__
    def recorded_getitem(self, key):
        if sys._getframe(1).f_code.co_name != "__iter__":  # not a copy of every variable
            read.add(key)
        return getitem(self, key)
    def recorded_contains(self, key):
        read.add(key)
        return contains(self, key)
    environ_type.__getitem__, environ_type.__contains__ = recorded_getitem, recorded_contains
    names = []
    for package in ("retrievers", "viking_eval", "hydra_plugins"):
        module = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
                names.append(info.name)
    for module in sys.argv[1:]:
        importlib.import_module(module)
    print(json.dumps({"read": sorted(read), "modules": len(names)}))
    """
)


def test_importing_the_harness_and_the_preloaded_libraries_reads_no_variable_a_child_may_change(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, *PRELOAD],
        cwd=tmp_path,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["modules"] > 100  # every module was imported
    changeable = [name for name in found["read"] if name.startswith(CHILD_PREFIXES) or name in CHILD_NAMES]
    assert changeable == []


def test_another_start_up_environment_gets_its_own_server(tmp_path: Path) -> None:
    """A variable read at start-up (here PYTHONPATH) differs: the child comes from a server started
    with it, so it imports what only that path has; the usual server keeps serving the others."""
    (tmp_path / "only_here.py").write_text("WHERE = 'only here'\n", encoding="utf-8")
    usual, other = _environment(), _environment(PYTHONPATH=str(tmp_path))
    code = "import os, only_here; print(only_here.WHERE, os.getppid())"
    done = run_python(["-c", code], cwd=REPO, env=other)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["only", "here", str(server_pid(other))]
    assert run_python(["-c", "import only_here"], cwd=REPO, env=usual).returncode == 1
    assert server_pid(usual) not in (None, server_pid(other))
