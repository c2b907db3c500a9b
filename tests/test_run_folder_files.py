"""The run folder owns its files (issue 24): ``viking_eval/results/`` is the only writer of every
file in a run folder, a sweep folder and a benchmark folder, each write atomic
(``viking_eval/files.py``); a run marked failed (``status.json``) is not finished; report.html
lists exactly the files ``results/layout.py`` declares.

Two checks of who writes: a static one over the package's sources (no module outside
``results/`` and ``files.py`` calls anything that writes, renames or removes a file, except the
listed modules, each with its reason), and a recorded one: real runs (a run, a failed run, a
sweep) in a subprocess whose ``viking_eval.files.atomic_path`` records the module that asked for
each write; every file found in the folders afterwards (Hydra's own aside) was written that way
by a ``results/`` module.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from viking_eval.results import layout, run_folder

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "viking_eval"
SMOKE = ["experiment=smoke", "run.latency.n_queries=0"]

OWNERS = ("viking_eval/results/", "viking_eval/files.py")

ALLOWED_WRITERS = {
    "viking_eval/data/": "datasets: downloads, unpacked archives, conversions and their checksums",
    "viking_eval/run/cache.py": "the artifact cache (embeddings, fitted embedders, stores), not a run folder",
    "viking_eval/answers/cache.py": "the reader's and judge's replies in the cache (<cache>/answers/), not a run folder",
    "viking_eval/sweep/export.py": "tuned files exported into conf/tuned (never a run folder)",
    "viking_eval/benchmark/leaderboard.py": "--csv/--md: files at paths the user names",
    "viking_eval/benchmark/run.py": "benchmark.lock: the runner's lock while it runs, not a result",
    "viking_eval/gate/": "the gate's baseline file (python -m viking_eval.gate record), not a run folder",
}
"""Modules (or folders) outside ``results/`` that may write files, and why."""

WRITING_CALLS = {
    "write_text",
    "write_bytes",
    "write_json",
    "atomic_path",
    "unlink",
    "rename",
    "rmtree",
    "copyfile",
    "copy",
    "copy2",
    "move",
    "mkstemp",
    "NamedTemporaryFile",
    "FileLock",
}
"""Calls (by attribute or function name) that write, move or remove a file."""

OS_CALLS = {"replace", "rename", "link", "remove", "unlink", "symlink"}


def _writes(path: Path) -> list[str]:
    """``line: call`` for each call in the module that writes, renames or removes a file:
    ``WRITING_CALLS``, ``os.<OS_CALLS>``, ``open`` with a writing mode, ``savefig`` into anything
    but an in-memory buffer (a name bound to ``io.BytesIO()`` in the module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    buffers = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) in ("io.BytesIO", "BytesIO")
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
        writes = name in WRITING_CALLS or (owner == "os" and name in OS_CALLS)
        if name == "open" and not owner:
            mode = (
                node.args[1]
                if len(node.args) > 1
                else next((keyword.value for keyword in node.keywords if keyword.arg == "mode"), None)
            )
            writes = isinstance(mode, ast.Constant) and any(flag in str(mode.value) for flag in "wax+")
        if name == "savefig":
            target = node.args[0] if node.args else None
            writes = not (isinstance(target, ast.Name) and target.id in buffers)
        if writes:
            found.append(f"{node.lineno}: {ast.unparse(func)}")
    return found


def test_the_scan_finds_the_writes_it_looks_for(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        textwrap.dedent(
            """
            import io, os
            buffer = io.BytesIO()
            figure.savefig(buffer)
            figure.savefig(path)
            open(path, "w")
            open(path)
            open(path, mode="ab")
            os.replace(a, b)
            text.replace("a", "b")
            files.write_text(path, "x")
            path.unlink()
            """
        )
    )
    assert [line.split(": ", 1)[1] for line in _writes(source)] == [
        "figure.savefig",
        "open",
        "open",
        "os.replace",
        "files.write_text",
        "path.unlink",
    ]


