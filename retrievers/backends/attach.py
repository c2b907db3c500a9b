"""Open the backend a config names, write the store into it once, and give the store view whose
searches go there."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from retrievers.backends.base import BackendError, SearchBackend, identity_of
from retrievers.backends.config import BackendConfig
from retrievers.backends.keywords import BackendKeywords

if TYPE_CHECKING:
    from retrievers.store import ContextStore

__all__ = ["attach", "open_backend"]


def open_backend(
    config: BackendConfig,
    store: ContextStore,
    *,
    content_key: str | None = None,
    default_location: Path | None = None,
) -> SearchBackend:
    """The backend ``config`` names, holding ``store`` (written now when it holds nothing under
    ``config.backend_name``); :class:`BackendError` when it cannot be reached or holds another
    store. ``content_key`` is the store's key (default: a hash of its contents);
    ``default_location`` a folder for the embedded backends when no URL is configured."""
    if config.is_local:
        raise ValueError("store.backend=local searches the store's own files: there is nothing to open")
    identity = identity_of(store, content_key)
    location = config.url
    if location is None and config.backend != "postgres" and default_location is not None:
        location = str(default_location / ("libsql.db" if config.backend == "libsql" else "qdrant"))
    if location is None:
        raise BackendError(
            f"store.backend={config.backend} needs store.backend_url (or $VIKING_EVAL_STORE_URL): "
            + ("a postgresql:// URL" if config.backend == "postgres" else "a file, folder or URL")
        )
    backend: SearchBackend
    if config.backend == "libsql":
        from retrievers.backends.libsql_backend import LibsqlBackend

        backend = LibsqlBackend(config, identity, location)
    elif config.backend == "postgres":
        from retrievers.backends.postgres_backend import PostgresBackend

        backend = PostgresBackend(config, identity, location)
    else:
        from retrievers.backends.qdrant_backend import QdrantBackend

        backend = QdrantBackend(config, identity, location)
    try:
        backend.write(store)
    except BaseException:
        backend.close()
        raise
    return backend


def attach(store: ContextStore, backend: SearchBackend) -> ContextStore:
    """A view of ``store`` whose vector and keyword searches (every family's, unchanged) run in
    ``backend``, which must hold this very store."""
    if backend.identity != identity_of(store, backend.identity.content_key):
        raise BackendError(
            f"store.backend={backend.kind} was opened for another store ({backend.identity.rows} rows); "
            "open it with this store"
        )
    return store.with_search(backend, BackendKeywords(backend, store.bm25))
