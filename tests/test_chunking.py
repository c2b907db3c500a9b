"""Parent-child chunks: windows by hand, chunked stores (rows, parents, save/load, cache key),
parent resolution by hand, and document-level BM25 / dense retrieval over chunks checked against
a full-depth oracle (including a tie at the top-k boundary that a shallow read gets wrong)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from retrievers import BM25Retriever, ContextStore, DenseRetriever, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.builders.chunking import chunk_documents, chunk_text
from retrievers.parents import resolve_parents, search_documents
from retrievers.store import ChunkingConfig
from viking_eval.data import load_dataset


def test_windows_by_hand_keep_the_original_text() -> None:
    text = "Alpha beta,  gamma (delta) epsilon.\nzeta eta"
    # 7 tokens; size 3, overlap 1 -> stride 2: tokens 0-2, 2-4, 4-6
    assert chunk_text(text, ChunkingConfig(size=3, overlap=1)) == [
        "Alpha beta,  gamma",
        "gamma (delta) epsilon.",
        "epsilon.\nzeta eta",
    ]
    # no overlap: 0-2, 3-5, 6
    assert chunk_text(text, ChunkingConfig(size=3, overlap=0)) == [
        "Alpha beta,  gamma",
        "(delta) epsilon.\nzeta",
        "eta",
    ]
    assert chunk_text(text, ChunkingConfig(size=7)) == [text]
    assert chunk_text("  ", ChunkingConfig(size=4)) == [""]
    # the window that reaches the last token is the last one (no tail chunk inside the previous)
    assert chunk_text("a b c d", ChunkingConfig(size=3, overlap=2)) == ["a b c", "b c d"]


def test_chunking_config_is_validated() -> None:
    with pytest.raises(ValueError, match=r"chunking.size must be an integer in \[1, 100000\]"):
        ChunkingConfig(size=0)
    with pytest.raises(
        ValueError, match=r"chunking.overlap must be an integer in \[0, size - 1\] = \[0, 127\]"
    ):
        ChunkingConfig(size=128, overlap=128)
    with pytest.raises(ValueError, match=r"unknown store.chunking key\(s\) \['stride'\]"):
        ChunkingConfig.from_dict({"size": 4, "stride": 2})
    with pytest.raises(ValueError, match=r"unknown store key\(s\) \['chunks'\]"):
        StoreConfig.from_dict({"chunks": {"size": 4}})


def test_chunks_keep_title_and_metadata_and_name_their_parent() -> None:
    doc = Document("d7", "one two three four five", title="Title", metadata={"year": 2020})
    chunks = chunk_documents([doc], ChunkingConfig(size=2, overlap=0))
    assert [chunk.id for chunk in chunks] == ["d7#0", "d7#1", "d7#2"]
    assert [chunk.text for chunk in chunks] == ["one two", "three four", "five"]
    assert chunks[1].full_text == "Title three four"
    assert chunks[2].metadata == {"year": 2020, "parent_id": "d7", "chunk": 2}


class CountEmbedder:
    """A deterministic 3-d embedder: counts of the letters a, b, c (L2-normalised)."""

    name = "count"
    dim = 3

    def encode(self, texts, *, kind):  # type: ignore[no-untyped-def]
        rows = np.asarray([[text.count(ch) for ch in "abc"] for text in texts], dtype=np.float32) + 1e-3
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _small_chunked_store() -> ContextStore:
    docs = [
        Document("y", "aaa bbb ccc aaa", metadata={"k": "v"}),
        Document("x", "ccc ccc"),
        Document("x b", "bbb"),  # sorts before "x#0" (space < '#'): row order is not parent order
    ]
    return build_store(docs, CountEmbedder(), StoreConfig.from_dict({"chunking": {"size": 2, "overlap": 1}}))


def test_chunked_store_rows_parents_and_round_trip(tmp_path: Path) -> None:
    store = _small_chunked_store()
    assert store.chunked
    assert store.doc_ids == ["x b#0", "x#0", "y#0", "y#1", "y#2"]
    assert store.parent_ids == ["x", "x b", "y"]
    assert store.parent_of.tolist() == [1, 0, 2, 2, 2]
    assert [doc.text for doc in store.documents[2:]] == ["aaa bbb", "bbb ccc", "ccc aaa"]
    assert store.documents[3].metadata == {"k": "v", "parent_id": "y", "chunk": 1}
    assert store.parent_documents[2].text == "aaa bbb ccc aaa"
    store.save(tmp_path / "store")
    loaded = ContextStore.load(tmp_path / "store")
    assert loaded.chunked and loaded.parent_ids == store.parent_ids
    assert loaded.parent_of.tolist() == store.parent_of.tolist()
    assert loaded.config.chunking == ChunkingConfig(size=2, overlap=1)
    for query in ("aaa", "ccc bbb"):
        assert BM25Retriever(loaded).retrieve(query, 3) == BM25Retriever(store).retrieve(query, 3)


def test_unchunked_store_has_identity_parents() -> None:
    assert StoreConfig().to_dict()["chunking"] is None
    assert StoreConfig.from_dict({"chunking": {"size": 8}}).to_dict()["chunking"] == {"size": 8, "overlap": 0}
    store = build_store([Document("b", "bbb"), Document("a", "aaa")], CountEmbedder())
    assert not store.chunked and store.parent_ids == store.doc_ids == ["a", "b"]
    assert store.parent_of.tolist() == [0, 1]


def test_resolve_parents_by_hand() -> None:
    parent_of = np.array([0, 0, 1, 2, 2, 1])  # rows 0,1 -> parent 0; rows 2,5 -> 1; rows 3,4 -> 2
    rows = np.array([4, 0, 2, 1, 5, 3])
    scores = np.array([0.5, 0.9, 0.7, 0.3, 0.7, 0.5])
    hits = resolve_parents(parent_of, rows, scores)
    # parent 0: best 0.9 (row 0); parent 1: 0.7 at rows 2 and 5 -> row 2; parent 2: 0.5 at rows 3 and 4 -> row 3
    assert hits.parents.tolist() == [0, 1, 2]
    assert hits.scores.tolist() == [0.9, 0.7, 0.5]
    assert hits.rows.tolist() == [0, 2, 3]
    tie = resolve_parents(np.array([1, 0]), np.array([0, 1]), np.array([0.4, 0.4]))
    assert tie.parents.tolist() == [0, 1]  # equal scores: parent index (doc id) order, not row order


def test_search_documents_reads_past_a_tie_at_the_boundary() -> None:
    parent_of = np.array([1, 2, 0])  # row 0 -> P1, row 1 -> P2, row 2 -> P0
    scores = np.array([5.0, 4.0, 4.0])
    reads: list[int] = []

    def search(picked, k):  # type: ignore[no-untyped-def]
        reads.append(k)
        order = np.lexsort((np.arange(3), -scores))[:k]
        return [(scores[order], order.astype(np.int64)) for _ in picked]

    (hits,) = search_documents(search, 1, 2, parent_of, first_fetch=2, growth=2)
    # after 2 chunks the 2nd document (P2, 4.0) ties with the last chunk read: read on; P0 (4.0)
    # then wins the tie by document order
    assert hits.parents.tolist() == [1, 0] and hits.scores.tolist() == [5.0, 4.0]
    assert reads == [2, 4]


@pytest.fixture(scope="module")
def adi_chunked(shared_datasets: Path):  # type: ignore[no-untyped-def]
    adi = load_dataset(str(shared_datasets / "adi"), "test")
    documents = list(adi.corpus.values())
    embedder = TfidfEmbedder(dim=32, seed=0).fit([d.full_text for d in sorted(documents, key=lambda d: d.id)])
    store = build_store(documents, embedder, StoreConfig.from_dict({"chunking": {"size": 12, "overlap": 4}}))
    return adi, store, embedder


def _oracle(store: ContextStore, rows: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[str, float]]:
    best: dict[str, float] = {}
    for row, score in zip(rows.tolist(), scores.tolist(), strict=True):
        parent = store.parent_ids[store.parent_of[row]]
        best[parent] = max(best.get(parent, -np.inf), score)
    return sorted(best.items(), key=lambda pair: (-pair[1], pair[0]))[:k]


@pytest.mark.needs_data
def test_flat_retrievers_rank_documents_by_their_best_chunk(adi_chunked) -> None:  # type: ignore[no-untyped-def]
    adi, store, embedder = adi_chunked
    assert len(store) > 2 * len(store.parent_ids)  # several chunks per document
    bm25, dense = BM25Retriever(store), DenseRetriever(store, embedder)
    queries = [query.text for query in adi.queries.values()]
    for query in queries[:15]:
        ((bm25_scores, bm25_rows),) = store.bm25.search([query], len(store))  # every matching chunk
        got = [(r.doc_id, r.score) for r in bm25.retrieve(query, 10)]
        assert got == _oracle(store, bm25_rows, bm25_scores, 10)  # the same index: the same floats
        ((dense_scores, dense_rows),) = store.vectors.search(
            embedder.encode([query], kind="query"), len(store)
        )
        got = [(r.doc_id, r.score) for r in dense.retrieve(query, 10)]
        assert got == _oracle(store, dense_rows, dense_scores.astype(np.float64), 10)
    result = dense.retrieve(queries[0], 1)[0]
    assert store.parent_ids[store.parent_of[store.row_of[result.provenance["chunk_id"]]]] == result.doc_id
    assert bm25.retrieve_batch(queries, 10) == [bm25.retrieve(query, 10) for query in queries]
    assert dense.retrieve_batch(queries, 10) == [dense.retrieve(query, 10) for query in queries]


def test_a_stores_row_count_is_the_number_of_chunks_the_builder_makes() -> None:
    """StoreConfig.n_rows (the vector index pre-flight counts rows without building) and
    chunk_documents share one window definition (ChunkingConfig.windows): equal counts for every
    size/overlap on texts of 0 to 30 tokens."""
    rng = random.Random(0)
    docs = [
        Document(id=str(i), text="  ".join("w" * rng.randint(1, 3) for _ in range(rng.randint(0, 30))))
        for i in range(40)
    ]
    for size in (1, 2, 3, 5, 8, 31):
        for overlap in range(size):
            config = ChunkingConfig(size=size, overlap=overlap)
            assert StoreConfig(chunking=config).n_rows(docs) == len(chunk_documents(docs, config))
