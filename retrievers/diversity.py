"""Diversity: maximal marginal relevance (MMR) re-ranking and the redundancy of a result list.

MMR (J. Carbonell, J. Goldstein, "The use of MMR, diversity-based reranking for reordering
documents and producing summaries", SIGIR 1998) picks, one at a time, the candidate maximising

    lambda * rel(d) - (1 - lambda) * max_{s in chosen} cos(d, s)

where ``rel`` is the candidate's score min-max normalised over the candidates (1.0 each when all
are equal) and ``cos`` the cosine of the documents' vectors (the store's embeddings; a zero
vector has cosine 0 with everything). ``lambda = 1`` keeps the relevance order; ties go to the
candidate that came first (the ranking order: score desc, doc id asc).

Redundancy of a list: the mean cosine similarity over all pairs of its documents' vectors
(0 for fewer than two documents).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["mmr_order", "redundancy", "unit_rows"]

T = TypeVar("T")


def unit_rows(vectors: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Each row divided by its L2 norm (a zero row stays zero)."""
    rows = np.asarray(vectors, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"vectors must be 2-D (documents x dimensions), got shape {rows.shape}")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    unit: npt.NDArray[np.float64] = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return unit


def mmr_order(
    vectors: npt.ArrayLike, scores: Sequence[float], mmr_lambda: float, k: int, items: Sequence[T]
) -> list[T]:
    """The first ``k`` of ``items`` (in the ranking order, with ``scores`` and ``vectors`` row by
    row) in MMR order (see the module docstring)."""
    if not 0.0 <= mmr_lambda <= 1.0:
        raise ValueError(f"mmr_lambda must be in [0, 1], got {mmr_lambda}")
    n = len(items)
    if len(scores) != n:
        raise ValueError(f"got {len(scores)} scores for {n} items")
    if n == 0:
        return []
    unit = unit_rows(vectors)
    if unit.shape[0] != n:
        raise ValueError(f"got {unit.shape[0]} vectors for {n} items")
    values = np.asarray(scores, dtype=np.float64)
    low, high = float(values.min()), float(values.max())
    relevance = np.ones(n) if high == low else (values - low) / (high - low)
    similarity = unit @ unit.T
    closest = np.full(n, -np.inf)  # max cosine to the chosen; none chosen yet
    remaining = np.ones(n, dtype=bool)
    chosen: list[int] = []
    for _ in range(min(k, n)):
        penalty = np.where(np.isfinite(closest), closest, 0.0)
        value = mmr_lambda * relevance - (1.0 - mmr_lambda) * penalty
        value[~remaining] = -np.inf
        pick = int(np.argmax(value))  # the first of equal values: the ranking order
        chosen.append(pick)
        remaining[pick] = False
        closest = np.maximum(closest, similarity[pick])
    return [items[i] for i in chosen]


def redundancy(vectors: npt.ArrayLike) -> float:
    """Mean pairwise cosine similarity of the rows of ``vectors`` (0.0 for fewer than two)."""
    unit = unit_rows(vectors)
    n = unit.shape[0]
    if n < 2:
        return 0.0
    similarity = unit @ unit.T
    upper = np.triu_indices(n, k=1)
    return float(similarity[upper].mean())
