"""Benchmark mode (viking_eval/benchmark/run.py): the same retrievers over several datasets, one table;
every cell equals the single-dataset run of the same config; refused before any work when a
dataset is unknown."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import compose_settings, preflight_error, run_cli

from viking_eval.benchmark.run import check_benchmark, plan_jobs, run_benchmark
from viking_eval.config import ConfigError
from viking_eval.measures.corrections import adjust
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
COMMAND = [
    "experiment=benchmark",
    "benchmark.datasets=[adi,medline]",
    "run.latency.n_queries=5",
    "run.latency.warmup=1",
]


def test_jobs_are_the_single_dataset_commands() -> None:
    settings = compose_settings(*COMMAND)
    jobs = plan_jobs(settings, [*COMMAND, "dataset.strict=true"])
    assert [job.folder for job in jobs] == ["adi", "adi@static", "medline", "medline@static"]
    assert jobs[0].overrides == (
        "experiment=benchmark",
        "run.latency.n_queries=5",
        "run.latency.warmup=1",
        "dataset.strict=true",
        "dataset=adi",
        "benchmark.datasets=null",
    )
    assert jobs[1].overrides[-2:] == ("embedder=static", "~retrievers.bm25")
    with pytest.raises(ConfigError, match="both choose datasets"):
        plan_jobs(settings, [*COMMAND, "dataset=cisi"])


@pytest.mark.slow
@pytest.mark.needs_data
def test_benchmark_table_equals_the_single_dataset_runs(data_env: Path, tmp_path: Path) -> None:
    settings = compose_settings(*COMMAND)
    table = run_benchmark(settings, tmp_path / "bench", COMMAND)
    out = tmp_path / "bench"
    assert table.rows == ("bm25", "dense", "dense@static") and table.datasets == ("adi", "medline")
    for name in (
        "benchmark.json",
        "benchmark.csv",
        "benchmark.md",
        "benchmark.html",
        "adi/report.md",
        "medline@static/runs/dense.trec",
    ):
        assert (out / name).is_file(), name
    # every cell is the single-dataset run of the same config, to the last bit
    for dataset in ("adi", "medline"):
        single = run_experiment(
            compose_settings(
                *["experiment=benchmark", "benchmark.datasets=null", f"dataset={dataset}", *COMMAND[2:]]
            ),
            tmp_path / f"single_{dataset}",
        )
        for result in single.results:
            assert table.values[result.name][dataset] == result.metrics
        static = run_experiment(
            compose_settings(
                *[
                    "experiment=benchmark",
                    "benchmark.datasets=null",
                    f"dataset={dataset}",
                    *COMMAND[2:],
                    "embedder=static",
                    "~retrievers.bm25",
                ]
            ),
            tmp_path / f"static_{dataset}",
        )
        assert table.values["dense@static"][dataset] == static.results[0].metrics
    # the mean is over datasets, each weighing the same
    assert table.mean("bm25", "nDCG@10") == pytest.approx(
        (table.values["bm25"]["adi"]["nDCG@10"] + table.values["bm25"]["medline"]["nDCG@10"]) / 2, abs=1e-15
    )
    # significance: one family over the whole table (2 rows x 2 datasets x 5 metrics per test)
    comparisons = [
        c for report in table.significance.values() for c in report.comparisons if c.test == "t-test"
    ]
    assert table.family_size() == len(comparisons) == 20
    expected = adjust([c.p_value for c in comparisons], "holm")
    assert [c.p_adjusted for c in comparisons] == expected
    assert {c.retriever for c in comparisons} == {"dense", "dense@static"}
    document = json.loads((out / "benchmark.json").read_text())
    assert document["kind"] == "benchmark" and document["baseline"] == "bm25"
    assert document["table"]["dense"]["medline"]["metrics"] == table.values["dense"]["medline"]
    assert document["significance"]["family_size"] == 20 and set(
        document["table"]["bm25"]["adi"]["latency"]
    ) >= {"p50_ms", "p95_ms"}
    assert [run["folder"] for run in document["runs"]] == ["adi", "adi@static", "medline", "medline@static"]
    with open(out / "benchmark.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    means = [
        row
        for row in rows
        if row["dataset"] == "mean" and row["retriever"] == "bm25" and row["metric"] == "nDCG@10"
    ]
    assert float(means[0]["value"]) == table.mean("bm25", "nDCG@10")
    markdown = (out / "benchmark.md").read_text()
    assert "| bm25 (baseline) |" in markdown and "over the 20 comparisons of the whole table" in markdown

    # resumed: every run's markers are reused, the table is the same
    markers = sorted((out / "adi" / "results").glob("*.json"))
    stamps = [path.stat().st_mtime_ns for path in markers]
    again = run_benchmark(settings, out, COMMAND)
    assert [path.stat().st_mtime_ns for path in markers] == stamps
    assert again.values == table.values and again.latency == table.latency


@pytest.mark.needs_data
def test_an_unknown_dataset_is_refused_before_any_work(
    data_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench"
    line = preflight_error(
        capsys, "experiment=benchmark", "benchmark.datasets=[adi,scifakt]", f"hydra.run.dir={out}"
    )
    assert line.startswith(
        "error: benchmark.datasets: unknown dataset 'scifakt': not a dataset config (conf/dataset/: adi, "
    )
    assert "datasets there: adi, cisi" in line
    assert not out.exists()  # nothing ran, not even adi


@pytest.mark.needs_data
def test_a_missing_split_and_a_bad_variant_are_refused_too(data_env: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"dataset 'adi' \(.*\) has no qrels for split 'train'; splits: test"
    ):
        check_benchmark(compose_settings(*COMMAND, "dataset.split=train"), [*COMMAND, "dataset.split=train"])
    bad = [*COMMAND, "+benchmark.variants.big=['run.top_k=0']"]
    with pytest.raises(
        ConfigError,
        match=r"run.top_k: must be an integer in \[1, 10000\], got 0 \(benchmark.datasets: adi, variant big\)",
    ):
        check_benchmark(compose_settings(*bad), bad)


@pytest.mark.needs_data
def test_answers_over_a_dataset_without_gold_answers_are_refused_before_any_dataset_runs(
    data_env: Path,
) -> None:
    """answers.enabled: LoCoMo's queries carry answers, ADI's do not; found from the query files
    before LoCoMo runs (not at ADI's turn, after it)."""
    with_answers = ["experiment=benchmark", "answers.enabled=true"]
    fine = [*with_answers, "benchmark.datasets=[locomo]"]
    assert {job.dataset for job in check_benchmark(compose_settings(*fine), fine)} == {"locomo"}
    both = [*with_answers, "benchmark.datasets=[locomo,adi]"]
    with pytest.raises(
        ConfigError,
        match=r"answers.enabled: dataset 'adi' \(.*\): no query has a gold answer under 'answer' "
        r"\(answer metrics need one\): remove it from benchmark.datasets or set answers.enabled=false",
    ):
        check_benchmark(compose_settings(*both), both)


def test_a_benchmark_is_not_a_sweep(tmp_path: Path) -> None:
    result = run_cli("-m", "experiment=benchmark", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("error: benchmark.datasets: a benchmark runs every dataset itself: drop -m")
    )
