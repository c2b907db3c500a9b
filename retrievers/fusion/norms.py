"""Score normalisations applied to each leg of one query before a fusion method (ranx's set).

A leg is a list of ``(item, score)`` pairs in the project's ranking order (score descending, then
item ascending: :func:`retrievers.ranking.pair_key`); position ``i`` is 0-based. ``n`` is the
leg's length, ``C`` the number of distinct items over every leg of the query. The small floor
``1e-9`` on a denominator is ranx's: a leg whose scores are all equal normalises to 0 (min-max,
sum, zmuv), where :func:`retrievers.fusion.normalize_scores` gives 1.0 (min-max) for the hybrid.

* ``min-max``: ``(s - min) / max(max - min, 1e-9)`` (J. H. Lee, "Analyses of multiple evidence
  combination", SIGIR 1997).
* ``max``: ``s / max(max, 1e-9)`` (Lee 1997's variant).
* ``sum``: ``(s - min) / max(sum(s) - n * min, 1e-9)``, and ``zmuv`` (z-score, zero mean unit
  variance): ``(s - mean) / max(std, 1e-9)`` with the population standard deviation (M. Montague,
  J. A. Aslam, "Relevance score normalization for metasearch", CIKM 2001).
* ``rank``: ``1 - i / n`` (only the order counts).
* ``borda``: ``1 - i / C`` for an item the leg returned and ``0.5 - (n - 1) / (2C)`` for every
  other item of the query, which the leg then holds too (M. E. Renda, U. Straccia, "Web
  metasearch: rank vs. score based rank aggregation methods", SAC 2003).
* ``none``: the raw scores.

After normalisation a leg is put in the ranking order again (score descending, item ascending; only
``borda`` can change it: the items it adds, tied, go after the leg's own by item).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["NORMS", "Leg", "normalise_legs"]

NORMS: tuple[str, ...] = ("min-max", "max", "sum", "zmuv", "rank", "borda", "none")
_ALIASES = {"minmax": "min-max", "min_max": "min-max", "zscore": "zmuv", "z-score": "zmuv"}
_FLOOR = 1e-9

Item = TypeVar("Item")
Leg = list[tuple[Item, float]]


def norm_name(norm: str) -> str:
    """``norm`` as named in :data:`NORMS` (``minmax`` and ``zscore`` are accepted for ``min-max``
    and ``zmuv``); ValueError naming the allowed values."""
    name = _ALIASES.get(norm, norm)
    if name not in NORMS:
        raise ValueError(f"normalisation must be one of {', '.join(NORMS)}, got {norm!r}")
    return name


def _one(leg: Leg[Item], norm: str) -> Leg[Item]:
    scores = [score for _, score in leg]
    if not scores or norm == "none":
        return list(leg)
    n = len(scores)
    if norm == "rank":
        return [(item, 1.0 - i / n) for i, (item, _) in enumerate(leg)]
    low, high = min(scores), max(scores)
    if norm == "min-max":
        spread = max(high - low, _FLOOR)
        return [(item, (score - low) / spread) for item, score in leg]
    if norm == "max":
        top = max(high, _FLOOR)
        return [(item, score / top) for item, score in leg]
    if norm == "sum":
        total = max(math.fsum(scores) - low * n, _FLOOR)
        return [(item, (score - low) / total) for item, score in leg]
    mean = math.fsum(scores) / n
    std = math.sqrt(math.fsum((score - mean) ** 2 for score in scores) / n)
    spread = max(std, _FLOOR)
    return [(item, (score - mean) / spread) for item, score in leg]


def normalise_legs(legs: Sequence[Leg[Item]], norm: str) -> list[Leg[Item]]:
    """Every leg of one query normalised by ``norm`` (see the module docstring), each in the
    ranking order."""
    name = norm_name(norm)
    if name != "borda":
        return [_one(leg, name) for leg in legs]
    candidates = {item for leg in legs for item, _ in leg}
    count = len(candidates)
    out: list[Leg[Item]] = []
    for leg in legs:
        own = {item: 1.0 - i / count for i, (item, _) in enumerate(leg)}
        unranked = 0.5 - (len(leg) - 1) / (2 * count) if count else 0.0
        scored = {item: own.get(item, unranked) for item in candidates}
        out.append(sorted(scored.items(), key=lambda pair: (-pair[1], pair[0])))
    return out
