"""Search backends: the databases a store's searches can run on (docs/stores.md).

``local`` (default) searches the store's own files; ``libsql``, ``postgres`` and ``qdrant`` hold
the store's rows, vectors and texts and answer the kernel's vector and keyword searches with the
scope pushed down as their own filters (:mod:`retrievers.backends.base`)::

    backend = open_backend(BackendConfig(backend="postgres", backend_url=url), store)
    retriever = HybridRetriever(attach(store, backend), embedder)
"""

from __future__ import annotations

from retrievers.backends.attach import attach, open_backend
from retrievers.backends.base import BackendError, BackendLost, SearchBackend, StoreIdentity, identity_of
from retrievers.backends.config import BACKENDS, INDEXES, BackendConfig

__all__ = [
    "BACKENDS",
    "INDEXES",
    "BackendConfig",
    "BackendError",
    "BackendLost",
    "SearchBackend",
    "StoreIdentity",
    "attach",
    "identity_of",
    "open_backend",
]
