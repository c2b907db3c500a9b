"""The leaderboard (viking_eval/benchmark/leaderboard.py): finished runs and benchmarks in one table, refused
when the data or the metric settings differ."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from conftest import shared_data_env, smoke_settings

from viking_eval import files
from viking_eval.benchmark.leaderboard import main
from viking_eval.config.compose import compose_config, hydra_session
from viking_eval.run.experiment import run_experiment


@pytest.fixture(scope="module")
def runs(shared_datasets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two finished ADI runs (BM25 + TF-IDF dense; the second with BM25 k1 = 1.2) and a benchmark
    folder holding a copy of the first as its 'adi@static' variant run."""
    root = tmp_path_factory.mktemp("leaderboard")
    with shared_data_env(shared_datasets):
        for name, extra in (("first", []), ("second", ["store.bm25.k1=1.2"])):
            settings = smoke_settings("run.latency.n_queries=0", *extra)
            run_experiment(settings, root / "runs" / name, config_yaml=_yaml(extra))
    bench = root / "bench"
    shutil.copytree(root / "runs" / "first", bench / "adi@static")
    files.write_json(
        bench / "benchmark.json",
        {
            "format": 1,
            "kind": "benchmark",
            "runs": [{"dataset": "adi", "variant": "static", "folder": "adi@static"}],
        },
    )
    return root


def _yaml(extra: list[str]) -> str:
    """The config.yaml a run of ``experiment=smoke`` (+ extra) writes."""
    from omegaconf import OmegaConf

    with hydra_session():
        return OmegaConf.to_yaml(
            compose_config(["experiment=smoke", "run.latency.n_queries=0", *extra]), resolve=True
        )


@pytest.mark.needs_data
def test_runs_and_benchmarks_in_one_table(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(runs), "--csv", str(tmp_path / "lb.csv"), "--md", str(tmp_path / "lb.md")]) == 0
    with open(tmp_path / "lb.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    # 2 runs x 2 retrievers, and the benchmark's run once (not again as a plain run): 6 rows
    assert len(rows) == 6
    assert {row["retriever"] for row in rows} == {
        "bm25",
        "dense · tfidf",
        "bm25@static",
        "dense@static · tfidf",
    }
    first = json.loads((runs / "runs" / "first" / "metrics.json").read_text())
    bm25 = next(row for row in rows if row["retriever"] == "bm25" and row["folder"].endswith("first"))
    assert float(bm25["nDCG@10"]) == first["retrievers"]["bm25"]["metrics"]["nDCG@10"]
    assert bm25["dataset"] == "adi" and bm25["split"] == "test" and bm25["queries"] == "35"
    assert bm25["date"] and len(bm25["git"].split("+")[0]) == 12
    # the config hash: BM25 with k1 1.2 is another configuration; the dense retriever's store changed too
    hashes = {(row["retriever"], row["folder"].rsplit("/", 1)[-1]): row["config"] for row in rows}
    assert hashes[("bm25", "first")] != hashes[("bm25", "second")]
    assert hashes[("bm25", "first")] == hashes[("bm25@static", "adi@static")]  # same config, same hash
    # sorted by the first metric, best first
    values = [float(row["nDCG@10"]) for row in rows]
    assert values == sorted(values, reverse=True)
    assert (tmp_path / "lb.md").read_text().splitlines()[4].startswith("| retriever ")
    assert "bm25@static" in capsys.readouterr().out


@pytest.mark.needs_data
def test_different_data_is_refused(runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    changed = tmp_path / "changed"
    shutil.copytree(runs / "runs" / "first", changed)
    environment = json.loads((changed / "environment.json").read_text())
    environment["dataset_files"]["qrels/test.tsv"] = "f" * 64
    (changed / "environment.json").write_text(json.dumps(environment))
    assert main([str(runs / "runs" / "first"), str(changed)]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: adi (test): data checksums differ: qrels/test.tsv sha256 ")
    assert "ffffffffffff in " in line and "\n" not in line


@pytest.mark.needs_data
def test_different_metric_settings_are_refused(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deeper = tmp_path / "deeper"
    shutil.copytree(runs / "runs" / "second", deeper)
    config = (deeper / "config.yaml").read_text()
    (deeper / "config.yaml").write_text(config.replace("  top_k: 100\n", "  top_k: 1000\n", 1))
    assert main([str(runs / "runs" / "first"), str(deeper)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: adi (test): metric settings differ: run.top_k 100 in {runs / 'runs' / 'first'} vs 1000 in {deeper}"
    )


def test_a_folder_without_runs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no finished run or benchmark folder in it" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2
