"""BM25 and dense baselines over a real (small) store: batch == single, brute-force oracle,
store save/load round trip, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrievers import BM25Retriever, ContextStore, DenseRetriever, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from viking_eval.data import load_dataset

pytestmark = pytest.mark.needs_data  # every test here reads a shared dataset


@pytest.fixture(scope="module")
def adi(shared_datasets: Path):  # type: ignore[no-untyped-def]
    return load_dataset(str(shared_datasets / "adi"), "test")


@pytest.fixture(scope="module")
def store_and_embedder(adi):  # type: ignore[no-untyped-def]
    documents = list(adi.corpus.values())
    embedder = TfidfEmbedder(dim=64, seed=0).fit(
        [doc.full_text for doc in sorted(documents, key=lambda d: d.id)]
    )
    return build_store(documents, embedder, StoreConfig()), embedder


def _queries(adi) -> list[str]:  # type: ignore[no-untyped-def]
    return [query.text for query in adi.queries.values()]


def test_store_rows_sorted_by_id(store_and_embedder) -> None:  # type: ignore[no-untyped-def]
    store, _ = store_and_embedder
    assert store.doc_ids == sorted(store.doc_ids)
    assert len(store) == 82


@pytest.mark.parametrize("kind", ["bm25", "dense"])
def test_batch_equals_single(kind: str, store_and_embedder, adi) -> None:  # type: ignore[no-untyped-def]
    store, embedder = store_and_embedder
    retriever = (
        BM25Retriever(store) if kind == "bm25" else DenseRetriever(store, embedder, query_batch_size=7)
    )
    queries = _queries(adi)
    assert retriever.retrieve_batch(queries, 20) == [retriever.retrieve(query, 20) for query in queries]


def test_dense_equals_brute_force(store_and_embedder, adi) -> None:  # type: ignore[no-untyped-def]
    store, embedder = store_and_embedder
    retriever = DenseRetriever(store, embedder)
    matrix = embedder.encode([doc.full_text for doc in store.documents], kind="document")
    for query in _queries(adi)[:10]:
        vector = embedder.encode([query], kind="query")[0]
        scores = matrix.astype(np.float64) @ vector.astype(np.float64)
        expected = sorted(range(len(scores)), key=lambda row: (-scores[row], store.doc_ids[row]))[:10]
        got = retriever.retrieve(query, 10)
        assert [r.doc_id for r in got] == [store.doc_ids[row] for row in expected]
        np.testing.assert_allclose([r.score for r in got], scores[expected], rtol=1e-5, atol=1e-6)


def test_bm25_ranks_by_score_then_id_and_only_matching(store_and_embedder) -> None:  # type: ignore[no-untyped-def]
    store, _ = store_and_embedder
    results = BM25Retriever(store).retrieve("computer retrieval of information", 82)
    keys = [(-r.score, r.doc_id) for r in results]
    assert keys == sorted(keys)
    assert all(r.score > 0 for r in results)
    assert BM25Retriever(store).retrieve("the of and", 10) == []  # stopwords only: no match, no error


def test_store_save_load_round_trip(tmp_path: Path, store_and_embedder, adi) -> None:  # type: ignore[no-untyped-def]
    store, embedder = store_and_embedder
    store.save(tmp_path / "store")
    loaded = ContextStore.load(tmp_path / "store")
    assert loaded.doc_ids == store.doc_ids
    assert loaded.documents == store.documents
    queries = _queries(adi)
    assert BM25Retriever(loaded).retrieve_batch(queries, 10) == BM25Retriever(store).retrieve_batch(
        queries, 10
    )
    assert DenseRetriever(loaded, embedder).retrieve_batch(queries, 10) == DenseRetriever(
        store, embedder
    ).retrieve_batch(queries, 10)
    assert not list((tmp_path / "store").rglob("*.pkl"))


def test_bad_input(store_and_embedder) -> None:  # type: ignore[no-untyped-def]
    store, embedder = store_and_embedder
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        BM25Retriever(store).retrieve("x", 0)
    with pytest.raises(ValueError, match="non-empty string"):
        DenseRetriever(store, embedder).retrieve("   ", 5)
    with pytest.raises(ValueError, match=r"query_batch_size must be an integer in \[1, 65536\]"):
        DenseRetriever(store, embedder, query_batch_size=0)
    other = TfidfEmbedder(dim=8).fit(["alpha beta", "gamma delta", "beta gamma"])
    with pytest.raises(ValueError, match="not the one the store was built with"):
        DenseRetriever(store, other)
    with pytest.raises(ValueError, match="empty corpus"):
        build_store([], embedder)
    with pytest.raises(ValueError, match="duplicate document id"):
        build_store([Document("a", "x"), Document("a", "y")], embedder)
