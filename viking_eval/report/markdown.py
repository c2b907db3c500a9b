"""The summary table printed at the end of a run, and report.md."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from viking_eval.answers.names import answer_metric_names
from viking_eval.answers.report import answer_lines
from viking_eval.measures.metrics import deeper_than_run, depth_label, depth_note
from viking_eval.report.stages import stages_markdown
from viking_eval.run import ann_quality

if TYPE_CHECKING:
    from viking_eval.config import Settings
    from viking_eval.results.model import RunSummary


def _latency(result: Any, key: str) -> str:
    value = (result.latency or {}).get(key)
    return "-" if value is None else f"{value:.1f}" if key == "qps" else f"{value:.2f}"


def latency_note(settings: Settings) -> str:
    """How latency was measured, in one sentence (report.md and report.html)."""
    latency = settings.run.latency
    threads = (
        "the process's BLAS threads"
        if latency.blas_threads is None
        else f"{latency.blas_threads} BLAS thread{'s' if latency.blas_threads > 1 else ''}"
    )
    return (
        f"Latency: one query at a time on {latency.n_queries} sampled queries after {latency.warmup} "
        f"warm-up queries, with {threads}; batch QPS with all threads."
    )


def summary_table(summary: RunSummary, settings: Settings, *, fmt: str = "github") -> str:
    """One row per retriever: every metric (4 decimals; ▲/▼ significantly better/worse than the
    baseline, see significance.py), ann_recall@10 over an approximate vector index
    (ann_quality.py), p50/p95 latency in ms, QPS."""
    metric_names = [metric.name for metric in settings.metrics]
    metric_names += answer_metric_names(summary.results, with_usage=True)  # answers.enabled
    ann_names = ann_quality.metric_names(summary.results)
    top_k = settings.run.top_k
    deeper = deeper_than_run(settings.metrics, top_k)  # R@100 at top_k 10: "R@100 (depth 10)"
    header = [
        "retriever",
        *(depth_label(name, top_k, deeper) for name in metric_names),
        *ann_names,
        "p50 ms",
        "p95 ms",
        "QPS",
    ]
    significance = summary.significance
    rows = [
        [
            result.name,
            *(
                f"{result.metrics[name]:.4f}"
                + (significance.marker(result.name, name) if significance is not None else "")
                for name in metric_names
            ),
            *(f"{result.metrics[name]:.4f}" if name in result.metrics else "-" for name in ann_names),
            _latency(result, "p50_ms"),
            _latency(result, "p95_ms"),
            _latency(result, "qps"),
        ]
        for result in summary.results
    ]
    table: str = tabulate(rows, headers=header, tablefmt=fmt, disable_numparse=True)  # tabulate: untyped
    return table


def significance_lines(summary: RunSummary) -> list[str]:
    """The legend of the markers and each comparison with the baseline (primary test)."""
    significance = summary.significance
    if significance is None or not significance.comparisons:
        return []
    rows = [
        [
            c.retriever,
            c.metric,
            f"{c.mean_difference:+.4f}",
            f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]",
            f"{c.wins} / {c.ties} / {c.losses}",
            f"{c.p_value:.3g}",
            f"{c.p_adjusted:.3g}",
            f"{c.effect_size:+.2f} ({c.effect_size_name})",
        ]
        for c in significance.comparisons
        if c.test == significance.settings.test
    ]
    return [
        significance.legend() + ".",
        "",
        f"## Against the baseline ({significance.baseline})",
        "",
        tabulate(
            rows,
            headers=[
                "retriever",
                "metric",
                "Δ mean",
                f"{significance.settings.confidence:.0%} CI (bootstrap)",
                "wins / ties / losses",
                f"p ({significance.settings.test})",
                f"p ({significance.settings.correction})",
                "effect size",
            ],
            tablefmt="github",
            disable_numparse=True,
        ),
        "",
        "Every test (t-test, Wilcoxon, randomisation) is in `significance.csv`; plots in `report.html`.",
        "",
    ]


def stats_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if isinstance(value, dict) else str(value)


def stats_lines(summary: RunSummary) -> list[str]:
    """What each retriever says about its work (``stats`` in metrics.json: means over the queries
    that carry them; a run file's ``file_*`` counts, unknown query and doc ids among them, are
    file-wide)."""
    shown = [result for result in summary.results if result.stats]
    if not shown:
        return []
    return [
        "",
        "## Retriever stats",
        "",
        *(
            f"- {result.name}: "
            + ", ".join(f"{key} {stats_text(value)}" for key, value in result.stats.items())
            for result in shown
        ),
    ]


def _depth_lines(settings: Settings) -> list[str]:
    """A warning under the table when a metric is deeper than the run (metrics.py depth_note)."""
    note = depth_note(settings.run.top_k, deeper_than_run(settings.metrics, settings.run.top_k))
    return [f"> **Warning: metric deeper than the run.** {note}.", ""] if note else []


def report_markdown(summary: RunSummary, settings: Settings, environment: dict[str, Any]) -> str:
    n_queries = summary.results[0].n_queries if summary.results else 0
    issues = summary.data_issues
    lines = [
        f"# {settings.name}: {summary.dataset} ({summary.split})",
        "",
        *(
            [
                "> **Warning: tuned on the reported split.** Scores of a sweep evaluated on the split it reports overfit it.",
                "",
            ]
            if summary.tuned_on_reported_split
            else []
        ),
        f"{n_queries} judged queries evaluated; {issues.get('unjudged_queries', 0)} queries without judgments "
        f"in this split were excluded. Run depth top_k = {settings.run.top_k}. {latency_note(settings)}",
        "",
        summary_table(summary, settings),
        "",
        *_depth_lines(settings),
        *ann_quality.table_note(environment),
        *significance_lines(summary),
        "## Latency split (ms)",
        "",
    ]
    rows = []
    for result in summary.results:
        latency = result.latency or {}
        rows.append(
            [
                result.name,
                *(
                    f"{latency[key]:.2f}" if key in latency else "-"
                    for key in ("encode_p50_ms", "search_p50_ms", "search_p95_ms", "p99_ms")
                ),
                f"{latency['batch_qps']:.1f}" if "batch_qps" in latency else "-",
            ]
        )
    lines.append(
        tabulate(
            rows,
            headers=["retriever", "encode p50", "search p50", "search p95", "total p99", "batch QPS"],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    stage_lines = stages_markdown(summary.results)
    lines += ["", *stage_lines] if stage_lines else []
    group_metrics = [m.name for m in settings.metrics] + answer_metric_names(summary.results)
    group_rows = [
        [
            group,
            result.name,
            str(entry["n_queries"]),
            *(f"{entry['metrics'][name]:.4f}" if name in entry["metrics"] else "-" for name in group_metrics),
        ]
        for result in summary.results
        for group, entry in result.groups.items()
    ]
    if group_rows:
        group_rows.sort(key=lambda row: (row[0], row[1]))
        lines += [
            "",
            f"## Metrics by {settings.dataset.group_key}",
            "",
            tabulate(
                group_rows,
                headers=[
                    settings.dataset.group_key or "group",
                    "retriever",
                    "queries",
                    *group_metrics,
                ],
                tablefmt="github",
                disable_numparse=True,
            ),
        ]
    lines += answer_lines(summary.results, settings.dataset.group_key)
    lines += stats_lines(summary)
    scope = settings.dataset.scope_key
    lines += [
        "",
        "## Data",
        "",
        f"- setting: {'each query searches only documents with its own `' + scope + '`' if scope else 'one pooled corpus'}",
        "",
        *(f"- {key.replace('_', ' ')}: {value}" for key, value in issues.items()),
        "",
        "## Store",
        "",
        f"- embedder: `{environment.get('embedder')}`",
        f"- store key: `{environment.get('store_key')}`",
        f"- built in this run: {environment.get('store_built_now')}; build seconds: "
        f"{json.dumps(environment.get('store_build_seconds'))}",
        f"- peak RSS: {environment.get('peak_rss_mb')} MB",
        *ann_quality.store_lines(summary.results, environment),
        "",
        "Files: `metrics.json`, `metrics.csv`, `per_query.csv`, `significance.csv`, `latency.json`, "
        "`spans/*.csv`, `runs/*.trec`, `environment.json`, `config.yaml`, `report.html`.",
        "",
    ]
    return "\n".join(lines)
