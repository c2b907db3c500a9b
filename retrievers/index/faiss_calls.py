"""How :class:`retrievers.index.ann.FaissVectorIndex` calls faiss: the search parameters of one
search (the knob of its kind, the selector of the rows a mask allows) and the search calls."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "candidate_counts",
    "faiss_threads",
    "one_faiss_thread",
    "optional_faiss",
    "search_blocks",
    "search_one",
    "search_parameters",
]

#: per thread: fetch -> (scores, labels, their faiss pointers), reused by every one-query search
_ONE_QUERY = threading.local()
#: fetch sizes a thread keeps arrays for (a knob sweep asks for a few)
_ONE_QUERY_SIZES = 32


@contextmanager
def one_faiss_thread() -> Iterator[None]:
    """faiss on one OpenMP thread inside the block (a deterministic build; restored after)."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)


@contextmanager
def faiss_threads(faiss: Any, threads: int) -> Iterator[None]:
    """faiss on ``threads`` OpenMP threads inside the block (restored after; untouched when it
    already runs on that many)."""
    before = int(faiss.omp_get_max_threads())
    if threads != before:
        faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        if threads != before:
            faiss.omp_set_num_threads(before)


@functools.cache
def optional_faiss() -> Any | None:
    """The faiss module, imported on first use, or None when it is not installed."""
    loader = logging.getLogger("faiss.loader")
    if loader.level == logging.NOTSET:  # it logs each SIMD build it fails to find, at INFO
        loader.setLevel(logging.WARNING)
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss-cpu is a dependency
        return None
    return faiss


def candidate_counts(
    kind: str, k: int, n_allowed: int, ef_search: int | None, refine_factor: int | None
) -> tuple[int, int, int]:
    """(the candidates the contract asks faiss for, those asked first: flat's and HNSW's best
    2k, IVF-Flat's best k + 3, those that leave no allowed row unseen: flat's contract is every
    row) of a search of ``k`` among ``n_allowed`` rows (``retrievers.index.ann``'s module
    docstring). ``ef_search`` (HNSW) and ``refine_factor`` (IVF-PQ) are the call's, resolved by
    the caller. IVF-Flat's smaller heap costs faiss less than one of 2k (at 10k rows and k 10,
    a heap of 11 or 12 took 3-5 us less than one of 20 in a 50 us query); a query whose k + 3
    all lie within the band asks again for 2k (none of benchmarks/speed.py's 64 queries at 10k;
    with k + 1, 6 of them did)."""
    fetch = 2 * k
    if kind == "hnsw" and ef_search is not None:
        fetch = max(k, ef_search)
    elif kind == "ivf_pq" and refine_factor is not None:
        fetch = refine_factor * k
    fetch = min(fetch, n_allowed)
    if kind in ("flat", "hnsw"):
        asked = min(fetch, 2 * k)
    elif kind == "ivf_flat":
        asked = min(fetch, k + 3)
    else:
        asked = fetch
    return fetch, asked, n_allowed if kind == "flat" else fetch


def search_parameters(
    faiss: Any,
    kind: str,
    n_rows: int,
    allowed: npt.NDArray[np.bool_] | None,
    ef_search: int | None,
    nprobe: int | None,
) -> Any:
    """faiss ``SearchParameters`` of ``kind`` (HNSW: ``efSearch``; IVF: ``nprobe``; both resolved
    by the caller) with an ``IDSelectorBitmap`` of the ``allowed`` rows (of ``n_rows``) when given."""
    selector = None
    if allowed is not None:
        bits = np.packbits(allowed, bitorder="little")  # faiss: bit i & 7 of byte i >> 3
        selector = faiss.IDSelectorBitmap(n_rows, faiss.swig_ptr(bits))
        selector.referenced_bits = bits  # keep the buffer alive as long as the selector
    if kind == "hnsw":
        parameters = faiss.SearchParametersHNSW(efSearch=ef_search)
    elif kind in ("ivf_flat", "ivf_pq"):
        parameters = faiss.SearchParametersIVF(nprobe=nprobe)
    else:
        parameters = faiss.SearchParameters()
    if selector is not None:
        parameters.sel = selector
        parameters.referenced_selector = selector
    return parameters


def search_blocks(
    faiss: Any, index: Any, queries: npt.NDArray[np.float32], fetch: int, parameters: Any, block: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """faiss's scores and rows of ``index`` for C-contiguous float32 ``queries``, ``(n_queries,
    fetch)`` each, ``block`` queries a call. A faiss index is searched by its C++ search straight
    into the result arrays (the Python wrapper's checks and copies cost ~5 us a call, a tenth of a
    10k-row HNSW search); anything else (a test's stand-in) by its ``search``."""
    n_queries = queries.shape[0]
    scores = np.empty((n_queries, fetch), dtype=np.float32)
    labels = np.empty((n_queries, fetch), dtype=np.int64)
    direct = isinstance(index, faiss.Index)
    for first in range(0, n_queries, block):
        rows = slice(first, first + block)
        if direct:
            part = queries[rows]
            pointers = (faiss.swig_ptr(scores[rows]), faiss.swig_ptr(labels[rows]))
            index.search_c(part.shape[0], faiss.swig_ptr(part), fetch, *pointers, parameters)
        else:
            scores[rows], labels[rows] = index.search(queries[rows], fetch, params=parameters)
    return scores, labels


def search_one(
    faiss: Any, index: Any, query: npt.NDArray[np.float32], fetch: int, parameters: Any
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """:func:`search_blocks` for one C-contiguous float32 query of a faiss index (the latency
    path): ``(1, fetch)`` arrays this thread allocated once for ``fetch``, with their pointers, so
    a call costs faiss's search and one pointer. The arrays are overwritten by this thread's next
    call with the same ``fetch``: the caller copies what it keeps (fancy indexing does) first."""
    kept: dict[int, tuple[Any, ...]] | None = getattr(_ONE_QUERY, "by_fetch", None)
    if kept is None or (fetch not in kept and len(kept) >= _ONE_QUERY_SIZES):
        kept = _ONE_QUERY.by_fetch = {}
    arrays = kept.get(fetch)
    if arrays is None:
        scores = np.empty((1, fetch), dtype=np.float32)
        labels = np.empty((1, fetch), dtype=np.int64)
        arrays = kept[fetch] = (scores, labels, faiss.swig_ptr(scores), faiss.swig_ptr(labels))
    index.search_c(1, faiss.swig_ptr(query), fetch, arrays[2], arrays[3], parameters)
    return arrays[0], arrays[1]
