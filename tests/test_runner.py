"""End to end: compose a config, run it into tmp_path, check every output and resuming."""

from __future__ import annotations

import csv
import json
import os
import stat
from pathlib import Path

import pytest
import yaml
from conftest import smoke_multirun, smoke_settings

from viking_eval.run import experiment as loop
from viking_eval.run.experiment import run_experiment

SPREAD_OVER_WORKERS = True  # tests/conftest.py: independent tests, each to the next free worker

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.needs_data
def test_smoke_run_writes_every_output(data_env: Path, tmp_path: Path) -> None:
    summary = run_experiment(smoke_settings(), tmp_path / "run", config_yaml="name: smoke\n")
    out = tmp_path / "run"
    for name in [
        "metrics.json",
        "metrics.csv",
        "per_query.csv",
        "latency.json",
        "environment.json",
        "report.md",
        "config.yaml",
        "runs/bm25.trec",
        "runs/dense.trec",
    ]:
        assert (out / name).is_file(), name
    document = json.loads((out / "metrics.json").read_text())
    assert document["dataset"] == "adi" and document["split"] == "test"
    assert set(document["retrievers"]) == {"bm25", "dense"}
    bm25 = document["retrievers"]["bm25"]
    assert set(bm25["metrics"]) == {"nDCG@10", "R@10", "R@100", "RR@10", "AP@100"}
    assert 0.2 < bm25["metrics"]["nDCG@10"] < 0.8  # ADI BM25 is around 0.4-0.5
    assert {"p50_ms", "p95_ms", "qps"} <= set(bm25["latency"])
    assert bm25["n_queries"] == summary.results[0].n_queries == len(summary.results[0].per_query["nDCG@10"])
    # per-query rows: one per (retriever, judged query); their mean is the aggregate
    with open(out / "per_query.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row["retriever"] == "bm25"]
    assert len(rows) == bm25["n_queries"]
    mean = sum(float(row["nDCG@10"]) for row in rows) / len(rows)
    assert mean == pytest.approx(bm25["metrics"]["nDCG@10"], abs=1e-9)
    # TREC file: ranks 1..n per query, scores non-increasing, ties in doc id order
    lines = [line.split() for line in (out / "runs" / "bm25.trec").read_text().splitlines()]
    first_query = [line for line in lines if line[0] == lines[0][0]]
    assert [int(line[3]) for line in first_query] == list(range(1, len(first_query) + 1))
    keys = [(-float(line[4]), line[2]) for line in first_query]
    assert keys == sorted(keys)
    environment = json.loads((out / "environment.json").read_text())
    assert environment["packages"]["bm25s"] and environment["store_key"]
    # written with the user's umask, not 0600 (issue 12)
    umask = os.umask(0)
    os.umask(umask)
    for path in [
        out / "metrics.json",
        out / "report.html",
        out / "runs" / "bm25.trec",
        out / "results" / "bm25.json",
    ]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


@pytest.mark.needs_data
def test_second_run_is_deterministic_and_embeds_nothing(data_env: Path, tmp_path: Path) -> None:
    first = run_experiment(smoke_settings("run.latency.n_queries=0"), tmp_path / "a")
    second = run_experiment(smoke_settings("run.latency.n_queries=0"), tmp_path / "b")
    assert first.metrics() == second.metrics()
    assert (tmp_path / "a/runs/dense.trec").read_bytes() == (tmp_path / "b/runs/dense.trec").read_bytes()
    environment = json.loads((tmp_path / "b" / "environment.json").read_text())
    assert environment["store_built_now"] is False
    assert environment["cache_builds"] == 0


@pytest.mark.needs_data
def test_interrupted_run_resumes_without_redoing_finished_work(
    data_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = smoke_settings("run.latency.n_queries=0")
    real = loop.run_retriever
    calls: list[str] = []

    def interrupted(settings, spec, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(spec.name)
        if spec.name == "dense":
            raise KeyboardInterrupt
        return real(settings, spec, *args, **kwargs)

    monkeypatch.setattr(loop, "run_retriever", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(settings, tmp_path / "run")
    assert (tmp_path / "run/results/bm25.json").is_file()
    assert not (tmp_path / "run/results/dense.json").exists()
    assert not (tmp_path / "run/metrics.json").exists()
    assert not [p for p in (tmp_path / "run").rglob("*.tmp")]

    def counted(settings, spec, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(spec.name)
        return real(settings, spec, *args, **kwargs)

    monkeypatch.setattr(loop, "run_retriever", counted)
    summary = run_experiment(settings, tmp_path / "run")
    assert calls == ["bm25", "dense", "dense"]  # bm25 was not rerun
    assert {result.name for result in summary.results} == {"bm25", "dense"}


@pytest.mark.needs_data
def test_changed_parameters_are_not_taken_from_an_old_result(data_env: Path, tmp_path: Path) -> None:
    run_experiment(smoke_settings("run.latency.n_queries=0", "run.top_k=5"), tmp_path / "run")
    summary = run_experiment(smoke_settings("run.latency.n_queries=0", "run.top_k=100"), tmp_path / "run")
    lines = (tmp_path / "run/runs/bm25.trec").read_text().splitlines()
    per_query = max(int(line.split()[3]) for line in lines)
    assert per_query > 5
    assert summary.results[0].metrics["R@100"] >= summary.results[0].metrics["R@10"]


@pytest.mark.slow
@pytest.mark.needs_data
def test_cli_multirun_writes_sweep_summary_and_resumes(data_env: Path, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    done = smoke_multirun(sweep_dir, "run.latency.n_queries=5", "store.bm25.k1=0.9,1.5", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(sweep_dir / "sweep.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["job"], row["store.bm25.k1"], row["retriever"]) for row in rows] == [
        ("0", "0.9", "bm25"),
        ("0", "0.9", "dense"),
        ("1", "1.5", "bm25"),
        ("1", "1.5", "dense"),
    ]
    assert rows[0]["nDCG@10"] != rows[2]["nDCG@10"]  # k1 changes BM25
    assert rows[1]["nDCG@10"] == rows[3]["nDCG@10"]  # and not dense
    # each job's wall time, the same on every row of the job, is metrics.json's wall_seconds
    job_seconds = {row["job"]: float(row["job_seconds"]) for row in rows}
    assert [float(row["job_seconds"]) for row in rows] == [job_seconds[row["job"]] for row in rows]
    for job, seconds in job_seconds.items():
        assert seconds > 0
        assert seconds == json.loads((sweep_dir / job / "metrics.json").read_text())["wall_seconds"]
    sweep_md = (sweep_dir / "sweep.md").read_text()
    assert "store.bm25.k1" in sweep_md
    assert "(plot_bm25_nDCG_10_vs_store_bm25_k1.png)" in sweep_md
    assert (sweep_dir / "plot_bm25_nDCG_10_vs_store_bm25_k1.png").read_bytes()[:4] == b"\x89PNG"
    assert (sweep_dir / "pareto_bm25_nDCG_10.png").is_file()
    best = yaml.safe_load((sweep_dir / "best.yaml").read_text())
    assert best["objective"] == "bm25.nDCG@10"  # the swept store parameter feeds BM25; first metric
    tuned = {row["job"]: float(row["nDCG@10"]) for row in rows if row["retriever"] == "bm25"}
    assert best["job"] == max(tuned, key=lambda job: (tuned[job], -int(job)))
    assert best["tuned_on"]["split"] == "test[tune half]"  # ADI has one split: tune on a seeded half
    assert best["evaluated_on"]["split"] == "test[holdout half]"
    assert best["overrides"] == {"store.bm25.k1": rows[2 * int(best["job"])]["store.bm25.k1"]}
    assert 0 <= best["best_vs_default"]["p_value"] <= 1
    marker = sweep_dir / "0" / "results" / "bm25.json"
    before = marker.stat().st_mtime_ns
    again = smoke_multirun(sweep_dir, "run.latency.n_queries=5", "store.bm25.k1=0.9,1.5", timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert marker.stat().st_mtime_ns == before  # finished job not redone
    # a resumed job keeps the cost of its work (the markers' recorded seconds), not the resume's
    with open(sweep_dir / "sweep.csv") as handle:
        resumed = {row["job"]: float(row["job_seconds"]) for row in csv.DictReader(handle)}
    assert set(resumed) == set(job_seconds)  # the same command: every job is still its job
    for job in job_seconds:
        recorded = sum(
            json.loads((sweep_dir / job / "results" / f"{name}.json").read_text())["cost_seconds"]
            for name in ("bm25", "dense")
        )
        assert recorded > 0 and resumed[job] >= recorded


def test_pareto_front_by_hand() -> None:
    from viking_eval.report.sweep_plots import pareto_front

    # (quality, latency): b dominates a; c is faster but worse; d is dominated by b
    points = [(0.5, 10.0), (0.6, 8.0), (0.4, 2.0), (0.55, 9.0)]
    assert pareto_front(points) == [1, 2]
