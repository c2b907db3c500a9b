"""One query through :class:`~retrievers.index.ann.FaissVectorIndex` (the latency path): the
steps of its general search for the common case (one C-contiguous float32 vector, no mask, ``k``
below the index's size, a faiss index), without the batch's arrays and calls.

Its result is the general path's, bit for bit (tests/test_speed_one_query.py): the same faiss
search on one OpenMP thread (one query never gets more, :meth:`FaissVectorIndex.omp_threads`),
the same candidates, cut at the same band and rescored by
:func:`~retrievers.index.rescore.one_top`. Where the general path would ask faiss again (every
candidate within the band of the k-th best) or IVF-PQ's float32 heap dropped a candidate
(:func:`~retrievers.index.rescore.refined_top`), :func:`one_query` answers None and the caller's
general path answers instead.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from retrievers.index.faiss_calls import search_one
from retrievers.index.rescore import one_top, refined_top

__all__ = ["is_one_vector", "one_query"]

Float32Array = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]


def is_one_vector(queries: npt.ArrayLike, dim: int) -> TypeGuard[Float32Array]:
    """Whether ``queries`` is one C-contiguous float32 vector of ``dim`` values (an embedder's)."""
    return (
        isinstance(queries, np.ndarray)
        and queries.dtype == np.float32
        and queries.shape == (dim,)
        and queries.flags.c_contiguous
    )


def one_query(
    faiss: Any,
    index: Any,
    kind: str,
    vectors: Float32Array,
    query: Float32Array,
    band: float,
    length: int,
    counts: tuple[int, int, int],
    parameters: Any,
) -> tuple[Float32Array, IndexArray] | None:
    """The top ``length`` of one ``query`` (band: its rounding band) among the candidates of the
    faiss ``index`` of ``kind``, scored exactly over ``vectors``; ``counts`` is (the contract's
    candidates, those asked first, those that leave no row unseen: every allowed row for flat),
    as :meth:`FaissVectorIndex.search` computes them. None: the general path must answer."""
    fetch, asked, complete = counts
    before = int(faiss.omp_get_max_threads())
    if before != 1:  # one query on two threads only spins the second core
        faiss.omp_set_num_threads(1)
    try:
        scores, labels = search_one(faiss, index, query, asked, parameters)
    finally:
        if before != 1:
            faiss.omp_set_num_threads(before)
    if kind == "ivf_pq":  # quantised scores only choose: the best 2k by float32 scores
        scores, labels, missing = refined_top(faiss, vectors, query, labels, min(fetch, 2 * length))
        if missing:
            return None
        asked = labels.shape[1]
    return one_top(vectors, query, labels[0], scores[0], band, length, asked < complete, True)
