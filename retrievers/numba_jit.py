"""numba's compiler switched on for a few functions, whatever the environment says.

The kernels compiled through it (:mod:`retrievers.index.exact_kernel`'s top of a query's
scores, :mod:`retrievers.builders.label_terms`'s word numbering) are loops over every element:
run by the interpreter, as ``NUMBA_DISABLE_JIT=1`` would make ``numba.njit`` do (the test
session sets it for ranx), they would take a thousand times longer. :func:`jit_enabled`
compiles them anyway, and optionally with LLVM's SLP vectoriser; numba's on-disk cache is not
used (it unpickles its index files), so each process compiles on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["jit_enabled"]

#: held inside every :func:`jit_enabled` block: numba's settings are global to the process, so
#: two blocks at once (a query's kernel and a tree build's, on two threads) would each restore
#: what the other had set
_LOCK = threading.Lock()


@contextmanager
def jit_enabled(*, slp_vectorize: bool = False) -> Iterator[Any]:
    """``with jit_enabled() as numba: numba.njit(signature)(function)``: inside the block numba
    compiles (``DISABLE_JIT`` off) and, when asked, with the SLP vectoriser on; both are restored
    after. One block at a time in the process (:data:`_LOCK`; not reentrant)."""
    import numba
    from numba.core import config as numba_config

    config: Any = numba_config  # its settings are read from the environment at import
    with _LOCK:
        # numba's compiler re-reads every NUMBA_* variable when one changed since its last read
        # (a test module sets NUMBA_CACHE_DIR), which would undo the settings below half-way
        # through: read them now, so the compiler finds nothing changed
        config.reload_config()
        before = getattr(config, "SLP_VECTORIZE", 0), config.DISABLE_JIT
        if slp_vectorize:
            config.SLP_VECTORIZE = 1  # read when a function's passes are made (numba >= 0.59)
        config.DISABLE_JIT = 0
        try:
            yield numba
        finally:
            config.SLP_VECTORIZE, config.DISABLE_JIT = before
