"""report.html and sweep.html: self-contained pages (inline CSS, plots as base64 PNG, no script,
nothing fetched from the network), readable offline and attachable to a CI run.

report.html: the metric table (best per column in bold, ▲/▼ where a retriever is significantly
better/worse than the baseline after correction), every comparison with the baseline (difference,
bootstrap CI, win/tie/loss counts, p-values of the three tests, effect sizes), per-query
differences, latency distributions (latency.json ``samples_ms``), metrics by group, provenance.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from viking_eval.measures.metrics import deeper_than_run, depth_label, depth_note
from viking_eval.measures.paired_tests import TEST_NAMES, TESTS
from viking_eval.measures.significance import Comparison, SignificanceReport
from viking_eval.report.markdown import latency_note, stats_text

if TYPE_CHECKING:
    from viking_eval.config import Settings
    from viking_eval.results.model import RetrieverResult, RunSummary

BETTER = "#1a7f37"
WORSE = "#cf222e"
NEUTRAL = "#8c959f"
PALETTE = ["#0969da", "#bf8700", "#8250df", "#1a7f37", "#cf222e", "#57606a", "#e16f24", "#1b7c83"]

CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #f6f8fa; color: #1f2328;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 32px 48px; }
header { border-bottom: 1px solid #d0d7de; margin-bottom: 8px; padding-bottom: 12px; }
h1 { font-size: 26px; margin: 0 0 4px; font-weight: 600; }
h1 .sub { color: #57606a; font-weight: 400; }
h2 { font-size: 19px; margin: 16px 0 8px; font-weight: 600; }
p { margin: 6px 0; }
.meta, .note { color: #57606a; font-size: 13.5px; }
section { background: #fff; border: 1px solid #d0d7de; border-radius: 8px; padding: 4px 20px 16px;
  margin-top: 18px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 14px; }
th, td { padding: 5px 11px; border-bottom: 1px solid #d8dee4; }
table.comparisons { font-size: 13.5px; }
table.comparisons th, table.comparisons td { padding: 5px 8px; }
table.comparisons thead th { vertical-align: bottom; }
thead th { border-bottom: 2px solid #8c959f; text-align: right; font-weight: 600; white-space: nowrap; }
thead th:first-child, tbody th { text-align: left; }
tbody th { font-weight: 500; white-space: nowrap; }
td { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { text-align: left; }
tbody tr:nth-child(even) { background: #f6f8fa; }
tbody tr:hover { background: #eaeef2; }
td.best { font-weight: 700; }
.tag { display: inline-block; font-size: 11px; font-weight: 600; color: #0969da; border: 1px solid #0969da;
  border-radius: 10px; padding: 0 7px; margin-left: 6px; vertical-align: 1px; }
sup.sig { font-size: 11px; margin-left: 1px; }
.better { color: #1a7f37; }
.worse { color: #cf222e; }
.wtl .w { color: #1a7f37; } .wtl .l { color: #cf222e; } .wtl .t { color: #57606a; }
figure { margin: 12px 0 4px; }
figure img { max-width: 100%; height: auto; border: 1px solid #d8dee4; border-radius: 6px; background: #fff; }
figcaption { color: #57606a; font-size: 13px; margin-top: 4px; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px;
  background: #eff1f3; padding: 1px 5px; border-radius: 4px; }
ul { margin: 6px 0; padding-left: 22px; }
.scroll { overflow-x: auto; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _metric(value: float) -> str:
    return f"{value:.4f}"


def _p(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.1e}" if 0 < value < 1e-3 else f"{value:.3f}"


def _signed(value: float) -> str:
    return f"{value:+.4f}"


def _effect(value: float) -> str:
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "+∞" if value > 0 else "−∞"
    return f"{value:+.2f}"


def png_data_uri(figure: Figure, dpi: int = 100) -> str:
    """The figure as a ``data:image/png;base64,...`` URI."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, facecolor="white")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure_html(uri: str, alt: str, caption: str) -> str:
    return f'<figure><img src="{uri}" alt="{_e(alt)}"><figcaption>{caption}</figcaption></figure>'