def test_no_module_outside_results_writes_a_file() -> None:
    """Every write of the package is in results/ or files.py, or in a module listed (with its
    reason) in ALLOWED_WRITERS."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith(OWNERS) or relative.startswith(tuple(ALLOWED_WRITERS)):
            continue
        writes = _writes(path)
        if writes:
            offenders[relative] = writes
    assert offenders == {}
    for allowed in ALLOWED_WRITERS:
        assert (REPO / allowed).exists(), f"{allowed} no longer exists: remove it from ALLOWED_WRITERS"


def test_the_report_page_lists_exactly_the_files_the_layout_declares() -> None:
    """The page takes its file list from the layout (the rendered line: the recorded run below)."""
    from viking_eval.report import page

    text = Path(page.__file__).read_text(encoding="utf-8")
    assert "Files: <code>" not in text and "REPORTED_FILES" in text
    assert page.REPORTED_FILES is layout.REPORTED_FILES
    assert layout.REPORTED_FILES == (
        "metrics.json",
        "metrics.csv",
        "per_query.csv",
        "significance.csv",
        "latency.json",
        "spans/*.csv",
        "runs/*.trec",
        "environment.json",
        "config.yaml",
        "report.md",
    )


# --------------------------------------------------------------------------- real runs, recorded

RECORDER = """
import json, os, sys
from pathlib import Path

import viking_eval.files as files

_log = Path(os.environ["RUN_FOLDER_WRITES"])
_atomic_path = files.atomic_path


def _recording(path):
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.endswith(("viking_eval/files.py", "contextlib.py")):
        frame = frame.f_back
    caller = frame.f_code.co_filename if frame is not None else "?"
    with open(_log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"path": str(Path(path).resolve()), "caller": caller}) + "\\n")
    return _atomic_path(path)


files.atomic_path = _recording
"""


def _cli(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    recorder = tmp_path / "recorder"
    recorder.mkdir(exist_ok=True)
    (recorder / "sitecustomize.py").write_text(RECORDER, encoding="utf-8")
    environment = {**os.environ, **env, "RUN_FOLDER_WRITES": str(tmp_path / "writes.jsonl")}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(recorder), str(REPO), str(REPO / "tests"), environment.get("PYTHONPATH", "")]
    )
    return subprocess.run(
        [sys.executable, "-m", "viking_eval", *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _writers(tmp_path: Path) -> dict[str, set[str]]:
    """Path -> the source files that asked for its writes."""
    writers: dict[str, set[str]] = {}
    for line in (tmp_path / "writes.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        writers.setdefault(record["path"], set()).add(record["caller"])
    return writers


def _harness_files(folder: Path) -> list[Path]:
    """The files in ``folder`` except Hydra's own (``.hydra/``, job logs, ``multirun.yaml``)."""
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file()
        and ".hydra" not in path.relative_to(folder).parts
        and path.suffix != ".log"
        and path.name != "multirun.yaml"
    )


def _assert_written_by_results(tmp_path: Path, folder: Path) -> None:
    writers = _writers(tmp_path)
    owner = str(PACKAGE / "results") + os.sep
    found = _harness_files(folder)
    assert found
    for path in found:
        callers = writers.get(str(path.resolve()))
        assert callers, f"{path} was not written through viking_eval/files.py"
        assert all(caller.startswith(owner) for caller in callers), (path, callers)
    assert not [path for path in folder.rglob("*.tmp")]  # no temporary file left behind


