"""One query through :class:`~retrievers.index.ann.FaissVectorIndex` (the latency path): the
steps of its general search for the common case (one C-contiguous float32 vector, no mask, ``k``
below the index's size, a faiss index), without the batch's arrays and calls.

What a search of one ``(k, knobs)`` needs (the candidates to ask for, faiss's search parameters,
IVF-PQ's heap size) is worked out once, when its knobs are checked, and kept as a
:class:`OneQueryPlan`; a query then costs faiss's search, IVF-PQ's float32 heap and the exact
rescoring of the rows within the band, each into arrays its thread allocated once.

Its result is the general path's, bit for bit (tests/test_speed_one_query.py,
tests/test_speed_one_plan.py): the same faiss search on one OpenMP thread (one query never gets
more, :meth:`FaissVectorIndex.omp_threads`), the same candidates, cut at the same band and
rescored by :func:`~retrievers.index.rescore.one_top`. Where the general path would ask faiss
again (every candidate within the band of the k-th best) or IVF-PQ's float32 heap dropped a
candidate (:func:`refined_one`), :func:`one_query` answers None and the caller's general path
answers instead.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from retrievers.index.faiss_calls import search_one
from retrievers.index.rescore import one_top

__all__ = ["OneQueryPlan", "is_one_vector", "one_query", "plain_knobs", "refined_one"]

Float32Array = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]

#: per thread: heap size -> (scores, rows, their faiss pointers), reused by every IVF-PQ query
_HEAP = threading.local()
#: heap sizes a thread keeps arrays for (a knob sweep asks for a few)
_HEAP_SIZES = 32


@dataclass(frozen=True)
class OneQueryPlan:
    """A one-query search of ``length`` results from the faiss ``index`` of ``kind``: faiss is
    asked for ``asked`` candidates with ``parameters``; IVF-PQ's float32 heap keeps the best
    ``wanted`` of them (the others: ``wanted == asked``); ``check_gap``: the candidates cut are
    fewer than the contract's, so a query whose candidates all lie within the band is answered
    by the general path."""

    index: Any
    kind: str
    length: int
    asked: int
    wanted: int
    check_gap: bool
    parameters: Any


def is_one_vector(queries: npt.ArrayLike, dim: int) -> TypeGuard[Float32Array]:
    """Whether ``queries`` is one C-contiguous float32 vector of ``dim`` values (an embedder's)."""
    return (
        isinstance(queries, np.ndarray)
        and queries.dtype == np.float32
        and queries.shape == (dim,)
        and queries.flags.c_contiguous
    )


def plain_knobs(k: object, ef_search: object, nprobe: object, refine_factor: object) -> bool:
    """Whether ``k`` is an int and each knob an int or None (not a bool, float or numpy integer):
    only those find a kept plan, since ``16.0`` and ``True`` hash and compare equal to ``16`` and
    ``1`` and would skip the check that refuses them."""
    return (
        type(k) is int
        and (ef_search is None or type(ef_search) is int)
        and (nprobe is None or type(nprobe) is int)
        and (refine_factor is None or type(refine_factor) is int)
    )


def one_query(
    faiss: Any, plan: OneQueryPlan, vectors: Float32Array, query: Float32Array, band: float
) -> tuple[Float32Array, IndexArray] | None:
    """The top ``plan.length`` of one ``query`` (band: its rounding band) among the candidates
    of ``plan``'s faiss index, scored exactly over ``vectors``. None: the general path must
    answer (module docstring)."""
    before = int(faiss.omp_get_max_threads())
    if before != 1:  # one query on two threads only spins the second core
        faiss.omp_set_num_threads(1)
    try:
        scores, labels = search_one(faiss, plan.index, query, plan.asked, plan.parameters)
    finally:
        if before != 1:
            faiss.omp_set_num_threads(before)
    if plan.kind == "ivf_pq":  # quantised scores only choose: the best 2k by float32 scores
        refined = refined_one(faiss, vectors, query, labels, plan.wanted)
        if refined is None:
            return None
        return one_top(vectors, query, refined[1], refined[0], band, plan.length, plan.check_gap, True)
    return one_top(vectors, query, labels[0], scores[0], band, plan.length, plan.check_gap, True)


def refined_one(
    faiss: Any, vectors: Float32Array, query: Float32Array, labels: IndexArray, wanted: int
) -> tuple[Float32Array, IndexArray] | None:
    """:func:`~retrievers.index.rescore.refined_top` for one C-contiguous float32 ``query`` and
    its C-contiguous ``(1, fetch)`` ``labels``: the best ``wanted`` candidates by faiss's float32
    dot products over ``vectors`` (``knn_inner_products_by_idx``, best first, -1 rows after the
    last), in 1-D arrays this thread allocated once for ``wanted`` (overwritten by its next call:
    :func:`~retrievers.index.rescore.one_top` never returns them). None when the heap dropped a
    candidate it had room for (a score not above -FLT_MAX): the general path scores them all."""
    kept: dict[int, tuple[Any, ...]] | None = getattr(_HEAP, "by_wanted", None)
    if kept is None or (wanted not in kept and len(kept) >= _HEAP_SIZES):
        kept = _HEAP.by_wanted = {}
    arrays = kept.get(wanted)
    if arrays is None:
        top_scores = np.empty(wanted, dtype=np.float32)
        top_rows = np.empty(wanted, dtype=np.int64)
        arrays = kept[wanted] = (top_scores, top_rows, faiss.swig_ptr(top_scores), faiss.swig_ptr(top_rows))
    fetch = labels.shape[1]
    n_rows, dim = vectors.shape
    pointer = faiss.swig_ptr
    faiss.knn_inner_products_by_idx(
        pointer(query),
        pointer(vectors),
        pointer(labels),
        dim,
        1,
        n_rows,
        fetch,
        wanted,
        arrays[2],
        arrays[3],
        fetch,
    )
    rows: IndexArray = arrays[1]
    if rows.item(-1) < 0 and np.count_nonzero(rows >= 0) < np.count_nonzero(labels[0, :wanted] >= 0):
        return None  # a heap with room left must hold every candidate (up to ``wanted``)
    return arrays[0], rows


def one_plan(
    index: Any, kind: str, length: int, counts: tuple[int, int, int], parameters: Any
) -> OneQueryPlan:
    """The plan of ``length`` results from the faiss ``index`` of ``kind``; ``counts``: (the
    contract's candidates, those asked first, those that leave no row unseen), as
    :meth:`FaissVectorIndex.search` computes them."""
    fetch, asked, complete = counts
    wanted = min(fetch, 2 * length) if kind == "ivf_pq" else asked
    return OneQueryPlan(index, kind, length, asked, wanted, wanted < complete, parameters)
