"""Sweep plots (PNG, matplotlib ``Figure`` objects, no pyplot state, imported only when a plot is
drawn): metric vs each swept parameter (one line per value of another swept parameter), a heatmap
when two parameters were swept, and quality vs latency with the Pareto front marked. The plots are
returned as PNG bytes under their file names; ``results/sweep_folder.py`` writes them into the
sweep folder."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Plot:
    """One sweep plot: its file name in the sweep folder and its PNG bytes."""

    name: str
    png: bytes

    @property
    def stem(self) -> str:
        return Path(self.name).stem


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _axis_values(rows: list[dict[str, Any]], key: str) -> list[Any]:
    values = list(dict.fromkeys(row[key] for row in rows))
    if all(_number(value) is not None for value in values):
        return sorted(values, key=lambda value: float(value))
    return sorted(values, key=str)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points not dominated when quality (first) is maximised and latency (second)
    minimised; ties kept."""
    front = []
    for i, (quality, latency) in enumerate(points):
        dominated = any(
            (q >= quality and lat <= latency) and (q > quality or lat < latency)
            for j, (q, lat) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return front


def sweep_plots(rows: list[dict[str, Any]], swept: list[str], metric: str) -> list[Plot]:
    """The plots for ``metric`` (nothing is written)."""
    written: list[Plot] = []
    retrievers = list(dict.fromkeys(row["retriever"] for row in rows))
    for retriever in retrievers:
        mine = [row for row in rows if row["retriever"] == retriever and isinstance(row.get(metric), float)]
        if not mine:
            continue
        for key in swept:
            others = [other for other in swept if other != key]
            series_key = others[0] if others else None
            figure, axes = _figure((6.4, 4.0))
            for series in _axis_values(mine, series_key) if series_key else [None]:
                in_series = [row for row in mine if series_key is None or row[series_key] == series]
                xs = _axis_values(in_series, key)
                ys = [next(row[metric] for row in in_series if row[key] == x) for x in xs]
                numeric = all(_number(x) is not None for x in xs)
                axes.plot(
                    [float(x) for x in xs] if numeric else [str(x) for x in xs],
                    ys,
                    marker="o",
                    label=f"{series_key}={series}" if series_key else None,
                )
            axes.set_xlabel(key)
            axes.set_ylabel(metric)
            axes.set_title(f"{retriever}: {metric} vs {key}")
            axes.grid(alpha=0.3)
            if series_key:
                axes.legend(fontsize=7)
            written.append(_render(figure, f"plot_{retriever}_{_slug(metric)}_vs_{_slug(key)}.png"))
        if len(swept) >= 2:
            x_key, y_key = swept[0], swept[1]
            xs, ys = _axis_values(mine, x_key), _axis_values(mine, y_key)
            grid = [[float("nan")] * len(xs) for _ in ys]
            for row in mine:
                grid[ys.index(row[y_key])][xs.index(row[x_key])] = row[metric]
            figure, axes = _figure((6.4, 4.8))
            image = axes.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
            axes.set_xticks(range(len(xs)), [str(x) for x in xs], rotation=45, fontsize=7)
            axes.set_yticks(range(len(ys)), [str(y) for y in ys], fontsize=7)
            axes.set_xlabel(x_key)
            axes.set_ylabel(y_key)
            axes.set_title(f"{retriever}: {metric}")
            figure.colorbar(image, ax=axes)
            written.append(_render(figure, f"heatmap_{retriever}_{_slug(metric)}.png"))
        timed = [row for row in mine if _number(row.get("p95_ms")) is not None]
        if timed:
            points = [(row[metric], float(row["p95_ms"])) for row in timed]
            front = set(pareto_front(points))
            figure, axes = _figure((6.4, 4.0))
            axes.scatter([p[1] for p in points], [p[0] for p in points], c="#999999", label="jobs")
            ordered = sorted(front, key=lambda i: points[i][1])
            axes.plot(
                [points[i][1] for i in ordered],
                [points[i][0] for i in ordered],
                "o-",
                color="#d62728",
                label="Pareto front",
            )
            axes.set_xlabel("latency p95 (ms)")
            axes.set_ylabel(metric)
            axes.set_title(f"{retriever}: quality vs latency")
            axes.grid(alpha=0.3)
            axes.legend(fontsize=7)
            written.append(_render(figure, f"pareto_{retriever}_{_slug(metric)}.png"))
    return written


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_")


def _render(figure: Any, name: str) -> Plot:
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    return Plot(name, buffer.getvalue())


def _figure(size: tuple[float, float]) -> tuple[Any, Any]:
    """A figure of ``size`` inches and its one axes (matplotlib imported here: a command that
    draws nothing never loads it)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=size)
    return figure, figure.subplots()