@pytest.mark.needs_data
def test_a_failed_run_its_rerun_and_a_failed_run_over_it(shared_datasets: Path, tmp_path: Path) -> None:
    """A run with a setting the store refuses (an ANN knob on an exact store: refused when the
    retriever is built over the store): one line naming the key, exit 2, status.json failed, the
    retrievers before it kept; rerun without it: those resumed, finished, status.json gone; the
    finished folder rerun with the refused setting: failed again, and the earlier run's
    metrics.json no longer makes the folder finished. Every file written by results/."""
    env = {"VIKING_EVAL_DATA": str(shared_datasets)}
    run_dir = tmp_path / "run"
    refused = "error: retrievers.dense.nprobe: nprobe=4 applies to an approximate vector index"

    failed = _cli(tmp_path, *SMOKE, "retrievers.dense.nprobe=4", f"hydra.run.dir={run_dir}", env=env)
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(refused), failed.stderr[-3000:]
    status = json.loads((run_dir / layout.STATUS).read_text(encoding="utf-8"))
    assert status["status"] == "failed" and status["error"].startswith("retrievers.dense.nprobe:")
    assert (run_dir / "runs" / "bm25.trec").is_file() and not (run_dir / "runs" / "dense.trec").exists()
    assert not run_folder.is_finished_run(run_dir)
    _assert_written_by_results(tmp_path, run_dir)

    again = _cli(tmp_path, *SMOKE, f"hydra.run.dir={run_dir}", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "retriever bm25 already finished" in again.stdout + again.stderr
    assert not (run_dir / layout.STATUS).exists()
    assert run_folder.is_finished_run(run_dir) and run_folder.read_status(run_dir) is None
    _assert_written_by_results(tmp_path, run_dir)
    listed = "Files: " + ", ".join(f"<code>{name}</code>" for name in layout.REPORTED_FILES) + "."
    assert listed in (run_dir / layout.REPORT_HTML).read_text(encoding="utf-8")

    over = _cli(tmp_path, *SMOKE, "retrievers.dense.nprobe=4", f"hydra.run.dir={run_dir}", env=env)
    assert over.returncode == 2, over.stderr[-3000:]
    status = json.loads((run_dir / layout.STATUS).read_text(encoding="utf-8"))
    assert status["status"] == "failed" and status["error"].startswith("retrievers.dense.nprobe:")
    assert (run_dir / layout.METRICS).is_file() and (run_dir / layout.CONFIG).is_file()  # leftovers
    assert run_folder.read_status(run_dir) == "failed"
    assert not run_folder.is_finished_run(run_dir)
    _assert_written_by_results(tmp_path, run_dir)


def test_a_folder_marked_failed_is_not_finished(tmp_path: Path) -> None:
    (tmp_path / layout.METRICS).write_text("{}", encoding="utf-8")
    (tmp_path / layout.CONFIG).write_text("{}", encoding="utf-8")
    assert run_folder.is_finished_run(tmp_path)
    run_folder.mark_failed(tmp_path, "data/corpus.jsonl:2: not JSON")
    assert json.loads((tmp_path / layout.STATUS).read_text(encoding="utf-8")) == {
        "status": "failed",
        "error": "data/corpus.jsonl:2: not JSON",
        "folder": str(tmp_path),
        "clean": f"python -m viking_eval.clean {tmp_path.parent}",
    }
    assert not run_folder.is_finished_run(tmp_path)
    (tmp_path / layout.STATUS).write_text("[unclosed", encoding="utf-8")  # unreadable: not finished
    assert not run_folder.is_finished_run(tmp_path)


@pytest.mark.needs_data
def test_a_sweep_writes_every_file_through_results(shared_datasets: Path, tmp_path: Path) -> None:
    env = {"VIKING_EVAL_DATA": str(shared_datasets)}
    sweep_dir = tmp_path / "sweep"
    result = _cli(tmp_path, "-m", *SMOKE, "store.bm25.k1=0.9,1.2", f"hydra.sweep.dir={sweep_dir}", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    names = {path.name for path in sweep_dir.iterdir()}
    assert {layout.SWEEP_CSV, layout.SWEEP_MD, layout.SWEEP_HTML, layout.BEST} <= names
    assert any(name.endswith(".png") for name in names)
    assert {layout.BEST_FINAL, layout.DEFAULT_FINAL, "0", "1"} <= names
    assert (sweep_dir / "0" / layout.SWEEP_TAG).is_file()
    # a sweep job's report has its tables but no figure (drawing them cost more than the job);
    # the chosen configuration's final report has them
    job_page = (sweep_dir / "0" / layout.REPORT_HTML).read_text(encoding="utf-8")
    assert "<img" not in job_page and "figures left out of a sweep job's report" in job_page
    assert '<table id="latency">' in job_page
    final_page = (sweep_dir / layout.BEST_FINAL / layout.REPORT_HTML).read_text(encoding="utf-8")
    assert final_page.count('<img src="data:image/png;base64,') >= 2  # wins/ties/losses, differences
    assert "figures left out" not in final_page
    _assert_written_by_results(tmp_path, sweep_dir)