def provenance_meta(environment: dict[str, Any]) -> list[str]:
    """The header's provenance items (HTML): the git commit (and whether the tree was dirty) and
    the time, from environment.json's values, where present."""
    git = environment.get("git") if isinstance(environment.get("git"), dict) else {}
    sha = str((git or {}).get("sha") or "")
    items = []
    if sha:
        items.append(
            f"git <code>{_e(sha[:12])}</code>"
            + (" (uncommitted changes)" if (git or {}).get("dirty") else "")
        )
    if environment.get("time"):
        items.append(_e(environment["time"]))
    return items


def _page(title: str, body: list[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<link rel="icon" href="data:,">',  # no favicon request
            f"<title>{_e(title)}</title>",
            f"<style>{CSS}</style>",
            "</head>",
            "<body><main>",
            *body,
            "</main></body>",
            "</html>",
            "",
        ]
    )


def _best(values: list[float | None], *, highest: bool) -> set[int]:
    present = [
        (index, value) for index, value in enumerate(values) if value is not None and math.isfinite(value)
    ]
    if len(present) < 2:
        return set()
    target = max(value for _, value in present) if highest else min(value for _, value in present)
    return {index for index, value in present if value == target}


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
    best = [_best(values, highest=highest) for _, values, highest in columns]
    top_k = settings.run.top_k
    deeper = deeper_than_run(settings.metrics, top_k)  # R@100 at top_k 10: "R@100 (depth 10)"
    header = "".join(f"<th>{_e(depth_label(name, top_k, deeper))}</th>" for name, _, _ in columns)
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
                text = _metric(value) + _marker(significance, result.name, name)
            else:
                text = f"{value:.1f}" if name == "QPS" else f"{value:.2f}"
            cells.append(f"<td{css}>{text}</td>")
        tag = (
            '<span class="tag">baseline</span>'
            if significance is not None and result.name == significance.baseline
            else ""
        )
        rows.append(f"<tr><th>{_e(result.name)}{tag}</th>{''.join(cells)}</tr>")
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
        f"{comparison.test}: p {_p(comparison.p_value)}, {significance.settings.correction}-adjusted "
        f"{_p(comparison.p_adjusted)} vs {significance.baseline}"
    )
    return f'<sup class="sig {css}" title="{_e(title)}">{symbol}</sup>'


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
            f"<th>{_e(retriever)}</th>",
            f'<td class="text">{_e(metric)}</td>',
            f'<td class="{css}">{_signed(first.mean_difference)}</td>',
            f"<td>[{_signed(first.ci_low)}, {_signed(first.ci_high)}]</td>",
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
            adjusted = _p(comparison.p_adjusted)
            if comparison.significant:
                adjusted = f"<b>{adjusted}</b>"
            cells.append(f"<td>{_p(comparison.p_value)} ({adjusted})</td>")
        cells.append(f"<td>{_effect(effects.get('d_z', math.nan))}</td>")
        cells.append(f"<td>{_effect(effects.get('rank_biserial', math.nan))}</td>")
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


def win_tie_loss_figure(significance: SignificanceReport) -> Figure | None:
    """Stacked horizontal bars: per (retriever, metric), the share of queries won/tied/lost."""
    rows = [c for c in significance.comparisons if c.test == significance.settings.test]
    if not rows:
        return None
    figure = Figure(figsize=(9.5, 0.45 * len(rows) + 1.1), layout="constrained")
    axes = figure.subplots()
    labels = [f"{c.retriever} · {c.metric}" for c in rows]
    positions = np.arange(len(rows))[::-1]
    wins = np.array([c.wins for c in rows], dtype=float)
    ties = np.array([c.ties for c in rows], dtype=float)
    losses = np.array([c.losses for c in rows], dtype=float)
    axes.barh(positions, wins, color=BETTER, label="wins")
    axes.barh(positions, ties, left=wins, color="#d0d7de", label="ties")
    axes.barh(positions, losses, left=wins + ties, color=WORSE, label="losses")
    for y, w, t, loss in zip(positions, wins, ties, losses, strict=True):
        for left, width, color in ((0, w, "white"), (w, t, "#1f2328"), (w + t, loss, "white")):
            if width >= max(1.0, 0.04 * (w + t + loss)):
                axes.text(
                    left + width / 2, y, f"{int(width)}", ha="center", va="center", fontsize=8, color=color
                )
    axes.set_yticks(positions, labels, fontsize=9)
    axes.set_xlabel("queries")
    axes.set_title(f"per-query wins / ties / losses against {significance.baseline}", fontsize=10, loc="left")
    figure.legend(loc="outside upper right", fontsize=8, ncols=3, frameon=False)
    axes.spines[["top", "right"]].set_visible(False)
    axes.set_xlim(0, max(1.0, float((wins + ties + losses).max())))
    return figure


