"""store.backend=libsql (retrievers/backends/libsql_backend.py): one file, FTS5 bm25(), F32_BLOB
vectors (exact vector_distance_cos; libsql_vector_idx + vector_top_k)."""

from __future__ import annotations

from pathlib import Path

import libsql
import numpy as np
import pytest
from backend_cases import (
    QUERIES,
    check_chunked,
    check_every_family,
    check_vector_leg,
    chunked_store,
    corpus,
    family_store,
    fts5_idf,
    hand_bm25,
    top,
)

from retrievers import BM25Retriever, DenseRetriever
from retrievers.backends import BackendConfig, BackendError, BackendLost, attach, open_backend
from retrievers.builders import build_store
from retrievers.filters import MetadataFilter
from retrievers.store import StoreConfig
from retrievers.text import words


@pytest.fixture(scope="module")
def stores():  # type: ignore[no-untyped-def]
    return family_store(), chunked_store()


def config(tmp_path: Path, **values: object) -> BackendConfig:
    return BackendConfig.from_dict({"backend": "libsql", "backend_url": str(tmp_path / "s.db"), **values})


def test_every_family_equals_the_local_run(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (store, embedder), (chunked, chunk_embedder) = stores
    backend = open_backend(config(tmp_path), store)
    assert check_every_family(backend, store, embedder) == 2 * (5 * 4 + 1)
    check_vector_leg(backend, store, embedder)
    other = open_backend(config(tmp_path, backend_name="chunks"), chunked)
    check_chunked(other, chunked, chunk_embedder)


def test_keyword_leg_is_fts5_bm25_computed_by_hand(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, _ = stores[0]
    served = attach(store, open_backend(config(tmp_path), store))
    texts = [words(doc.full_text) for doc in store.documents]
    mask = store.metadata_mask("conversation", "c2")
    for query in QUERIES:
        expected = hand_bm25(texts, words(query), k1=1.2, b=0.75, idf=fts5_idf)  # FTS5's constants
        got = served.bm25.search([query], 7)[0]
        assert got[1].tolist() == top(expected, 7)
        np.testing.assert_allclose(got[0], expected[got[1]], rtol=1e-6)
        np.testing.assert_allclose(served.bm25.scores(query), expected, rtol=1e-6, atol=1e-9)
        filtered = BM25Retriever(
            served, filters=MetadataFilter.from_dict({"metadata": {"conversation": "c2"}})
        )
        assert [r.doc_id for r in filtered.retrieve(query, 7)] == [
            store.doc_ids[r] for r in top(expected, 7, mask)
        ]


def test_written_once_then_reused_and_other_stores_refused(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, embedder = stores[0]
    first = open_backend(config(tmp_path), store)
    first.close()
    again = open_backend(config(tmp_path), store)
    assert again.write(store) is False  # already there: not written again
    again.close()
    other_corpus = build_store(corpus(40, seed=5), embedder)
    with pytest.raises(BackendError, match=r"holds another corpus \(96 rows") as error:
        open_backend(config(tmp_path), other_corpus)
    assert "\n" not in str(error.value)
    docs = list(store.documents)
    wider = build_store(docs, type(embedder)(dim=8, seed=0).fit([d.full_text for d in docs]))
    with pytest.raises(BackendError, match="vectors of another dimension"):
        open_backend(config(tmp_path), wider)
    restemmed = build_store(docs, embedder, StoreConfig.from_dict({"bm25": {"k1": 1.5}}))
    with pytest.raises(BackendError, match="a stale store of this corpus"):
        open_backend(config(tmp_path), restemmed)


def test_an_unfinished_write_is_redone(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, embedder = stores[0]
    open_backend(config(tmp_path), store).close()
    db = libsql.connect(str(tmp_path / "s.db"))
    db.execute("DROP TABLE viking_meta")  # as if the writer died before its last statement
    db.execute("DELETE FROM viking_docs WHERE row > 10")
    db.commit()
    backend = open_backend(config(tmp_path), store)
    assert len(backend._run("SELECT row FROM viking_docs")) == len(store)
    check_vector_leg(backend, store, embedder)


def test_vector_index_is_searched_and_refuses_a_filter(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, embedder = stores[0]
    backend = open_backend(config(tmp_path, backend_index="vector_idx"), store)
    served = attach(store, backend)
    exact = DenseRetriever(store, embedder).retrieve_batch(QUERIES, 10)
    found = DenseRetriever(served, embedder).retrieve_batch(QUERIES, 10)
    recall = np.mean(
        [len({r.doc_id for r in a} & {r.doc_id for r in b}) / 10 for a, b in zip(exact, found, strict=True)]
    )
    assert recall >= 0.8 and all(len(hits) == 10 for hits in found)
    assert backend._run("SELECT name FROM sqlite_master WHERE name = 'viking_vidx'")
    with pytest.raises(BackendError, match="vector_idx cannot filter inside its vector search"):
        DenseRetriever(
            served, embedder, filters=MetadataFilter.from_dict({"metadata": {"conversation": "c1"}})
        )
    with pytest.raises(ValueError, match=r"ef_search=8 does not apply to store\.backend=libsql"):
        DenseRetriever(served, embedder, ef_search=8)


def test_bad_location_and_lost_database(stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, _ = stores[0]
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(BackendError, match=r"store\.backend=libsql: cannot open .*dir.db"):
        open_backend(BackendConfig(backend="libsql", backend_url=str(tmp_path / "dir.db")), store)
    backend = open_backend(config(tmp_path), store)
    served = attach(store, backend)
    backend.db.execute("DROP TABLE viking_fts")  # the database changed under a running service
    with pytest.raises(BackendLost, match=r"store\.backend=libsql"):
        BM25Retriever(served).retrieve("cat", 5)
