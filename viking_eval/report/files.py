"""The files of a run folder (DESIGN.md section 5). ``metrics.json`` is a stable contract::

{"dataset": ..., "split": ..., "n_queries": ..., "data_issues": {...}, "wall_seconds": ...,
 "retrievers": {"<name>": {"metrics": {"nDCG@10": 0.67, ...},
                           "latency": {"p50_ms": ..., "p95_ms": ..., "qps": ...},
                           "n_queries": ...}}}
"""

from __future__ import annotations

import csv
import io as text_io
from typing import TYPE_CHECKING, Any

from viking_eval import io
from viking_eval.report.html import report_html
from viking_eval.report.markdown import report_markdown
from viking_eval.significance import CSV_COLUMNS, csv_rows

if TYPE_CHECKING:
    from viking_eval.runner import RunSummary
    from viking_eval.settings import Settings


def metrics_document(summary: RunSummary) -> dict[str, Any]:
    n_queries = summary.results[0].n_queries if summary.results else 0
    return {
        "dataset": summary.dataset,
        "split": summary.split,
        "n_queries": n_queries,
        "data_issues": summary.data_issues,
        "phase": summary.phase,
        "tuned_on_reported_split": summary.tuned_on_reported_split,
        "wall_seconds": round(summary.wall_seconds, 3),
        "retrievers": {
            result.name: {
                "metrics": result.metrics,
                # the per-query samples stay in latency.json
                "latency": (
                    {key: value for key, value in result.latency.items() if key != "samples_ms"}
                    if result.latency
                    else result.latency
                ),
                "n_queries": result.n_queries,
                "n_queries_without_results": result.n_queries_without_results,
                "run_seconds": round(result.run_seconds, 4),
                **({"groups": result.groups} if result.groups else {}),
                **({"stats": result.stats} if result.stats else {}),
            }
            for result in summary.results
        },
    }


def _csv_text(header: list[str], rows: list[list[Any]]) -> str:
    buffer = text_io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_outputs(summary: RunSummary, settings: Settings, environment: dict[str, Any]) -> None:
    """Write metrics.json/.csv, per_query.csv, latency.json, significance.csv, environment.json,
    report.md and report.html."""
    folder = summary.output_dir
    metric_names = [metric.name for metric in settings.metrics]
    io.write_json(folder / "metrics.json", metrics_document(summary))
    latency_keys = ["p50_ms", "p95_ms", "p99_ms", "mean_ms", "qps", "batch_qps"]
    rows = []
    for result in summary.results:
        latency = result.latency or {}
        rows.append(
            [
                result.name,
                *(result.metrics[name] for name in metric_names),
                *(latency.get(key) for key in latency_keys),
            ]
        )
    io.write_text(folder / "metrics.csv", _csv_text(["retriever", *metric_names, *latency_keys], rows))
    per_query_rows = []
    for result in summary.results:
        query_ids = sorted(next(iter(result.per_query.values()), {}))
        for query_id in query_ids:
            per_query_rows.append(
                [result.name, query_id, *(result.per_query[name][query_id] for name in metric_names)]
            )
    io.write_text(
        folder / "per_query.csv", _csv_text(["retriever", "query_id", *metric_names], per_query_rows)
    )
    io.write_json(
        folder / "latency.json",
        {
            "retrievers": {result.name: result.latency for result in summary.results},
            "store": {
                key: environment.get(key)
                for key in ("store_build_seconds", "store_built_now", "store_ready_seconds", "peak_rss_mb")
            },
        },
    )
    if summary.significance is not None:
        io.write_text(folder / "significance.csv", _csv_text(CSV_COLUMNS, csv_rows(summary.significance)))
    io.write_json(folder / "environment.json", environment)
    io.write_text(folder / "report.md", report_markdown(summary, settings, environment))
    io.write_text(folder / "report.html", report_html(summary, settings, environment))
