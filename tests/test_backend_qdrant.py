"""store.backend=qdrant (retrievers/backends/qdrant_backend.py) in local mode (a folder, no
server): dense vectors with HasId filters, BM25 as sparse vectors with Modifier.IDF. No Qdrant
server can be installed on these machines, so the URL form is not exercised here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from backend_cases import (
    QUERIES,
    assert_top,
    check_chunked,
    check_every_family,
    check_vector_leg,
    chunked_store,
    corpus,
    embedder_for,
    family_store,
    hand_bm25,
    qdrant_idf,
)

from retrievers import BM25Retriever, DenseRetriever
from retrievers.backends import BackendConfig, BackendError, BackendLost, attach, open_backend
from retrievers.builders import build_store
from retrievers.filters import MetadataFilter
from retrievers.text import tokenize
from retrievers.types import Document


@pytest.fixture(scope="module")
def stores():  # type: ignore[no-untyped-def]
    return family_store(), chunked_store()


def config(tmp_path: Path, **values: object) -> BackendConfig:
    return BackendConfig.from_dict({"backend": "qdrant", "backend_url": str(tmp_path / "q"), **values})


def test_every_family_equals_the_local_run(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (store, embedder), (chunked, chunk_embedder) = stores
    backend = open_backend(config(tmp_path), store)
    assert check_every_family(backend, store, embedder) == 42
    check_vector_leg(backend, store, embedder)
    backend.close()
    check_chunked(open_backend(config(tmp_path, backend_name="chunks"), chunked), chunked, chunk_embedder)


def test_keyword_leg_is_bm25_with_qdrant_idf_computed_by_hand(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, _ = stores[0]
    served = attach(store, open_backend(config(tmp_path), store))
    bm25 = store.config.bm25
    texts = tokenize(
        [doc.full_text for doc in store.documents], stopwords=bm25.stopwords, stemmer=bm25.stemmer
    )
    mask = store.metadata_mask("conversation", "c0")
    for query in QUERIES:
        terms = tokenize([query], stopwords=bm25.stopwords, stemmer=bm25.stemmer)[0]
        expected = hand_bm25(texts, terms, k1=bm25.k1, b=bm25.b, idf=qdrant_idf, repeats=True)
        got = served.bm25.search([query], 7)[0]
        assert_top(got[1].tolist(), expected, 7)
        np.testing.assert_allclose(got[0], expected[got[1]], rtol=1e-5)
        np.testing.assert_allclose(served.bm25.scores(query), expected, rtol=1e-5, atol=1e-7)
        filtered = BM25Retriever(
            served, filters=MetadataFilter.from_dict({"metadata": {"conversation": "c0"}})
        )
        assert_top([store.row_of[r.doc_id] for r in filtered.retrieve(query, 7)], expected, 7, mask)


def test_written_once_other_stores_refused_unfinished_redone(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, embedder = stores[0]
    open_backend(config(tmp_path), store).close()
    again = open_backend(config(tmp_path), store)
    assert again.write(store) is False
    again.client.delete_collection("viking_meta")  # as if the writer died before its last step
    again.close()
    redone = open_backend(config(tmp_path), store)
    assert redone.client.count("viking_docs").count == len(store)
    check_vector_leg(redone, store, embedder)
    redone.close()
    with pytest.raises(
        BackendError, match=r"qdrant .* \(collection viking_docs\) holds another corpus"
    ) as error:
        open_backend(config(tmp_path), build_store(corpus(20, seed=9), embedder))
    assert "\n" not in str(error.value)


def test_hnsw_index_and_knobs(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, embedder = stores[0]
    served = attach(store, open_backend(config(tmp_path, backend_index="hnsw"), store))
    # local mode scans every point: HNSW settings change nothing there, the result is exact
    exact = DenseRetriever(store, embedder).retrieve_batch(QUERIES, 10)
    found = DenseRetriever(served, embedder, ef_search=16).retrieve_batch(QUERIES, 10)
    assert [[r.doc_id for r in hits] for hits in found] == [[r.doc_id for r in hits] for hits in exact]
    with pytest.raises(ValueError, match=r"nprobe=2 does not apply to store\.backend=qdrant"):
        DenseRetriever(served, embedder, nprobe=2)


def test_locked_folder_and_lost_collection(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, embedder = stores[0]
    backend = open_backend(config(tmp_path), store)
    with pytest.raises(BackendError, match=r"store\.backend=qdrant: cannot open"):
        open_backend(config(tmp_path), store)  # local mode: one process holds the folder
    served = attach(store, backend)
    backend.client.delete_collection("viking_docs")
    with pytest.raises(BackendLost, match=r"store\.backend=qdrant"):
        DenseRetriever(served, embedder).retrieve("cat", 3)


def test_ties_at_the_kth_place_go_to_the_lowest_rows(tmp_path: Path) -> None:
    docs = [Document(id=f"t{i:02d}", text="cat dog" if i % 2 else "sea hill") for i in range(30)]
    embedder = embedder_for(docs)
    store = build_store(docs, embedder)  # 15 identical vectors per text: every score tied
    served = attach(store, open_backend(config(tmp_path), store))
    local = [
        [(r.doc_id, r.score) for r in hits]
        for hits in DenseRetriever(store, embedder).retrieve_batch(["cat"], 5)
    ]
    other = [
        [(r.doc_id, r.score) for r in hits]
        for hits in DenseRetriever(served, embedder).retrieve_batch(["cat"], 5)
    ]
    assert [d for d, _ in local[0]] == ["t01", "t03", "t05", "t07", "t09"]
    assert other == local
