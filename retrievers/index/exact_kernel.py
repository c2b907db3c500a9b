"""The exact index's scores of a few rows, and their top, in one compiled call (the latency path).

:class:`~retrievers.index.vectors.ExactVectorIndex` scores a row as numpy does: the float32
products of the row and the query, summed by ``np.add.reduce`` along the row, which is numpy's
pairwise sum (``pairwise_sum`` in numpy's ``loops_utils.h``): a run of at most 128 values is
summed in 8 interleaved float32 accumulators (value ``i`` into accumulator ``i % 8``, the last
``n % 8`` values added one by one after the 8 are combined as ``((r0 + r1) + (r2 + r3)) + ((r4 +
r5) + (r6 + r7))``), a longer run is split at half its length rounded down to a multiple of 8 and
its halves' sums added; the reduction starts from its identity, 0.0 (so a sum of -0.0 is 0.0).
:func:`exact_top` computes the same operations in the same order,
compiled by numba (no fast-math: nothing reassociated or fused, so every float32 operation
rounds as numpy's does, on any CPU), for the given rows only, and keeps the top ``length`` by
(score desc, row asc) as it goes. Equal to numpy bit for bit (tests/test_exact_kernel.py, every
dimension from 1 to 300 and the common embedding sizes up to 3,072).

Why: an approximate index's one-query search rescores its candidates exactly, and in numpy that
is a gather, a product, a sum and a sort, four calls of a microsecond or more each on a dozen
rows; IVF-PQ's 100 candidates took faiss's float32 heap (as ``IndexRefineFlat`` does) before
them. One call here scores all of IVF-PQ's candidates exactly in less time than the heap
(docs/scale.md, issue 30).

The function is compiled on first use in a process (2.1-2.4 s on the machine docs/scale.md
names; numba's on-disk cache is not used: it unpickles its index files), with LLVM's SLP
vectoriser on for that compilation so the 8 accumulators become one vector register (lane-wise
IEEE operations: the same results), and even when ``NUMBA_DISABLE_JIT`` is set (the test
session sets it for ranx).
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.numba_jit import jit_enabled

__all__ = ["ASK_AGAIN", "NO_SCORES", "NUMPY", "checked_top", "exact_top", "pairwise_program"]

Float32Array = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]

#: numpy's pairwise sum sums runs of at most this many values with 8 accumulators
#: (``PW_BLOCKSIZE`` in numpy's ``loops_utils.h.src``)
BLOCK = 128

_COMPILED: Any = None
_LOCK = threading.Lock()


@lru_cache(maxsize=64)
def pairwise_program(dim: int) -> IndexArray:
    """numpy's pairwise sum of ``dim`` values as a postfix program, ``(steps, 2)`` int64: a step
    ``(start, length)`` pushes the sum of that run (at most :data:`BLOCK` values), ``(-1, 0)``
    replaces the top two sums by their sum (the earlier plus the later)."""
    steps: list[tuple[int, int]] = []

    def split(start: int, length: int) -> None:
        if length <= BLOCK:
            steps.append((start, length))
            return
        half = length // 2
        half -= half % 8
        split(start, half)
        split(start + half, length - half)
        steps.append((-1, 0))

    split(0, dim)
    program = np.array(steps, dtype=np.int64)
    program.flags.writeable = False
    return program


def _run(row: Any, query: Any, start: int, length: int) -> Any:  # pragma: no cover - compiled
    """numpy's pairwise sum of ``row[start:start+length] * query[start:start+length]`` for a run
    of at most 128 values (compiled; see the module docstring)."""
    if length < 8:
        total = np.float32(-0.0)
        for i in range(start, start + length):
            total += row[i] * query[i]
        return total
    r0 = row[start] * query[start]
    r1 = row[start + 1] * query[start + 1]
    r2 = row[start + 2] * query[start + 2]
    r3 = row[start + 3] * query[start + 3]
    r4 = row[start + 4] * query[start + 4]
    r5 = row[start + 5] * query[start + 5]
    r6 = row[start + 6] * query[start + 6]
    r7 = row[start + 7] * query[start + 7]
    stop = start + length - length % 8
    i = start + 8
    while i < stop:
        r0 += row[i] * query[i]
        r1 += row[i + 1] * query[i + 1]
        r2 += row[i + 2] * query[i + 2]
        r3 += row[i + 3] * query[i + 3]
        r4 += row[i + 4] * query[i + 4]
        r5 += row[i + 5] * query[i + 5]
        r6 += row[i + 6] * query[i + 6]
        r7 += row[i + 7] * query[i + 7]
        i += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < start + length:
        total += row[i] * query[i]
        i += 1
    return total


def _run4(a: Any, b: Any, c: Any, d: Any, query: Any, start: int, length: int) -> Any:  # pragma: no cover
    """:func:`_run` of four rows at once (``length`` at least 8): four independent chains of
    additions, which the CPU overlaps (one row's chain waits on each addition before the next)."""
    a0 = a[start] * query[start]
    a1 = a[start + 1] * query[start + 1]
    a2 = a[start + 2] * query[start + 2]
    a3 = a[start + 3] * query[start + 3]
    a4 = a[start + 4] * query[start + 4]
    a5 = a[start + 5] * query[start + 5]
    a6 = a[start + 6] * query[start + 6]
    a7 = a[start + 7] * query[start + 7]
    b0 = b[start] * query[start]
    b1 = b[start + 1] * query[start + 1]
    b2 = b[start + 2] * query[start + 2]
    b3 = b[start + 3] * query[start + 3]
    b4 = b[start + 4] * query[start + 4]
    b5 = b[start + 5] * query[start + 5]
    b6 = b[start + 6] * query[start + 6]
    b7 = b[start + 7] * query[start + 7]
    c0 = c[start] * query[start]
    c1 = c[start + 1] * query[start + 1]
    c2 = c[start + 2] * query[start + 2]
    c3 = c[start + 3] * query[start + 3]
    c4 = c[start + 4] * query[start + 4]
    c5 = c[start + 5] * query[start + 5]
    c6 = c[start + 6] * query[start + 6]
    c7 = c[start + 7] * query[start + 7]
    d0 = d[start] * query[start]
    d1 = d[start + 1] * query[start + 1]
    d2 = d[start + 2] * query[start + 2]
    d3 = d[start + 3] * query[start + 3]
    d4 = d[start + 4] * query[start + 4]
    d5 = d[start + 5] * query[start + 5]
    d6 = d[start + 6] * query[start + 6]
    d7 = d[start + 7] * query[start + 7]
    stop = start + length - length % 8
    i = start + 8
    while i < stop:
        a0 += a[i] * query[i]
        a1 += a[i + 1] * query[i + 1]
        a2 += a[i + 2] * query[i + 2]
        a3 += a[i + 3] * query[i + 3]
        a4 += a[i + 4] * query[i + 4]
        a5 += a[i + 5] * query[i + 5]
        a6 += a[i + 6] * query[i + 6]
        a7 += a[i + 7] * query[i + 7]
        b0 += b[i] * query[i]
        b1 += b[i + 1] * query[i + 1]
        b2 += b[i + 2] * query[i + 2]
        b3 += b[i + 3] * query[i + 3]
        b4 += b[i + 4] * query[i + 4]
        b5 += b[i + 5] * query[i + 5]
        b6 += b[i + 6] * query[i + 6]
        b7 += b[i + 7] * query[i + 7]
        c0 += c[i] * query[i]
        c1 += c[i + 1] * query[i + 1]
        c2 += c[i + 2] * query[i + 2]
        c3 += c[i + 3] * query[i + 3]
        c4 += c[i + 4] * query[i + 4]
        c5 += c[i + 5] * query[i + 5]
        c6 += c[i + 6] * query[i + 6]
        c7 += c[i + 7] * query[i + 7]
        d0 += d[i] * query[i]
        d1 += d[i + 1] * query[i + 1]
        d2 += d[i + 2] * query[i + 2]
        d3 += d[i + 3] * query[i + 3]
        d4 += d[i + 4] * query[i + 4]
        d5 += d[i + 5] * query[i + 5]
        d6 += d[i + 6] * query[i + 6]
        d7 += d[i + 7] * query[i + 7]
        i += 8
    ta = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
    tb = ((b0 + b1) + (b2 + b3)) + ((b4 + b5) + (b6 + b7))
    tc = ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7))
    td = ((d0 + d1) + (d2 + d3)) + ((d4 + d5) + (d6 + d7))
    while i < start + length:
        ta += a[i] * query[i]
        tb += b[i] * query[i]
        tc += c[i] * query[i]
        td += d[i] * query[i]
        i += 1
    return ta, tb, tc, td


