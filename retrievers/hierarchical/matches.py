"""What ``find()``/``search()`` return: typed matches in memories / resources / skills buckets,
and how the matches of several typed queries merge into one :class:`FindResult`.

Merging differs from OpenViking's (which concatenates the per-query lists): results are deduplicated
by URI keeping the best priority-weighted score, ordered by that score (then URI) and cut per bucket.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrievers.hierarchical.intent import ContextType, QueryPlan, TypedQuery
from retrievers.params import check_int

__all__ = ["FindResult", "MatchedContext", "merge_matches", "priority_weight"]


@dataclass(frozen=True)
class MatchedContext:
    """One result of ``find``/``search``. ``level`` 2 is a leaf (``doc_id`` set), 0 a directory."""

    uri: str
    context_type: ContextType
    level: int
    abstract: str
    score: float
    doc_id: str | None = None
    query: str = ""
    provenance: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FindResult:
    """Results by context type, each bucket ordered by (score desc, URI asc)."""

    memories: tuple[MatchedContext, ...] = ()
    resources: tuple[MatchedContext, ...] = ()
    skills: tuple[MatchedContext, ...] = ()
    plan: QueryPlan | None = None

    @property
    def total(self) -> int:
        return len(self.memories) + len(self.resources) + len(self.skills)

    def __iter__(self) -> Iterator[MatchedContext]:
        yield from self.memories
        yield from self.resources
        yield from self.skills


def priority_weight(priority: int) -> float:
    """Weight of a typed query's scores: ``(6 - priority) / 5``, so priority 1 -> 1.0 .. 5 -> 0.2."""
    return (6 - priority) / 5


def _weighted(score: float, weight: float) -> float:
    # Multiplying a negative score by a weight < 1 would raise it; dividing keeps "lower priority
    # never ranks higher" for scores of either sign (cosine scores can be negative).
    return score * weight if score >= 0 else score / weight


def merge_matches(
    results: Sequence[tuple[TypedQuery, Sequence[MatchedContext]]],
    *,
    limit_per_bucket: int,
    plan: QueryPlan | None = None,
) -> FindResult:
    """Merge the results of several typed queries into one :class:`FindResult`.

    Each match's score becomes ``score * priority_weight(priority)`` (divided instead when the
    score is negative); a URI found by several queries keeps its best weighted score (the first
    query on a tie). Each bucket is ordered by (score desc, URI asc) and cut to ``limit_per_bucket``.
    """
    check_int("limit_per_bucket", limit_per_bucket, 1)
    best: dict[str, MatchedContext] = {}
    for typed, matches in results:
        weight = priority_weight(typed.priority)
        for match in matches:
            score = _weighted(match.score, weight)
            if not math.isfinite(score):
                raise ValueError(f"non-finite score {match.score!r} for {match.uri}")
            known = best.get(match.uri)
            if known is None or score > known.score:
                best[match.uri] = MatchedContext(
                    uri=match.uri,
                    context_type=match.context_type,
                    level=match.level,
                    abstract=match.abstract,
                    score=score,
                    doc_id=match.doc_id,
                    query=typed.query,
                    provenance={
                        **match.provenance,
                        "unweighted_score": match.score,
                        "priority": typed.priority,
                    },
                )
    buckets: dict[ContextType, list[MatchedContext]] = {kind: [] for kind in ContextType}
    for match in best.values():
        buckets[match.context_type].append(match)
    ordered = {
        kind: tuple(sorted(items, key=lambda m: (-m.score, m.uri))[:limit_per_bucket])
        for kind, items in buckets.items()
    }
    return FindResult(
        memories=ordered[ContextType.MEMORY],
        resources=ordered[ContextType.RESOURCE],
        skills=ordered[ContextType.SKILL],
        plan=plan,
    )
