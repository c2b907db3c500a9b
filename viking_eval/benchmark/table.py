"""The benchmark table: retrievers x datasets, built from the runs of a benchmark (values, no I/O).

One cell is one retriever's aggregate metrics and latency on one dataset, taken unchanged from
that dataset's run (so a cell equals the single-dataset run of the same config). The mean over
datasets is the arithmetic mean of the cells (each dataset weighs the same, whatever its number of
queries: BEIR's and MTEB's average). Significance: on each dataset every row is compared with the
baseline row by the paired tests of viking_eval/measures/significance.py on the per-query values, and the
p-values are corrected (``run.significance.correction``) across every comparison of the *whole
table* (all datasets, rows and metrics, per test), not per dataset: with 4 datasets x 2 rows x 5
metrics a marker survives a family of 40 comparisons. The mean has no test (the datasets' queries
are not paired with each other).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from viking_eval.measures.corrections import adjust
from viking_eval.measures.paired_tests import TEST_NAMES, TESTS
from viking_eval.measures.significance import (
    Comparison,
    SignificanceReport,
    SignificanceSettings,
    compare_with_baseline,
)
from viking_eval.results.model import RunSummary

__all__ = ["BenchmarkRun", "BenchmarkTable", "build_table", "row_name", "table_significance"]

LATENCY_KEYS = ("p50_ms", "p95_ms", "qps", "batch_qps")


def row_name(retriever: str, variant: str | None) -> str:
    """A row of the table: the retriever's name, ``<retriever>@<variant>`` for a variant's run."""
    return retriever if variant is None else f"{retriever}@{variant}"


@dataclass(frozen=True)
class BenchmarkRun:
    """One run of the benchmark: a dataset (and variant) and its run folder (relative to the
    benchmark folder)."""

    dataset: str
    variant: str | None
    folder: str
    split: str
    n_queries: int
    wall_seconds: float
    rows: tuple[str, ...]
    data_files: dict[str, str]


@dataclass(frozen=True)
class BenchmarkTable:
    """Rows (retrievers) x datasets: metrics, latency, significance against ``baseline``."""

    name: str
    datasets: tuple[str, ...]
    rows: tuple[str, ...]
    baseline: str
    metrics: tuple[str, ...]
    values: dict[str, dict[str, dict[str, float]]]  # row -> dataset -> metric -> mean over queries
    latency: dict[str, dict[str, dict[str, float]]]  # row -> dataset -> p50_ms, p95_ms, qps, batch_qps
    n_queries: dict[str, int]  # dataset -> judged queries evaluated
    significance: dict[str, SignificanceReport]  # dataset -> comparisons, p adjusted over the whole table
    settings: SignificanceSettings
    runs: tuple[BenchmarkRun, ...]
    variants: dict[str, tuple[str, ...]]
    wall_seconds: float = 0.0

    @property
    def primary_metric(self) -> str:
        return self.metrics[0]

    def value(self, row: str, dataset: str, metric: str) -> float | None:
        return self.values.get(row, {}).get(dataset, {}).get(metric)

    def mean(self, row: str, metric: str) -> float | None:
        """Mean of the row's cells over every dataset; None when a dataset has no cell."""
        cells = [self.value(row, dataset, metric) for dataset in self.datasets]
        if any(cell is None for cell in cells):
            return None
        return math.fsum(cell for cell in cells if cell is not None) / len(cells)

    def comparison(self, row: str, dataset: str, metric: str) -> Comparison | None:
        report = self.significance.get(dataset)
        return report.find(row, metric) if report is not None else None

    def marker(self, row: str, dataset: str, metric: str) -> str:
        """▲/▼: significantly better/worse than the baseline on that dataset (primary test,
        corrected over the whole table)."""
        report = self.significance.get(dataset)
        return report.marker(row, metric) if report is not None else ""

    def family_size(self) -> int:
        """Comparisons of the primary test across the whole table (the correction's family)."""
        return sum(report.family_size() for report in self.significance.values())

    def legend(self) -> str:
        return (
            f"▲/▼: significantly better/worse than {self.baseline} on that dataset "
            f"({TEST_NAMES[self.settings.test]} on per-query values, {self.settings.correction} correction "
            f"over the {self.family_size()} comparisons of the whole table, alpha {self.settings.alpha})"
        )


