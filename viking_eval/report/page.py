"""report.html and sweep.html: self-contained pages (inline CSS, plots as base64 PNG, no script,
nothing fetched from the network), readable offline and attachable to a CI run.

report.html: the metric table (best per column in bold, ▲/▼ where a retriever is significantly
better/worse than the baseline after correction), every comparison with the baseline (difference,
bootstrap CI, win/tie/loss counts, p-values of the three tests, effect sizes), per-query
differences, latency distributions (latency.json ``samples_ms``), metrics by group, provenance.
The figures are drawn in :mod:`viking_eval.report.plots`, the small pieces (CSS, formats, page
skeleton) are in :mod:`viking_eval.report.html_parts`.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from viking_eval.measures.metrics import deeper_than_run, depth_label, depth_note
from viking_eval.measures.paired_tests import TEST_NAMES, TESTS
from viking_eval.measures.significance import Comparison, SignificanceReport
from viking_eval.report.html_parts import (
    best_indices,
    escape,
    figure_html,
    format_effect,
    format_metric,
    format_p,
    format_signed,
    html_page,
    png_data_uri,
    provenance_meta,
)
from viking_eval.report.markdown import latency_note, stats_text
from viking_eval.report.plots import differences_figure, latency_figure, win_tie_loss_figure
from viking_eval.report.stages import memory_table_html, stages_figure, stages_table_html, top_level
from viking_eval.results.layout import REPORTED_FILES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from viking_eval.config import Settings
    from viking_eval.report.sweep_plots import Plot
    from viking_eval.results.model import RetrieverResult, RunSummary


def metric_table(summary: RunSummary, settings: Settings) -> str:
    """One row per retriever: metrics (best per column bold, significance markers), latency."""
    metric_names = [metric.name for metric in settings.metrics]
    significance = summary.significance
    latency_columns = [("p50_ms", "p50 ms", False), ("p95_ms", "p95 ms", False), ("qps", "QPS", True)]
    columns: list[tuple[str, list[float | None], bool]] = [
        (name, [result.metrics[name] for result in summary.results], True) for name in metric_names
    ]
    columns += [
        (label, [(result.latency or {}).get(key) for result in summary.results], highest)
        for key, label, highest in latency_columns
    ]
    best = [best_indices(values, highest=highest) for _, values, highest in columns]
    top_k = settings.run.top_k
    deeper = deeper_than_run(settings.metrics, top_k)  # R@100 at top_k 10: "R@100 (depth 10)"
    header = "".join(f"<th>{escape(depth_label(name, top_k, deeper))}</th>" for name, _, _ in columns)
    rows = []
    for row_index, result in enumerate(summary.results):
        cells = []
        for column_index, (name, values, _) in enumerate(columns):
            value = values[row_index]
            css = ' class="best"' if row_index in best[column_index] else ""
            if value is None:
                cells.append("<td>-</td>")
                continue
            if column_index < len(metric_names):
                text = format_metric(value) + _marker(significance, result.name, name)
            else:
                text = f"{value:.1f}" if name == "QPS" else f"{value:.2f}"
            cells.append(f"<td{css}>{text}</td>")
        tag = (
            '<span class="tag">baseline</span>'
            if significance is not None and result.name == significance.baseline
            else ""
        )
        rows.append(f"<tr><th>{escape(result.name)}{tag}</th>{''.join(cells)}</tr>")
    return (
        '<div class="scroll"><table class="metrics" id="metrics">'
        f"<thead><tr><th>retriever</th>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _marker(significance: SignificanceReport | None, retriever: str, metric: str) -> str:
    if significance is None:
        return ""
    symbol = significance.marker(retriever, metric)
    if not symbol:
        return ""
    comparison = significance.find(retriever, metric)
    if comparison is None:
        return ""
    css = "better" if symbol == "▲" else "worse"
    title = (
        f"{comparison.test}: p {format_p(comparison.p_value)}, {significance.settings.correction}-adjusted "
        f"{format_p(comparison.p_adjusted)} vs {significance.baseline}"
    )
    return f'<sup class="sig {css}" title="{escape(title)}">{symbol}</sup>'


def comparison_table(significance: SignificanceReport) -> str:
    """Every (retriever, metric) against the baseline: difference, CI, W/T/L, then each test's
    p-value with the adjusted one in brackets (bold when significant) and the effect sizes."""
    primary = significance.settings.test
    keys = list(dict.fromkeys((c.retriever, c.metric) for c in significance.comparisons))
    rows = []
    for retriever, metric in keys:
        by_test = {test: significance.find(retriever, metric, test) for test in TESTS}
        first = by_test[primary]
        if first is None:
            continue
        css = ""
        if first.significant:
            css = "better" if first.mean_difference > 0 else "worse"
        cells = [
            f"<th>{escape(retriever)}</th>",
            f'<td class="text">{escape(metric)}</td>',
            f'<td class="{css}">{format_signed(first.mean_difference)}</td>',
            f"<td>[{format_signed(first.ci_low)}, {format_signed(first.ci_high)}]</td>",
            f'<td class="wtl"><span class="w">{first.wins}</span> / <span class="t">{first.ties}</span> / '
            f'<span class="l">{first.losses}</span></td>',
        ]
        effects: dict[str, float] = {}
        for test in TESTS:
            comparison: Comparison | None = by_test[test]
            if comparison is None:
                cells.append("<td>-</td>")
                continue
            effects.setdefault(comparison.effect_size_name, comparison.effect_size)
            adjusted = format_p(comparison.p_adjusted)
            if comparison.significant:
                adjusted = f"<b>{adjusted}</b>"
            cells.append(f"<td>{format_p(comparison.p_value)} ({adjusted})</td>")
        cells.append(f"<td>{format_effect(effects.get('d_z', math.nan))}</td>")
        cells.append(f"<td>{format_effect(effects.get('rank_biserial', math.nan))}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    names = {"t-test": "t-test", "wilcoxon": "Wilcoxon", "permutation": "randomisation"}
    test_headers = "".join(f"<th>{names[test]}<br>p (adjusted)</th>" for test in TESTS)
    header = (
        "<tr><th>retriever</th><th>metric</th><th>Δ mean</th>"
        f"<th>{significance.settings.confidence:.0%} CI<br>of Δ</th><th>win / tie<br>/ loss</th>{test_headers}"
        "<th>effect<br>d<sub>z</sub></th><th>effect<br>r<sub>rb</sub></th></tr>"
    )
    return (
        '<div class="scroll"><table class="comparisons" id="comparisons">'
        f"<thead>{header}</thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _latency_split_table(results: Sequence[RetrieverResult]) -> str:
    keys = [
        ("n_queries", "timed queries"),
        ("p50_ms", "p50"),
        ("p95_ms", "p95"),
        ("p99_ms", "p99"),
        ("encode_p50_ms", "encode p50"),
        ("search_p50_ms", "search p50"),
        ("search_p95_ms", "search p95"),
        ("qps", "QPS"),
        ("batch_qps", "batch QPS"),
    ]
    rows = []
    for result in results:
        latency = result.latency or {}
        cells = []
        for key, _ in keys:
            value = latency.get(key)
            text = "-" if value is None else str(value) if key == "n_queries" else f"{value:.2f}"
            cells.append(f"<td>{text}</td>")
        rows.append(f"<tr><th>{escape(result.name)}</th>{''.join(cells)}</tr>")
    header = "".join(f"<th>{label}</th>" for _, label in keys)
    return (
        '<div class="scroll"><table id="latency"><thead><tr><th>retriever</th>'
        f"{header}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


#: a sweep job's report.html (phase ``tune``) has every table but no figure: drawing them cost more
#: than a small job's retrieval (about 1.4 s a job on ADI), and a sweep is read from its sweep.html
#: and from best_final/report.html, which has every figure
FIGURES_LEFT_OUT = (
    "figures left out of a sweep job's report: see the sweep's sweep.html, and best_final/report.html "
    "for the chosen configuration"
)


def _figure(summary: RunSummary, draw: Callable[[], Figure | None], alt: str, caption: str) -> list[str]:
    """The figure ``draw`` makes, drawn into the page (no line when it makes none); in a sweep
    job's report nothing is built or drawn (:data:`FIGURES_LEFT_OUT`)."""
    if summary.phase == "tune":
        return []
    figure = draw()
    return [] if figure is None else [figure_html(png_data_uri(figure), alt, caption)]


