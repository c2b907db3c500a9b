"""Flat baselines: BM25 and exact dense retrieval over a ContextStore.

Each retriever class names its parameter dataclass in ``Params``; the parameters are validated
there (``__post_init__``), so a harness can check a configuration before any store is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from retrievers.chunking import Hits, search_documents
from retrievers.store import ContextStore
from retrievers.types import Embedder, RetrievalResult


def check_top_k(top_k: int) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")


def check_query(query: str) -> None:
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"query must be a non-empty string, got {query!r}")


def results_from_rows(store: ContextStore, scores: np.ndarray, rows: np.ndarray) -> list[RetrievalResult]:
    """Turn (scores, rows), already ordered by (score desc, row asc), into results."""
    doc_ids = store.doc_ids
    return [
        RetrievalResult(doc_id=doc_ids[row], score=float(score))
        for score, row in zip(scores, rows, strict=True)
    ]


def document_results(
    store: ContextStore, search: Callable[[Sequence[int], int], Sequence[Hits]], n_queries: int, top_k: int
) -> list[list[RetrievalResult]]:
    """For a chunked store: each query's top ``top_k`` documents, a document scoring its best
    chunk (``provenance["chunk_id"]``), from a chunk search ``search(query_indices, k)`` read as
    deep as needed (retrievers/chunking.py)."""
    return [
        [
            RetrievalResult(
                doc_id=store.parent_ids[parent],
                score=float(score),
                provenance={"chunk_id": store.doc_ids[row]},
            )
            for parent, score, row in zip(
                hits.parents.tolist(), hits.scores.tolist(), hits.rows.tolist(), strict=True
            )
        ]
        for hits in search_documents(search, n_queries, top_k, store.parent_of)
    ]


@dataclass(frozen=True)
class BM25Params:
    """BM25 has no query-time parameters: k1, b and the tokenizer are store settings."""


class BM25Retriever:
    """Lexical retrieval with the store's BM25 index (OR semantics over query terms; documents
    matching no query term are not returned)."""

    Params = BM25Params

    def __init__(self, store: ContextStore, embedder: Embedder | None = None) -> None:
        self.store = store
        self.params = BM25Params()

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        return self.retrieve_batch([query], top_k)[0]

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        check_top_k(top_k)
        for query in queries:
            check_query(query)
        if self.store.chunked:  # rank documents by their best chunk
            return document_results(
                self.store,
                lambda picked, k: self.store.bm25.search(
                    [queries[i] for i in picked], k, mask=self.store.allowed
                ),
                len(queries),
                top_k,
            )
        hits = self.store.bm25.search(list(queries), top_k, mask=self.store.allowed)
        return [results_from_rows(self.store, scores, rows) for scores, rows in hits]


@dataclass(frozen=True)
class DenseParams:
    """``query_batch_size``: queries encoded per call in ``retrieve_batch`` (1..65536)."""

    query_batch_size: int = 256

    def __post_init__(self) -> None:
        if not 1 <= self.query_batch_size <= 65536:
            raise ValueError(f"query_batch_size must be in [1, 65536], got {self.query_batch_size}")


class DenseRetriever:
    """Exact inner-product search over the store's L2-normalised document embeddings (cosine).

    ``retrieve_batch`` encodes queries in batches; the search itself is batch-invariant, so the
    result equals ``retrieve`` bit for bit whenever the embedder is (TF-IDF, static models). A
    transformer pads a batch to its longest query, which moves vectors by ~1e-7; rankings then
    agree except for documents whose scores differ by less than that."""

    Params = DenseParams

    def __init__(self, store: ContextStore, embedder: Embedder, *, query_batch_size: int = 256) -> None:
        self.params = DenseParams(query_batch_size=query_batch_size)
        if embedder.name != store.embedder_name:
            raise ValueError(
                f"embedder {embedder.name!r} is not the one the store was built with ({store.embedder_name!r})"
            )
        self.store = store
        self.embedder = embedder

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        return self.retrieve_batch([query], top_k)[0]

    def _search_rows(self, vectors: np.ndarray, picked: Sequence[int], k: int) -> Sequence[Hits]:
        return self.store.vectors.search(vectors[list(picked)], k, mask=self.store.allowed)

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        check_top_k(top_k)
        for query in queries:
            check_query(query)
        results: list[list[RetrievalResult]] = []
        size = self.params.query_batch_size
        for start in range(0, len(queries), size):
            vectors = self.embedder.encode(list(queries[start : start + size]), kind="query")
            if self.store.chunked:  # rank documents by their best chunk
                results += document_results(
                    self.store, partial(self._search_rows, vectors), len(vectors), top_k
                )
                continue
            for scores, rows in self.store.vectors.search(vectors, top_k, mask=self.store.allowed):
                results.append(results_from_rows(self.store, scores, rows))
        return results
