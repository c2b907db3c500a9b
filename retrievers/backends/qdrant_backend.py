"""Qdrant: local mode (a folder, in-process, no server) or any Qdrant server or cluster by URL
(``http(s)://...``; an API key from ``QDRANT_API_KEY``).

Collection ``<backend_name>_docs``: one point per row (point id = row, payload ``doc_id`` and
the row's digest) with a dense vector ``emb`` (dot product: the store's rows are L2-normalised)
and a sparse vector ``bm25``; collection ``<backend_name>_meta`` holds the store's identity, store
key and mean document length, written after every point (a docs collection without it is a
write that did not finish: dropped and redone). A later version of the store
(:mod:`retrievers.backends.changes`, :meth:`QdrantBackend._change`) marks the change pending,
deletes and writes the rows that differ, rewrites every kept point's sparse vector when the mean
length moved, and writes the new identity last.

Vector search: ``exact`` asks for an exact scan (``SearchParams(exact=True)``), ``hnsw`` searches
the HNSW graph (``m``, ``ef_construction``) with ``ef_search`` as ``hnsw_ef``; the scope is a
``HasIdCondition`` filter, applied inside the search; each returned row is scored from its
returned vector (``rescored_hit``). (Local mode scans every point whatever the
index: HNSW is a server's.) Keyword search: BM25 as sparse vectors: a document's entry for a term
is its BM25 term-frequency part ``tf (k1 + 1) / (tf + k1 (1 - b + b len / avglen))`` (the store's
k1, b and tokenizer: stopwords, stemmer), a query's is the term's count in the query (a repeated
word counts again, as bm25s sums over query tokens), and the collection's
``Modifier.IDF`` multiplies each term by Qdrant's ``ln(1 + (N - n + 0.5) / (n + 0.5))``. Term
ids are the CRC-32 of the term (no vocabulary to store; a collision merges two terms).

A batch of queries goes in ``query_batch_points`` requests of :data:`BATCH` queries (one round
trip per request to a server), no payload fetched. Local mode has no sparse index: each keyword
query scores every point in Python (a merge of the query's term ids with each point's), so its
cost grows with rows x terms per row, whatever the request holds.
"""

from __future__ import annotations

import os
import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from retrievers.backends.base import (
    BackendError,
    BackendLost,
    Float32Array,
    IntArray,
    SearchBackend,
    StoreIdentity,
    empty_hit,
    ordered_hit,
    rescored_hit,
)
from retrievers.backends.changes import RowChange, row_change, row_digests, store_key
from retrievers.index.vectors import Hits
from retrievers.store.row_digests import DigestArray
from retrievers.text import tokenize

if TYPE_CHECKING:
    from retrievers.backends.config import BackendConfig
    from retrievers.store import ContextStore

__all__ = ["QdrantBackend", "sparse_terms"]

API_KEY_ENV = "QDRANT_API_KEY"
#: queries per ``query_batch_points`` request (a batch of 384-d dense queries is ~2 MB of JSON)
BATCH = 256


def sparse_terms(terms: Sequence[str]) -> Counter[int]:
    """Term counts keyed by the term's id (CRC-32)."""
    return Counter(zlib.crc32(term.encode("utf-8")) for term in terms)


