"""Qdrant: local mode (a folder, in-process, no server) or any Qdrant server or cluster by URL
(``http(s)://...``; an API key from ``QDRANT_API_KEY``).

Collection ``<backend_name>_docs``: one point per row (point id = row, payload ``doc_id``, the
row's digest and its BM25 terms) with a dense vector ``emb`` (dot product: the store's rows are
L2-normalised); collection ``<backend_name>_meta`` holds the store's identity, store key and the
keyword layout (:data:`KEYWORDS`), written after every point (a docs collection without it is a
write that did not finish: dropped and redone; one of another layout is written again). A later
version of the store (:mod:`retrievers.backends.changes`, :meth:`QdrantBackend._change`) marks
the change pending, deletes and writes only the rows that differ, and writes the new identity
last.

Vector search: ``exact`` asks for an exact scan (``SearchParams(exact=True)``), ``hnsw`` searches
the HNSW graph (``m``, ``ef_construction``) with ``ef_search`` as ``hnsw_ef``; the scope is a
``HasIdCondition`` filter, applied inside the search; each returned row is scored from its
returned vector (``rescored_hit``). (Local mode scans every point whatever the
index: HNSW is a server's.)

Keyword search: Qdrant's own BM25 over a text index (``TextQuery`` on the payload field
``terms``, indexed with ``scoring``): Qdrant keeps each point's length and the collection's
statistics (points, mean length, document frequencies) itself, so a change writes only its own
points, whatever the mean length does. The field holds the row's terms from the store's tokenizer
(stopwords, stemmer), written so that Qdrant's word tokenizer (split on non-alphanumerics,
lowercase, nothing else) reads exactly those terms (:func:`encoded_terms`); k1 and b are the
store's, sent with every query. Score: ``sum over distinct query terms of ln(1 + (N - n + 0.5) /
(n + 0.5)) tf (k1 + 1) / (tf + k1 (1 - b + b len / avglen))``, N and avglen over the points
holding any term. Qdrant counts a query term once; a query repeating a term (as bm25s counts it
again) is asked in layers, the terms appearing at least j times in layer j, and the layers'
scores summed per point (all matching points fetched: exact).

A batch of queries goes in ``query_batch_points`` requests of :data:`BATCH` queries (one round
trip per request to a server), no payload fetched. Local mode has no text index: each keyword
query tokenizes and scores every point in Python, so its cost grows with rows x terms per row.
"""

from __future__ import annotations

import os
import re
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

__all__ = ["KEYWORDS", "QdrantBackend", "encoded_terms"]

API_KEY_ENV = "QDRANT_API_KEY"
#: queries per ``query_batch_points`` request (a batch of 384-d dense queries is ~2 MB of JSON)
BATCH = 256


#: the payload field holding a row's BM25 terms (Qdrant's text index with BM25 scoring)
TERMS = "terms"
#: the keyword layout the identity point records (collections of another are written again)
KEYWORDS = "text-bm25"


#: a term written as itself: ASCII lowercase letters and digits, not starting with ``x``
_PLAIN = re.compile(r"[a-wyz0-9][a-z0-9]*")


