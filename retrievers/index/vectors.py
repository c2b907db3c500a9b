"""Exact inner-product vector search (numpy), batch-invariant, at the memory-bandwidth floor.

A query's result must not depend on the batch it came in (``retrieve_batch`` equals ``retrieve``
bit for bit), yet BLAS rounds ``Q @ V.T`` differently for different numbers of queries (a
one-query product goes to a GEMV kernel, a batch to GEMM, and threads split sums differently).
So search runs in two stages:

1. **Candidates from float32 scores**, whatever the batch shape: for a single query faiss's
   SIMD dot products (``fvec_inner_products_ny``, what ``IndexFlatIP`` runs; 5.6 ms against
   einsum's 7.0 at 100k x 384 on an AMD EPYC) per chunk of rows, or ``np.einsum('ij,j->i')``
   when faiss is not installed (both stream the matrix once; OpenBLAS 0.3.31's single-precision
   GEMV streamed at half einsum's speed there), GEMM for a batch.
   For a float32 dot product of dimension ``d`` the rounding error is at most
   ``gamma_d * |q| * |v|`` with ``gamma_d = d u / (1 - d u)`` and ``u = 2^-24`` (Higham,
   *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 3.5), for any summation order.
   Every item whose float32 score is within twice that bound of the k-th best float32 score is a
   candidate, so the candidates hold every item of the top k, however faiss, einsum or BLAS
   rounded.
2. **Batch-invariant scores for the candidates**: each candidate row times the query, summed by
   numpy's pairwise summation row by row: the value depends only on that row and the query, never
   on the batch, and its error (``~log2(d) u``) is smaller than BLAS's. The band above covers
   both errors, so the candidates hold the top k by these scores. The top k by (score desc, row
   asc) are returned.

The corpus is walked in chunks of rows (a memory-mapped matrix is read once per batch), never
building an ``n_queries x n_items`` matrix. A batch cuts its chunks (:data:`BATCH_CHUNK_ROWS`
rows, whose scores stay in the cache) at one floor per query taken from a sample of the rows
(:meth:`ExactVectorIndex._sample_floors`); the chunks are shared among as many threads as the
process lets BLAS use, each multiplying (BLAS at one thread) and cutting its own chunks while
their scores are in its cache (:mod:`retrievers.index.blas_threads`; the candidates are kept in
chunk order, the same in any number of threads). Results follow the ranking order (score desc, row
asc; :mod:`retrievers.ranking`); masked-out items are left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.index.blas_threads import blas_workers
from retrievers.index.faiss_calls import optional_faiss
from retrievers.ranking import check_mask, check_positive_int

__all__ = ["ExactVectorIndex", "Hits", "check_queries"]

FloatArray = npt.NDArray[np.floating[Any]]
Float32Array = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Hits = list[tuple[Float32Array, IndexArray]]

#: unit roundoff of float32
_UNIT_ROUNDOFF = 2.0**-24
#: queries multiplied against a chunk at once in a batch (GEMM width; no effect on results:
#: wide blocks keep GEMM efficient, at 4 bytes x 512 x BATCH_CHUNK_ROWS of scores per thread)
_QUERY_BLOCK = 512
#: rows per chunk of the corpus
CHUNK_ROWS = 65536
#: every _SAMPLE-th score of a row gives a cheap lower bound of its k-th best (see _collect)
_SAMPLE = 32
_MIN_SAMPLE = 16
#: rows of a batch's sample at most (bounds its copy: 32768 x 384 x 4 B = 50 MB)
_MAX_SAMPLE_ROWS = 32768
#: rows per chunk in a batch: a block's scores (``_QUERY_BLOCK`` x this, 16 MB) stay in the cache
#: between the GEMM that writes them and the pass that keeps the candidates
BATCH_CHUNK_ROWS = 8192
#: groups of sampled scores per result wanted whose maxima bound a batch's floors (_kth_lower_bound)
_GROUPS_PER_RESULT = 8


class ExactVectorIndex:
    """Exact (brute-force) inner-product search over a float32 matrix, one row per item.

    Rows are expected to be L2-normalised, which makes the inner product the cosine similarity.
    The matrix may be a read-only ``np.memmap``; it is never copied when it is a C-contiguous
    float32 array, and search reads it in chunks of rows.
    """

    def __init__(self, vectors: npt.ArrayLike) -> None:
        """Validate ``vectors``: 2-D ``(n, dim)`` with ``dim >= 1``, every value finite.

        Non-float32 input is converted to float32 (a copy); so is non-contiguous input.
        """
        matrix = np.asarray(vectors)
        if matrix.ndim != 2:
            raise ValueError(f"vectors must be 2-D (n_items, dim), got shape {matrix.shape}")
        if matrix.shape[1] < 1:
            raise ValueError(f"vectors must have dim >= 1, got shape {matrix.shape}")
        if not (np.issubdtype(matrix.dtype, np.floating) or np.issubdtype(matrix.dtype, np.integer)):
            raise ValueError(f"vectors must be real numbers, got dtype {matrix.dtype}")
        matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        # Check finiteness chunk by chunk: a full isfinite() of a 1M x 384 memmap would allocate
        # a 384 MB temporary.
        step = 65536
        max_norm = 0.0
        for start in range(0, matrix.shape[0], step):
            block = matrix[start : start + step]
            if not np.isfinite(block).all():
                raise ValueError("vectors contain NaN or infinite values; every value must be finite")
            if block.size:
                max_norm = max(max_norm, float(np.sqrt(np.einsum("ij,ij->i", block, block).max())))
        self._max_norm = max_norm * (1.0 + 1e-6)

        def gamma(n: float) -> float:
            return n * _UNIT_ROUNDOFF / (1.0 - n * _UNIT_ROUNDOFF)

        # BLAS: any summation order over dim terms (+2 for fused multiply-adds); the rescoring:
        # numpy's pairwise summation, whose error grows with log2(dim) (Higham, section 4.2)
        dim = matrix.shape[1]
        bound = gamma(dim + 2) + gamma(math.ceil(math.log2(max(dim, 2))) + 2)
        # the band per unit of query norm (norms summed in float64, rounded up by 1e-6)
        self._band_factor = 2.0 * bound * self._max_norm * (1.0 + 1e-6) ** 2
        self._vectors: Float32Array = matrix
        self.size: int = int(matrix.shape[0])
        self.dim: int = int(matrix.shape[1])

    @property
    def band_factor(self) -> float:
        """A query's rounding band per unit of its norm (:meth:`one_band`)."""
        return self._band_factor

    @property
    def vectors(self) -> Float32Array:
        """The indexed matrix (read-only use)."""
        return self._vectors

    def _check_queries(self, queries: npt.ArrayLike) -> Float32Array:
        return check_queries(queries, self.dim)

    def checked_queries(self, queries: npt.ArrayLike) -> tuple[Float32Array, npt.NDArray[np.float64]]:
        """:func:`check_queries` and :meth:`rounding_bands` at once: one C-contiguous float32
        vector (the latency path) costs two numpy calls, its squared norm in float64 (finite
        exactly when every value is: a float32's square cannot overflow a float64)."""
        if (
            isinstance(queries, np.ndarray)
            and queries.dtype == np.float32
            and queries.shape == (self.dim,)
            and queries.flags.c_contiguous
        ):
            band = self.one_band(queries)
            if band is not None:
                return queries[None, :], np.array([band])
        matrix = check_queries(queries, self.dim)
        if not matrix.flags.c_contiguous:
            matrix = np.ascontiguousarray(matrix)
        return matrix, self.rounding_bands(matrix)

    def one_band(self, query: Float32Array) -> float | None:
        """:meth:`rounding_bands` of one float32 ``(dim,)`` query, from its squared norm in float64
        (finite exactly when every value is: a float32's square cannot overflow a float64), or
        None when a value is NaN or infinite (:func:`check_queries` says which)."""
        wide = query.astype(np.float64)
        squared = float(wide.dot(wide))  # what rounding_bands computes (np.dot's method: no dispatch)
        return self._band_factor * math.sqrt(squared) if math.isfinite(squared) else None

    def rounding_bands(self, queries: Float32Array) -> npt.NDArray[np.float64]:
        """Per query: twice the rounding bound of its BLAS scores plus that of the pairwise
        rescoring (see the module docstring)."""

        if queries.shape[0] == 1:  # one query (the latency path): a float64 dot product
            row = queries[0].astype(np.float64)
            return np.array([self._band_factor * math.sqrt(float(np.dot(row, row)))])
        norms = np.sqrt(np.einsum("ij,ij->i", queries, queries, dtype=np.float64))
        result: npt.NDArray[np.float64] = self._band_factor * norms
        return result

    def search(
        self,
        queries: npt.ArrayLike,
        k: int,
        *,
        mask: npt.ArrayLike | None = None,
        chunk_size: int = CHUNK_ROWS,
    ) -> Hits:
        """Top ``k`` items by inner product for each query, by score desc then row index asc.

        ``queries`` is ``(n_queries, dim)`` or a single ``(dim,)`` vector (then one result).
        ``mask`` (bool, ``n_items``) restricts the result to items marked True.
        Returns one ``(scores float32, indices int64)`` pair per query, each of length
        ``min(k, allowed items)``; a batch returns exactly what the same queries return one at a
        time (see the module docstring). Memory is
        ``O(64 * chunk_size + n_queries * k)``.
        """
        k = check_positive_int(k, "k")
        chunk_size = check_positive_int(chunk_size, "chunk_size")
        query_matrix, bands = self.checked_queries(queries)
        allowed = None if mask is None else check_mask(mask, self.size)
        n_queries = query_matrix.shape[0]
        n_allowed = self.size if allowed is None else int(np.count_nonzero(allowed))
        length = min(k, n_allowed)
        if length == 0:
            empty = (np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64))
            return [empty for _ in range(n_queries)]
        parts: list[tuple[IndexArray, IndexArray, Float32Array]] = []
        if n_queries == 1:
            for start, first, scores in self._steps(query_matrix, allowed, chunk_size):
                parts.append(self._collect(scores, start, first, length, bands, None))
        else:
            # a batch: one floor per query from a sample of rows, then chunks small enough for
            # their scores to stay in the cache, each multiplied and cut by one worker thread
            # (numpy releases the GIL; BLAS at one thread each: retrievers.index.blas_threads);
            # the chunks' candidates are kept in order, so they are the same in any thread
            rows = min(chunk_size, BATCH_CHUNK_ROWS)
            starts = range(0, self.size, rows)

            def chunk_parts(start: int) -> list[tuple[IndexArray, IndexArray, Float32Array]]:
                steps = self._steps(query_matrix, allowed, rows, (start,))
                return [self._collect(block, at, first, length, bands, floors) for at, first, block in steps]

            with blas_workers(len(starts)) as workers, ThreadPoolExecutor(workers) as pool:
                floors = self._sample_floors(query_matrix, allowed, length, bands, pool, workers)
                for found in pool.map(chunk_parts, starts) if workers > 1 else map(chunk_parts, starts):
                    parts += found
        found_rows, found_scores = _by_query(parts, n_queries)
        return self._rescore(query_matrix, found_rows, found_scores, length, bands)

    def _steps(
        self,
        query_matrix: Float32Array,
        allowed: BoolArray | None,
        chunk_size: int,
        starts: Iterable[int] | None = None,
    ) -> Iterator[tuple[int, int, Float32Array]]:
        """(first row of the chunk, first query of the block, the block's float32 scores against
        the chunk) for every chunk of rows (those that begin at ``starts``, default all) with an
        allowed item and every block of queries; excluded items score -inf."""
        n_queries = query_matrix.shape[0]
        kernel = optional_faiss() if n_queries == 1 else None
        query = np.ascontiguousarray(query_matrix[0]) if n_queries == 1 else query_matrix
        for start in range(0, self.size, chunk_size) if starts is None else starts:
            stop = min(start + chunk_size, self.size)
            excluded: BoolArray | None = None
            if allowed is not None:
                chunk_allowed = allowed[start:stop]
                if not chunk_allowed.any():
                    continue
                if not chunk_allowed.all():
                    excluded = ~chunk_allowed
            chunk = self._vectors[start:stop]
            for first in range(0, n_queries, _QUERY_BLOCK):
                block = query_matrix[first : first + _QUERY_BLOCK]
                if block.shape[0] > 1:  # a batch: GEMM
                    scores = block @ chunk.T
                elif kernel is not None:  # one query: faiss's SIMD dot products (see the docstring)
                    scores = np.empty((1, stop - start), dtype=np.float32)
                    pointers = (kernel.swig_ptr(scores), kernel.swig_ptr(query), kernel.swig_ptr(chunk))
                    kernel.fvec_inner_products_ny(*pointers, self.dim, stop - start)
                else:  # one query without faiss: einsum's sum of products
                    scores = np.einsum("ij,j->i", chunk, query)[None, :]
                if excluded is not None:
                    scores[:, excluded] = -np.inf
                yield start, first, scores

    def _sample_floors(
        self,
        queries: Float32Array,
        allowed: BoolArray | None,
        length: int,
        bands: npt.NDArray[np.float64],
        pool: ThreadPoolExecutor | None = None,
        workers: int = 1,
    ) -> Float32Array | None:
        """Per query of a batch, a float32 score below which no item can reach its top
        ``length``: a lower bound (:func:`_kth_lower_bound`) of the k-th best score of every
        ``_SAMPLE``-th allowed row (at most ``_MAX_SAMPLE_ROWS`` rows, evenly spread), minus the
        band (see :meth:`_collect`); None
        when the sample holds too few rows to cut anything. The queries are split between the
        ``workers`` threads of ``pool`` (none: this thread)."""
        rows = np.arange(self.size) if allowed is None else np.flatnonzero(allowed)
        rows = rows[:: max(_SAMPLE, -(-rows.size // _MAX_SAMPLE_ROWS))]
        if rows.size <= max(length, _MIN_SAMPLE):
            return None
        sampled = self._vectors[rows]
        floors = np.empty(queries.shape[0], dtype=np.float32)
        step = min(_QUERY_BLOCK, -(-queries.shape[0] // workers))

        def floors_of(first: int) -> None:
            block = queries[first : first + step]
            bound = _kth_lower_bound(block @ sampled.T, length)
            floors[first : first + block.shape[0]] = _floor32(bound - bands[first : first + block.shape[0]])

        firsts = range(0, queries.shape[0], step)
        for _ in pool.map(floors_of, firsts) if pool is not None and workers > 1 else map(floors_of, firsts):
            pass
        return floors

    @staticmethod
    def _collect(
        scores: Float32Array,
        start: int,
        first: int,
        length: int,
        bands: npt.NDArray[np.float64],
        floors: Float32Array | None,
    ) -> tuple[IndexArray, IndexArray, Float32Array]:
        """The block's items that may be in their query's top ``length``: (query, row, float32
        score) arrays, by query then row.

        Any item below (a lower bound of the query's k-th best score) minus the band cannot be.
        The k-th best score of any subset of the items is such a bound (never above the whole's):
        of the sample of the whole matrix (``floors``, a batch) or of every ``_SAMPLE``-th item
        of the chunk (one query: a partition of a part of the row). The items above it (about
        ``_SAMPLE * length`` a query) are cut again at their k-th best over every chunk when
        rescored."""
        n_queries, n_items = scores.shape
        if floors is not None:
            cut = floors[first : first + n_queries]
        else:
            sample = scores[:, ::_SAMPLE] if n_items >= _SAMPLE * max(length, _MIN_SAMPLE) else scores
            width = sample.shape[1]
            if width > length:
                bound = np.partition(sample, width - length, axis=1)[:, width - length]
            else:
                bound = sample.min(axis=1)
            cut = _floor32(bound - bands[first : first + n_queries])
        # one pass over the whole block (row by row, np.flatnonzero's call costs more than the
        # comparison for a batch); the flat positions are sorted, so each query's are a slice
        flat = np.flatnonzero(scores >= cut[:, None])
        values = scores.ravel()[flat]
        finite = values != -np.inf
        if not finite.all():
            flat, values = flat[finite], values[finite]
        owners, cols = np.divmod(flat, n_items)
        return owners + first, cols + start, values

    def _rescore(
        self,
        queries: Float32Array,
        found_rows: list[list[IndexArray]],
        found_scores: list[list[Float32Array]],
        length: int,
        bands: npt.NDArray[np.float64],
    ) -> Hits:
        """Batch-invariant scores of every query's candidates (one vectorised pass), then each
        query's top ``length`` by (score desc, row asc)."""
        kept: list[IndexArray] = []
        for i, (rows_found, scores_found) in enumerate(zip(found_rows, found_scores, strict=True)):
            if not rows_found:
                kept.append(np.empty(0, dtype=np.int64))
                continue
            rows = np.concatenate(rows_found) if len(rows_found) > 1 else rows_found[0]
            if rows.size > length:  # the band of the k-th best over every chunk's candidates
                approx = np.concatenate(scores_found)
                kth = np.partition(approx, rows.size - length)[rows.size - length]
                rows = rows[approx >= kth - bands[i]]
            kept.append(rows)
        counts = np.fromiter((rows.size for rows in kept), dtype=np.int64, count=len(kept))
        rows = np.concatenate(kept) if kept else np.empty(0, dtype=np.int64)
        owner = np.repeat(np.arange(len(kept), dtype=np.int64), counts)
        products = self._vectors[rows]  # a copy (fancy indexing), multiplied in place
        products *= queries[owner]
        scores = products.sum(axis=1)  # pairwise per row: the same value in any batch
        order = np.lexsort((rows, -scores, owner))
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        if kept and bool((counts >= length).all()):  # every query has k: one gather for the batch
            picked = order[starts[:, None] + np.arange(length)]
            top = scores[picked]
            if not np.isfinite(top).all():
                raise ValueError(
                    "a similarity score overflowed to a non-finite value; rows and queries should be "
                    "L2-normalised"
                )
            return list(zip(top, rows[picked], strict=True))
        results: Hits = []
        for i in range(len(kept)):
            picked = order[starts[i] : starts[i] + min(int(counts[i]), length)]
            top = scores[picked]
            if not np.isfinite(top).all():
                raise ValueError(
                    "a similarity score overflowed to a non-finite value; rows and queries should be "
                    "L2-normalised"
                )
            results.append((top, rows[picked]))
        return results

    def scores(self, query: npt.ArrayLike, *, chunk_size: int = CHUNK_ROWS) -> Float32Array:
        """Inner product of one ``(dim,)`` query with every item: ``(n_items,)`` float32, one GEMV
        per chunk (deterministic for a given query and thread count; :meth:`search` gives
        batch-invariant scores)."""
        chunk_size = check_positive_int(chunk_size, "chunk_size")
        array = np.asarray(query)
        if array.ndim != 1:
            raise ValueError(f"query must be one vector of shape ({self.dim},), got {array.shape}")
        vector = self._check_queries(array)[0]
        out = np.empty(self.size, dtype=np.float32)
        for start in range(0, self.size, chunk_size):
            stop = min(start + chunk_size, self.size)
            out[start:stop] = self._vectors[start:stop] @ vector
        return out


def _kth_lower_bound(scores: Float32Array, length: int) -> Float32Array:
    """Per row of ``scores``, a value its ``length``-th best is never below: the ``length``-th
    best of the maxima of ``_GROUPS_PER_RESULT * length`` disjoint groups of columns (every
    ``groups``-th column from each of the first ``groups``: ``length`` groups hold a column at
    least that high, so ``length`` columns are), one elementwise maximum and a partition of a
    few columns instead of a partition of the whole row (17 ms against 0.8 for 512 x 3,125;
    about the 11th best at k = 10); the ``length``-th best itself when the groups would hold
    fewer than two columns. A row with NaN (an overflow) gives -inf: no cut."""
    n_rows, width = scores.shape
    groups = _GROUPS_PER_RESULT * length
    if width < 2 * groups:
        maxima, groups = scores, width
    else:  # a maximum propagates NaN
        maxima = scores[:, : groups * (width // groups)].reshape(n_rows, -1, groups).max(axis=1)
    bound = np.partition(maxima, groups - length, axis=1)[:, groups - length]
    unordered = np.isnan(maxima).any(axis=1)  # NaN sorts last: it would pass for a high score
    return np.where(unordered, np.float32(-np.inf), bound) if unordered.any() else bound


def _floor32(values: npt.NDArray[np.float64]) -> Float32Array:
    """``values`` rounded down to float32 (a cut never rises above the float64 one)."""
    rounded = values.astype(np.float32)
    above = rounded > values
    if above.any():
        rounded[above] = np.nextafter(rounded[above], np.float32(-np.inf))
    return rounded


def _by_query(
    parts: list[tuple[IndexArray, IndexArray, Float32Array]], n_queries: int
) -> tuple[list[list[IndexArray]], list[list[Float32Array]]]:
    """Each query's candidate rows and scores from the blocks' (query, row, score) arrays, in
    block order (so by row within a query): one array of each per query with candidates."""
    found_rows: list[list[IndexArray]] = [[] for _ in range(n_queries)]
    found_scores: list[list[Float32Array]] = [[] for _ in range(n_queries)]
    if not parts:
        return found_rows, found_scores
    owners = np.concatenate([part[0] for part in parts])
    rows = np.concatenate([part[1] for part in parts])
    values = np.concatenate([part[2] for part in parts])
    if n_queries > 1:
        order = np.argsort(owners, kind="stable")
        owners, rows, values = owners[order], rows[order], values[order]
    edges = np.searchsorted(owners, np.arange(n_queries + 1)).tolist()
    for query in range(n_queries):
        low, high = edges[query], edges[query + 1]
        if low < high:
            found_rows[query].append(rows[low:high])
            found_scores[query].append(values[low:high])
    return found_rows, found_scores


def check_queries(queries: npt.ArrayLike, dim: int) -> Float32Array:
    """``queries`` as a float32 ``(n_queries, dim)`` matrix (one vector of ``dim`` is one
    query), or ValueError: another shape, values that are not real numbers, NaN or infinity."""
    if isinstance(queries, np.ndarray) and queries.dtype == np.float32 and queries.shape[-1:] == (dim,):
        # the common case (an embedder's output), checked in a few microseconds
        matrix = queries[None, :] if queries.ndim == 1 else queries
        if matrix.ndim == 2 and np.isfinite(matrix).all():
            return matrix
    array = np.asarray(queries)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] != dim:
        raise ValueError(f"queries must have shape ({dim},) or (n_queries, {dim}), got {array.shape}")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"queries must be real numbers, got dtype {array.dtype}")
    array = np.asarray(array, dtype=np.float32)
    if not np.isfinite(array).all():
        raise ValueError("queries contain NaN or infinite values; every value must be finite")
    return array
