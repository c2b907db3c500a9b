"""store.backend=qdrant asks a batch of queries in ``query_batch_points`` requests of at most
``BATCH`` queries (one round trip per batch to a server), never one ``query_points`` per query,
and the batched answers are the per-query ones: the keyword leg against BM25 with Qdrant's idf
written out by hand, the vector leg against numpy's exact top-k."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from backend_cases import QUERIES, assert_top, family_store, hand_bm25, qdrant_idf

from retrievers.backends import BackendConfig, open_backend
from retrievers.backends.qdrant_backend import BATCH
from retrievers.text import tokenize

N_QUERIES = BATCH + 44  # two requests: a full batch and a part


class CountingClient:
    """A Qdrant client that records each call: (method, number of requests in it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, len(kwargs.get("requests", ()))))
            return method(*args, **kwargs)

        return call


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    store, embedder = family_store()
    folder = tmp_path_factory.mktemp("qdrant-batches")
    config = BackendConfig.from_dict({"backend": "qdrant", "backend_url": str(folder / "q")})
    backend = open_backend(config, store)
    spy = CountingClient(backend.client)
    backend.client = spy
    yield store, embedder, backend, spy
    spy.inner.close()


def searched(spy: CountingClient, ask: Callable[[], Any]) -> tuple[Any, list[tuple[str, int]]]:
    spy.calls.clear()
    found = ask()
    return found, list(spy.calls)


def assert_widened(calls: list[tuple[str, int]]) -> None:
    """The requests after the first pass: the queries tied at the k-th place asked again (with a
    score threshold), in batches too, never one request per query."""
    assert all(name == "query_batch_points" and 1 <= size <= BATCH for name, size in calls)
    assert len(calls) <= -(-N_QUERIES // BATCH)
    assert all(size == BATCH for _, size in calls[:-1])


def test_keyword_queries_go_in_batches_and_score_as_bm25_by_hand(served) -> None:  # type: ignore[no-untyped-def]
    store, _, backend, spy = served
    # stopwords only: no term left, so it is answered empty without a request
    texts = [*(QUERIES[i % len(QUERIES)] for i in range(N_QUERIES - 1)), "the of and"]
    hits, calls = searched(spy, lambda: backend.keyword_search(texts, 7, None))
    # Qdrant counts a query term once: "dog dog fish" is asked in two layers, summed (qdrant_backend.py)
    repeated = texts.count("dog dog fish")
    assert calls[0] == ("query_batch_points", N_QUERIES - 1 - repeated)  # the others: one full batch
    assert calls[-1] == ("query_batch_points", 2 * repeated)  # every layer of every repeating query
    assert_widened(calls[1:-1])
    bm25 = store.config.bm25
    docs = tokenize([d.full_text for d in store.documents], stopwords=bm25.stopwords, stemmer=bm25.stemmer)
    for text, (scores, rows) in zip(texts[:-1], hits[:-1], strict=True):
        terms = tokenize([text], stopwords=bm25.stopwords, stemmer=bm25.stemmer)[0]
        expected = hand_bm25(docs, terms, k1=bm25.k1, b=bm25.b, idf=qdrant_idf, repeats=True)
        assert_top(rows.tolist(), expected, 7)
        np.testing.assert_allclose(scores, expected[rows], rtol=1e-5)
    assert hits[-1][1].size == 0


def test_filtered_keyword_batch_keeps_the_filter(served) -> None:  # type: ignore[no-untyped-def]
    store, _, backend, spy = served
    allowed = store.metadata_mask("conversation", "c0")
    rows_allowed = np.flatnonzero(allowed).astype(np.int64)
    texts = [QUERIES[i % len(QUERIES)] for i in range(N_QUERIES)]
    hits, calls = searched(spy, lambda: backend.keyword_search(texts, 5, rows_allowed))
    assert [name for name, _ in calls[:2]] == ["query_batch_points", "query_batch_points"]
    assert calls[-1] == ("query_batch_points", 2 * texts.count("dog dog fish"))  # layers, one batch
    assert_widened(calls[2:-1])
    bm25 = store.config.bm25
    docs = tokenize([d.full_text for d in store.documents], stopwords=bm25.stopwords, stemmer=bm25.stemmer)
    for text, (_, rows) in zip(texts, hits, strict=True):
        terms = tokenize([text], stopwords=bm25.stopwords, stemmer=bm25.stemmer)[0]
        expected = hand_bm25(docs, terms, k1=bm25.k1, b=bm25.b, idf=qdrant_idf, repeats=True)
        assert_top(rows.tolist(), expected, 5, allowed)


def test_vector_queries_go_in_batches_and_equal_numpy_exact(served) -> None:  # type: ignore[no-untyped-def]
    store, embedder, backend, spy = served
    texts = [QUERIES[i % len(QUERIES)] + f" {'fish ' * (i % 3)}" for i in range(N_QUERIES)]
    vectors = embedder.encode(texts, kind="query")
    hits, calls = searched(spy, lambda: backend.vector_search(vectors, 6, None))
    assert "query_points" not in {name for name, _ in calls}
    assert calls[:2] == [("query_batch_points", BATCH), ("query_batch_points", N_QUERIES - BATCH)]
    assert_widened(calls[2:])
    matrix = np.asarray(store.embeddings, dtype=np.float32)
    for vector, (scores, rows) in zip(vectors, hits, strict=True):
        exact = (matrix * vector.astype(np.float32)).sum(axis=1)
        order = np.lexsort((np.arange(len(exact)), -exact))[:6]
        assert rows.tolist() == order.tolist()
        np.testing.assert_array_equal(scores, exact[order])
