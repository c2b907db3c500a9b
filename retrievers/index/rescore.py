"""Exact rescoring of candidate rows: how an approximate index keeps the exact index's scores.

:func:`rescore` scores each query's candidates as :class:`~retrievers.index.vectors.ExactVectorIndex`
scores them (float32 products, numpy's pairwise sum per row: the same value in any batch) and
keeps the top ``length`` by (score desc, row asc); :mod:`retrievers.index.ann` uses it for every
faiss search.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.index.exact_kernel import ASK_AGAIN, exact_top
from retrievers.index.vectors import Hits

__all__ = ["band_top", "float32_scores", "one_top", "refined_top", "rescore"]

Float32Array = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]

#: candidate rows rescored at once (bounds the products in memory: 32768 x 384 x 4 B = 50 MB)
_RESCORE_ROWS = 32768


def rescore(
    vectors: Float32Array, queries: Float32Array, candidates: Sequence[IndexArray], length: int
) -> Hits:
    """Each query's candidate rows scored as :class:`ExactVectorIndex` scores them (float32
    products, numpy's pairwise sum per row: batch-invariant), then its top ``length`` by
    (score desc, row asc). Queries are taken in blocks of at most :data:`_RESCORE_ROWS`
    candidate rows (one query's rows at least), which bounds the products held at once."""
    results: Hits = []
    first = 0
    while first < len(candidates):
        last, total = first + 1, candidates[first].size
        while last < len(candidates) and total + candidates[last].size <= _RESCORE_ROWS:
            total += candidates[last].size
            last += 1
        results += _rescore_block(vectors, queries[first:last], candidates[first:last], length)
        first = last
    return results


def _rescore_block(
    vectors: Float32Array, queries: Float32Array, candidates: Sequence[IndexArray], length: int
) -> Hits:
    if len(candidates) == 1:  # one query (the latency path): no owners to track
        rows = candidates[0]
        products = vectors[rows]  # a copy (fancy indexing), multiplied in place
        if products.dtype != np.float32:
            products = products.astype(np.float32)
        np.multiply(products, queries[0], out=products)
        scores = np.add.reduce(products, axis=1)  # what .sum(axis=1) calls: pairwise per row
        picked = np.lexsort((rows, -scores))[:length]
        return [_checked(scores[picked], rows[picked])]
    counts = np.fromiter((rows.size for rows in candidates), dtype=np.int64, count=len(candidates))
    rows = np.concatenate(candidates)
    owner = np.repeat(np.arange(len(candidates), dtype=np.int64), counts)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    products = np.asarray(vectors[rows], dtype=np.float32)  # a copy (fancy indexing), multiplied in place
    for i, (start, count) in enumerate(zip(starts.tolist(), counts.tolist(), strict=True)):
        products[start : start + count] *= queries[i]  # elementwise: the same products as the exact index
    scores = products.sum(axis=1)  # pairwise per row: the same value in any batch
    order = np.lexsort((rows, -scores, owner))
    results: Hits = []
    for i in range(len(candidates)):
        picked = order[starts[i] : starts[i] + min(int(counts[i]), length)]
        results.append(_checked(scores[picked], rows[picked]))
    return results


def float32_scores(
    faiss: Any, vectors: Float32Array, queries: Float32Array, labels: IndexArray
) -> Float32Array:
    """Each query's inner product with each of its candidate rows, ``labels`` ``(n_queries,
    fetch)``: faiss's SIMD dot products over ``vectors`` (what ``IndexRefineFlat`` computes,
    with no copy of the vectors); -inf where faiss found no row (-1, which faiss skips)."""
    n_queries, fetch = labels.shape
    if n_queries == 1 and labels.item(-1) >= 0:  # one query, every row found: faiss writes each
        scores = np.empty(labels.shape, dtype=np.float32)
    else:
        scores = np.full(labels.shape, -np.inf, dtype=np.float32)
    faiss.fvec_inner_products_by_idx(
        faiss.swig_ptr(scores),
        faiss.swig_ptr(queries if queries.flags.c_contiguous else np.ascontiguousarray(queries)),
        faiss.swig_ptr(vectors),
        faiss.swig_ptr(labels if labels.flags.c_contiguous else np.ascontiguousarray(labels)),
        queries.shape[1],
        n_queries,
        fetch,
    )
    return scores


def refined_top(
    faiss: Any, vectors: Float32Array, queries: Float32Array, labels: IndexArray, wanted: int
) -> tuple[Float32Array, IndexArray, list[int]]:
    """Each query's ``wanted`` best candidates of ``labels`` ``(n_queries, fetch)`` (-1 = none, at
    the end) by faiss's float32 dot products over ``vectors``, best first, chosen in C++ by a heap
    (``knn_inner_products_by_idx``: ``IndexRefineFlat``'s step over the exact index's matrix, no
    copy): ``(scores, rows, missing)``, ``(n_queries, wanted)`` each, -1 rows after the last
    candidate. The heap drops a candidate whose score is not above -FLT_MAX (-inf, NaN: an
    overflow); ``missing`` lists the queries where it dropped one it had room for, so the caller
    scores their candidates by :func:`float32_scores`, whose cut keeps them and whose rescoring
    refuses the overflow. Which candidates are chosen does not depend on the batch (each query's
    heap is its own), and they only choose: the results are their exact scores (:func:`band_top`)."""
    n_queries, fetch = labels.shape  # one query may come as a (dim,) vector
    scores = np.empty((n_queries, wanted), dtype=np.float32)
    rows = np.empty((n_queries, wanted), dtype=np.int64)
    faiss.knn_inner_products_by_idx(
        faiss.swig_ptr(queries if queries.flags.c_contiguous else np.ascontiguousarray(queries)),
        faiss.swig_ptr(vectors),
        faiss.swig_ptr(labels if labels.flags.c_contiguous else np.ascontiguousarray(labels)),
        vectors.shape[1],
        n_queries,
        vectors.shape[0],
        fetch,
        wanted,
        faiss.swig_ptr(scores),
        faiss.swig_ptr(rows),
        fetch,
    )
    missing: list[int] = []
    if rows.item(-1) < 0 if n_queries == 1 else not bool((rows[:, -1] >= 0).all()):
        # a heap with room left: it must hold every candidate (up to ``wanted``)
        had = np.count_nonzero(labels[:, :wanted] >= 0, axis=1)
        missing = np.flatnonzero(np.count_nonzero(rows >= 0, axis=1) < had).tolist()
    return scores, rows, missing


def band_top(
    vectors: Float32Array,
    queries: Float32Array,
    labels: IndexArray,
    scores: Float32Array,
    bands: npt.NDArray[np.float64],
    length: int,
    *,
    check_gap: bool,
    ranked: bool = False,
) -> tuple[Hits, list[int]]:
    """Each query's top ``length`` among faiss's candidates (``labels``, ``(n_queries, fetch)``,
    -1 = none, with their float32 ``scores``), as :func:`rescore` ranks and scores them, for the
    whole batch at once: the candidates within the rounding band (``bands``, per query) of the
    k-th best float32 score are gathered, multiplied by their query and summed row by row
    (numpy's pairwise sum, the exact index's value in any batch), then ordered by (query, score
    desc, row asc). A candidate below the band cannot reach the top (the module docstring of
    :mod:`retrievers.index.vectors`), so the result equals rescoring every candidate.

    With ``check_gap`` (faiss was asked for fewer candidates than the contract's), also the
    queries whose ``fetch`` candidates all lie within the band (faiss returned as many as asked,
    the lowest still within the band of the k-th best): a row faiss did not return might reach
    their top, so the caller must search them again and replace their (empty) entries.

    ``ranked``: each query's ``scores`` come in descending order (faiss's results), so the k-th
    best of one query is the lowest of its first k (any order stays correct: that lowest is never
    above the k-th best, so the cut only keeps more)."""
    n_queries, fetch = labels.shape
    if n_queries == 1:
        found = one_top(vectors, queries[0], labels[0], scores[0], float(bands[0]), length, check_gap, ranked)
        return ([(scores[0, :0], labels[0, :0])], [0]) if found is None else ([found], [])
    present = labels >= 0
    absent = not bool(present[:, -1].all())  # faiss fills the rows it did not find with -1, at the end
    if absent:
        scores = np.where(present, scores, np.float32(-np.inf))
    if fetch > length:
        kth = np.partition(scores, fetch - length, axis=1)[:, fetch - length]
        floor = kth - bands  # float64: the float32 scores are compared exactly
        keep = scores >= floor[:, None]
        if absent:
            keep &= present
    else:
        floor = np.full(n_queries, -np.inf)
        keep = present
    again: list[int] = []
    if check_gap:
        again = np.flatnonzero(present[:, -1] & (scores.min(axis=1) >= floor)).tolist()
        if again:
            keep[again] = False
    results: Hits = []
    step = max(1, _RESCORE_ROWS // fetch)  # bounds the products held at once
    for first in range(0, n_queries, step):
        results += _top_of_kept(
            vectors,
            queries[first : first + step],
            labels[first : first + step],
            keep[first : first + step],
            length,
        )
    return results, again


def one_top(
    vectors: Float32Array,
    query: Float32Array,
    labels: IndexArray,
    scores: Float32Array,
    band: float,
    length: int,
    check_gap: bool,
    ranked: bool,
) -> tuple[Float32Array, IndexArray] | None:
    """:func:`band_top` for one query (the latency path): the same steps on 1-D arrays. Ranked
    candidates (faiss's results) are cut, scored and ranked by one compiled call
    (:func:`~retrievers.index.exact_kernel.exact_top`); when it cannot, numpy's calls below do
    the same (the cut of faiss's ranked candidates on Python floats, exact doubles of the
    float32 scores).
    None: every candidate lies within the band (with ``check_gap``), so the caller asks again.
    The result never aliases ``labels`` or ``scores`` (faiss's arrays, reused by the next call)."""
    if ranked:  # compiled, the same cut and the same bits (numpy below when it cannot)
        found = exact_top(vectors, query, labels, length, ranked=scores, band=band, check_gap=check_gap)
        if not isinstance(found, str):
            return found
        if found == ASK_AGAIN:
            return None
    if labels.item(-1) < 0:  # faiss fills the rows it did not find with -1, at the end
        present = labels >= 0
        labels, scores, check_gap = labels[present], scores[present], False
    fetch = labels.size
    rows = labels
    if fetch > length and ranked:
        values = scores.tolist()
        # the lowest of the first k: the k-th best when ranked, never above it otherwise
        floor = min(values[:length]) - band
        count = length  # ranked: the candidates within the band are a prefix ...
        while count < fetch and values[count] >= floor:
            count += 1
        if count == fetch:
            if check_gap:  # every candidate within the band: ask again
                return None
        elif max(values[count:]) < floor:  # ... checked: none of the rest is within it
            rows = labels[:count]  # a view, copied by the gather below
        else:  # not in order after all: every candidate within the band
            rows = labels[[i for i, value in enumerate(values) if value >= floor]]
    elif fetch > length:
        kth = np.partition(scores, fetch - length)[fetch - length]
        # float64: the float32 scores are compared exactly (a Python float would be cast down)
        rows = labels[scores >= np.float64(float(kth) - band)]
        if check_gap and rows.size == fetch:  # every candidate within the band: ask again
            return None
    products = vectors.take(rows, axis=0)  # a copy (float32: ExactVectorIndex's matrix)
    np.multiply(products, query, out=products)  # elementwise: the exact index's products
    exact = np.add.reduce(products, axis=1)  # what .sum(axis=1) calls: pairwise per row
    ordered = exact.tolist()
    if ordered and all(map(operator.gt, ordered, ordered[1:])):  # strictly descending: no tie
        # +inf would come first, -inf last (and NaN is never greater, so never here)
        if not (math.isfinite(ordered[0]) and math.isfinite(ordered[min(length, len(ordered)) - 1])):
            _checked(exact, rows)
        return exact[:length], rows[:length].copy()  # rows may be a view of faiss's arrays
    picked = np.lexsort((rows, -exact))[:length]
    return _checked(exact[picked], rows[picked])


def _top_of_kept(
    vectors: Float32Array, queries: Float32Array, labels: IndexArray, keep: npt.NDArray[np.bool_], length: int
) -> Hits:
    n_queries = labels.shape[0]
    owner, position = np.nonzero(keep)  # by query, then by faiss's order
    rows = labels[owner, position]
    products = vectors[rows]  # a copy (fancy indexing), multiplied in place
    if products.dtype != np.float32:
        products = products.astype(np.float32)
    # elementwise: the same products as the exact index (one query: no gathered copy of it)
    np.multiply(products, queries[0] if n_queries == 1 else queries[owner], out=products)
    exact = np.add.reduce(products, axis=1)  # what .sum(axis=1) calls: pairwise per row
    order = np.lexsort((rows, -exact, owner)) if n_queries > 1 else np.lexsort((rows, -exact))
    counts = np.bincount(owner, minlength=n_queries)
    starts = np.cumsum(counts) - counts
    if n_queries == 1 or bool((counts >= length).all()):
        if n_queries == 1:
            picked = order[: min(int(counts[0]), length)][None, :]
        else:
            picked = order[starts[:, None] + np.arange(length)]
        top_scores, top_rows = exact[picked], rows[picked]
        _checked(top_scores, top_rows)
        return list(zip(top_scores, top_rows, strict=True))
    results: Hits = []
    for start, count in zip(starts.tolist(), counts.tolist(), strict=True):
        picked = order[start : start + min(count, length)]
        results.append(_checked(exact[picked], rows[picked]))
    return results


def _checked(scores: Float32Array, rows: IndexArray) -> tuple[Float32Array, IndexArray]:
    if not np.isfinite(scores).all():
        raise ValueError(
            "a similarity score overflowed to a non-finite value; rows and queries should be L2-normalised"
        )
    return scores, rows
