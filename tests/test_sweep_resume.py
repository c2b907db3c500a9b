"""Resuming a sweep folder with another command that shares some of its jobs (issue 12, item 3):
sweep.csv, sweep.md and best.yaml come from the current command's jobs only; the old command's
other job folders are counted, ignored and kept. (A command whose job would write into another
job's folder is refused: tests/test_sweep_folders.py.) ADI with BM25 + TF-IDF dense, no latency
timing."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import smoke_multirun

from viking_eval.results import sweep_folder
from viking_eval.sweep.summary import sweep_command, sweep_identity, sweep_jobs

REPO = Path(__file__).resolve().parents[1]


def _sweep(sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return smoke_multirun(sweep_dir, "run.latency.n_queries=0", *overrides, timeout=300)


def _bm25_ndcg(job_dir: Path) -> float:
    return json.loads((job_dir / "metrics.json").read_text())["retrievers"]["bm25"]["metrics"]["nDCG@10"]


@pytest.mark.slow
@pytest.mark.needs_data
def test_a_sweep_resumed_with_another_grid_uses_only_its_own_jobs(data_env: Path, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    first = _sweep(sweep_dir, "store.bm25.k1=0.05,0.1,1.5,2.0")
    assert first.returncode == 0, first.stderr[-3000:]
    old = {job: (sweep_dir / job / "metrics.json").stat().st_mtime_ns for job in ("2", "3")}

    # the same folder, a grid of its first two (worse) points: the same jobs 0 and 1, resumed;
    # folders 2 and 3 belong to the first command only
    second = _sweep(sweep_dir, "store.bm25.k1=0.05,0.1")
    assert second.returncode == 0, second.stderr[-3000:]
    with open(sweep_dir / "sweep.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["job"], row["store.bm25.k1"], row["retriever"]) for row in rows] == [
        ("0", "0.05", "bm25"),
        ("0", "0.05", "dense"),
        ("1", "0.1", "bm25"),
        ("1", "0.1", "dense"),
    ]
    assert "\n4 rows\n" in (sweep_dir / "sweep.md").read_text()
    # the old jobs score better on the tuning split: choosing among every folder would pick one
    assert max(_bm25_ndcg(sweep_dir / job) for job in "23") > max(_bm25_ndcg(sweep_dir / job) for job in "01")
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    assert best["job"] in {"0", "1"} and best["overrides"] == {
        "store.bm25.k1": rows[2 * int(best["job"])]["store.bm25.k1"]
    }
    assert best["tuned_on"]["value"] == max(_bm25_ndcg(sweep_dir / job) for job in "01")
    assert (
        f"2 finished job folder(s) in {sweep_dir} are not jobs of this command (another grid or search "
        "space) and are ignored, not deleted: 2, 3"
    ) in second.stdout
    # never deleted, never touched
    assert {job: (sweep_dir / job / "metrics.json").stat().st_mtime_ns for job in ("2", "3")} == old
    # each current job names the command that finished it
    tag = json.loads((sweep_dir / "0" / "sweep_job.json").read_text())
    assert tag["command"]["task_overrides"] == sorted(
        ["experiment=smoke", "run.latency.n_queries=0", "store.bm25.k1=0.05,0.1"]
    )
    assert tag["overrides"] == sweep_folder.read_job_overrides(sweep_dir / "0")


def _job(sweep_dir: Path, name: str, overrides: list[str], tag: dict[str, object] | None) -> Path:
    job_dir = sweep_dir / name
    (job_dir / ".hydra").mkdir(parents=True)
    (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job_dir / "metrics.json").write_text(json.dumps({"retrievers": {}}))
    (job_dir / "config.yaml").write_text("{}\n")  # a finished run: metrics.json and config.yaml
    if tag is not None:
        (job_dir / "sweep_job.json").write_text(json.dumps(tag))
    return job_dir


def test_sweep_jobs_are_the_folders_the_current_command_finished(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    config = OmegaConf.create(
        {"hydra": {"overrides": {"task": ["b=1,2", "a=x"]}, "sweeper": {"params": None}}}
    )
    command = sweep_command(config)
    assert command == {"task_overrides": ["a=x", "b=1,2"], "sweeper_params": None}
    identity = sweep_identity(command)
    other = sweep_identity({"task_overrides": ["a=x", "b=3,4"], "sweeper_params": None})
    assert identity != other
    with_params = OmegaConf.create(
        {"hydra": {"overrides": {"task": ["a=x", "b=1,2"]}, "sweeper": {"params": {"c": "interval(0,1)"}}}}
    )
    assert sweep_identity(sweep_command(with_params)) != identity  # the search space counts too

    sweep_dir = tmp_path / "sweep"
    mine = _job(sweep_dir, "0", ["a=x", "b=1"], {"sweep": identity, "overrides": ["a=x", "b=1"]})
    _job(sweep_dir, "1", ["a=x", "b=3"], {"sweep": other, "overrides": ["a=x", "b=3"]})  # another grid
    _job(sweep_dir, "2", ["a=x", "b=4"], None)  # finished by no tagged command (or rerun and crashed)
    # a tag whose overrides are not the folder's: the folder was reused by a job that did not finish
    _job(sweep_dir, "10", ["a=x", "b=2"], {"sweep": identity, "overrides": ["a=x", "b=9"]})
    (sweep_dir / "3" / ".hydra").mkdir(parents=True)  # a job that never finished: not a candidate
    jobs = sweep_jobs(sweep_dir, identity)
    assert jobs.current == [mine]
    assert [path.name for path in jobs.ignored] == ["1", "2", "10"]
    assert [path.name for path in sweep_jobs(sweep_dir).current] == ["0", "1", "2", "10"]  # no identity: all