def _top(
    vectors: Any,
    query: Any,
    labels: Any,
    ranked: Any,
    band: float,
    band_factor: float,
    check_gap: bool,
    program: Any,
    top_scores: Any,
    top_rows: Any,
) -> int:  # pragma: no cover - compiled
    """The rows ``labels`` names (-1: none, skipped) scored against ``query`` (``program``:
    :func:`pairwise_program`), four rows at a time, the best ``top_scores.size`` kept by (score
    desc, row asc) in ``top_scores`` / ``top_rows``, best first, by insertion. With ``ranked``
    (faiss's float32 scores of ``labels``, best first) only the rows within ``band`` of the k-th
    best are scored: :func:`~retrievers.index.rescore.one_top`'s cut, step for step; with
    ``band_factor`` > 0 the band is ``band_factor`` times the query's norm (its squared norm
    summed in float64, as :meth:`~retrievers.index.vectors.ExactVectorIndex.one_band` computes
    it up to the order of the additions, far inside the band's 1e-6 slack). Answers the number
    kept; -2: every candidate lies within the band and ``check_gap`` is set (the caller asks
    faiss again); -3: a query value is NaN or infinite (the caller's general path refuses it);
    -1: a row outside ``vectors`` or a score that is not finite (the caller's numpy path
    answers, and refuses what numpy's would)."""
    if band_factor > 0.0:
        squared = 0.0
        for i in range(query.size):
            value = np.float64(query[i])
            squared += value * value
        if not np.isfinite(squared):
            return -3
        band = band_factor * np.sqrt(squared)
    fetch = labels.size
    length = top_scores.size
    n_rows = vectors.shape[0]
    cut = ranked.size > 0
    rows = np.empty(fetch, dtype=np.int64)
    values = np.empty(fetch if cut else 0, dtype=np.float64)  # exact doubles of the float32 scores
    n = 0
    for i in range(fetch):
        if labels[i] >= 0:  # faiss fills the rows it did not find with -1, at the end
            if labels[i] >= n_rows:  # never read outside the matrix
                return -1
            rows[n] = labels[i]
            if cut:
                values[n] = ranked[i]
            n += 1
    if n < fetch:
        check_gap = False
    if cut and n > length:
        floor = values[0]  # the lowest of the first k (Python's min: the first unless one is lower)
        for i in range(1, length):
            if values[i] < floor:
                floor = values[i]
        floor = floor - band
        count = length  # ranked: the candidates within the band are a prefix ...
        while count < n and values[count] >= floor:
            count += 1
        if count == n:
            if check_gap:  # every candidate within the band: ask again
                return -2
        else:
            highest = values[count]  # (Python's max: the first unless one is higher)
            for i in range(count + 1, n):
                if values[i] > highest:
                    highest = values[i]
            if highest < floor:  # ... checked: none of the rest is within it
                n = count
            else:  # not in order after all: every candidate within the band
                kept_rows = 0
                for i in range(n):
                    if values[i] >= floor:
                        rows[kept_rows] = rows[i]
                        kept_rows += 1
                n = kept_rows
    steps = program.shape[0]
    scores = np.empty(n, dtype=np.float32)
    sa = np.empty(steps, dtype=np.float32)
    sb = np.empty(steps, dtype=np.float32)
    sc = np.empty(steps, dtype=np.float32)
    sd = np.empty(steps, dtype=np.float32)
    quads = vectors.shape[1] >= 8  # (every run is then 8 values or more)
    first = 0
    while first < n:
        quad = quads and first + 4 <= n
        va = vectors[rows[first]]
        vb = vectors[rows[first + 1]] if quad else va
        vc = vectors[rows[first + 2]] if quad else va
        vd = vectors[rows[first + 3]] if quad else va
        depth = 0
        for step in range(steps):
            start = program[step, 0]
            run = program[step, 1]
            if start < 0:  # the two sums on top added: the earlier plus the later
                sa[depth - 2] = sa[depth - 2] + sa[depth - 1]
                sb[depth - 2] = sb[depth - 2] + sb[depth - 1]
                sc[depth - 2] = sc[depth - 2] + sc[depth - 1]
                sd[depth - 2] = sd[depth - 2] + sd[depth - 1]
                depth -= 1
            elif quad:
                sa[depth], sb[depth], sc[depth], sd[depth] = _run4_compiled(va, vb, vc, vd, query, start, run)
                depth += 1
            else:
                sa[depth] = _run_compiled(va, query, start, run)
                depth += 1
        # the reduction's identity first, as numpy's (-0.0 -> 0.0)
        scores[first] = np.float32(0.0) + sa[0]
        if quad:
            scores[first + 1] = np.float32(0.0) + sb[0]
            scores[first + 2] = np.float32(0.0) + sc[0]
            scores[first + 3] = np.float32(0.0) + sd[0]
            first += 4
        else:
            first += 1
    kept = 0
    for i in range(n):
        score = scores[i]
        row = rows[i]
        if not np.isfinite(score):
            return -1
        if kept == length:
            last = top_scores[kept - 1]
            if score < last or (score == last and row > top_rows[kept - 1]):
                continue
            j = kept - 1
        else:
            j = kept
            kept += 1
        while j > 0 and (top_scores[j - 1] < score or (top_scores[j - 1] == score and top_rows[j - 1] > row)):
            top_scores[j] = top_scores[j - 1]
            top_rows[j] = top_rows[j - 1]
            j -= 1
        top_scores[j] = score
        top_rows[j] = row
    return kept


