"""One query through :class:`~retrievers.index.ann.FaissVectorIndex` (the latency path): the
steps of its general search for the common case (one C-contiguous float32 vector, no mask, ``k``
below the index's size, a faiss index), without the batch's arrays and calls.

What a search of one ``(k, knobs)`` needs (the candidates to ask for, faiss's search parameters,
the rescoring's pairwise program) is worked out once, when its knobs are checked, and kept as a
:class:`OneQueryPlan`; a query then costs faiss's search (into arrays its thread allocated once)
and one compiled call (:func:`~retrievers.index.exact_kernel.checked_top`, the plan's shapes
standing for ``exact_top``'s checks) that works out the query's rounding band, scores exactly
the rows within it (IVF-PQ: every candidate, whose quantised scores cannot be cut on) and keeps
the top.

Its result is the general path's, bit for bit (tests/test_speed_one_query.py,
tests/test_speed_one_plan.py): the same faiss search on one OpenMP thread (one query never gets
more, :meth:`FaissVectorIndex.omp_threads`), the same candidates, cut at the band and rescored as
:func:`~retrievers.index.rescore.one_top` does; IVF-PQ's candidates all rescored, which is what
the general path's float32 heap and band cut amount to. (The band's norm is summed in another
order than ``one_band``'s, far inside its 1e-6 slack: a candidate it could keep or drop cannot
reach the top either way.) Where the general path would ask faiss again (every candidate within
the band of the k-th best), a score is not finite or a query value is NaN or infinite,
:func:`one_query` answers None and the caller's general path answers (or refuses) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from retrievers.index.exact_kernel import NO_SCORES, NUMPY, checked_top, pairwise_program
from retrievers.index.faiss_calls import search_one
from retrievers.index.rescore import one_top
from retrievers.index.vectors import ExactVectorIndex

__all__ = ["OneQueryPlan", "is_one_vector", "one_query", "plain_knobs"]

Float32Array = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class OneQueryPlan:
    """A one-query search of ``length`` results from the faiss ``index`` of ``kind``: faiss is
    asked for ``asked`` candidates with ``parameters``; ``check_gap``: the candidates asked are
    fewer than the contract's, so a query whose candidates all lie within the band is answered
    by the general path."""

    index: Any
    kind: str
    length: int
    asked: int
    check_gap: bool
    parameters: Any
    program: IndexArray  # pairwise_program(dim): how the rescoring sums a row


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
    faiss: Any, plan: OneQueryPlan, exact: ExactVectorIndex, query: Float32Array
) -> tuple[Float32Array, IndexArray] | None:
    """The top ``plan.length`` of one ``query`` among the candidates of ``plan``'s faiss index,
    scored exactly over ``exact``'s vectors; its rounding band is worked out in the same compiled
    call. None: the general path must answer (module docstring; a query value that is NaN or
    infinite too: faiss answers it without harm, and the general path refuses it)."""
    before = int(faiss.omp_get_max_threads())
    if before != 1:  # one query on two threads only spins the second core
        faiss.omp_set_num_threads(1)
    try:
        scores, labels = search_one(faiss, plan.index, query, plan.asked, plan.parameters)
    finally:
        if before != 1:
            faiss.omp_set_num_threads(before)
    vectors, factor = exact.vectors, exact.band_factor
    # the plan's shapes hold (a (dim,) query of the (n, dim) matrix, faiss's (asked,) arrays):
    # the compiled call without exact_top's checks
    if plan.kind == "ivf_pq":  # quantised scores only choose: every candidate scored exactly
        found = checked_top(
            vectors, query, labels[0], NO_SCORES, 0.0, factor, False, plan.program, plan.length
        )
        return None if isinstance(found, str) else found
    found = checked_top(
        vectors, query, labels[0], scores[0], 0.0, factor, plan.check_gap, plan.program, plan.length
    )
    if not isinstance(found, str):
        return found
    band = exact.one_band(query) if found == NUMPY else None
    if band is None:  # every candidate within the band, or the query not finite
        return None
    return one_top(vectors, query, labels[0], scores[0], band, plan.length, plan.check_gap, True)


def one_plan(
    index: Any, kind: str, length: int, counts: tuple[int, int, int], parameters: Any
) -> OneQueryPlan:
    """The plan of ``length`` results from the faiss ``index`` of ``kind``; ``counts``: (the
    contract's candidates, those asked first, those that leave no row unseen), as
    :meth:`FaissVectorIndex.search` computes them."""
    _, asked, complete = counts
    return OneQueryPlan(index, kind, length, asked, asked < complete, parameters, pairwise_program(index.d))
