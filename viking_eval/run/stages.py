"""Per-stage latency: the spans of each timed query (retrievers/spans.py) summed per stage.

A stage's *path* is its span's stage name after its ancestors' (``traverse/round``); a span with
a detail is named ``stage[detail]`` (``strategies/strategy[semantic]``). Per query, a path's time
is the sum of its spans (a hop taken three times counts three times) and its count the number of
spans. The summary gives per path the mean count per query, the p50 and mean of the per-query
time (0 for a query that had no such span), and its share of the mean total. Top-level spans run
one after another in the query's thread, so they sum to at most the query's total; ``other`` is
what they leave (setup, ranking, result objects) and closes the sum. Nested paths are parts of
their parent (threads inside ``legs`` or ``strategies`` overlap, so siblings may sum above it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from retrievers.spans import Span

OTHER = "other"


@dataclass(frozen=True)
class QuerySpans:
    """One timed query: ``start_ns``/``end_ns`` (perf_counter_ns) around ``retrieve`` and its
    spans; ``epoch_offset_ns`` turns those clock times into epoch nanoseconds."""

    query: int  # position in the timed sample
    start_ns: int
    end_ns: int
    epoch_offset_ns: int
    spans: tuple[Span, ...]

    @property
    def total_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


@dataclass(frozen=True)
class StageSummary:
    path: str
    stage: str
    depth: int  # 0: a top-level stage (part of the stacked bar), 1+: inside another
    count_mean: float  # spans per query
    p50_ms: float
    mean_ms: float
    share: float  # mean_ms / mean total ms

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def label(span: Span) -> str:
    return f"{span.stage}[{span.detail}]" if span.detail else span.stage


def span_paths(spans: Sequence[Span]) -> list[str]:
    """Each span's path, in ``spans`` order (a parent missing from ``spans`` counts as the root)."""
    by_index = {span.index: span for span in spans}
    paths: dict[int, str] = {}

    def path(span: Span) -> str:
        if span.index not in paths:
            parent = by_index.get(span.parent)
            paths[span.index] = label(span) if parent is None else f"{path(parent)}/{label(span)}"
        return paths[span.index]

    return [path(span) for span in spans]


def summarize(queries: Sequence[QuerySpans]) -> tuple[StageSummary, ...]:
    """Per path (first-seen order, ``other`` last): see the module docstring. Empty without queries."""
    if not queries:
        return ()
    order: list[str] = []
    times: dict[str, np.ndarray] = {}
    counts: dict[str, np.ndarray] = {}
    stages: dict[str, str] = {}
    n = len(queries)
    other = np.zeros(n)
    for q, query in enumerate(queries):
        top = 0.0
        for span, path in zip(query.spans, span_paths(query.spans), strict=True):
            if path not in times:
                order.append(path)
                times[path], counts[path] = np.zeros(n), np.zeros(n)
                stages[path] = span.stage
            times[path][q] += span.ms
            counts[path][q] += 1
            if "/" not in path:
                top += span.ms
        other[q] = max(query.total_ms - top, 0.0)
    times[OTHER], counts[OTHER], stages[OTHER] = other, np.ones(n), OTHER
    mean_total = float(np.mean([query.total_ms for query in queries]))
    return tuple(
        StageSummary(
            path=path,
            stage=stages[path],
            depth=path.count("/"),
            count_mean=float(np.mean(counts[path])),
            p50_ms=float(np.percentile(times[path], 50)),
            mean_ms=float(np.mean(times[path])),
            share=float(np.mean(times[path])) / mean_total if mean_total > 0 else 0.0,
        )
        for path in [*order, OTHER]
    )


def span_rows(queries: Sequence[QuerySpans]) -> list[list[Any]]:
    """One row per span for the spans CSV: query, span, parent, path, stage, detail, start and
    duration in ms (start from the query's start)."""
    rows: list[list[Any]] = []
    for query in queries:
        for span, path in zip(query.spans, span_paths(query.spans), strict=True):
            rows.append(
                [
                    query.query,
                    span.index,
                    span.parent,
                    path,
                    span.stage,
                    span.detail,
                    round((span.start_ns - query.start_ns) / 1e6, 6),
                    round(span.ms, 6),
                ]
            )
    return rows


SPAN_COLUMNS = ("query", "span", "parent", "path", "stage", "detail", "start_ms", "duration_ms")
