"""Rank and score fusion: weighted reciprocal rank fusion, convex combination of normalised
scores, CombSUM / CombMNZ, consensus fusion, score normalisation and the project's tie-breaking
order. Every family that fuses lists (hybrid legs, graph seeds, multi-strategy) uses these.

Inputs are per-leg rankings (items best first) or runs (``{item: raw score}``); outputs are
``{item: fused score}`` mappings that :func:`ranked` turns into the one ranking order of the
project, score descending then item ascending. Items are anything hashable and mutually
comparable (doc ids, or store row indices, whose order is the doc id order).

Conventions shared by the score-based fusions (:func:`convex_combination`, :func:`comb_sum`,
:func:`comb_mnz`): each leg's scores are normalised over the documents that leg returned
(:func:`normalize_scores`); a document a leg did not return gets that leg's lowest normalised
value (0 with min-max, the lowest z-score with z-score), i.e. "no evidence" is worth what the
weakest evidence is, never more. Weights multiply each leg's contribution.

Sources:

* RRF: G. V. Cormack, C. L. A. Clarke, S. Büttcher, "Reciprocal rank fusion outperforms
  Condorcet and individual rank learning methods", SIGIR 2009 (``k = 60``).
* CombSUM, CombMNZ: E. A. Fox, J. A. Shaw, "Combination of multiple searches", TREC-2, 1994;
  min-max normalisation before combining: J. H. Lee, "Analyses of multiple evidence
  combination", SIGIR 1997.
* Convex combination of normalised lexical and dense scores: S. Bruch, S. Gai, A. Ingber,
  "An analysis of fusion functions for hybrid retrieval", ACM TOIS 2023 (they find it more
  robust than RRF when tuned; z-score normalisation is their "z" variant).
* Consensus fusion (the multi-strategy seed design): the mean of a document's weighted,
  normalised scores plus a boost per extra list that found it, capped at 1; its max-based variant
  (CombMAX, Fox & Shaw 1994, plus the same boost), which a weak list cannot drag down; and the
  seed's own raw weighted average (Memory-Arc's ``_fuse_results``), kept to reproduce the seed.
* Context fusion (sentence-window retrieval, e.g. LlamaIndex's ``SentenceWindowNodeParser``, and
  score propagation over a document graph): a document's score plus a share of its best
  neighbour's, so the turn that answers a matching question ranks next to it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from retrievers.params import Params, param
from retrievers.ranking import pair_key

__all__ = [
    "NORMALIZATIONS",
    "Normalization",
    "comb_mnz",
    "comb_sum",
    "consensus_fuse",
    "context_fusion",
    "convex_combination",
    "edge_neighbours",
    "max_consensus_fuse",
    "neighbour_graph",
    "normalize_scores",
    "ranked",
    "reciprocal_rank_fusion",
    "weighted_average_fusion",
]

Normalization = Literal["minmax", "zscore", "max"]
NORMALIZATIONS: tuple[str, ...] = ("minmax", "zscore", "max")


class _Comparable(Hashable, Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


Item = TypeVar("Item", bound=_Comparable)

#: relative tolerance for "the weights of a convex combination sum to 1"
_WEIGHT_SUM_TOLERANCE = 1e-9


def ranked(scores: Mapping[Item, float], limit: int | None = None) -> list[tuple[Item, float]]:
    """``(item, score)`` pairs by score descending, then item ascending (the project's ranking
    rule: ties never depend on insertion order), cut to ``limit`` when given (``limit >= 0``).
    Scores must be finite."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be an integer >= 0 or None, got {limit!r}")
    for item, score in scores.items():
        if not math.isfinite(score):
            raise ValueError(f"score of {item!r} is {score}; fused scores must be finite")
    order = sorted(scores.items(), key=pair_key)
    return order if limit is None else order[:limit]


