"""A benchmark folder (DESIGN.md section 5): the only module that reads or writes its own files.

A benchmark folder (``viking_eval/benchmark/run.py``) holds one run folder per dataset (and
variant), written by the runner as any run (``run_folder.py``), and the table over them:
``benchmark.json`` (a stable contract, below), ``benchmark.csv`` (one row per retriever, dataset
and metric), ``benchmark.md`` and ``benchmark.html`` (rendered by ``report/benchmark.py``). Every
write is atomic (``viking_eval/files.py``). (``benchmark.lock``, held while a benchmark runs, is
the runner's lock, not a result: ``benchmark/run.py``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from viking_eval import files
from viking_eval.benchmark.table import comparison_record
from viking_eval.report.benchmark import CSV_COLUMNS, benchmark_html, benchmark_markdown, csv_rows
from viking_eval.results import layout
from viking_eval.results.run_folder import RunFolderError, csv_text, read_json_object

if TYPE_CHECKING:
    from viking_eval.benchmark.table import BenchmarkTable

BENCHMARK_FORMAT = 1


def benchmark_document(table: BenchmarkTable, environment: Mapping[str, Any]) -> dict[str, Any]:
    """benchmark.json::

    {"format": 1, "kind": "benchmark", "name": ..., "datasets": [...], "rows": [...],
     "baseline": ..., "metrics": [...], "variants": {name: [overrides]},
     "table": {row: {dataset: {"metrics": {...}, "latency": {"p50_ms": ...}}}},
     "mean": {row: {metric: mean over datasets}},
     "significance": {"test", "correction", "alpha", "family_size", "comparisons": [...]},
     "runs": [{"dataset", "variant", "folder", "split", "n_queries", "wall_seconds", "rows",
               "data_files"}],
     "wall_seconds": ..., "environment": {...}}
    """
    settings = table.settings
    return {
        "format": BENCHMARK_FORMAT,
        "kind": "benchmark",
        "name": table.name,
        "datasets": list(table.datasets),
        "rows": list(table.rows),
        "baseline": table.baseline,
        "metrics": list(table.metrics),
        "variants": {name: list(overrides) for name, overrides in table.variants.items()},
        "table": {
            row: {
                dataset: {"metrics": metrics, "latency": table.latency.get(row, {}).get(dataset, {})}
                for dataset, metrics in table.values.get(row, {}).items()
            }
            for row in table.rows
        },
        "mean": {row: {metric: table.mean(row, metric) for metric in table.metrics} for row in table.rows},
        "significance": {
            "test": settings.test,
            "correction": settings.correction,
            "alpha": settings.alpha,
            "family_size": table.family_size(),
            "comparisons": [
                comparison_record(dataset, comparison)
                for dataset, report in table.significance.items()
                for comparison in report.comparisons
                if comparison.test == settings.test
            ],
        },
        "runs": [asdict(run) for run in table.runs],
        "wall_seconds": round(table.wall_seconds, 3),
        "environment": dict(environment),
    }


def write_benchmark(folder: Path, table: BenchmarkTable, environment: Mapping[str, Any]) -> None:
    """benchmark.json, benchmark.csv, benchmark.md and benchmark.html of a finished benchmark."""
    files.write_json(folder / layout.BENCHMARK, benchmark_document(table, environment))
    files.write_text(folder / layout.BENCHMARK_CSV, csv_text(CSV_COLUMNS, csv_rows(table)))
    files.write_text(folder / layout.BENCHMARK_MD, benchmark_markdown(table))
    files.write_text(folder / layout.BENCHMARK_HTML, benchmark_html(table, dict(environment)))


def is_benchmark_folder(folder: Path) -> bool:
    return (folder / layout.BENCHMARK).is_file()


def read_benchmark(folder: Path) -> dict[str, Any]:
    """benchmark.json, checked for its format."""
    document = read_json_object(folder / layout.BENCHMARK)
    if document.get("format") != BENCHMARK_FORMAT or document.get("kind") != "benchmark":
        raise RunFolderError(
            f"{folder / layout.BENCHMARK}: not a benchmark file of format {BENCHMARK_FORMAT}"
        )
    return document