def differences_figure(summary: RunSummary, significance: SignificanceReport, metric: str) -> Figure | None:
    """Per-query differences to the baseline on ``metric``, sorted (one panel per retriever)."""
    baseline = next((r for r in summary.results if r.name == significance.baseline), None)
    others = [r for r in summary.results if r.name != significance.baseline and metric in r.per_query]
    if baseline is None or not others or metric not in baseline.per_query:
        return None
    figure = Figure(figsize=(9.5, 2.4 * len(others) + 0.4), layout="constrained")
    panels = figure.subplots(len(others), 1, squeeze=False)[:, 0]
    for axes, result in zip(panels, others, strict=True):
        query_ids = sorted(baseline.per_query[metric])
        if set(query_ids) != set(result.per_query[metric]):
            continue
        differences = np.sort(
            np.array([result.per_query[metric][q] - baseline.per_query[metric][q] for q in query_ids])
        )[::-1]
        colors = [BETTER if d > 1e-12 else WORSE if d < -1e-12 else NEUTRAL for d in differences]
        axes.bar(np.arange(differences.size), differences, width=1.0, color=colors, linewidth=0)
        axes.axhline(0.0, color="#57606a", linewidth=0.8)
        axes.set_xlim(-0.5, differences.size - 0.5)
        axes.set_ylabel(f"Δ {metric}", fontsize=9)
        axes.set_title(f"{result.name} − {significance.baseline}, queries sorted by difference", fontsize=10)
        axes.spines[["top", "right"]].set_visible(False)
        axes.tick_params(labelsize=8)
    panels[-1].set_xlabel("queries")
    return figure