def _stages_section(summary: RunSummary) -> str:
    """Where the time goes: the stacked bar per retriever, the stage table, memory (report/stages.py)."""
    results = summary.results
    if not any(top_level(result) for result in results):
        return ""
    return "".join(
        [
            '<section id="where-the-time-goes"><h2>Where the time goes</h2>',
            *_figure(
                summary,
                lambda: stages_figure(results),
                "mean ms per query by stage, a stacked bar per retriever",
                "Each bar: the retriever's top-level stages' mean ms per timed query, <code>other</code> "
                "the rest of its mean total; every span is in <code>spans/&lt;retriever&gt;.csv</code>.",
            ),
            stages_table_html(results),
            memory_table_html(results),
            '<p class="note">Index MB: the store parts the retriever reads and what it built for '
            "itself; RSS growth: how far the process's resident set rose above its level before the "
            "retriever's timed queries (the peak RSS below is the whole process's).</p></section>",
        ]
    )


def _groups_table(summary: RunSummary, settings: Settings) -> str:
    names = [metric.name for metric in settings.metrics]
    rows = [
        (group, result.name, entry) for result in summary.results for group, entry in result.groups.items()
    ]
    if not rows:
        return ""
    rows.sort(key=lambda row: (row[0], row[1]))
    body = "".join(
        f'<tr><td class="text">{escape(group)}</td><th>{escape(name)}</th><td>{entry["n_queries"]}</td>'
        + "".join(f"<td>{format_metric(entry['metrics'][metric])}</td>" for metric in names)
        + "</tr>"
        for group, name, entry in rows
    )
    header = "".join(f"<th>{escape(metric)}</th>" for metric in names)
    return (
        f"<section><h2>Metrics by {escape(settings.dataset.group_key)}</h2>"
        '<div class="scroll"><table id="groups"><thead><tr><th>group</th><th>retriever</th><th>queries</th>'
        f"{header}</tr></thead><tbody>{body}</tbody></table></div></section>"
    )