class QdrantBackend(SearchBackend):
    kind = "qdrant"
    KNOBS: ClassVar[dict[str, tuple[str, ...]]] = {"exact": (), "hnsw": ("ef_search",)}

    def default_knobs(self) -> dict[str, int]:
        # a server's hnsw_ef defaults to ef_construct; local mode scans every point
        return {"ef_search": self.config.backend_ef_construction} if self.index == "hnsw" else {}

    def __init__(self, config: BackendConfig, identity: StoreIdentity, location: str) -> None:
        super().__init__(config, identity)
        from qdrant_client import QdrantClient

        self.location = location
        self.docs, self.meta = f"{config.backend_name}_docs", f"{config.backend_name}_meta"
        self._tokens: tuple[str | None, str | None] = (None, None)
        #: local mode scans every point (search parameters have no effect there)
        self.embedded = not location.startswith(("http://", "https://"))
        try:
            if location.startswith(("http://", "https://")):
                self.client: Any = QdrantClient(url=location, api_key=os.environ.get(API_KEY_ENV), timeout=10)
            else:
                Path(location).mkdir(parents=True, exist_ok=True)
                self.client = QdrantClient(path=location)
            self.client.get_collections()
        except Exception as error:  # connection, lock and HTTP errors have no common base
            text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackendError(f"store.backend=qdrant: cannot open {location}: {text}") from None

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(*args, **kwargs)
        except Exception as error:
            text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackendLost(f"store.backend=qdrant ({self.location}): {what} failed: {text}") from None

    def _held(self) -> tuple[StoreIdentity | None, str | None, str | None]:
        """The identity, store key and pending change's target key the folder holds (all None:
        nothing, or a write that did not finish)."""
        if not self._call("checking", "collection_exists", self.meta):
            return None, None, None
        points = self._call("reading the identity", "retrieve", self.meta, [0], with_payload=True)
        if not points:
            return None, None, None
        payload = points[0].payload
        return StoreIdentity.from_json(payload["identity"]), payload.get("store_key"), payload.get("pending")

    def write(self, store: ContextStore) -> bool:
        bm25 = store.config.bm25
        self._tokens = (bm25.stopwords, bm25.stemmer)
        held, held_key, pending = self._held()
        where = f"qdrant {self.location} (collection {self.docs})"
        action = self.decide(store, held, held_key, where, pending=pending)
        if action == "write":
            self._write(store)
        elif action == "change":
            planned = None if pending is not None else self.planned_change(store, held, held_key, where)
            self._change(store, rewrite_sparse=pending is not None, planned=planned)
        return action != "reuse"

    def _write(self, store: ContextStore) -> None:
        from qdrant_client import models

        for name in (self.meta, self.docs):
            if self._call("checking", "collection_exists", name):
                self._call("dropping an unfinished write", "delete_collection", name)
        dim = self.identity.dim
        dense = {"emb": models.VectorParams(size=dim, distance=models.Distance.DOT)} if dim else {}
        self._call(
            "creating the collection",
            "create_collection",
            self.docs,
            vectors_config=dense,
            sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)},
            hnsw_config=models.HnswConfigDiff(
                m=self.config.backend_m, ef_construct=self.config.backend_ef_construction
            ),
        )
        terms = self._terms(store)
        self._upsert(store, np.arange(len(store), dtype=np.int64), terms, row_digests(store))
        self._call(
            "creating the identity",
            "create_collection",
            self.meta,
            vectors_config=models.VectorParams(size=1, distance=models.Distance.DOT),
        )
        self._record(store, terms[2])

    def _terms(self, store: ContextStore) -> tuple[list[Counter[int]], np.ndarray, float]:
        """Every row's term counts (by term id), lengths, and the mean length."""
        counts = [sparse_terms(terms) for terms in self._tokenize([doc.full_text for doc in store.documents])]
        lengths = np.asarray([sum(count.values()) for count in counts], dtype=np.float64)
        average = float(lengths.mean()) if len(lengths) and lengths.mean() > 0 else 1.0
        return counts, lengths, average

    def _sparse_row(
        self, store: ContextStore, row: int, terms: tuple[list[Counter[int]], np.ndarray, float]
    ) -> Any:
        """Row ``row``'s BM25 sparse vector: the tf part of each of its terms (module doc)."""
        from qdrant_client import models

        counts, lengths, average = terms
        k1, b = store.config.bm25.k1, store.config.bm25.b
        norm = k1 * (1.0 - b + b * lengths[row] / average)
        ids = sorted(counts[row])
        values = [counts[row][i] * (k1 + 1.0) / (counts[row][i] + norm) for i in ids]
        return models.SparseVector(indices=ids, values=values)

    def _upsert(
        self,
        store: ContextStore,
        rows: IntArray,
        terms: tuple[list[Counter[int]], np.ndarray, float],
        digests: DigestArray,
    ) -> None:
        """The store's ``rows`` as points: dense and sparse vectors, id and digest."""
        from qdrant_client import models

        step = 512
        for start in range(0, len(rows), step):
            points = []
            for row in rows[start : start + step].tolist():
                vectors: dict[str, Any] = {"bm25": self._sparse_row(store, row, terms)}
                if self.identity.dim:
                    vectors["emb"] = np.asarray(store.embeddings[row], dtype=np.float32).tolist()
                payload = {"doc_id": store.doc_ids[row], "digest": digests[row].tobytes().hex()}
                points.append(models.PointStruct(id=row, vector=vectors, payload=payload))
            self._call("writing points", "upsert", self.docs, points=points, wait=True)

    def _record(self, store: ContextStore, average: float) -> None:
        """The identity, written last: one point, replaced whole (no change left pending)."""
        from qdrant_client import models

        payload = {"identity": self.identity.to_json(), "store_key": store_key(store), "average": average}
        self._call(
            "writing the identity",
            "upsert",
            self.meta,
            points=[models.PointStruct(id=0, vector=[1.0], payload=payload)],
            wait=True,
        )

    def _change(self, store: ContextStore, *, rewrite_sparse: bool, planned: RowChange | None = None) -> None:
        """Only the rows that differ (:mod:`retrievers.backends.changes`). Qdrant has no
        transactions, so the change is first recorded as pending (the target's store key on the
        identity point): a process killed before the last step leaves it there, and the next
        open finishes the change (with this store or a later one) or brings the rows back (with
        the store it came from), comparing digests again; it never serves the mix. The kept
        rows' sparse vectors are rewritten when the mean length moved (every BM25 entry's length
        part depends on it), as always after an interrupted change."""
        from qdrant_client import models

        digests = row_digests(store)
        change = planned if planned is not None else self._compared(digests)
        self.last_change = change
        terms = self._terms(store)
        found = self._call("reading the identity", "retrieve", self.meta, [0], with_payload=True)
        held_average = found[0].payload.get("average") if found else None
        self._call(
            "marking the change", "set_payload", self.meta, payload={"pending": store_key(store)},
            points=[0], wait=True,
        )  # fmt: skip
        if change.drop.size:
            self._call(
                "deleting points", "delete", self.docs,
                points_selector=models.PointIdsList(points=change.drop.tolist()), wait=True,
            )  # fmt: skip
        self._upsert(store, change.write, terms, digests)
        if rewrite_sparse or held_average != terms[2]:
            written = set(change.write.tolist())
            kept = [row for row in range(len(store)) if row not in written]
            for start in range(0, len(kept), 512):
                vectors = [
                    models.PointVectors(id=row, vector={"bm25": self._sparse_row(store, row, terms)})
                    for row in kept[start : start + 512]
                ]
                self._call("rewriting sparse vectors", "update_vectors", self.docs, points=vectors, wait=True)
        self._record(store, terms[2])

    def _compared(self, digests: DigestArray) -> RowChange:
        """The change found by reading every held point's digest and comparing it with the store's."""
        held_rows: list[int] = []
        held_digests: list[bytes] = []
        offset = None
        while True:
            points, offset = self._call(
                "reading digests", "scroll", self.docs, limit=4096, offset=offset,
                with_payload=["digest"], with_vectors=False,
            )  # fmt: skip
            for point in points:
                held_rows.append(int(point.id))
                held_digests.append(bytes.fromhex(point.payload["digest"]))
            if offset is None:
                break
        return row_change(held_rows, held_digests, digests)

    def _tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        stopwords, stemmer = self._tokens
        return tokenize(texts, stopwords=stopwords, stemmer=stemmer)

    @staticmethod
    def _filter(rows: IntArray | None) -> Any:
        from qdrant_client import models

        if rows is None:
            return None
        return models.Filter(must=[models.HasIdCondition(has_id=rows.tolist())])

    def vector_search(
        self,
        queries: np.ndarray,
        k: int,
        rows: IntArray | None,
        *,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> Hits:
        from qdrant_client import models

        params = (
            None
            if self.embedded
            else models.SearchParams(exact=True)
            if self.index == "exact"
            else models.SearchParams(hnsw_ef=ef_search)
        )
        matrix = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.identity.dim)
        query_filter = self._filter(rows)
        ask: dict[str, Any] = {"using": "emb", "with_vector": ["emb"], "with_payload": False}
        requests = [
            models.QueryRequest(query=query.tolist(), filter=query_filter, params=params, limit=k + 1, **ask)
            for query in matrix
        ]
        results: Hits = []
        for query, points in zip(matrix, self._top("vector search", k, requests), strict=True):
            vectors = [point.vector["emb"] for point in points]
            results.append(rescored_hit([point.id for point in points], vectors, query, k))
        return results

    def _batched(self, what: str, requests: Sequence[Any]) -> list[list[Any]]:
        """The points each request found, asked :data:`BATCH` requests at a time with
        ``query_batch_points`` (one round trip per batch to a server; local mode answers them one
        by one in-process)."""
        found: list[list[Any]] = []
        for start in range(0, len(requests), BATCH):
            chunk = list(requests[start : start + BATCH])
            responses = self._call(what, "query_batch_points", self.docs, requests=chunk)
            found.extend(response.points for response in responses)
        return found

    def _top(self, what: str, k: int, requests: Sequence[Any]) -> list[list[Any]]:
        """The points of each request (asked with ``limit`` k + 1) ranked in the top ``k``, and
        every point tied with the k-th (float32 scores, as the hits hold them): Qdrant orders
        equal scores its own way (after a change, not by row), the ranking rule takes the lowest
        rows, so every point scoring at least the k-th is fetched to choose from (Qdrant's
        threshold is strict: one float32 step below)."""
        found = self._batched(what, requests)
        tied = [
            number
            for number, points in enumerate(found)
            if len(points) > k and np.float32(points[k].score) >= np.float32(points[k - 1].score)
        ]
        wider = [
            requests[number].model_copy(
                update={
                    "limit": self.identity.rows,
                    "score_threshold": float(
                        np.nextafter(np.float32(found[number][k - 1].score), np.float32(-np.inf))
                    ),
                }
            )
            for number in tied
        ]
        for number, points in zip(tied, self._batched(what, wider), strict=True):
            found[number] = points
        return found

    def _sparse(self, text: str) -> Any:
        from qdrant_client import models

        counts = sparse_terms(self._tokenize([text])[0])
        ids = sorted(counts)
        return models.SparseVector(indices=ids, values=[float(counts[i]) for i in ids]) if ids else None

    def keyword_search(self, queries: Sequence[str], k: int, rows: IntArray | None) -> Hits:
        from qdrant_client import models

        query_filter = self._filter(rows)
        vectors = [self._sparse(text) for text in queries]
        asked = [i for i, vector in enumerate(vectors) if vector is not None]
        requests = [
            models.QueryRequest(
                query=vectors[i], using="bm25", filter=query_filter, limit=k + 1, with_payload=False
            )
            for i in asked
        ]
        results: Hits = [empty_hit() for _ in queries]
        for i, points in zip(asked, self._top("keyword search", k, requests), strict=True):
            results[i] = ordered_hit([(point.id, point.score) for point in points], k)
        return results

    def keyword_scores(self, query: str) -> Float32Array:
        scores = np.zeros(self.identity.rows, dtype=np.float32)
        vector = self._sparse(query)
        if vector is not None:
            found = self._call(
                "keyword scores",
                "query_points",
                self.docs,
                query=vector,
                using="bm25",
                limit=self.identity.rows,
                with_payload=False,
            )
            for point in found.points:
                scores[int(point.id)] = point.score
        return scores

    def close(self) -> None:
        self.client.close()