def table_significance(
    per_query: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]],
    baseline: str,
    metrics: Sequence[str],
    settings: SignificanceSettings,
) -> dict[str, SignificanceReport]:
    """``per_query``: dataset -> row -> metric -> query id -> value. Every row against
    ``baseline`` on each dataset (every test), then each test's p-values adjusted together over
    all datasets, rows and metrics."""
    raw = {
        dataset: compare_with_baseline(
            rows, baseline, metrics, dataclasses.replace(settings, correction="none")
        )
        for dataset, rows in per_query.items()
    }
    flat = [(dataset, comparison) for dataset, report in raw.items() for comparison in report.comparisons]
    adjusted: dict[int, float] = {}
    for test in TESTS:
        family = [index for index, (_, comparison) in enumerate(flat) if comparison.test == test]
        values = adjust([flat[index][1].p_value for index in family], settings.correction) if family else []
        adjusted.update(zip(family, values, strict=True))
    by_dataset: dict[str, list[Comparison]] = {dataset: [] for dataset in raw}
    for index, (dataset, comparison) in enumerate(flat):
        p_adjusted = adjusted[index]
        by_dataset[dataset].append(
            dataclasses.replace(
                comparison,
                p_adjusted=p_adjusted,
                significant=p_adjusted <= settings.alpha and comparison.mean_difference != 0.0,
            )
        )
    return {
        dataset: SignificanceReport(baseline=baseline, settings=settings, comparisons=tuple(comparisons))
        for dataset, comparisons in by_dataset.items()
    }


def build_table(
    name: str,
    runs: Sequence[tuple[str, str | None, str, RunSummary, dict[str, str]]],
    *,
    datasets: Sequence[str],
    baseline: str,
    metrics: Sequence[str],
    settings: SignificanceSettings,
    variants: Mapping[str, Sequence[str]],
    wall_seconds: float = 0.0,
) -> BenchmarkTable:
    """The table from each run: ``(dataset, variant, folder, summary, data files)``. Rows keep
    the order they first appear in (the base run's retrievers, then each variant's)."""
    rows: list[str] = []
    values: dict[str, dict[str, dict[str, float]]] = {}
    latency: dict[str, dict[str, dict[str, float]]] = {}
    per_query: dict[str, dict[str, dict[str, dict[str, float]]]] = {dataset: {} for dataset in datasets}
    n_queries: dict[str, int] = {}
    described: list[BenchmarkRun] = []
    for dataset, variant, folder, summary, files in runs:
        names = []
        for result in summary.results:
            row = row_name(result.name, variant)
            names.append(row)
            if row not in rows:
                rows.append(row)
            values.setdefault(row, {})[dataset] = {metric: result.metrics[metric] for metric in metrics}
            latency.setdefault(row, {})[dataset] = {
                key: float(result.latency[key])
                for key in LATENCY_KEYS
                if result.latency and key in result.latency
            }
            per_query[dataset][row] = {metric: result.per_query[metric] for metric in metrics}
            n_queries[dataset] = result.n_queries
        described.append(
            BenchmarkRun(
                dataset=dataset,
                variant=variant,
                folder=folder,
                split=summary.split,
                n_queries=summary.results[0].n_queries if summary.results else 0,
                wall_seconds=summary.wall_seconds,
                rows=tuple(names),
                data_files=dict(files),
            )
        )
    significance = table_significance(
        {dataset: rows_of for dataset, rows_of in per_query.items() if baseline in rows_of},
        baseline,
        metrics,
        settings,
    )
    return BenchmarkTable(
        name=name,
        datasets=tuple(datasets),
        rows=tuple(rows),
        baseline=baseline,
        metrics=tuple(metrics),
        values=values,
        latency=latency,
        n_queries=n_queries,
        significance=significance,
        settings=settings,
        runs=tuple(described),
        variants={key: tuple(value) for key, value in variants.items()},
        wall_seconds=wall_seconds,
    )


def comparison_record(dataset: str, comparison: Comparison) -> dict[str, Any]:
    """One comparison as benchmark.json and benchmark.csv hold it."""
    return {
        "retriever": comparison.retriever,
        "dataset": dataset,
        "metric": comparison.metric,
        "test": comparison.test,
        "n_queries": comparison.n_queries,
        "mean_difference": comparison.mean_difference,
        "ci_low": comparison.ci_low,
        "ci_high": comparison.ci_high,
        "p_value": comparison.p_value,
        "p_adjusted": comparison.p_adjusted,
        "significant": comparison.significant,
    }
