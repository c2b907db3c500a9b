"""Where the time goes, in the reports: a stacked bar per retriever of its top-level stages'
mean ms per query (``other`` closes each bar at the mean total), a table of every stage path
(nested ones indented), and each retriever's own memory. Read from each retriever's
``latency["stages"]``, ``["index_bytes"]`` and ``["rss_growth_mb"]`` (viking_eval/run/latency.py)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np

from viking_eval.report.html_parts import PALETTE

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from viking_eval.results.model import RetrieverResult

#: a stage's colour in every bar (stages not named here take the palette in order of appearance)
STAGE_COLORS = {
    "encode": "#8250df",
    "vector": "#0969da",
    "bm25": "#bf8700",
    "legs": "#54aeff",
    "seeds": "#e16f24",
    "fusion": "#1a7f37",
    "traverse": "#1b7c83",
    "analysis": "#d4a72c",
    "strategies": "#0550ae",
    "parents": "#a475f9",
    "rerank": "#cf222e",
    "llm": "#bc4c00",
    "other": "#afb8c1",
}


def stages_of(result: RetrieverResult) -> list[dict[str, Any]]:
    """The retriever's stage summaries (empty without latency)."""
    stages = (result.latency or {}).get("stages") or []
    return [stage for stage in stages if isinstance(stage, dict)]


def top_level(result: RetrieverResult) -> list[dict[str, Any]]:
    return [stage for stage in stages_of(result) if stage.get("depth") == 0]


def stage_color(stage: str, order: list[str]) -> str:
    if stage in STAGE_COLORS:
        return STAGE_COLORS[stage]
    if stage not in order:
        order.append(stage)
    return PALETTE[order.index(stage) % len(PALETTE)]


def stages_figure(results: Sequence[RetrieverResult]) -> Figure | None:
    """One horizontal stacked bar per retriever: its top-level stages' mean ms per query."""
    from matplotlib.figure import Figure

    rows = [(result.name, top_level(result)) for result in results]
    rows = [(name, stages) for name, stages in rows if stages]
    if not rows:
        return None
    figure = Figure(figsize=(10.5, 0.5 * len(rows) + 1.6), layout="constrained")
    axes = figure.subplots()
    extra: list[str] = []
    shown: set[str] = set()
    positions = np.arange(len(rows))[::-1]
    for y, (_, stages) in zip(positions, rows, strict=True):
        left = 0.0
        for stage in stages:
            width = float(stage["mean_ms"])
            name = str(stage["path"])
            axes.barh(
                y,
                width,
                left=left,
                color=stage_color(name, extra),
                edgecolor="white",
                linewidth=0.6,
                label=None if name in shown else name,
            )
            shown.add(name)
            left += width
        axes.text(left, y, f" {left:.2f} ms", va="center", fontsize=8)
    axes.set_yticks(positions, [name for name, _ in rows], fontsize=9)
    axes.set_xlabel("mean ms per query (one at a time), by top-level stage")
    axes.set_title("where the time goes", fontsize=10, loc="left")
    axes.spines[["top", "right"]].set_visible(False)
    axes.margins(x=0.12)
    figure.legend(loc="outside upper right", fontsize=8, ncols=min(len(shown), 7), frameon=False)
    return figure


def stages_table_html(results: Sequence[RetrieverResult]) -> str:
    """Table ``stages``: retriever, stage path (indented by depth), spans per query, p50, mean, share."""
    body = []
    for result in results:
        for stage in stages_of(result):
            indent = "&nbsp;&nbsp;" * int(stage["depth"])
            body.append(
                f'<tr data-retriever="{escape(result.name)}" data-depth="{int(stage["depth"])}">'
                f"<th>{escape(result.name)}</th>"
                f'<td class="text">{indent}{escape(str(stage["path"]))}</td>'
                f"<td>{float(stage['count_mean']):.2f}</td><td>{float(stage['p50_ms']):.3f}</td>"
                f"<td>{float(stage['mean_ms']):.3f}</td><td>{100 * float(stage['share']):.1f}%</td></tr>"
            )
    if not body:
        return ""
    return (
        '<div class="scroll"><table id="stages"><thead><tr><th>retriever</th><th>stage</th>'
        "<th>spans / query</th><th>p50 ms</th><th>mean ms</th><th>share of mean</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _mb(value: float) -> str:
    return f"{value / 2**20:.2f}"


def memory_table_html(results: Sequence[RetrieverResult]) -> str:
    """Table ``memory``: each retriever's index MB (total, then per part) and query-time RSS growth."""
    body = []
    for result in results:
        latency = result.latency or {}
        parts = latency.get("index_bytes") or {}
        if not parts:
            continue
        detail = ", ".join(f"{escape(part)} {_mb(size)}" for part, size in parts.items() if part != "total")
        body.append(
            f"<tr><th>{escape(result.name)}</th><td>{_mb(parts.get('total', 0))}</td>"
            f'<td class="text">{detail}</td><td>{float(latency.get("rss_growth_mb", 0.0)):.2f}</td></tr>'
        )
    if not body:
        return ""
    return (
        '<div class="scroll"><table id="memory"><thead><tr><th>retriever</th><th>index MB</th>'
        "<th>per part (MB)</th><th>RSS growth MB</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def stages_markdown(results: Sequence[RetrieverResult]) -> list[str]:
    """The report.md section: one row per retriever and stage path, then the memory lines."""
    rows = [
        f"| {result.name} | {'· ' * int(stage['depth'])}{stage['path']} | {float(stage['count_mean']):.2f} "
        f"| {float(stage['p50_ms']):.3f} | {float(stage['mean_ms']):.3f} | {100 * float(stage['share']):.1f}% |"
        for result in results
        for stage in stages_of(result)
    ]
    if not rows:
        return []
    lines = [
        "## Where the time goes",
        "",
        "Mean and p50 ms per timed query of each stage (spans/<retriever>.csv has every span); "
        "top-level stages and `other` sum to the mean total, nested ones (·) are parts of their parent.",
        "",
        "| retriever | stage | spans / query | p50 ms | mean ms | share of mean |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]
    memory = [
        f"- {result.name}: index {_mb(parts.get('total', 0))} MB ("
        + ", ".join(f"{part} {_mb(size)}" for part, size in parts.items() if part != "total")
        + f"), RSS growth during its queries {float((result.latency or {}).get('rss_growth_mb', 0.0)):.2f} MB"
        for result in results
        if (parts := (result.latency or {}).get("index_bytes") or {})
    ]
    return lines + (["Memory per retriever:", "", *memory, ""] if memory else [])
