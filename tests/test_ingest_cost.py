"""What keeps a store change proportional to the change (issue 29, ingest cost of BM25 and edges),
each against an independent reference:

- BM25 scoring in blocks: the arrays bm25s's own ``index()`` makes, for every method, with
  blocks that cut terms anywhere; and its memory: no temporary as large as the index;
- the term union of a change (only the unseen terms placed) against ``sorted(set(...))``, and a
  changed index with new terms sorting before, among and after the old ones against a fresh build;
- :class:`~retrievers.text.TermIds` (new words stemmed in one call) against a word-by-word
  reference;
- edges: a change reads the groups its edge set remembers (only the new documents' metadata is
  read, never the whole column) and makes the edges the parse of every row makes.
"""

from __future__ import annotations

import tracemalloc
import zlib

import bm25s
import numpy as np
import pytest

import retrievers.index.bm25_counts as bm25_counts
from retrievers import Document, StoreConfig
from retrievers.builders import build_store, edge_changes, edge_groups
from retrievers.builders.edge_groups import RowGroups, group_name
from retrievers.index import BM25Index
from retrievers.index.bm25 import BM25_METHODS
from retrievers.store import ContextStore
from retrievers.text import TermIds, _stemmer, stopword_set, tokenize

VOCABULARY = ["amber", "birch", "cedar", "running", "runs", "runner", "the", "and", "p53", "x_1"]


def _texts(n_docs: int, seed: int, words: list[str] = VOCABULARY) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, int(rng.integers(0, 12))).tolist()) for _ in range(n_docs)]


def _reference(texts: list[str], **params: object) -> bm25s.BM25:
    tokens = tokenize(texts)
    vocab = {term: i for i, term in enumerate(sorted({term for doc in tokens for term in doc}))}
    model = bm25s.BM25(dtype="float32", int_dtype="int32", backend="numpy", csc_backend="numpy", **params)  # type: ignore[arg-type]
    model.index(
        ([[vocab[t] for t in doc] for doc in tokens], vocab), create_empty_token=False, show_progress=False
    )
    return model


def _same_arrays(ours: BM25Index, theirs: bm25s.BM25) -> None:
    model = ours._model
    for key in ("data", "indices", "indptr"):
        assert np.array_equal(model.scores[key], theirs.scores[key]), key
    assert model.vocab_dict == theirs.vocab_dict
    if theirs.nonoccurrence_array is None:
        assert model.nonoccurrence_array is None
    else:
        assert np.array_equal(model.nonoccurrence_array, theirs.nonoccurrence_array)


@pytest.mark.parametrize("method", BM25_METHODS)
@pytest.mark.parametrize("block", [1, 5, 64])
def test_scoring_in_blocks_equals_bm25s(method: str, block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_counts, "_SCORE_BLOCK", block)  # blocks end inside terms, at their ends
    texts = _texts(80, seed=block)
    params = {"method": method, "k1": 1.2, "b": 0.7, "delta": 0.6}
    _same_arrays(BM25Index.build(texts, **params), _reference(texts, **params))  # type: ignore[arg-type]


def test_scoring_holds_no_temporary_as_large_as_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_counts, "_SCORE_BLOCK", 256)
    texts = [" ".join(f"w{(i * 7 + j) % 400}" for j in range(60)) for i in range(400)]
    counts = BM25Index.build(texts).counts
    assert counts is not None and counts.rows.size > 20_000
    for method in ("lucene", "bm25+"):
        params = BM25Index.build(texts[:2], method=method).params
        tracemalloc.start()
        data, _ = bm25_counts.score_counts(counts, params)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        # the scores themselves, per-row and per-term arrays, and a few blocks of float64
        allowed = data.nbytes + 16 * counts.n_rows + 64 * len(counts.terms) + 10 * 8 * 256
        assert peak <= allowed, (method, peak, allowed)


def test_the_union_of_terms_places_only_the_unseen_ones() -> None:
    old = ("bb", "dd", "ff")
    vocab = {term: i for i, term in enumerate(old)}
    union, old_map, new_map = bm25_counts._union(old, vocab, ["ff", "aa", "ee", "gg", "bb", "cc"])
    assert union == ("aa", "bb", "cc", "dd", "ee", "ff", "gg")
    assert old_map.tolist() == [1, 3, 5]
    assert new_map.tolist() == [5, 0, 4, 6, 1, 2]
    same, identity, found = bm25_counts._union(old, vocab, ["dd", "bb"])
    assert same == old and identity.tolist() == [0, 1, 2] and found.tolist() == [1, 0]
    rng = np.random.default_rng(0)
    for _ in range(20):
        pool = [f"t{i:02d}" for i in range(40)]
        old_terms = tuple(sorted(rng.choice(pool, int(rng.integers(1, 30)), replace=False).tolist()))
        new_terms = rng.choice(pool, int(rng.integers(0, 30)), replace=False).tolist()
        union, old_map, new_map = bm25_counts._union(
            old_terms, {t: i for i, t in enumerate(old_terms)}, new_terms
        )
        assert list(union) == sorted(set(old_terms) | set(new_terms))
        assert [union[i] for i in old_map.tolist()] == list(old_terms)
        assert [union[i] for i in new_map.tolist()] == new_terms


