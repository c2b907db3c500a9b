"""A sweep folder's job folders are reused only by the same job (issue 23, item 2).

A second grid sent into the same ``hydra.sweep.dir`` would have Hydra write its job 0 into the
first grid's folder ``0``: the command is refused before anything is written (one line, exit 2),
and every file of the sweep folder stays byte-identical. The same command resumed reuses its
folders without redoing the finished retrievers. The Optuna sweeper makes the same check per
trial. ADI, experiment=smoke (BM25 + TF-IDF), no latency timing."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from viking_eval.results import run_folder, sweep_folder

BASE = ["experiment=smoke", "run.latency.n_queries=0"]


def _multirun(sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return run_cli("-m", *BASE, *overrides, f"hydra.sweep.dir={sweep_dir}")


def _hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file below ``folder``, by relative path."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _work_files(folder: Path) -> dict[str, str]:
    """The files a job writes only when it computes a retriever: markers and run files."""
    return {key: value for key, value in _hashes(folder).items() if "/results/" in key or "/runs/" in key}


@pytest.mark.needs_data
def test_a_second_grid_into_the_same_sweep_dir_is_refused_and_the_first_kept(
    data_env: Path, tmp_path: Path
) -> None:
    sweep_dir = tmp_path / "D"
    first = _multirun(sweep_dir, "store.bm25.k1=0.1,0.2,0.3")
    assert first.returncode == 0, first.stderr[-3000:]
    assert [sweep_folder.read_job_overrides(sweep_dir / job)[-1] for job in "012"] == [
        "store.bm25.k1=0.1",
        "store.bm25.k1=0.2",
        "store.bm25.k1=0.3",
    ]
    before = _hashes(sweep_dir)
    assert "0/metrics.json" in before and "best.yaml" in before and "multirun.yaml" in before

    second = _multirun(sweep_dir, "store.bm25.k1=0.35,0.45")
    assert second.returncode == 2
    assert second.stderr == (
        f"error: hydra.sweep.dir: job 0 of this command (experiment=smoke run.latency.n_queries=0 "
        f"store.bm25.k1=0.35) would write into {sweep_dir / '0'}, which holds another job "
        "(experiment=smoke run.latency.n_queries=0 store.bm25.k1=0.1) (2 jobs of this command clash); "
        "a sweep folder's job folders are reused only by the same jobs (resuming the same command): "
        "give this command another hydra.sweep.dir\n"
    )
    assert _hashes(sweep_dir) == before  # every file of the first grid, summaries included

    # the same command again: the same jobs, their finished retrievers not recomputed (a marker
    # records the seconds its work took, so a recomputed one would differ)
    work = _work_files(sweep_dir)
    # 3 jobs x (bm25, dense) x (results/*.json, runs/*.trec), and best_final and default_final
    assert len([key for key in work if key.split("/")[0].isdigit()]) == 3 * 4 and len(work) == 5 * 4
    metrics = {job: run_folder.read_metrics(sweep_dir / job)["retrievers"] for job in "012"}
    resumed = _multirun(sweep_dir, "store.bm25.k1=0.1,0.2,0.3")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _work_files(sweep_dir) == work
    assert {job: run_folder.read_metrics(sweep_dir / job)["retrievers"] for job in "012"} == metrics
    assert "not jobs of this command" not in resumed.stdout  # the summary is the same three jobs


@pytest.mark.needs_data
def test_an_optuna_study_does_not_write_into_another_jobs_folder(data_env: Path, tmp_path: Path) -> None:
    study = ["hparams_search=bm25_optuna", "hydra.sweeper.n_trials=2", "sweep.evaluate_best=false"]
    grid_dir = tmp_path / "grid"
    grid = _multirun(grid_dir, "store.bm25.k1=0.1,0.2", "sweep.evaluate_best=false")
    assert grid.returncode == 0, grid.stderr[-3000:]
    before = _hashes(grid_dir)

    refused = _multirun(grid_dir, *study)
    assert refused.returncode == 2
    error = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "Traceback" not in refused.stderr
    assert error[0].startswith(
        "error: hydra.sweep.dir: trial 0 of this command (experiment=smoke run.latency.n_queries=0 "
        "hparams_search=bm25_optuna sweep.evaluate_best=false store.bm25.k1="
    )
    assert (
        f"would write into {grid_dir / '0'}, which holds another job (experiment=smoke "
        "run.latency.n_queries=0 store.bm25.k1=0.1 sweep.evaluate_best=False); "
    ) in error[0]
    assert error[0].endswith("give this command another hydra.sweep.dir")
    assert _hashes(grid_dir) == before  # multirun.yaml included: nothing written

    # an in-memory study run again with its seed draws the same trials: the same jobs, reused
    study_dir = tmp_path / "study"
    done = _multirun(study_dir, *study)
    assert done.returncode == 0, done.stderr[-3000:]
    work = _work_files(study_dir)
    assert len(work) == 2 * 4
    again = _multirun(study_dir, *study)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _work_files(study_dir) == work


def _job(folder: Path, overrides: list[str]) -> Path:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "metrics.json").write_text("{}")
    return folder


def test_a_folder_is_free_for_the_same_job_only(tmp_path: Path) -> None:
    clash = sweep_folder.job_folder_clash
    job = ["experiment=smoke", "store.bm25.k1=0.1"]
    assert clash(tmp_path / "missing", job) is None
    (tmp_path / "empty" / ".hydra").mkdir(parents=True)
    assert clash(tmp_path / "empty", job) is None  # an empty folder (and empty .hydra) holds nothing
    logged = tmp_path / "logged"
    logged.mkdir()
    (logged / "cli.log").write_text("")  # a job killed before Hydra recorded its overrides
    assert clash(logged, job) is None

    same = _job(tmp_path / "same", job)
    assert clash(same, job) is None
    assert clash(same, list(reversed(job))) is None  # the order overrides were typed in does not count
    assert clash(same, ["experiment=smoke", "store.bm25.k1=0.35"]) == (
        "another job (experiment=smoke store.bm25.k1=0.1)"
    )
    assert clash(same, [*job, "sweep.evaluate_best=false"]) is not None  # another command line

    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    assert clash(stray, job) == "files of no recorded job (notes.txt)"
    (tmp_path / "file").write_text("")
    assert clash(tmp_path / "file", job) == "a file, not a job folder"
    broken = tmp_path / "broken"
    (broken / ".hydra").mkdir(parents=True)
    (broken / ".hydra" / "overrides.yaml").write_text("[unclosed")
    assert clash(broken, job) == "a job whose overrides.yaml cannot be read (ParserError)"
