"""What the supervised fusion methods learn from judged training runs (ranx's estimators).

Each leg's training run is read as *hit lists*: per judged training query, ``h[r] = 1`` when the
leg's result at 0-based position ``r`` is judged relevant (grade >= 1), else 0, over the whole
depth the leg returned. Queries without any judgment are not used; a judged query the leg
returned nothing for is an empty hit list.

* PosFuse, SlideFuse: ``P(r) = sum_q h_q[r] / |{q : len(h_q) > r}|``, the share of relevant
  results at position ``r`` among the queries the leg answered that deep.
* ProbFuse (``n_segments``): each query's hit list is cut into ``n_segments`` segments of
  ``ceil(len(h_q) / n_segments)``; ``P(k)`` is the mean over queries of the share of relevant
  results in segment ``k`` (an empty segment adds 0 to the sum, and still counts in the mean).
* SegFuse: ``P(k) = mean_q sum(h_q[seg k]) / |seg k|`` over the fixed segments
  :data:`~retrievers.fusion.methods.SEGFUSE_BOUNDS`.
* MAPFuse: the leg's MAP (trec_eval's AP: precision at each relevant result over the number of
  relevant judgments of the query, averaged over judged queries).
* BayesFuse: the log-odds ``ln(p / (1 - p))`` of the mean precision ``p`` of each segment of
  positions cut at 0, 5, 10, 15, 20, 30, 100, 200, 500, 1000 (0.001 in place of a 0 on either
  side), per position up to 1000.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

from retrievers.fusion.methods import SEGFUSE_BOUNDS

__all__ = ["BAYES_CUTS", "TRAINERS", "hit_lists", "learn"]

BAYES_CUTS: tuple[int, ...] = (0, 5, 10, 15, 20, 30, 100, 200, 500, 1000)

Ranking = Sequence[str]
Qrels = Mapping[str, Mapping[str, int]]


def hit_lists(rankings: Mapping[str, Ranking], qrels: Qrels) -> list[list[float]]:
    """One hit list per judged query (sorted by id), from the leg's ``{query: [doc, ...]}``."""
    lists: list[list[float]] = []
    for query_id in sorted(qrels):
        relevant = {doc for doc, grade in qrels[query_id].items() if grade >= 1}
        if not qrels[query_id]:
            continue
        lists.append([1.0 if doc in relevant else 0.0 for doc in rankings.get(query_id, ())])
    return lists


def position_probs(lists: Sequence[Sequence[float]]) -> tuple[float, ...]:
    depth = max((len(hits) for hits in lists), default=0)
    hits_at = [0.0] * depth
    answered = [0] * depth
    for hits in lists:
        for position, hit in enumerate(hits):
            hits_at[position] += hit
            answered[position] += 1
    return tuple(hits_at[r] / answered[r] for r in range(depth))


def segment_probs(lists: Sequence[Sequence[float]], n_segments: int) -> tuple[float, ...]:
    totals = [0.0] * n_segments
    for hits in lists:
        size = math.ceil(len(hits) / n_segments)
        for k in range(n_segments):
            segment = hits[k * size : (k + 1) * size]
            if segment:
                totals[k] += math.fsum(segment) / len(segment)
    return tuple(total / len(lists) for total in totals) if lists else tuple(totals)


def segfuse_probs(lists: Sequence[Sequence[float]]) -> tuple[float, ...]:
    totals = [0.0] * (len(SEGFUSE_BOUNDS) - 1)
    for hits in lists:
        for k in range(len(totals)):
            start, end = SEGFUSE_BOUNDS[k], SEGFUSE_BOUNDS[k + 1]
            totals[k] += math.fsum(hits[start:end]) / (end - start)
    return tuple(total / len(lists) for total in totals) if lists else tuple(totals)


def mean_average_precision(rankings: Mapping[str, Ranking], qrels: Qrels) -> float:
    values: list[float] = []
    for query_id in sorted(qrels):
        relevant = {doc for doc, grade in qrels[query_id].items() if grade >= 1}
        if not qrels[query_id]:
            continue
        found = 0
        total = 0.0
        for position, doc in enumerate(rankings.get(query_id, ())):
            if doc in relevant:
                found += 1
                total += found / (position + 1)
        values.append(total / len(relevant) if relevant else 0.0)
    return math.fsum(values) / len(values) if values else 0.0


def bayes_log_odds(lists: Sequence[Sequence[float]]) -> tuple[float, ...]:
    odds = [0.0] * BAYES_CUTS[-1]
    for start, end in itertools.pairwise(BAYES_CUTS):
        precision = math.fsum(math.fsum(hits[start:end]) / (end - start) for hits in lists) / max(
            len(lists), 1
        )
        positive = precision if precision != 0 else 0.001
        negative = 1 - positive if 1 - positive != 0 else 0.001
        odds[start:end] = [math.log(positive / negative)] * (end - start)
    return tuple(odds)


#: the supervised methods and what each learns per leg
TRAINERS = ("posfuse", "slidefuse", "probfuse", "segfuse", "mapfuse", "bayesfuse")


def learn(
    method: str, legs: Sequence[Mapping[str, Ranking]], qrels: Qrels, *, n_segments: int = 10
) -> tuple[tuple[float, ...], ...]:
    """Per leg, what ``method`` learns from the leg's training rankings and ``qrels``."""
    if method not in TRAINERS:
        raise ValueError(f"{method!r} learns nothing; the supervised methods are {', '.join(TRAINERS)}")
    if not any(qrels.values()):
        raise ValueError(f"{method} learns from judged training queries, and none is judged")
    model: list[tuple[float, ...]] = []
    for rankings in legs:
        lists = hit_lists(rankings, qrels)
        if method in ("posfuse", "slidefuse"):
            model.append(position_probs(lists))
        elif method == "probfuse":
            model.append(segment_probs(lists, n_segments))
        elif method == "segfuse":
            model.append(segfuse_probs(lists))
        elif method == "mapfuse":
            model.append((mean_average_precision(rankings, qrels),))
        else:
            model.append(bayes_log_odds(lists))
    return tuple(model)
