"""The fusion methods of ranx (E. Bassani, L. Romelli, "ranx.fuse: A Python library for metasearch",
CIKM 2022), one query at a time, each with its formula and source.

Every method takes the query's legs, already normalised (:mod:`retrievers.fusion.norms`), each a
list of ``(item, score)`` in the ranking order (score descending, item ascending; position ``r``
is 0-based), the legs' ``weights`` ``w_i`` and the method's parameters, and returns
``{item: fused score}`` over every item some leg returned. Notation: ``s_i(d)`` leg ``i``'s
normalised score of ``d``, ``r_i(d)`` its position, ``I(d)`` the legs that returned ``d``,
``n(d) = |I(d)|``, ``C`` the number of distinct items of the query. Sums run over ``I(d)``
unless said otherwise. The supervised methods (probfuse, slidefuse, posfuse, segfuse, mapfuse,
bayesfuse) read per-leg statistics learned from judged training runs
(:mod:`retrievers.fusion.supervised`), passed as ``model``.

Sources (besides ranx):

* CombSUM, CombMNZ, CombANZ, CombMIN, CombMAX, CombMED: E. A. Fox, J. A. Shaw, "Combination of
  multiple searches", TREC-2, 1994. CombGMNZ: J. H. Lee, SIGIR 1997 (``n(d)^gamma``).
* Weighted sum (linear combination): C. C. Vogt, G. W. Cottrell, "Fusion via a linear combination
  of scores", Information Retrieval 1999. WMNZ: S. Wu, F. Crestani, "Data fusion with estimated
  weights", CIKM 2002. Mixed: S. Wu, "Applying statistical principles to data fusion in
  information retrieval", Expert Systems with Applications 2009.
* RRF: G. V. Cormack, C. L. A. Clarke, S. Büttcher, SIGIR 2009. ISR, log-ISR, logN-ISR:
  A. Mourão, F. Martins, J. Magalhães, "Multimodal medical information retrieval with
  unsupervised rank fusion", Computerized Medical Imaging and Graphics 2015.
* BordaFuse (and weighted), BayesFuse: J. A. Aslam, M. Montague, "Models for metasearch",
  SIGIR 2001. Condorcet (and weighted): M. Montague, J. A. Aslam, "Condorcet fusion for improved
  retrieval", CIKM 2002. RBC: P. Bailey, A. Moffat, F. Scholer, P. Thomas, "Retrieval consistency
  in the presence of query variations", SIGIR 2017.
* ProbFuse: D. Lillis, F. Toolan, R. Collier, J. Dunnion, SIGIR 2006; SlideFuse and PosFuse:
  the same authors, "Extending probabilistic data fusion using sliding windows", ECIR 2008;
  SegFuse: M. Shokouhi, "Segmentation of search engine results for effective data-fusion",
  ECIR 2007; MAPFuse: D. Lillis et al., "Estimating probabilities for effective data fusion",
  SIGIR 2010.

Two places where we differ from ranx's code, both only where ranx's result depends on the order
of a Python set: Condorcet's pairwise vote between two items a leg did not return is no vote
(ranx gives it to the second item), and items the majority cannot order (a tie, or a cycle) are
ordered by item.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import cmp_to_key
from typing import Any

from retrievers.fusion.norms import Leg

__all__ = ["UNRANKED_LOG_ODDS", "score_methods"]

Scores = dict[Any, float]
#: BayesFuse's log-odds of an item a leg did not return: ln(0.001 / 0.999)
UNRANKED_LOG_ODDS = math.log(0.001 / 0.999)


def _found(legs: Sequence[Leg[Any]]) -> dict[Hashable, list[tuple[int, int, float]]]:
    """item -> ``(leg, position, score)`` of every leg that returned it, legs in order."""
    found: dict[Hashable, list[tuple[int, int, float]]] = {}
    for leg_index, leg in enumerate(legs):
        for position, (item, score) in enumerate(leg):
            found.setdefault(item, []).append((leg_index, position, score))
    return found


def _floors(legs: Sequence[Leg[Any]], missing: str) -> list[float]:
    """What a leg adds for an item it did not return: 0 (``zero``, ranx's rule) or the leg's
    lowest normalised score (``floor``: no evidence is worth the weakest evidence, never more;
    with z-scores 0 is the leg's mean, above its weaker half)."""
    if missing == "zero":
        return [0.0] * len(legs)
    return [min((score for _, score in leg), default=0.0) for leg in legs]


def _additive(legs: Sequence[Leg[Any]], weights: Sequence[float], missing: str) -> tuple[Scores, Scores]:
    """``(sum_i w_i s_i(d) over every leg, missing legs adding their floor; n(d))``."""
    floors = _floors(legs, missing)
    total: Scores = {}
    count: Scores = {}
    for item, hits in _found(legs).items():
        present = {leg for leg, _, _ in hits}
        value = math.fsum(weights[leg] * score for leg, _, score in hits)
        value += math.fsum(weights[leg] * floors[leg] for leg in range(len(legs)) if leg not in present)
        total[item] = value
        count[item] = float(len(hits))
    return total, count


def comb_sum(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """CombSUM: ``sum_i s_i(d)``; wsum: ``sum_i w_i s_i(d)`` (``weights`` 1 for sum)."""
    return _additive(legs, weights, p["missing"])[0]


def comb_mnz(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """CombMNZ: ``n(d) * sum_i s_i(d)``."""
    total, count = _additive(legs, weights, p["missing"])
    return {item: value * count[item] for item, value in total.items()}


def comb_gmnz(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """CombGMNZ: ``n(d)^gamma * sum_i s_i(d)`` (gamma 1 is CombMNZ, 0 CombSUM)."""
    total, count = _additive(legs, weights, p["missing"])
    return {item: value * count[item] ** p["gamma"] for item, value in total.items()}


def comb_wmnz(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """WMNZ: ``(sum_{i in I(d)} s_i(d)) * (sum_{i in I(d)} w_i)``: the weights of the legs that
    found ``d`` replace MNZ's count."""
    unit = [1.0] * len(legs)
    total, _ = _additive(legs, unit, p["missing"])
    return {
        item: total[item] * math.fsum(weights[leg] for leg, _, _ in hits)
        for item, hits in _found(legs).items()
    }


def _over_found(reduce: Callable[[list[float]], float]) -> Callable[..., Scores]:
    def fuse(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
        return {item: reduce([score for _, _, score in hits]) for item, hits in _found(legs).items()}

    return fuse


#: CombANZ ``sum_i s_i(d) / n(d)``; CombMIN, CombMAX, CombMED: the min, max, median of ``s_i(d)``
comb_anz = _over_found(lambda values: math.fsum(values) / len(values))
comb_min = _over_found(min)
comb_max = _over_found(max)
comb_med = _over_found(lambda values: float(statistics.median(values)))


def mixed(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """Mixed: ``sqrt(n(d)) * sum_i w_i s_i(d)`` (weights learned on training queries)."""
    return {
        item: math.fsum(weights[leg] * score for leg, _, score in hits) * math.sqrt(len(hits))
        for item, hits in _found(legs).items()
    }


def _by_position(value: Callable[[int, int, float, Mapping[str, Any]], float]) -> Callable[..., Scores]:
    """A fusion summing ``w_i * value(leg, position, score)`` over the legs that returned the item."""

    def fuse(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
        return {
            item: sum(weights[leg] * value(leg, position, score, p) for leg, position, score in hits)
            for item, hits in _found(legs).items()
        }

    return fuse


def rrf(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """RRF: ``sum_i w_i / (k + r_i(d) + 1)`` (weights 1 unless given), computed as
    :func:`retrievers.fusion.reciprocal_rank_fusion` does, so the hybrid's weighted RRF is
    reproduced bit for bit."""
    return {
        item: sum(weights[leg] / (p["k"] + position + 1) for leg, position, _ in hits)
        for item, hits in _found(legs).items()
    }


#: RBC: ``sum_i (1 - phi) phi^r_i(d)`` (rank-biased centroid)
rbc = _by_position(lambda leg, r, s, p: (1.0 - p["phi"]) * p["phi"] ** r)
#: PosFuse: ``sum_i P_i(r_i(d))``, ``P_i(r)`` the share of training queries whose result at ``r``
#: is relevant (0 past the deepest training result)
posfuse = _by_position(lambda leg, r, s, p: p["model"][leg][r] if r < len(p["model"][leg]) else 0.0)
#: MAPFuse: ``sum_i MAP_i / (r_i(d) + 1)``, ``MAP_i`` leg ``i``'s MAP on the training queries
mapfuse = _by_position(lambda leg, r, s, p: p["model"][leg][0] / (r + 1))


def _isr_terms(legs: Sequence[Leg[Any]]) -> dict[Hashable, tuple[float, int]]:
    return {
        item: (math.fsum(1.0 / (position + 1) ** 2 for _, position, _ in hits), len(hits))
        for item, hits in _found(legs).items()
    }


def isr(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """ISR: ``n(d) * sum_i 1 / (r_i(d) + 1)^2``."""
    return {item: total * count for item, (total, count) in _isr_terms(legs).items()}


def log_isr(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """log-ISR: ``ln(n(d)) * sum_i 1 / (r_i(d) + 1)^2`` (an item one leg found scores 0)."""
    return {item: total * math.log(count) for item, (total, count) in _isr_terms(legs).items()}


def logn_isr(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """logN-ISR: ``ln(n(d) + sigma) * sum_i 1 / (r_i(d) + 1)^2``."""
    return {item: total * math.log(count + p["sigma"]) for item, (total, count) in _isr_terms(legs).items()}


def bordafuse(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """BordaFuse: ``sum_i w_i b_i(d)`` over *every* leg, ``b_i(d) = C - r_i(d)`` where leg ``i``
    returned ``d``, else ``(C - n_i + 1) / 2`` (the mean of the points left), ``n_i`` the leg's
    length; weights 1 for the unweighted method."""
    candidates = {item for leg in legs for item, _ in leg}
    count = len(candidates)
    fused: Scores = dict.fromkeys(candidates, 0.0)
    for leg, weight in zip(legs, weights, strict=True):
        points = {item: float(count - position) for position, (item, _) in enumerate(leg)}
        unranked = (count - len(leg) + 1) / 2
        for item in candidates:
            fused[item] += weight * points.get(item, unranked)
    return fused


def condorcet(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """Condorcet fusion: items sorted by pairwise majority, ``d`` before ``e`` when the legs
    ranking ``d`` above ``e`` weigh more than those ranking ``e`` above ``d`` (a leg that returned
    one of the two ranks it above the other; one that returned neither does not vote); score
    ``C - position``. Unordered pairs (equal votes) go by item; with cycles the result is that of
    this merge sort started from the items in order, as in the paper any sort gives one."""
    positions = [{item: position for position, (item, _) in enumerate(leg)} for leg in legs]
    candidates = sorted({item for leg in legs for item, _ in leg})

    def compare(x: Any, y: Any) -> int:
        votes = 0.0
        for ranks, weight in zip(positions, weights, strict=True):
            rx, ry = ranks.get(x), ranks.get(y)
            if rx is None and ry is None:
                continue
            if ry is None or (rx is not None and rx < ry):
                votes += weight
            else:
                votes -= weight
        if votes != 0:
            return -1 if votes > 0 else 1
        return -1 if x < y else (1 if y < x else 0)

    order = sorted(candidates, key=cmp_to_key(compare))
    return {item: float(len(order) - position) for position, item in enumerate(order)}


def _segments(n: int, n_segments: int) -> int:
    return math.ceil(n / n_segments) if n else 0


def probfuse(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """ProbFuse: ``sum_i P_i(k) / (k + 1)`` with ``k`` the segment of ``r_i(d)`` when the leg is cut
    in ``n_segments`` segments of ``ceil(n_i / n_segments)`` results, ``P_i(k)`` the mean share of
    relevant results in segment ``k`` over the training queries."""
    fused: Scores = {}
    for leg_index, leg in enumerate(legs):
        size = _segments(len(leg), p["n_segments"])
        probs = p["model"][leg_index]
        for position, (item, _) in enumerate(leg):
            segment = position // size
            value = probs[segment] / (segment + 1) if segment < len(probs) else 0.0
            fused[item] = fused.get(item, 0.0) + value
    return fused


def slidefuse(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """SlideFuse: ``sum_i mean(P_i(a..b))``, the PosFuse probabilities over the window
    ``a = max(r - w, 0)``, ``b = min(r + w, n_i - 1)`` (divided by ``b - a + 1`` even where the
    training runs were shorter, as ranx does)."""
    fused: Scores = {}
    for leg_index, leg in enumerate(legs):
        probs = p["model"][leg_index]
        last = len(leg) - 1
        for position, (item, _) in enumerate(leg):
            a, b = max(position - p["w"], 0), min(position + p["w"], last)
            value = math.fsum(probs[a : b + 1]) / (b - a + 1)
            fused[item] = fused.get(item, 0.0) + value
    return fused


#: SegFuse's segment bounds: segment k (1-based) holds positions [10 * 2^(k-2) - 5, 10 * 2^(k-1) - 5)
SEGFUSE_BOUNDS: tuple[int, ...] = (0, *(10 * 2 ** (k - 1) - 5 for k in range(1, 11)))


def segment_of(position: int) -> int | None:
    """SegFuse's segment of a 0-based position (None past the last bound)."""
    for k in range(len(SEGFUSE_BOUNDS) - 1):
        if SEGFUSE_BOUNDS[k] <= position < SEGFUSE_BOUNDS[k + 1]:
            return k
    return None


def segfuse(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """SegFuse: ``sum_i P_i(seg(r_i(d))) * (s_i(d) + 1)``, segments of growing size
    (:data:`SEGFUSE_BOUNDS`), ``P_i`` the mean share of relevant results per segment in training."""
    fused: Scores = {}
    for leg_index, leg in enumerate(legs):
        probs = p["model"][leg_index]
        for position, (item, score) in enumerate(leg):
            segment = segment_of(position)
            value = 0.0 if segment is None else probs[segment] * (score + 1.0)
            fused[item] = fused.get(item, 0.0) + value
    return fused


def bayesfuse(legs: Sequence[Leg[Any]], weights: Sequence[float], p: Mapping[str, Any]) -> Scores:
    """BayesFuse: ``sum_i L_i(r_i(d))`` over every leg, ``L_i(r)`` the log-odds of relevance at
    position ``r`` learned in training, ``ln(0.001 / 0.999)`` for a leg that did not return ``d``
    (or returned it deeper than the learned positions)."""
    fused: Scores = {}
    for item, hits in _found(legs).items():
        total = UNRANKED_LOG_ODDS * (len(legs) - len(hits))
        for leg, position, _ in hits:
            odds = p["model"][leg]
            total += odds[position] if position < len(odds) else UNRANKED_LOG_ODDS
        fused[item] = total
    return fused


def score_methods() -> dict[str, Callable[[Sequence[Leg[Any]], Sequence[float], Mapping[str, Any]], Scores]]:
    """Method name (ranx's) -> its per-query function."""
    return {
        "sum": comb_sum,
        "wsum": comb_sum,
        "mnz": comb_mnz,
        "gmnz": comb_gmnz,
        "wmnz": comb_wmnz,
        "anz": comb_anz,
        "min": comb_min,
        "max": comb_max,
        "med": comb_med,
        "mixed": mixed,
        "rrf": rrf,
        "rbc": rbc,
        "isr": isr,
        "log_isr": log_isr,
        "logn_isr": logn_isr,
        "bordafuse": bordafuse,
        "w_bordafuse": bordafuse,
        "condorcet": condorcet,
        "w_condorcet": condorcet,
        "probfuse": probfuse,
        "slidefuse": slidefuse,
        "posfuse": posfuse,
        "segfuse": segfuse,
        "mapfuse": mapfuse,
        "bayesfuse": bayesfuse,
    }