_run_compiled: Any = None
_run4_compiled: Any = None


def _compiled() -> Any:
    """:func:`_top` compiled for C-contiguous float32 vectors and query and int64 rows (once per
    process, with the SLP vectoriser on for this compilation only)."""
    global _COMPILED, _run_compiled, _run4_compiled
    if _COMPILED is not None:
        return _COMPILED
    with _LOCK:
        if _COMPILED is None:
            from numba import types

            # compiled even with NUMBA_DISABLE_JIT set (interpreted, a query would take 1,000x
            # longer), with the SLP vectoriser on for these functions only
            with jit_enabled(slp_vectorize=True) as numba:
                # inlined where _top calls them (compiled there only: no signature of their own)
                _run_compiled = numba.njit(nogil=True, inline="always")(_run)
                _run4_compiled = numba.njit(nogil=True, inline="always")(_run4)
                signature = types.int64(
                    types.Array(types.float32, 2, "C", readonly=True),  # vectors (a store's are)
                    types.Array(types.float32, 1, "C", readonly=True),  # query
                    types.Array(types.int64, 1, "C", readonly=True),  # labels
                    types.Array(types.float32, 1, "C", readonly=True),  # ranked (or empty)
                    types.float64,  # band
                    types.float64,  # band_factor (> 0: the band from the query's norm)
                    types.boolean,  # check_gap
                    types.Array(types.int64, 2, "C", readonly=True),  # pairwise_program's
                    types.float32[::1],
                    types.int64[::1],
                )
                _COMPILED = numba.njit(signature, nogil=True)(_top)
    return _COMPILED


