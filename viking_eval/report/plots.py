"""The report's matplotlib figures (drawn on ``Figure`` objects, no pyplot state; matplotlib is
imported when a figure is drawn): per-query wins/ties/losses against the baseline, sorted
per-query differences, latency distributions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from viking_eval.measures.significance import SignificanceReport
from viking_eval.report.html_parts import BETTER, NEUTRAL, PALETTE, WORSE

if TYPE_CHECKING:
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure

    from viking_eval.results.model import RetrieverResult, RunSummary


def win_tie_loss_figure(significance: SignificanceReport) -> Figure | None:
    """Stacked horizontal bars: per (retriever, metric), the share of queries won/tied/lost."""
    from matplotlib.figure import Figure

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
    from matplotlib.figure import Figure

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
        axes.add_collection(_bars(differences, colors))
        axes.axhline(0.0, color="#57606a", linewidth=0.8)
        axes.set_xlim(-0.5, differences.size - 0.5)
        axes.set_ylabel(f"Δ {metric}", fontsize=9)
        axes.set_title(f"{result.name} − {significance.baseline}, queries sorted by difference", fontsize=10)
        axes.spines[["top", "right"]].set_visible(False)
        axes.tick_params(labelsize=8)
    panels[-1].set_xlabel("queries")
    return figure


def _bars(heights: np.ndarray, colors: Sequence[str]) -> PolyCollection:
    """One bar a value at x = 0, 1, ... (width 1, from 0 to the value) in one collection: draws the
    same pixels as ``Axes.bar(..., width=1.0, linewidth=0)`` (a sticky edge at 0 too), but a
    Rectangle artist per bar made a 2,000-query panel take a minute to add and draw."""
    from matplotlib.collections import PolyCollection

    left = np.arange(heights.size, dtype=float) - 0.5
    zero = np.zeros(heights.size)
    corners = [(left, zero), (left, heights), (left + 1.0, heights), (left + 1.0, zero)]
    vertices = np.stack([np.stack(corner, axis=1) for corner in corners], axis=1)
    bars = PolyCollection(list(vertices), facecolors=list(colors), linewidths=0, closed=True)
    bars.sticky_edges.y.append(0.0)
    return bars


def latency_figure(results: Sequence[RetrieverResult]) -> Figure | None:
    """Distribution of per-query latency (one query at a time, ms): ECDF and box plot."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

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