def latency_figure(results: Sequence[RetrieverResult]) -> Figure | None:
    """Distribution of per-query latency (one query at a time, ms): ECDF and box plot."""
    samples = [
        (result.name, np.asarray((result.latency or {}).get("samples_ms") or [], dtype=float))
        for result in results
    ]
    samples = [(name, values) for name, values in samples if values.size]
    if not samples:
        return None
    figure = Figure(figsize=(10.5, 3.6), layout="constrained")
    ecdf_axes, box_axes = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    low = min(float(values.min()) for _, values in samples)
    high = max(float(values.max()) for _, values in samples)
    log_scale = low > 0 and high / low > 20
    for index, (name, values) in enumerate(samples):
        ordered = np.sort(values)
        shares = np.arange(1, ordered.size + 1) / ordered.size
        color = PALETTE[index % len(PALETTE)]
        ecdf_axes.step(ordered, shares, where="post", color=color, linewidth=1.6, label=name)
        p50, p95 = np.percentile(values, [50, 95])
        ecdf_axes.plot([p50, p95], [0.5, 0.95], "o", color=color, markersize=4)
    ecdf_axes.set_xlabel("ms per query (retrieve, one at a time)")
    ecdf_axes.set_ylabel("share of queries")
    ecdf_axes.set_title("latency ECDF (dots: p50, p95)", fontsize=10)
    ecdf_axes.grid(alpha=0.3)
    ecdf_axes.legend(fontsize=8, frameon=False)
    box = box_axes.boxplot(
        [values for _, values in samples],
        orientation="horizontal",
        tick_labels=[name for name, _ in samples],
        whis=(5, 95),
        showfliers=True,
        patch_artist=True,
        flierprops={"markersize": 3, "markeredgecolor": NEUTRAL},
        medianprops={"color": "#1f2328"},
    )
    for index, patch in enumerate(box["boxes"]):
        patch.set_facecolor(PALETTE[index % len(PALETTE)])
        patch.set_alpha(0.35)
    box_axes.set_xlabel("ms (whiskers: p5-p95)")
    box_axes.set_title("per retriever", fontsize=10)
    box_axes.grid(alpha=0.3, axis="x")
    if log_scale:
        for axes in (ecdf_axes, box_axes):
            axes.set_xscale("log")
            axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            axes.xaxis.set_minor_formatter(NullFormatter())
    for axes in (ecdf_axes, box_axes):
        axes.spines[["top", "right"]].set_visible(False)
        axes.tick_params(labelsize=8)
    return figure


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
        rows.append(f"<tr><th>{_e(result.name)}</th>{''.join(cells)}</tr>")
    header = "".join(f"<th>{label}</th>" for _, label in keys)
    return (
        '<div class="scroll"><table id="latency"><thead><tr><th>retriever</th>'
        f"{header}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
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
        f'<tr><td class="text">{_e(group)}</td><th>{_e(name)}</th><td>{entry["n_queries"]}</td>'
        + "".join(f"<td>{_metric(entry['metrics'][metric])}</td>" for metric in names)
        + "</tr>"
        for group, name, entry in rows
    )
    header = "".join(f"<th>{_e(metric)}</th>" for metric in names)
    return (
        f"<section><h2>Metrics by {_e(settings.dataset.group_key)}</h2>"
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
        f"phase {_e(summary.phase)}",
        *provenance_meta(environment),
    ]
    body = [
        f'<header><h1>{_e(settings.name)} <span class="sub">{_e(summary.dataset)} ({_e(summary.split)})</span></h1>',
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
            [f'<p class="worse"><b>Warning: metric deeper than the run.</b> {_e(note)}.</p>']
            if (note := depth_note(settings.run.top_k, deeper_than_run(settings.metrics, settings.run.top_k)))
            else []
        ),
        f'<p class="note">Bold: best per column (lowest latency, highest QPS). {_e(latency_note(settings))}',
        f" {_e(significance.legend())}." if significance is not None and significance.comparisons else "",
        "</p></section>",
    ]
    if significance is not None and significance.comparisons:
        config = significance.settings
        body += [
            f"<section><h2>Against the baseline: {_e(significance.baseline)}</h2>",
            comparison_table(significance),
            f'<p class="note">Paired tests over the {significance.comparisons[0].n_queries} queries; '
            f"p-values adjusted per test over the {significance.family_size()} comparisons of this report "
            f"({_e(config.correction)}). Markers use the {_e(TEST_NAMES[config.test])}; CI: bootstrap ({_e(config.bootstrap_method)}, "
            f"{config.bootstrap} resamples); randomisation test: {config.permutations} sign flips, seed {config.seed}; "
            "effect sizes: Cohen's d<sub>z</sub> (mean / sd of the differences), r<sub>rb</sub> the matched-pairs "
            "rank-biserial correlation (Wilcoxon). Every row is in <code>significance.csv</code>.</p>",
        ]
        figure = win_tie_loss_figure(significance)
        if figure is not None:
            body.append(
                _figure_html(
                    png_data_uri(figure),
                    "wins, ties and losses per retriever and metric",
                    "Queries "
                    "where each retriever scores higher (wins), the same (ties) or lower (losses) than the baseline.",
                )
            )
        first_metric = settings.metrics[0].name
        figure = differences_figure(summary, significance, first_metric)
        if figure is not None:
            body.append(
                _figure_html(
                    png_data_uri(figure),
                    f"per-query differences on {first_metric}",
                    f"Per-query {_e(first_metric)} minus the baseline's, largest gain first.",
                )
            )
        body.append("</section>")
    elif len(summary.results) == 1:
        body.append(
            '<section><h2>Against the baseline</h2><p class="note">One retriever: nothing to compare.</p></section>'
        )
    body += ["<section><h2>Latency</h2>", _latency_split_table(summary.results)]
    figure = latency_figure(summary.results)
    if figure is not None:
        body.append(
            _figure_html(
                png_data_uri(figure),
                "latency distribution per retriever",
                "Each timed query's total time (query encoding + search), from <code>latency.json</code>.",
            )
        )
    else:
        body.append('<p class="note">No per-query latency samples (run.latency.n_queries = 0).</p>')
    body.append("</section>")
    body.append(_groups_table(summary, settings))
    stats = [result for result in summary.results if result.stats]
    if stats:  # what each retriever says about its work, e.g. a run file's unknown ids
        items = "".join(
            f"<li><b>{_e(result.name)}</b>: "
            + ", ".join(f"{_e(key)} {_e(stats_text(value))}" for key, value in result.stats.items())
            + "</li>"
            for result in stats
        )
        body.append(
            f"<section><h2>Retriever stats</h2><ul>{items}</ul><p class='note'>Means over the queries that "
            "carry them (<code>stats</code> in metrics.json); a run file's <code>file_*</code> counts are "
            "file-wide.</p></section>"
        )
    issues = "".join(
        f"<li>{_e(key.replace('_', ' '))}: {_e(value)}</li>" for key, value in summary.data_issues.items()
    )
    scope = settings.dataset.scope_key
    body += [
        "<section><h2>Data and store</h2><ul>",
        "<li>setting: "
        + (
            f"each query searches only documents with its own <code>{_e(scope)}</code>"
            if scope
            else "one pooled corpus"
        )
        + "</li>",
        issues,
        f"<li>embedder: <code>{_e(environment.get('embedder'))}</code></li>",
        f"<li>store key: <code>{_e(environment.get('store_key'))}</code></li>",
        (
            f"<li>store built in this run: {_e(environment.get('store_built_now'))}</li>"
            if environment.get("store_built_now") is not None
            else "<li>store not loaded: every retriever's results were resumed</li>"
        ),
        f"<li>peak RSS: {_e(environment.get('peak_rss_mb'))} MB</li>",
        '</ul><p class="note">Files: <code>metrics.json</code>, <code>metrics.csv</code>, '
        "<code>per_query.csv</code>, <code>significance.csv</code>, <code>latency.json</code>, "
        "<code>runs/*.trec</code>, <code>environment.json</code>, <code>config.yaml</code>, "
        "<code>report.md</code>.</p></section>",
    ]
    return _page(title, body)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)


