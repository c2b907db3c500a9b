"""The one ranking order of the project, and top-k selection that keeps it.

Every ranking is ordered by **score descending, then id ascending**; ties never depend on
insertion order or on how a partial sort happened to split them. Store rows are kept in doc id
order, so breaking ties by the lower row index is breaking them by doc id, and the array
functions here work on rows.

* :func:`sort_key` / :func:`rank_results` order :class:`~retrievers.types.RetrievalResult` lists;
  :func:`pair_key` orders ``(id, score)`` pairs the same way.
* :func:`top_k_rows` partitions first (``O(n)``) and sorts only the candidates. A plain
  ``argpartition`` is not enough on its own: when equal scores straddle the partition boundary it
  keeps an arbitrary subset of them, so every item that ties with the k-th score is re-admitted
  and the tie is settled by index.
* :func:`top_k_1d` is one row of it with an allow-mask; :func:`merge_top_k` merges two candidate
  sets (used when a search walks a corpus in chunks).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from retrievers.types import RetrievalResult

__all__ = [
    "check_mask",
    "check_positive_int",
    "check_top_k",
    "merge_top_k",
    "order_rows",
    "pair_key",
    "rank_results",
    "sort_key",
    "top_k_1d",
    "top_k_rows",
]

FloatArray = npt.NDArray[np.floating[Any]]
IndexArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def sort_key(result: RetrievalResult) -> tuple[float, str]:
    """The ranking order as a sort key: score descending, then doc id ascending."""
    return (-result.score, result.doc_id)


Id = TypeVar("Id", bound="_Comparable")


class _Comparable(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


def pair_key(pair: tuple[Id, float]) -> tuple[float, Id]:
    """The same order for ``(id, score)`` pairs (a run's ``{doc_id: score}`` items, fused
    scores): score descending, then id ascending."""
    return (-pair[1], pair[0])


def rank_results(results: Iterable[RetrievalResult], limit: int | None = None) -> list[RetrievalResult]:
    """``results`` in the ranking order, cut to ``limit``; every score must be finite."""
    ordered = sorted(results, key=sort_key)
    for result in ordered:
        if not math.isfinite(result.score):
            raise ValueError(f"score of {result.doc_id!r} is {result.score}; scores must be finite")
    return ordered if limit is None else ordered[:limit]


def order_rows(rows: npt.ArrayLike, scores: npt.ArrayLike) -> IndexArray:
    """Positions that put ``(rows, scores)`` in the ranking order: score desc, row asc."""
    return np.lexsort((np.asarray(rows), -np.asarray(scores))).astype(np.int64, copy=False)


def check_top_k(top_k: object) -> int:
    """``top_k`` as an int >= 1 (bools refused), else ValueError."""
    return check_positive_int(top_k, "top_k")


def check_positive_int(value: object, name: str) -> int:
    """``value`` as an int if it is an integer >= 1 (bools are refused), else ValueError."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def check_mask(mask: object, n_items: int) -> BoolArray:
    """A boolean allow-mask of exactly ``n_items`` entries (True = the item may be returned)."""
    array = np.asarray(mask)
    if array.dtype != np.bool_ or array.shape != (n_items,):
        raise ValueError(
            f"mask must be a boolean array of shape ({n_items},), got dtype {array.dtype} shape {array.shape}"
        )
    return array