def encoded_terms(terms: Sequence[str]) -> str:
    """Terms as the text Qdrant's word tokenizer (split on non-alphanumerics, lowercase) splits
    back into exactly these terms: a term of ASCII lowercase letters and digits not starting
    with ``x`` as itself, any other as ``x`` + its UTF-8 bytes in hex (so two terms never meet
    in one token: written terms start with ``x`` only when encoded)."""
    return " ".join(term if _PLAIN.fullmatch(term) else "x" + term.encode("utf-8").hex() for term in terms)


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
        self._bm25 = (1.5, 0.75)  # (k1, b): the store's, set by write()
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

    def _held(self) -> tuple[StoreIdentity | None, str | None, str | None, str | None]:
        """The identity, store key, pending change's target key and keyword layout the folder
        holds (all None: nothing, or a write that did not finish)."""
        if not self._call("checking", "collection_exists", self.meta):
            return None, None, None, None
        points = self._call("reading the identity", "retrieve", self.meta, [0], with_payload=True)
        if not points:
            return None, None, None, None
        payload = points[0].payload
        identity = StoreIdentity.from_json(payload["identity"])
        return identity, payload.get("store_key"), payload.get("pending"), payload.get("keywords")

    def write(self, store: ContextStore) -> bool:
        bm25 = store.config.bm25
        self._tokens = (bm25.stopwords, bm25.stemmer)
        self._bm25 = (bm25.k1, bm25.b)
        held, held_key, pending, keywords = self._held()
        where = f"qdrant {self.location} (collection {self.docs})"
        action = self.decide(store, held, held_key, where, pending=pending)
        if action != "write" and keywords != KEYWORDS:
            action = "write"  # this store (or one it comes from) in an older keyword layout: written again
        if action == "write":
            self._write(store)
        elif action == "change":
            planned = None if pending is not None else self.planned_change(store, held, held_key, where)
            self._change(store, planned)
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
            hnsw_config=models.HnswConfigDiff(
                m=self.config.backend_m, ef_construct=self.config.backend_ef_construction
            ),
        )
        self._call(
            "creating the text index", "create_payload_index", self.docs, field_name=TERMS,
            field_schema=models.TextIndexParams(
                type=models.TextIndexType.TEXT, tokenizer=models.TokenizerType.WORD, lowercase=True, scoring=True
            ),
            wait=True,
        )  # fmt: skip
        self._upsert(store, np.arange(len(store), dtype=np.int64), row_digests(store))
        self._call(
            "creating the identity",
            "create_collection",
            self.meta,
            vectors_config=models.VectorParams(size=1, distance=models.Distance.DOT),
        )
        self._record(store)

    def _upsert(self, store: ContextStore, rows: IntArray, digests: DigestArray) -> None:
        """The store's ``rows`` as points: dense vector, id, digest and BM25 terms."""
        from qdrant_client import models

        step = 512
        for start in range(0, len(rows), step):
            block = rows[start : start + step].tolist()
            terms = self._tokenize([store.documents[row].full_text for row in block])
            points = []
            for row, row_terms in zip(block, terms, strict=True):
                vectors: dict[str, Any] = {}
                if self.identity.dim:
                    vectors["emb"] = np.asarray(store.embeddings[row], dtype=np.float32).tolist()
                payload = {
                    "doc_id": store.doc_ids[row],
                    "digest": digests[row].tobytes().hex(),
                    TERMS: encoded_terms(row_terms),
                }
                points.append(models.PointStruct(id=row, vector=vectors, payload=payload))
            self._call("writing points", "upsert", self.docs, points=points, wait=True)

    def _record(self, store: ContextStore) -> None:
        """The identity, written last: one point, replaced whole (no change left pending)."""
        from qdrant_client import models

        payload = {"identity": self.identity.to_json(), "store_key": store_key(store), "keywords": KEYWORDS}
        self._call(
            "writing the identity",
            "upsert",
            self.meta,
            points=[models.PointStruct(id=0, vector=[1.0], payload=payload)],
            wait=True,
        )

    def _change(self, store: ContextStore, planned: RowChange | None = None) -> None:
        """Only the rows that differ (:mod:`retrievers.backends.changes`: ``planned`` from the
        store's history, else every held point's digest compared). Qdrant has no transactions,
        so the change is first recorded as pending (the target's store key on the identity
        point): a process killed before the last step leaves it there, and the next open
        finishes the change (with this store or a later one) or brings the rows back (with the
        store it came from), comparing digests again; it never serves the mix. Kept points are
        not touched: Qdrant's text index keeps the BM25 statistics (module doc)."""
        from qdrant_client import models

        digests = row_digests(store)
        change = planned if planned is not None else self._compared(digests)
        self.last_change = change
        self._call(
            "marking the change", "set_payload", self.meta, payload={"pending": store_key(store)},
            points=[0], wait=True,
        )  # fmt: skip
        if change.drop.size:
            self._call(
                "deleting points", "delete", self.docs,
                points_selector=models.PointIdsList(points=change.drop.tolist()), wait=True,
            )  # fmt: skip
        self._upsert(store, change.write, digests)
        self._record(store)

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

    def _layers(self, text: str) -> list[str]:
        """The query's terms as Qdrant text queries: layer j holds the terms the query has at
        least j times (one layer unless a term repeats)."""
        counts = Counter(self._tokenize([text])[0])
        depth = max(counts.values(), default=0)
        return [encoded_terms(sorted(t for t in counts if counts[t] >= j)) for j in range(1, depth + 1)]

    def _text_request(self, text: str, limit: int, query_filter: Any) -> Any:
        from qdrant_client import models

        k1, b = self._bm25
        scoring = models.Bm25Scoring(bm25=models.Bm25Params(k=k1, b=b))
        return models.QueryRequest(
            query=models.TextQuery(text=models.TextQueryInput(query=text, scoring=scoring)),
            using=TERMS, filter=query_filter, limit=limit, with_payload=False,
        )  # fmt: skip

    def _summed(self, layered: Sequence[Sequence[str]], query_filter: Any) -> list[dict[int, float]]:
        """Per query (its layers): every matching point's score summed over the layers (float64,
        then float32); all layers of all queries asked in :data:`BATCH`-request batches."""
        requests = [
            self._text_request(text, self.identity.rows, query_filter)
            for layers in layered
            for text in layers
        ]
        found = iter(self._batched("keyword search", requests))
        results: list[dict[int, float]] = []
        for layers in layered:
            sums: dict[int, float] = {}
            for points in (next(found) for _ in layers):
                for point in points:
                    sums[int(point.id)] = sums.get(int(point.id), 0.0) + float(point.score)
            results.append({row: float(np.float32(score)) for row, score in sums.items()})
        return results

    def keyword_search(self, queries: Sequence[str], k: int, rows: IntArray | None) -> Hits:
        query_filter = self._filter(rows)
        layers = [self._layers(text) for text in queries]
        single = [i for i, layer in enumerate(layers) if len(layer) == 1]
        requests = [self._text_request(layers[i][0], k + 1, query_filter) for i in single]
        results: Hits = [empty_hit() for _ in queries]
        for i, points in zip(single, self._top("keyword search", k, requests), strict=True):
            results[i] = ordered_hit([(point.id, point.score) for point in points], k)
        repeated = [i for i, layer in enumerate(layers) if len(layer) > 1]
        for i, sums in zip(repeated, self._summed([layers[i] for i in repeated], query_filter), strict=True):
            results[i] = ordered_hit(list(sums.items()), k)
        return results

    def keyword_scores(self, query: str) -> Float32Array:
        scores = np.zeros(self.identity.rows, dtype=np.float32)
        for row, score in self._summed([self._layers(query)], None)[0].items():
            scores[row] = score
        return scores

    def close(self) -> None:
        self.client.close()