def sweep_html(
    sweep_dir: Path, columns: list[str], rows: list[dict[str, Any]], metric_keys: list[str], plots: list[Path]
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
    header = "".join(f"<th>{_e(column)}</th>" for column in columns)
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
                cells.append(f'<td class="text">{_e(_cell(value))}</td>')
            else:
                cells.append(f"<td{css}>{_e(_cell(value))}</td>")
        body_rows.append(f"<tr>{''.join(cells)}</tr>")
    figures = []
    for path in plots:
        uri = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
        figures.append(_figure_html(uri, path.stem, _e(path.name)))
    body = [
        f'<header><h1>Sweep <span class="sub">{_e(sweep_dir.name)}</span></h1>',
        f'<p class="meta">{len(rows)} rows (job × retriever) · <code>{_e(sweep_dir)}</code></p></header>',
        "<section><h2>Jobs</h2>",
        f'<div class="scroll"><table id="sweep"><thead><tr>{header}</tr></thead><tbody>{"".join(body_rows)}</tbody></table></div>',
        '<p class="note">Bold: the best value of each metric per retriever. Jobs evaluate the tuning '
        "split; <code>best.yaml</code> holds the chosen job evaluated once on the reported split.</p></section>",
    ]
    if figures:
        body += ["<section><h2>Plots</h2>", *figures, "</section>"]
    return _page(f"Sweep {sweep_dir.name}", body)