@pytest.mark.parametrize("method", ["lucene", "bm25l"])
def test_a_change_bringing_new_terms_equals_a_fresh_build(method: str) -> None:
    texts = _texts(40, seed=1, words=["delta", "golf", "kilo", "the"])
    added = ["alpha golf", "mike zulu delta", "hotel kilo kilo", "the and"]  # before, among, after
    params = {"method": method, "k1": 1.1, "b": 0.5, "delta": 0.4}
    index = BM25Index.build(texts, **params)  # type: ignore[arg-type]
    appended = index.changed(np.ones(40, dtype=bool), np.arange(40, 44), added)
    _same_arrays(appended, _reference(texts + added, **params))
    keep = np.ones(40, dtype=bool)
    keep[[0, 7]] = False  # rows removed and new ones among the kept
    middle = index.changed(keep, np.asarray([0, 5, 20, 41]), added)
    rows = [text for text, kept in zip(texts, keep.tolist(), strict=True) if kept]
    for row, text in zip([0, 5, 20, 41], added, strict=True):
        rows.insert(row, text)
    _same_arrays(middle, _reference(rows, **params))


def _word_by_word(
    chunks: list[list[str]], stopwords: str | None, stemmer: str | None
) -> tuple[list[int], list[str]]:
    """Term ids in order of first appearance, one word at a time (the tokenizer's steps)."""
    stop = stopword_set(stopwords)
    stem = _stemmer(stemmer).stemWord if stemmer is not None else None
    ids: dict[str, int] = {}
    out: list[int] = []
    for chunk in chunks:
        for text in chunk:
            for word in text.lower().replace(",", " ").split():
                if len(word) < 2 or word in stop:
                    continue
                term = stem(word) if stem is not None else word
                out.append(ids.setdefault(term, len(ids)))
    return out, list(ids)


@pytest.mark.parametrize(("stopwords", "stemmer"), [("en", "english"), (None, None), ("en", None)])
def test_term_ids_number_terms_by_first_appearance(stopwords: str | None, stemmer: str | None) -> None:
    chunks = [
        ["Running runs, the runner", "and p53 RUNNING"],
        [],
        ["x_1 the runs amber", "amber cedar runner running"],
        ["birch, runs"],
    ]
    encoder = TermIds(stopwords=stopwords, stemmer=stemmer)
    got: list[int] = []
    for chunk in chunks:
        ids, counts = encoder.encode(chunk)
        assert counts.sum() == ids.size and counts.size == len(chunk)
        got += ids.tolist()
    want, terms = _word_by_word(chunks, stopwords, stemmer)
    assert got == want
    assert encoder.terms == terms


# ---------------------------------------------------------------------------- edges


class _Random:
    name, dim = "random-12", 12

    def encode(self, texts: list[str], *, kind: str) -> np.ndarray:
        out = np.stack(
            [np.random.default_rng(zlib.crc32(text.encode())).standard_normal(self.dim) for text in texts]
        ).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


EMBEDDER = _Random()
EDGES = {
    "similar_to": {"k": 3, "min_sim": 0.0, "same_keys": ["conv"]},
    "sequence": {"group_keys": ["conv", "part"]},
}


def _doc(number: int, conv: str | None) -> Document:
    metadata: dict[str, object] = {"part": number % 2}
    if conv is not None:
        metadata["conv"] = conv
    return Document(f"d{number:04d}", f"memory {number} of {conv}", metadata=metadata)