def report_html(summary: RunSummary, settings: Settings, environment: dict[str, Any]) -> str:
    """The whole report page of one run."""
    n_queries = summary.results[0].n_queries if summary.results else 0
    significance = summary.significance
    title = f"{settings.name}: {summary.dataset} ({summary.split})"
    meta = [
        f"{n_queries} judged queries",
        f"run depth top_k {settings.run.top_k}",
        f"phase {escape(summary.phase)}",
        *provenance_meta(environment),
        *([FIGURES_LEFT_OUT] if summary.phase == "tune" else []),
    ]
    body = [
        f'<header><h1>{escape(settings.name)} <span class="sub">{escape(summary.dataset)} ({escape(summary.split)})</span></h1>',
        f'<p class="meta">{" · ".join(meta)}</p>',
        *(
            [
                '<p class="worse"><b>Warning: tuned on the reported split.</b> Scores of a sweep '
                "evaluated on the split it reports overfit it.</p>"
            ]
            if summary.tuned_on_reported_split
            else []
        ),
        "</header>",
        "<section><h2>Metrics</h2>",
        metric_table(summary, settings),
        *(
            [f'<p class="worse"><b>Warning: metric deeper than the run.</b> {escape(note)}.</p>']
            if (note := depth_note(settings.run.top_k, deeper_than_run(settings.metrics, settings.run.top_k)))
            else []
        ),
        f'<p class="note">Bold: best per column (lowest latency, highest QPS). {escape(latency_note(settings))}',
        f" {escape(significance.legend())}." if significance is not None and significance.comparisons else "",
        "</p></section>",
    ]
    if significance is not None and significance.comparisons:
        config = significance.settings
        body += [
            f"<section><h2>Against the baseline: {escape(significance.baseline)}</h2>",
            comparison_table(significance),
            f'<p class="note">Paired tests over the {significance.comparisons[0].n_queries} queries; '
            f"p-values adjusted per test over the {significance.family_size()} comparisons of this report "
            f"({escape(config.correction)}). Markers use the {escape(TEST_NAMES[config.test])}; CI: bootstrap ({escape(config.bootstrap_method)}, "
            f"{config.bootstrap} resamples); randomisation test: {config.permutations} sign flips, seed {config.seed}; "
            "effect sizes: Cohen's d<sub>z</sub> (mean / sd of the differences), r<sub>rb</sub> the matched-pairs "
            "rank-biserial correlation (Wilcoxon). Every row is in <code>significance.csv</code>.</p>",
        ]
        body += _figure(
            summary,
            lambda: win_tie_loss_figure(significance),
            "wins, ties and losses per retriever and metric",
            "Queries "
            "where each retriever scores higher (wins), the same (ties) or lower (losses) than the baseline.",
        )
        first_metric = settings.metrics[0].name
        body += _figure(
            summary,
            lambda: differences_figure(summary, significance, first_metric),
            f"per-query differences on {first_metric}",
            f"Per-query {escape(first_metric)} minus the baseline's, largest gain first.",
        )
        body.append("</section>")
    elif len(summary.results) == 1:
        body.append(
            '<section><h2>Against the baseline</h2><p class="note">One retriever: nothing to compare.</p></section>'
        )
    body += ["<section><h2>Latency</h2>", _latency_split_table(summary.results)]
    if any((result.latency or {}).get("samples_ms") for result in summary.results):
        body += _figure(
            summary,
            lambda: latency_figure(summary.results),
            "latency distribution per retriever",
            "Each timed query's total time (query encoding + search), from <code>latency.json</code>.",
        )
    else:
        body.append('<p class="note">No per-query latency samples (run.latency.n_queries = 0).</p>')
    body.append("</section>")
    body.append(_stages_section(summary))
    body.append(_groups_table(summary, settings))
    stats = [result for result in summary.results if result.stats]
    if stats:  # what each retriever says about its work, e.g. a run file's unknown ids
        items = "".join(
            f"<li><b>{escape(result.name)}</b>: "
            + ", ".join(f"{escape(key)} {escape(stats_text(value))}" for key, value in result.stats.items())
            + "</li>"
            for result in stats
        )
        body.append(
            f"<section><h2>Retriever stats</h2><ul>{items}</ul><p class='note'>Means over the queries that "
            "carry them (<code>stats</code> in metrics.json); a run file's <code>file_*</code> counts are "
            "file-wide.</p></section>"
        )
    issues = "".join(
        f"<li>{escape(key.replace('_', ' '))}: {escape(value)}</li>"
        for key, value in summary.data_issues.items()
    )
    scope = settings.dataset.scope_key
    body += [
        "<section><h2>Data and store</h2><ul>",
        "<li>setting: "
        + (
            f"each query searches only documents with its own <code>{escape(scope)}</code>"
            if scope
            else "one pooled corpus"
        )
        + "</li>",
        issues,
        f"<li>embedder: <code>{escape(environment.get('embedder'))}</code></li>",
        f"<li>store key: <code>{escape(environment.get('store_key'))}</code></li>",
        (
            f"<li>store built in this run: {escape(environment.get('store_built_now'))}</li>"
            if environment.get("store_built_now") is not None
            else "<li>store not loaded: every retriever's results were resumed</li>"
        ),
        f"<li>peak RSS: {escape(environment.get('peak_rss_mb'))} MB</li>",
        '</ul><p class="note">Files: '
        + ", ".join(f"<code>{escape(name)}</code>" for name in REPORTED_FILES)
        + ".</p></section>",
    ]
    return html_page(title, body)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)


