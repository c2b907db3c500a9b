"""Exact rescoring of candidate rows: how an approximate index keeps the exact index's scores.

:func:`rescore` scores each query's candidates as :class:`~retrievers.index.vectors.ExactVectorIndex`
scores them (float32 products, numpy's pairwise sum per row: the same value in any batch) and
keeps the top ``length`` by (score desc, row asc); :mod:`retrievers.index.ann` uses it for every
faiss search.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.index.vectors import Hits

__all__ = ["band_candidates", "float32_scores", "rescore"]

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
    scores = np.full(labels.shape, -np.inf, dtype=np.float32)
    n_queries, fetch = labels.shape
    faiss.fvec_inner_products_by_idx(
        faiss.swig_ptr(scores),
        faiss.swig_ptr(np.ascontiguousarray(queries)),
        faiss.swig_ptr(vectors),
        faiss.swig_ptr(np.ascontiguousarray(labels)),
        queries.shape[1],
        n_queries,
        fetch,
    )
    return scores


def band_candidates(
    labels: IndexArray,
    scores: Float32Array,
    bands: npt.NDArray[np.float64] | None,
    length: int,
    n_allowed: int | None,
) -> tuple[list[IndexArray], list[int]]:
    """Each query's candidate rows (faiss's ``labels``, -1 = none) that may reach its top
    ``length``: a float32 score is within the rounding band (``bands``, per query; None: keep
    every candidate) of the exact score, so one below the k-th best float32 score minus the band
    cannot. With ``n_allowed`` (a complete scan such as flat's, of that many rows), also the
    queries whose last candidate is still within the band of the k-th best: a row faiss did not
    return might then reach the top (many near-ties at the cut), and they must be searched
    exactly."""
    candidates = []
    incomplete = []
    for i in range(labels.shape[0]):
        rows, values = labels[i], scores[i]
        if rows[-1] < 0:  # faiss fills the rows it did not find with -1, at the end
            present = rows >= 0
            rows, values = rows[present], values[present]
        if bands is not None and rows.size > length:
            kth = np.partition(values, rows.size - length)[rows.size - length]
            if n_allowed is not None and rows.size < n_allowed and values.min() >= kth - bands[i]:
                incomplete.append(i)
            rows = rows[values >= kth - bands[i]]
        candidates.append(rows)
    return candidates, incomplete


def _checked(scores: Float32Array, rows: IndexArray) -> tuple[Float32Array, IndexArray]:
    if not np.isfinite(scores).all():
        raise ValueError(
            "a similarity score overflowed to a non-finite value; rows and queries should be L2-normalised"
        )
    return scores, rows