def _check_weights(weights: Sequence[float] | None, n_legs: int) -> list[float]:
    if weights is None:
        return [1.0] * n_legs
    values = list(weights)
    if len(values) != n_legs:
        raise ValueError(f"got {len(values)} weights for {n_legs} legs; give one weight per leg")
    for i, weight in enumerate(values):
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            raise ValueError(f"weights[{i}] must be a finite number >= 0, got {weight!r}")
        if weight < 0:
            raise ValueError(f"weights[{i}] must be >= 0, got {weight}")
    return [float(weight) for weight in values]


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Item]],
    weights: Sequence[float] | None = None,
    *,
    k: float = 60,
    normalize: bool = False,
) -> dict[Item, float]:
    """Weighted reciprocal rank fusion (Cormack et al., SIGIR 2009).

    ``score(d) = sum_i w_i / (k + rank_i(d) + 1)`` over the legs ``i`` that returned ``d``, with
    ``rank_i(d)`` its 0-based position in ``rankings[i]`` (so the first item of a leg adds
    ``w_i / (k + 1)``, the paper's ``1 / (k + r)`` with ``r`` from 1). ``weights`` default to 1
    each. ``normalize`` multiplies every score by ``k + 1``: with weights summing to 1 a document
    ranked first by every leg then scores exactly 1.0 (oasis's normalised RRF).

    ``k > 0`` (finite); a ranking must not list an item twice.
    """
    if isinstance(k, bool) or not isinstance(k, int | float) or not (math.isfinite(k) and k > 0):
        raise ValueError(f"k must be a finite number > 0, got {k!r}")
    if not isinstance(normalize, bool):
        raise ValueError(f"normalize must be True or False, got {normalize!r}")
    leg_weights = _check_weights(weights, len(rankings))
    scale = (k + 1) if normalize else 1.0
    fused: dict[Item, float] = {}
    for leg, (ranking, weight) in enumerate(zip(rankings, leg_weights, strict=True)):
        seen: set[Item] = set()
        for rank, item in enumerate(ranking):
            if item in seen:
                raise ValueError(f"rankings[{leg}] lists {item!r} twice")
            seen.add(item)
            fused[item] = fused.get(item, 0.0) + weight / (k + rank + 1)
    if normalize:
        fused = {item: score * scale for item, score in fused.items()}
    return fused