def sweep_html(
    sweep_dir: Path, columns: list[str], rows: list[dict[str, Any]], metric_keys: list[str], plots: list[Plot]
) -> str:
    """The sweep page: every (job, retriever) row, best per metric and retriever in bold, and the
    sweep plots embedded."""
    best: dict[tuple[str, str], float] = {}
    for row in rows:
        for key in metric_keys:
            value = row.get(key)
            if isinstance(value, float) and not key.startswith("stats."):
                pair = (row["retriever"], key)
                best[pair] = max(best.get(pair, -math.inf), value)
    header = "".join(f"<th>{escape(column)}</th>" for column in columns)
    body_rows = []
    for row in rows:
        cells = []
        for column in columns:
            value = row.get(column)
            css = ""
            if (
                column in metric_keys
                and isinstance(value, float)
                and value == best.get((row["retriever"], column))
            ):
                css = ' class="best"'
            if column in ("job", "retriever") or not isinstance(value, int | float):
                cells.append(f'<td class="text">{escape(_cell(value))}</td>')
            else:
                cells.append(f"<td{css}>{escape(_cell(value))}</td>")
        body_rows.append(f"<tr>{''.join(cells)}</tr>")
    figures = []
    for plot in plots:
        uri = "data:image/png;base64," + base64.b64encode(plot.png).decode("ascii")
        figures.append(figure_html(uri, plot.stem, escape(plot.name)))
    body = [
        f'<header><h1>Sweep <span class="sub">{escape(sweep_dir.name)}</span></h1>',
        f'<p class="meta">{len(rows)} rows (job × retriever) · <code>{escape(sweep_dir)}</code></p></header>',
        "<section><h2>Jobs</h2>",
        f'<div class="scroll"><table id="sweep"><thead><tr>{header}</tr></thead><tbody>{"".join(body_rows)}</tbody></table></div>',
        '<p class="note">Bold: the best value of each metric per retriever. Jobs evaluate the tuning '
        "split; <code>best.yaml</code> holds the chosen job evaluated once on the reported split.</p></section>",
    ]
    if figures:
        body += ["<section><h2>Plots</h2>", *figures, "</section>"]
    return html_page(f"Sweep {sweep_dir.name}", body)
