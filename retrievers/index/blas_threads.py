"""How many threads a batch search of :class:`~retrievers.index.vectors.ExactVectorIndex` runs:
as many as the process lets BLAS use (threadpoolctl reads it; the harness limits it while it
times queries), each multiplying its own chunks with BLAS held at one thread.

One GEMM split by BLAS over two threads while another thread keeps the candidates of the last
block puts three busy threads on two cores, and BLAS's threads wait for each other at the end of
every call; a thread per core, each doing its own chunks' GEMM and cut, does not.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

__all__ = ["blas_workers", "one_blas_thread"]


@functools.cache
def _blas() -> Any | None:
    """threadpoolctl's controller of the BLAS libraries loaded (numpy's), or None when there is
    none it knows (then BLAS is left alone)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        return None
    blas = ThreadpoolController().select(user_api="blas")
    return blas if blas.lib_controllers else None


@contextlib.contextmanager
def blas_workers(tasks: int) -> Iterator[int]:
    """The number of worker threads for ``tasks`` independent GEMMs: BLAS's current thread
    count, at most ``tasks``; while it is more than one, BLAS runs each call on one thread (and
    is set back afterwards). One worker: BLAS untouched."""
    blas = _blas()
    budget = 1 if blas is None else max(int(library.num_threads) for library in blas.lib_controllers)
    workers = max(1, min(budget, tasks))
    if blas is None or workers == 1:
        yield 1
        return
    with blas.limit(limits=1):
        yield workers


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS held at one thread inside the block (small products, where threads cost more than
    they give), through the controller made once: ``threadpool_limits`` looks for every loaded
    library again at each call (about 3 ms)."""
    blas = _blas()
    if blas is None:
        yield
        return
    with blas.limit(limits=1):
        yield