def normalize_scores(scores: npt.ArrayLike, method: Normalization = "minmax") -> npt.NDArray[np.float64]:
    """One leg's scores mapped onto a common scale.

    * ``minmax``: ``(s - min) / (max - min)`` into [0, 1] (Lee 1997); when every score is equal,
      every document gets 1.0 (the leg returned them all as equally good).
    * ``zscore``: ``(s - mean) / std`` with the population standard deviation; when every score
      is equal, every document gets 0.0.
    * ``max``: ``max(s, 0) / max`` into [0, 1]; when no score is positive, every document gets 1.0.

    Scores must be finite; an empty input gives an empty output.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {values.shape}")
    if not np.isfinite(values).all():
        raise ValueError("scores must be finite to be normalised")
    if method not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {list(NORMALIZATIONS)}, got {method!r}")
    if values.size == 0:
        return values
    if method == "minmax":
        low, high = float(values.min()), float(values.max())
        if high == low:
            return np.ones_like(values)
        return (values - low) / (high - low)
    if method == "max":
        top = float(values.max())
        if top <= 0:
            return np.ones_like(values)
        return np.clip(values, 0.0, None) / top
    spread = float(values.std())
    if spread == 0.0:
        return np.zeros_like(values)
    return (values - float(values.mean())) / spread


def _normalised_runs(
    runs: Sequence[Mapping[Item, float]], normalization: Normalization
) -> list[tuple[dict[Item, float], float]]:
    """Per leg: ``({item: normalised score}, value for an item the leg did not return)``."""
    out: list[tuple[dict[Item, float], float]] = []
    for run in runs:
        items = list(run)
        normalised = normalize_scores([run[item] for item in items], normalization)
        floor = 0.0 if normalization != "zscore" or not items else float(normalised.min())
        out.append((dict(zip(items, normalised.tolist(), strict=True)), floor))
    return out


def _weighted_sum(
    runs: Sequence[Mapping[Item, float]], weights: list[float], normalization: Normalization
) -> tuple[dict[Item, float], dict[Item, int]]:
    """``sum_i w_i * n_i(d)`` over every document any leg returned, and how many legs returned it."""
    legs = _normalised_runs(runs, normalization)
    fused: dict[Item, float] = {}
    found: dict[Item, int] = {}
    for normalised, _ in legs:
        for item in normalised:
            found[item] = found.get(item, 0) + 1
    for item in found:
        total = 0.0
        for (normalised, floor), weight in zip(legs, weights, strict=True):
            total += weight * normalised.get(item, floor)
        fused[item] = total
    return fused, found


def convex_combination(
    runs: Sequence[Mapping[Item, float]],
    weights: Sequence[float],
    *,
    normalization: Normalization = "minmax",
) -> dict[Item, float]:
    """Convex combination of normalised scores (Bruch et al., TOIS 2023):
    ``score(d) = sum_i w_i * n_i(d)`` with ``w_i >= 0`` summing to 1 and ``n_i`` leg ``i``'s
    normalised scores (see the module docstring for documents a leg did not return). With a
    dense and a BM25 leg this is ``alpha * dense + (1 - alpha) * bm25``."""
    leg_weights = _check_weights(weights, len(runs))
    if runs and not math.isclose(math.fsum(leg_weights), 1.0, rel_tol=_WEIGHT_SUM_TOLERANCE):
        raise ValueError(f"convex combination weights must sum to 1, got {leg_weights}")
    return _weighted_sum(runs, leg_weights, normalization)[0]


def comb_sum(
    runs: Sequence[Mapping[Item, float]],
    weights: Sequence[float] | None = None,
    *,
    normalization: Normalization = "minmax",
) -> dict[Item, float]:
    """CombSUM (Fox & Shaw 1994) over normalised scores: ``score(d) = sum_i w_i * n_i(d)``,
    weights 1 each by default (the original, unweighted method). With weights summing to 1 it
    is :func:`convex_combination`."""
    return _weighted_sum(runs, _check_weights(weights, len(runs)), normalization)[0]


def comb_mnz(
    runs: Sequence[Mapping[Item, float]],
    weights: Sequence[float] | None = None,
    *,
    normalization: Normalization = "minmax",
) -> dict[Item, float]:
    """CombMNZ (Fox & Shaw 1994): CombSUM times the number of legs that returned the document,
    ``score(d) = |{i : d in run_i}| * sum_i w_i * n_i(d)`` — agreement between legs is rewarded."""
    fused, found = _weighted_sum(runs, _check_weights(weights, len(runs)), normalization)
    return {item: score * found[item] for item, score in fused.items()}


def consensus_fuse(contributions: Sequence[float], consensus_boost: float) -> float:
    """``min(mean(contributions) + consensus_boost * (n - 1), 1.0)`` for a document found by
    ``n = len(contributions)`` lists (contributions already normalised and weighted). E.g.
    0.85, 0.72 and 0.68 with a boost of 0.1 give ``min(0.75 + 0.2, 1) = 0.95``."""
    if not contributions:
        raise ValueError("consensus_fuse needs at least one contribution")
    mean = math.fsum(contributions) / len(contributions)
    return min(mean + consensus_boost * (len(contributions) - 1), 1.0)


def max_consensus_fuse(contributions: Sequence[float], consensus_boost: float) -> float:
    """``min(max(contributions) + consensus_boost * (n - 1), 1.0)`` for a document found by
    ``n = len(contributions)`` lists: CombMAX (Fox & Shaw 1994) with the consensus boost of
    :func:`consensus_fuse`. A list that found the document with a low score cannot pull it below
    its best list's score, as the mean does. E.g. 0.85, 0.72 and 0.68 with a boost of 0.05 give
    ``min(0.85 + 0.1, 1) = 0.95``; 0.9 and 0.1 give 0.95, where the mean gives ``0.5 + 0.05``."""
    if not contributions:
        raise ValueError("max_consensus_fuse needs at least one contribution")
    return min(max(contributions) + consensus_boost * (len(contributions) - 1), 1.0)


def weighted_average_fusion(
    runs: Sequence[Mapping[Item, float]],
    weights: Sequence[float] | None = None,
    *,
    consensus_boost: float = 0.1,
) -> dict[Item, float]:
    """The Memory-Arc seed's fusion as written (``MultiStrategyRetrieval._fuse_results``), raw
    scales and all: each list's *raw* score times its weight, ``c_i(d) = w_i * s_i(d)``; a
    document found by one list keeps ``c_i(d)`` (not capped: a weight above 1 can push it past
    every document found by several lists); one found by ``n >= 2`` lists gets
    ``min(mean_i c_i(d) + consensus_boost * (n - 1), 1.0)``. E.g. raw 0.85 (weight 1.0) and 0.6
    (weight 1.2) give ``min((0.85 + 0.72) / 2 + 0.1, 1) = 0.885``, and a document only the
    second list found with raw 0.9 scores ``1.08``.

    Scores must be finite; a run must not hold an item twice (a mapping cannot)."""
    if isinstance(consensus_boost, bool) or not isinstance(consensus_boost, int | float):
        raise ValueError(f"consensus_boost must be a number, got {consensus_boost!r}")
    leg_weights = _check_weights(weights, len(runs))
    found: dict[Item, list[float]] = {}
    for leg, (run, weight) in enumerate(zip(runs, leg_weights, strict=True)):
        for item, score in run.items():
            if not math.isfinite(score):
                raise ValueError(f"runs[{leg}] scores {item!r} {score}; scores must be finite")
            found.setdefault(item, []).append(weight * float(score))
    return {
        item: values[0]
        if len(values) == 1
        else min(math.fsum(values) / len(values) + consensus_boost * (len(values) - 1), 1.0)
        for item, values in found.items()
    }


IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def neighbour_graph(
    n_nodes: int, src: npt.ArrayLike, dst: npt.ArrayLike, weight: npt.ArrayLike
) -> tuple[IntArray, IntArray, FloatArray]:
    """The undirected neighbour graph of directed, weighted edges ``src[i] -> dst[i]`` over
    ``n_nodes`` rows, as CSR arrays ``(indptr, neighbours, weights)``: ``a`` and ``b`` are
    neighbours when an edge joins them either way, with the largest weight of those edges;
    self-loops are dropped. Neighbours of a row are in ascending row order."""
    sources = np.asarray(src, dtype=np.int64)
    targets = np.asarray(dst, dtype=np.int64)
    weights = np.asarray(weight, dtype=np.float64)
    if not (sources.shape == targets.shape == weights.shape) or sources.ndim != 1:
        raise ValueError("src, dst and weight must be 1-D arrays of one length")
    if sources.size and (
        min(sources.min(), targets.min()) < 0 or max(sources.max(), targets.max()) >= n_nodes
    ):
        raise ValueError(f"edges name rows outside [0, {n_nodes})")
    if not np.isfinite(weights).all():
        raise ValueError("edge weights must be finite")
    keep = sources != targets
    a = np.concatenate([sources[keep], targets[keep]])
    b = np.concatenate([targets[keep], sources[keep]])
    w = np.concatenate([weights[keep], weights[keep]])
    # by (a, b, weight desc): the first of each (a, b) pair holds its largest weight
    order = np.lexsort((-w, b, a))
    a, b, w = a[order], b[order], w[order]
    first = np.ones(a.size, dtype=bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    a, b, w = a[first], b[first], w[first]
    indptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n_nodes), out=indptr[1:])
    return indptr, b, w


def edge_neighbours(edges: Any, relations: Sequence[str]) -> tuple[IntArray, IntArray, FloatArray]:
    """:func:`neighbour_graph` of a store's edges (:class:`retrievers.store.EdgeSet`: ``src``,
    ``dst``, ``weight``, ``relation``, ``relation_names``, ``n_nodes``) of the named
    ``relations``; ValueError naming a relation the edge set does not have."""
    names = list(edges.relation_names)
    unknown = [name for name in relations if name not in names]
    if unknown:
        raise ValueError(f"the store's edges have no relation {unknown}; they have {names}")
    wanted = np.isin(np.asarray(edges.relation), [names.index(name) for name in relations])
    return neighbour_graph(
        edges.n_nodes,
        np.asarray(edges.src)[wanted],
        np.asarray(edges.dst)[wanted],
        np.asarray(edges.weight)[wanted],
    )


@dataclass(frozen=True)
class ContextParams(Params):
    """The context term's parameters (:func:`context_fusion`), part of the parameters of the
    retrievers that fuse with it (hybrid, multi-strategy)."""

    context_weight: float = param(
        0.0,
        low=0.0,
        high=100.0,
        doc="after fusion, add this times the best neighbour's fused score (store edges of "
        "context_relations, both ways; neighbours join the candidates); 0 = off",
    )
    context_relations: tuple[str, ...] = param(
        ("sequence",), non_empty=True, unique=True, doc="edge relations whose ends are neighbours"
    )


def context_graph(edges: Any, params: ContextParams) -> tuple[IntArray, IntArray, FloatArray] | None:
    """The neighbour graph the context term uses (:func:`edge_neighbours` of ``params``'s
    relations), or None when ``context_weight`` is 0; ValueError when the store has no edges."""
    if params.context_weight <= 0:
        return None
    if edges is None:
        raise ValueError(
            "context_weight > 0 needs a store with edges (store.edges, e.g. store=locomo_graph "
            "for LoCoMo's sequence edges); this store has none"
        )
    return edge_neighbours(edges, params.context_relations)


def context_fusion(
    scores: Mapping[int, float],
    graph: tuple[IntArray, IntArray, FloatArray],
    *,
    weight: float,
    allowed: npt.NDArray[np.bool_] | None = None,
) -> tuple[dict[int, float], dict[int, float]]:
    """Each document's score plus ``weight`` times its best neighbour's::

        fused(d) = own(d) + weight * max(0, max_{n ~ d} w(n, d) * own(n))

    over the undirected ``graph`` (:func:`neighbour_graph`: e.g. the ``sequence`` edges joining a
    dialogue turn to the turns before and after it), ``own`` being ``scores`` (0 for a row they do
    not hold). Rows are store rows. A neighbour of a scored row becomes a candidate too (own
    score 0) when ``allowed`` (a mask over rows; None = all) admits it. Returns
    ``(fused, boosts)``: the fused score of every candidate and the neighbour term
    ``max(0, ...)`` of each, both keyed by row. ``weight = 0`` returns ``scores`` unchanged.

    Why: the evidence of a question is often next to the text that matches it (the answer after
    the question in a dialogue, the sentence after the one naming the subject), as sentence-window
    retrieval exploits; ``weight`` sets how much a neighbour's match counts against a document's
    own."""
    if (
        isinstance(weight, bool)
        or not isinstance(weight, int | float)
        or not (math.isfinite(weight) and weight >= 0)
    ):
        raise ValueError(f"weight must be a finite number >= 0, got {weight!r}")
    own = {int(row): float(score) for row, score in scores.items()}
    if weight == 0 or not own:
        return own, dict.fromkeys(own, 0.0)
    indptr, neighbours, edge_weights = graph
    rows = np.fromiter(own, dtype=np.int64, count=len(own))
    values = np.fromiter(own.values(), dtype=np.float64, count=len(own))
    if not np.isfinite(values).all():
        raise ValueError("scores must be finite")
    starts, ends = indptr[rows], indptr[rows + 1]
    counts = ends - starts
    # every (scored row -> neighbour) pair, as flat arrays
    offsets = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
    reached = neighbours[offsets]
    carried = np.repeat(values, counts) * edge_weights[offsets]
    if allowed is not None:
        inside = np.asarray(allowed, dtype=bool)[reached]
        reached, carried = reached[inside], carried[inside]
    boost: dict[int, float] = dict.fromkeys(own, 0.0)
    if reached.size:
        order = np.lexsort((-carried, reached))
        reached, carried = reached[order], carried[order]
        first = np.ones(reached.size, dtype=bool)
        first[1:] = reached[1:] != reached[:-1]
        for row, value in zip(reached[first].tolist(), carried[first].tolist(), strict=True):
            boost[row] = max(value, 0.0)
    fused = {row: own.get(row, 0.0) + weight * value for row, value in boost.items()}
    return fused, boost