def _same_edges(changed: ContextStore, fresh: ContextStore) -> None:
    """The same edges, weights to float32 rounding (a cosine from a product of another shape)."""
    got, want = changed.edges, fresh.edges
    assert got is not None and want is not None
    for name in ("indptr", "dst", "relation"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert np.allclose(got.weight, want.weight, rtol=0, atol=1e-6)


def test_a_change_reads_only_the_new_documents_metadata(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = StoreConfig.from_dict({"edges": EDGES})
    documents = [_doc(n, None if n % 9 == 4 else f"c{n % 3}") for n in range(60)]  # some lack "conv"
    store = build_store(documents, EMBEDDER, config)
    parsed: list[int] = []
    real_parse = edge_changes.decode_metadata_column

    def counting(column):  # type: ignore[no-untyped-def]
        parsed.append(1)
        return real_parse(column)

    monkeypatch.setattr(edge_changes, "decode_metadata_column", counting)
    changes = [
        ([_doc(60, "c1"), _doc(61, "new"), _doc(62, None)], []),  # a new group, a row without one
        ([_doc(63, "c0")], [doc.id for doc in documents if doc.metadata.get("conv") == "new"] + ["d0061"]),
        ([Document("d0001b", "among the others", metadata={"conv": "c2", "part": 1})], ["d0002"]),
    ]
    current = list(documents)
    for added, removed in changes:
        store = (store.delete(removed) if removed else store).add(added, EMBEDDER)
        current = sorted([doc for doc in current if doc.id not in removed] + added, key=lambda doc: doc.id)
        assert parsed == []  # the groups came from the edge set: no row's metadata parsed
        fresh = build_store(current, EMBEDDER, config)
        _same_edges(store, fresh)
        assert store.edges is not None and fresh.edges is not None
        for keys in (("conv",), ("conv", "part")):
            kept = edge_groups.recall(store.edges, keys)
            built = edge_groups.recall(fresh.edges, keys)
            assert kept is not None and built is not None
            assert np.array_equal(kept.code, built.code) and kept.names == built.names
    # a store read from disk has no groups kept: its first change parses the column, once
    store.save(tmp_path / "s")
    loaded = ContextStore.load(tmp_path / "s")
    assert loaded.edges is not None and edge_groups.recall(loaded.edges, ("conv",)) is None
    once = loaded.add([_doc(70, "c2")], EMBEDDER)
    assert parsed == [1]
    twice = once.add([_doc(71, "c1")], EMBEDDER)
    assert parsed == [1]
    _same_edges(twice, build_store([*current, _doc(70, "c2"), _doc(71, "c1")], EMBEDDER, config))


def test_row_groups_after_a_change_are_the_groups_of_the_rows() -> None:
    names_of_rows = [("a",), None, ("c",), ("a",), ("b",)]
    groups = RowGroups.of_names(names_of_rows)
    assert groups.names == (("a",), ("b",), ("c",)) and groups.code.tolist() == [0, -1, 2, 0, 1]
    # rows 2 and 4 removed (group b empties, c keeps none), two rows added at 0 and 3
    old_to_new = np.asarray([1, 2, -1, 4, -1], dtype=np.int64)
    after = groups.changed(old_to_new, np.asarray([0, 3]), [("0",), None])
    want = RowGroups.of_names([("0",), ("a",), None, None, ("a",)])
    assert after.names == want.names == (("0",), ("a",))
    assert after.code.tolist() == want.code.tolist() == [0, 1, -1, -1, 1]
    assert group_name({"x": 1, "y": "b"}, ["y", "x"]) == ("b", "1")
    assert group_name({"x": 1}, ["x", "y"]) is None


@pytest.mark.parametrize("order_key", [None, "turn"])
def test_a_sequence_change_links_only_around_the_new_rows(
    order_key: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sequence: dict[str, object] = {"group_keys": ["conv"]}
    if order_key is not None:
        sequence["order_key"] = order_key
    config = StoreConfig.from_dict({"edges": {"sequence": sequence}})

    def doc(number: int, turn: float) -> Document:
        return Document(f"d{number:03d}", f"turn {number}", metadata={"conv": f"c{number % 2}", "turn": turn})

    documents = [doc(n, float(n)) for n in range(40)]  # two chains of 20
    store = build_store(documents, None, config)
    fresh_links: list[int] = []
    real = edge_changes._merged

    def counting(n_rows, src, dst, weight, relation, names, links):  # type: ignore[no-untyped-def]
        fresh_links.append(
            sum(s.size for s, r in zip(links.sources, links.relations, strict=True) if r == "sequence")
        )
        return real(n_rows, src, dst, weight, relation, names, links)

    monkeypatch.setattr(edge_changes, "_merged", counting)
    # two documents of chain c0: after its end by id; by turn, one among the others (turn 7.5)
    added = [doc(40, 40.0), doc(42, 7.5)]
    changed = store.add(added, None)
    # row order: both at the chain's end (2 links); turn order: 40 at the end (1 link),
    # 42 between turns 6 and 8 (2 links, the kept 6 -> 8 edge dropped)
    assert fresh_links == ([2] if order_key is None else [3])
    fresh = build_store([*documents, *added], None, config)
    _same_edges(changed, fresh)
    after = changed.delete(["d008", "d040"])  # the chain closes over the removed rows
    # row order: 6 -> 10 and 38 -> 42; turn order: 7.5 -> 10 (40 was the end: 38 ends it now)
    assert fresh_links[1:] == ([2] if order_key is None else [1])
    _same_edges(
        after, build_store([d for d in [*documents, *added] if d.id not in ("d008", "d040")], None, config)
    )
