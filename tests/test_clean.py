"""``python -m viking_eval.clean`` (issue 25 item 7): lists the run folders that failed or never
finished, with size and error line, and removes them only with ``--yes``; never a finished run,
nor a sweep folder holding finished jobs (their files byte-identical afterwards), nor a folder
written to recently (it may still be running)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import run_cli

from viking_eval.clean import find_leftovers, main
from viking_eval.results import layout, run_folder

SMOKE = ["experiment=smoke", "run.latency.n_queries=0"]
HOUR = 3600.0


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _age(folder: Path, seconds: float) -> None:
    """Every file of ``folder`` last written ``seconds`` ago."""
    moment = time.time() - seconds
    for path in folder.rglob("*"):
        os.utime(path, (moment, moment))


@pytest.fixture
def reports(shared_datasets: Path, tmp_path: Path) -> Path:
    """reports/: a finished run, a run that failed (the CLI: a setting the store refuses, after
    its folder exists), a sweep with a finished job and a failed one, a run killed long ago
    (no metrics.json, no status) and one written to a minute ago."""
    root = tmp_path / "reports"
    env = {"VIKING_EVAL_DATA": str(shared_datasets)}
    finished = root / "smoke" / "finished"
    done = run_cli(*SMOKE, f"hydra.run.dir={finished}", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    failed = root / "smoke" / "failed"
    done = run_cli(*SMOKE, "retrievers.dense.nprobe=4", f"hydra.run.dir={failed}", env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    shutil.copytree(finished, root / "sweep" / "0")
    shutil.copytree(finished, root / "sweep" / "1")
    run_folder.mark_failed(root / "sweep" / "1", "retrievers.dense.nprobe: not with an exact index")
    for name, age in (("killed", 3 * HOUR), ("running", 60.0)):
        folder = root / "smoke" / name
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "config.yaml").write_text("name: smoke\n", encoding="utf-8")
        (folder / "cli.log").write_text("[INFO] - embedding corpus 10/82\n", encoding="utf-8")
        _age(folder, age)
    _age(failed, 2 * HOUR)
    return root


@pytest.mark.needs_data
def test_clean_lists_failed_runs_and_removes_them_only_when_asked(
    reports: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = reports / "smoke" / "failed"
    status = json.loads((failed / layout.STATUS).read_text(encoding="utf-8"))
    assert status["folder"] == str(failed)
    assert status["clean"] == f"python -m viking_eval.clean {reports / 'smoke'}"
    kept = {name: _snapshot(reports / name) for name in ("smoke/finished", "sweep/0")}

    found = {item.folder.relative_to(reports).as_posix(): item for item in find_leftovers(reports)}
    assert set(found) == {"smoke/failed", "smoke/killed", "smoke/running", "sweep/1"}
    assert found["smoke/failed"].kind == "failed" and found["smoke/failed"].detail == status["error"]
    assert found["smoke/failed"].detail.startswith("retrievers.dense.nprobe:")
    assert found["smoke/failed"].size_bytes == sum(p.stat().st_size for p in failed.rglob("*") if p.is_file())
    assert (
        found["smoke/killed"].kind == "unfinished"
        and "embedding corpus 10/82" in found["smoke/killed"].detail
    )
    assert found["smoke/running"].skipped and not found["smoke/killed"].skipped

    assert main([str(reports), "--dry-run", "--yes"]) == 0  # --dry-run wins: nothing removed
    out = capsys.readouterr().out
    assert f"{failed}  retrievers.dense.nprobe:" in out and "skipped (written 1 min ago" in out
    assert "3 folder(s)" in out and "nothing removed" in out
    assert all((reports / name).is_dir() for name in found)
    assert main([str(reports)]) == 0  # not a terminal, no --yes: nothing removed
    assert all((reports / name).is_dir() for name in found)

    assert main([str(reports), "--yes"]) == 0
    assert not failed.exists() and not (reports / "smoke" / "killed").exists()
    assert not (reports / "sweep" / "1").exists()
    assert (reports / "smoke" / "running").is_dir()  # may still be running: kept
    assert {name: _snapshot(reports / name) for name in kept} == kept
    assert run_folder.is_finished_run(reports / "smoke" / "finished")


@pytest.mark.needs_data
def test_a_finished_run_or_a_sweep_holding_one_is_never_removed(reports: Path) -> None:
    before = _snapshot(reports / "sweep")
    for folder in (reports / "smoke" / "finished", reports / "sweep", reports / "smoke"):
        with pytest.raises(run_folder.RemoveRefused, match="a finished run is in it"):
            run_folder.remove_run(folder)
    assert _snapshot(reports / "sweep") == before
    # the sweep's finished job is never listed; its failed job is
    listed = {item.folder.relative_to(reports).as_posix() for item in find_leftovers(reports)}
    assert "sweep/1" in listed and "sweep/0" not in listed and "sweep" not in listed


def test_a_missing_folder_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nowhere'}: not a folder\n"


@pytest.mark.parametrize("last_file", [layout.FUSE, layout.GROWTH])
def test_a_finished_fuse_or_growth_folder_is_kept_and_one_killed_before_its_last_file_is_listed(
    tmp_path: Path, last_file: str
) -> None:
    """A fuse or growth folder has no metrics.json: its last file (fuse.json, growth.json) says
    it finished. Without that file, idle for longer than --idle-minutes, it is unfinished."""
    reports = tmp_path / "reports"
    for name in ("done", "killed"):
        folder = reports / name
        (folder / ".hydra").mkdir(parents=True)  # a fuse writes no config.yaml of its own
        (folder / ".hydra" / "config.yaml").write_text("name: x\n", encoding="utf-8")
        (folder / "steps").mkdir()
        (folder / "steps" / "step.json").write_text("{}", encoding="utf-8")
    (reports / "done" / last_file).write_text("{}", encoding="utf-8")
    _age(reports, 3 * HOUR)
    found = {item.folder.name: item for item in find_leftovers(reports)}
    assert set(found) == {"killed"} and found["killed"].kind == "unfinished"
    assert run_folder.is_finished_output(reports / "done")
    assert not run_folder.is_finished_run(reports / "done")  # not a run: no metrics to read
    with pytest.raises(run_folder.RemoveRefused):
        run_folder.remove_run(reports / "done")
    run_folder.mark_failed(reports / "done", "a later attempt failed")
    assert not run_folder.is_finished_output(reports / "done")
