"""Which database a store's searches run on: the ``store.backend*`` settings, validated.

These settings say *where* a built store is searched, never *what* it holds, so they are not
part of :class:`retrievers.store.StoreConfig` (and not of a store's cache key or a tuned file):
the harness reads them from the ``store`` section (``store.backend=postgres``) and takes them out
before the store settings are checked; a service passes them to ``load_tuned(..., backend=)``.

URLs and credentials come from this config or the environment (``VIKING_EVAL_STORE_URL`` when
``backend_url`` is null; Postgres also reads libpq's ``PGPASSWORD``, ``PGHOST``...), never from a
tuned file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from retrievers.params import Params, param

__all__ = ["BACKENDS", "INDEXES", "URL_ENV", "BackendConfig"]

#: the backends ``store.backend`` may name
BACKENDS = ("local", "libsql", "postgres", "qdrant")
#: vector indexes each backend can search with (``exact`` = a full scan, the parity setting)
INDEXES: dict[str, tuple[str, ...]] = {
    "local": ("exact",),
    "libsql": ("exact", "vector_idx"),
    "postgres": ("exact", "hnsw", "ivfflat"),
    "qdrant": ("exact", "hnsw"),
}
#: the environment variable giving ``backend_url`` when the config leaves it null
URL_ENV = "VIKING_EVAL_STORE_URL"


@dataclass(frozen=True)
class BackendConfig(Params):
    """A search backend: its kind, where it is, the name its tables/collections carry, and its
    vector index (the ANN knobs ef_search / nprobe stay retriever parameters)."""

    SECTION = "store"

    backend: Literal["local", "libsql", "postgres", "qdrant"] = param(
        "local", doc="where searches run: local (the store files) | libsql | postgres | qdrant"
    )
    backend_url: str | None = param(
        None,
        doc="libsql: a file (or libsql:// URL); postgres: a postgresql:// URL; qdrant: a folder (local "
        "mode) or http(s):// URL; null = $VIKING_EVAL_STORE_URL, else (libsql, qdrant) beside the store",
    )
    backend_name: str = param(
        "viking", non_empty=True, doc="prefix of the backend's tables / collections (letters, digits, _)"
    )
    backend_index: Literal["exact", "vector_idx", "hnsw", "ivfflat"] = param(
        "exact",
        doc="vector index: exact (all backends) | vector_idx (libsql) | hnsw (postgres, qdrant) | ivfflat (postgres)",
    )
    backend_m: int = param(16, low=2, high=512, doc="hnsw: links per node")
    backend_ef_construction: int = param(64, low=4, high=4096, doc="hnsw: candidate list while inserting")
    backend_lists: int | None = param(
        None, low=1, high=1 << 20, doc="ivfflat: lists; null = max(1, rows / 1000) (pgvector's advice)"
    )

    def check(self) -> None:
        if not self.backend_name.replace("_", "").isalnum() or not self.backend_name.isascii():
            raise self.fail("backend_name", f"must be ASCII letters, digits and _, got {self.backend_name!r}")
        if self.backend_index not in INDEXES[self.backend]:
            raise self.fail(
                "backend_index",
                f"{self.backend_index!r} is not an index of store.backend={self.backend}; "
                f"allowed: {', '.join(INDEXES[self.backend])}",
            )

    @property
    def url(self) -> str | None:
        """``backend_url``, else the environment's ``VIKING_EVAL_STORE_URL``, else None."""
        return self.backend_url or os.environ.get(URL_ENV) or None

    @property
    def is_local(self) -> bool:
        return self.backend == "local"