def top_k_rows(scores: npt.ArrayLike, k: int) -> tuple[FloatArray, IndexArray]:
    """Top ``k`` of every row of ``scores``, ordered by score desc, then column index asc.

    ``scores`` is ``(n_queries, n_items)``; the result is ``(top_scores, top_indices)``, both of
    shape ``(n_queries, k')`` with ``k' = min(k, n_items)``; indices are int64 and the scores keep
    the input's floating dtype (integer input is converted to float64).

    Method: ``argpartition`` finds, per row, a set holding ``k'`` best scores and so the k'-th best
    score ``t``. Every item with score ``>= t`` is then a candidate (this re-admits items tying
    with ``t`` that the partition happened to leave out), and the candidates are lexsorted by
    (row, -score, index); the first ``k'`` of each row are the answer. With all scores equal this
    returns indices ``0..k'-1``.

    ``-inf`` marks an item that must not win; it sorts last, but it *is* returned when a row has
    fewer than ``k'`` finite scores. Use :func:`top_k_1d` (which drops them) or cut the rows.
    NaN scores have no place in a ranking and raise ValueError; ``k < 1`` raises ValueError.
    """
    k = check_positive_int(k, "k")
    values = np.asarray(scores)
    if values.ndim != 2:
        raise ValueError(f"scores must be 2-D (n_queries, n_items), got shape {values.shape}")
    if not np.issubdtype(values.dtype, np.floating):
        if not (np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_):
            raise ValueError(f"scores must be real numbers, got dtype {values.dtype}")
        values = values.astype(np.float64)
    n_rows, n_items = values.shape
    kk = min(k, n_items)
    if kk == 0 or n_rows == 0:
        return np.empty((n_rows, kk), dtype=values.dtype), np.empty((n_rows, kk), dtype=np.int64)
    if np.isnan(values).any():
        raise ValueError("scores contain NaN; every score must be a number (use -inf to exclude an item)")

    # Work with negated scores so that "ascending" means "best first".
    negated = -values
    if kk < n_items:
        part = np.argpartition(negated, kk - 1, axis=1)[:, :kk]
        kth = np.take_along_axis(negated, part, axis=1).max(axis=1)
        rows, cols = np.nonzero(negated <= kth[:, None])
    else:
        rows = np.repeat(np.arange(n_rows), n_items)
        cols = np.tile(np.arange(n_items), n_rows)
    # np.nonzero lists candidates row by row, columns ascending; lexsort is stable and sorts by
    # its last key first: rows, then negated score, then column index.
    order = np.lexsort((cols, negated[rows, cols], rows))
    counts = np.bincount(rows, minlength=n_rows)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    picked = order[starts[:, None] + np.arange(kk)[None, :]]
    top_indices = cols[picked].astype(np.int64, copy=False)
    top_scores = np.take_along_axis(values, top_indices, axis=1)
    return top_scores, top_indices


def top_k_1d(
    scores: npt.ArrayLike, k: int, mask: npt.ArrayLike | None = None
) -> tuple[FloatArray, IndexArray]:
    """Top ``k`` of one score vector, by score desc then index asc, leaving out excluded items.

    ``mask`` (bool, ``n_items``) says which items may be returned (True = allowed). Items with
    score ``-inf`` are excluded too. The result therefore has ``min(k, allowed items)`` entries
    and may be shorter than ``k``; returned scores are never ``-inf``.
    """
    k = check_positive_int(k, "k")
    values = np.asarray(scores)
    if values.ndim != 1:
        raise ValueError(f"scores must be 1-D (n_items,), got shape {values.shape}")
    allowed: IndexArray | None = None
    if mask is not None:
        allowed = np.flatnonzero(check_mask(mask, values.shape[0])).astype(np.int64)
        values = values[allowed]
    top_scores, top_indices = top_k_rows(values[None, :], k)
    kept_scores, kept = top_scores[0], top_indices[0]
    # -inf sorts last, so the excluded ones are a suffix.
    n_keep = int(np.count_nonzero(kept_scores != -np.inf))
    kept_scores, kept = kept_scores[:n_keep], kept[:n_keep]
    if allowed is not None:
        # ``allowed`` is increasing, so mapping back keeps the index-ascending tie order.
        kept = allowed[kept]
    return kept_scores, kept


def merge_top_k(
    scores_a: FloatArray, index_a: IndexArray, scores_b: FloatArray, index_b: IndexArray, k: int
) -> tuple[FloatArray, IndexArray]:
    """Row-wise top ``k`` of two candidate sets (same rows), by score desc then global index asc."""
    scores = np.concatenate((scores_a, scores_b), axis=1)
    indices = np.concatenate((index_a, index_b), axis=1)
    order = np.lexsort((indices, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(indices, order, axis=1)
