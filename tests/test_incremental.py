"""Incremental stores (issue 29, part 1): add/delete/update give what a fresh build gives.

Property tests: seeded random sequences of add / delete / update on small synthetic corpora
(static hashed vectors, tests/incremental_cases.py); after every step the changed store is
compared with ``build_store`` over the same documents: exact vector search and BM25 (scores and
order, bit for bit, with and without a mask), the documents, embeddings, times and (for a store
without tree and edges) the content key; edges by neighbour sets (weights to float32 rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
from incremental_cases import HashEmbedder, make_doc

from retrievers import Document, StoreConfig
from retrievers.builders import build_store
from retrievers.store import ChangeSettings, ContextStore

EMBEDDER = HashEmbedder()
QUERIES = ["apple banana", "kilo lima mike", "the and of", "running", "zulu yankee xray whiskey", "title 12"]


def _fresh(documents: dict[str, Document], config: StoreConfig) -> ContextStore:
    return build_store(list(documents.values()), EMBEDDER, config)


def _assert_same_search(changed: ContextStore, fresh: ContextStore, rng: np.random.Generator) -> None:
    assert list(changed.doc_ids) == list(fresh.doc_ids)
    assert np.array_equal(np.asarray(changed.embeddings), np.asarray(fresh.embeddings))
    vectors = EMBEDDER.encode(QUERIES, kind="query")
    mask = rng.random(len(fresh)) < 0.5
    for k in (1, 5, len(fresh) + 3):
        for use_mask in (None, mask):
            got = changed.exact_vectors.search(vectors, k, mask=use_mask)
            want = fresh.exact_vectors.search(vectors, k, mask=use_mask)
            for (gs, gr), (ws, wr) in zip(got, want, strict=True):
                assert np.array_equal(gr, wr) and np.array_equal(gs, ws)
            got = changed.bm25.search(QUERIES, k, mask=use_mask)
            want = fresh.bm25.search(QUERIES, k, mask=use_mask)
            for (gs, gr), (ws, wr) in zip(got, want, strict=True):
                assert np.array_equal(gr, wr) and np.array_equal(gs, ws)
    for query in QUERIES:
        assert np.array_equal(changed.bm25.scores(query), fresh.bm25.scores(query))


def _random_change(
    store: ContextStore, documents: dict[str, Document], rng: np.random.Generator, next_number: list[int]
) -> ContextStore:
    action = rng.choice(["add", "delete", "update", "add_front"])
    ids = sorted(documents)
    if action == "delete" and len(ids) > 5:
        gone = rng.choice(ids, size=int(rng.integers(1, 4)), replace=False).tolist()
        for doc_id in gone:
            del documents[doc_id]
        return store.delete(gone)
    if action == "update":
        chosen = rng.choice(ids, size=int(rng.integers(1, 4)), replace=False).tolist()
        made = [make_doc(rng, int(rng.integers(0, 99)), version=int(rng.integers(1, 99))) for _ in chosen]
        new = [
            Document(doc_id, doc.text, doc.title, doc.metadata)
            for doc_id, doc in zip(chosen, made, strict=True)
        ]
        documents.update({doc.id: doc for doc in new})
        return store.update(new, EMBEDDER)
    count = int(rng.integers(1, 8))
    if action == "add_front":  # ids that sort among the stored ones: rows shift
        numbers = [int(x) for x in rng.choice(np.arange(10000, 20000), size=count, replace=False)]
        new = [make_doc(rng, n) for n in numbers if f"d{n:05d}" not in documents]
        new = [Document("a" + doc.id, doc.text, doc.title, doc.metadata) for doc in new]
    else:
        new = [make_doc(rng, next_number[0] + i) for i in range(count)]
        next_number[0] += count
    new = [doc for doc in new if doc.id not in documents]
    documents.update({doc.id: doc for doc in new})
    return store.add(new, EMBEDDER)


@pytest.mark.parametrize(("seed", "method"), [(0, "lucene"), (1, "bm25l"), (2, "robertson"), (3, "bm25+")])
def test_random_changes_equal_a_fresh_build_bit_for_bit(seed: int, method: str) -> None:
    rng = np.random.default_rng(seed)
    config = StoreConfig.from_dict({"bm25": {"method": method}, "timestamps": {"fields": ["date"]}})
    documents = {doc.id: doc for doc in (make_doc(rng, n) for n in range(40))}
    store = _fresh(documents, config)
    next_number = [40]
    for step in range(8):
        store = _random_change(store, documents, rng, next_number)
        fresh = _fresh(documents, config)
        _assert_same_search(store, fresh, rng)
        assert store.content_key == fresh.content_key  # documents, vectors, times, settings
        assert np.array_equal(store.timestamps.epoch_seconds, fresh.timestamps.epoch_seconds, equal_nan=True)
        assert [version.version for version in store.history] == list(range(1, step + 3))
        assert store.history[-1].content_key == store.content_key
        assert store.history[-1].n_documents == len(documents)


def test_changes_leave_the_old_store_as_it_was() -> None:
    rng = np.random.default_rng(5)
    documents = [make_doc(rng, n) for n in range(30)]
    store = build_store(documents, EMBEDDER, StoreConfig())
    before = (list(store.doc_ids), store.bm25.scores("apple banana").copy(), store.content_key)
    store.add([make_doc(rng, 100)], EMBEDDER)
    store.delete(["d00003"])
    assert (list(store.doc_ids), store.content_key) == (before[0], before[2])
    assert np.array_equal(store.bm25.scores("apple banana"), before[1])
    assert store.history == ()


def test_saved_and_loaded_store_changes_exactly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(6)
    documents = {doc.id: doc for doc in (make_doc(rng, n) for n in range(30))}
    build_store(list(documents.values()), EMBEDDER, StoreConfig(), folder=tmp_path / "s")
    loaded = ContextStore.load(tmp_path / "s")
    assert loaded.bm25.counts is not None  # tf.npy and lengths.npy were saved
    new = [make_doc(rng, n) for n in range(30, 36)]
    documents.update({doc.id: doc for doc in new})
    changed = loaded.add(new, EMBEDDER).delete(["d00001", "d00031"])
    del documents["d00001"], documents["d00031"]
    _assert_same_search(changed, _fresh(documents, StoreConfig()), rng)
    changed.save(tmp_path / "t")
    reloaded = ContextStore.load(tmp_path / "t")
    assert reloaded.history == changed.history and reloaded.content_key == changed.content_key
    _assert_same_search(reloaded, _fresh(documents, StoreConfig()), rng)


def test_edges_after_changes_are_a_fresh_builds() -> None:
    rng = np.random.default_rng(7)
    config = StoreConfig.from_dict(
        {
            "edges": {
                "similar_to": {"k": 3, "min_sim": 0.2, "same_keys": ["conv"]},
                "sequence": {"group_keys": ["conv"], "order_key": "turn"},
                "mentions": {"terms_per_doc": 3, "max_fanout": 10},
            }
        }
    )
    documents = {doc.id: doc for doc in (make_doc(rng, n) for n in range(45))}
    store = _fresh(documents, config)
    next_number = [45]
    for _ in range(6):
        store = _random_change(store, documents, rng, next_number)
        fresh = _fresh(documents, config)

        def triples(s: ContextStore) -> dict[tuple[int, int, str], float]:
            edges = s.edges
            assert edges is not None
            names = [edges.relation_names[r] for r in np.asarray(edges.relation).tolist()]
            return {
                (a, b, name): w
                for a, b, name, w in zip(
                    edges.src.tolist(),
                    np.asarray(edges.dst).tolist(),
                    names,
                    np.asarray(edges.weight).tolist(),
                    strict=True,
                )
            }

        got, want = triples(store), triples(fresh)
        assert got.keys() == want.keys()
        assert max(abs(got[key] - want[key]) for key in want) <= 1e-6  # float32 rounding of a dot product


def test_refusals_name_what_is_wrong() -> None:
    rng = np.random.default_rng(8)
    store = build_store([make_doc(rng, n) for n in range(10)], EMBEDDER, StoreConfig())
    with pytest.raises(ValueError, match=r"'d00002' is already in the store: use update"):
        store.add([make_doc(rng, 2)], EMBEDDER)
    with pytest.raises(ValueError, match=r"not in the store, e\.g\. 'nope'"):
        store.delete(["nope"])
    with pytest.raises(ValueError, match="give the embedder"):
        store.add([make_doc(rng, 50)])
    with pytest.raises(ValueError, match="is not the store's"):
        other = HashEmbedder()
        other.name = "another"  # type: ignore[misc]
        store.add([make_doc(rng, 50)], other)
    with pytest.raises(ValueError, match="cannot remove every document"):
        store.delete(list(store.doc_ids))
    with pytest.raises(ValueError, match="tree_rebuild_fraction must be a number >= 0"):
        ChangeSettings(tree_rebuild_fraction=-1)
    chunked = build_store(
        [make_doc(rng, n) for n in range(5)], EMBEDDER, StoreConfig.from_dict({"chunking": {"size": 4}})
    )
    with pytest.raises(ValueError, match="not supported on chunked stores"):
        chunked.delete(["d00001"])
    given = np.zeros((2, EMBEDDER.dim), dtype=np.float32)
    with pytest.raises(ValueError, match=r"shape \(2, 32\), expected \(1, 32\)"):
        store.add([make_doc(rng, 60)], embeddings=given)


def test_bm25_without_counts_refuses_to_change(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from retrievers.index import BM25Index

    index = BM25Index.build(["one text here", "another text"])
    index.save(tmp_path / "b")
    (tmp_path / "b" / "tf.npy").unlink()
    loaded = BM25Index.load(tmp_path / "b")
    assert loaded.counts is None
    with pytest.raises(ValueError, match="saved without its term counts"):
        loaded.changed(np.ones(2, dtype=bool), np.asarray([2]), ["third text"])