#: what :func:`exact_top` answers when the caller's numpy path must answer instead (a row outside
#: the matrix, a score that is not finite, arrays the compiled function does not take)
NUMPY = "numpy"
#: what :func:`exact_top` answers when every candidate lies within the band and ``check_gap`` is set
ASK_AGAIN = "ask again"

#: ``ranked`` when there are no faiss scores to cut on (read-only)
NO_SCORES = np.empty(0, dtype=np.float32)
NO_SCORES.flags.writeable = False


def exact_top(
    vectors: Float32Array,
    query: Float32Array,
    labels: IndexArray,
    length: int,
    *,
    ranked: Float32Array | None = None,
    band: float = 0.0,
    band_factor: float = 0.0,
    check_gap: bool = False,
) -> tuple[Float32Array, IndexArray] | str:
    """The top ``length`` of the rows ``labels`` names (-1: none) by (score desc, row asc), each
    scored as :class:`~retrievers.index.vectors.ExactVectorIndex` scores it (bit for bit):
    ``(scores float32, rows int64)``, new arrays. With ``ranked`` (faiss's float32 scores of
    ``labels``, best first), only the rows within ``band`` of the k-th best are scored, as
    :func:`~retrievers.index.rescore.one_top` cuts them (``band_factor`` > 0: the band is worked
    out from the query in the same call, its ``one_band``); :data:`ASK_AGAIN` when every one is
    within it and ``check_gap`` is set, or a query value is not finite (the general path, asked
    instead, refuses it). :data:`NUMPY` when the caller's numpy path must answer: arrays the
    compiled function does not take (C-contiguous float32 ``(n, dim)`` vectors and ``(dim,)``
    query and ranked scores, int64 labels), a row outside ``vectors`` or a score that is not
    finite."""
    scores = NO_SCORES if ranked is None else ranked
    if not (
        vectors.ndim == 2
        and query.shape == (vectors.shape[1],)  # (the compiled code reads them unchecked)
        and (ranked is None or ranked.shape == labels.shape)
        and length > 0
    ):
        return NUMPY
    return checked_top(
        vectors,
        query,
        labels,
        scores,
        band,
        band_factor,
        check_gap,
        pairwise_program(vectors.shape[1]),
        length,
    )


def checked_top(
    vectors: Float32Array,
    query: Float32Array,
    labels: IndexArray,
    ranked: Float32Array,
    band: float,
    band_factor: float,
    check_gap: bool,
    program: IndexArray,
    length: int,
) -> tuple[Float32Array, IndexArray] | str:
    """:func:`exact_top` once its shapes are known to hold (``query`` ``(dim,)`` of ``vectors``'
    ``(n, dim)``, ``ranked`` empty or the shape of ``labels``, ``length`` >= 1; ``program``:
    ``pairwise_program(dim)``), as the one-query path's plan knows them: the call alone."""
    top_scores = np.empty(length, dtype=np.float32)
    top_rows = np.empty(length, dtype=np.int64)
    try:  # numba checks the dtypes, dimensions and C order against the signature
        kept = _compiled()(
            vectors, query, labels, ranked, band, band_factor, check_gap, program, top_scores, top_rows
        )
    except TypeError:
        return NUMPY
    if kept == length:  # the common case: the arrays as they are
        return top_scores, top_rows
    if kept < 0:
        return NUMPY if kept == -1 else ASK_AGAIN
    return top_scores[:kept], top_rows[:kept]
