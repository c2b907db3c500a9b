"""BM25 built in chunks with integer term ids, and searched over postings only (issue 17).

Oracles: bm25s's own ``index()`` (the arrays must be equal value for value, for every scoring
method) and a brute-force search over ``scores()`` (every document's score, matched documents
only, ordered by score desc then row asc).
"""

from __future__ import annotations

import bm25s
import numpy as np
import pytest

import retrievers.index.bm25 as bm25_module
from retrievers.index import BM25Index
from retrievers.index.bm25 import BM25_METHODS
from retrievers.text import TermIds, tokenize

WORDS = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma",
    "running", "runs", "runner", "the", "and", "of", "caf\u00e9", "na\u00efve", "p53", "x_1",
]  # fmt: skip


def corpus(n_docs: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    weights /= weights.sum()
    texts = []
    for i in range(n_docs):
        length = int(rng.integers(0, 30))
        texts.append(" ".join(WORDS[j] for j in rng.choice(len(WORDS), size=length, p=weights)))
        if i % 17 == 0:
            texts[-1] = texts[-1].upper() + " The, AND!"
    texts += ["", "the and of", "a", "unique words here", "unique words here"]  # no terms; a tie
    return texts


def bm25s_reference(texts: list[str], **params: object) -> bm25s.BM25:
    tokens = tokenize(texts)
    vocab = {term: i for i, term in enumerate(sorted({term for doc in tokens for term in doc}))}
    model = bm25s.BM25(dtype="float32", int_dtype="int32", backend="numpy", csc_backend="numpy", **params)  # type: ignore[arg-type]
    model.index(
        ([[vocab[term] for term in doc] for doc in tokens], vocab),
        create_empty_token=False,
        show_progress=False,
    )
    return model


@pytest.mark.parametrize("method", BM25_METHODS)
def test_the_index_equals_bm25s_value_for_value(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_module, "_BUILD_CHUNK", 7)  # many chunks, cut anywhere
    texts = corpus(300)
    ours = BM25Index.build(texts, method=method, k1=1.3, b=0.6, delta=0.7)._model
    theirs = bm25s_reference(texts, method=method, k1=1.3, b=0.6, delta=0.7)
    for key in ("data", "indices", "indptr"):
        assert ours.scores[key].dtype == theirs.scores[key].dtype, key
        assert np.array_equal(ours.scores[key], theirs.scores[key]), key
    assert ours.scores["num_docs"] == theirs.scores["num_docs"]
    assert ours.vocab_dict == theirs.vocab_dict
    if theirs.nonoccurrence_array is None:
        assert ours.nonoccurrence_array is None
    else:
        assert np.array_equal(ours.nonoccurrence_array, theirs.nonoccurrence_array)


def test_chunk_size_does_not_change_the_index(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = corpus(200, seed=3)
    whole = BM25Index.build(texts)._model.scores
    monkeypatch.setattr(bm25_module, "_BUILD_CHUNK", 1)
    one_by_one = BM25Index.build(texts)._model.scores
    assert all(np.array_equal(whole[key], one_by_one[key]) for key in ("data", "indices", "indptr"))


@pytest.mark.parametrize(("stopwords", "stemmer"), [("en", "english"), (None, None), ("en", None)])
def test_term_ids_are_the_tokenizer_in_integers(stopwords: str | None, stemmer: str | None) -> None:
    texts = corpus(60, seed=1)
    encoder = TermIds(stopwords=stopwords, stemmer=stemmer)
    expected = tokenize(texts, stopwords=stopwords, stemmer=stemmer)
    got: list[list[str]] = []
    for start in range(0, len(texts), 11):  # the vocabulary grows across chunks
        ids, counts = encoder.encode(texts[start : start + 11], first=start)
        assert ids.dtype == np.int32 and counts.dtype == np.int64 and counts.sum() == ids.size
        ends = np.cumsum(counts)
        got += [
            [encoder.terms[t] for t in ids[end - count : end]]
            for count, end in zip(counts, ends, strict=True)
        ]
    assert got == expected
    with pytest.raises(ValueError, match=r"texts\[12\] must be a string"):
        encoder.encode(["ok", 3], first=11)  # type: ignore[list-item]


def brute_force(
    index: BM25Index, query: str, k: int, mask: np.ndarray | None
) -> tuple[list[float], list[int]]:
    """Every matched document (one holding a query term), by score desc then row asc."""
    terms = {term for term in tokenize([query])[0]}
    matched = np.array([bool(terms & set(doc)) for doc in tokenize(TEXTS_FOR_SEARCH)])
    if mask is not None:
        matched &= mask
    scores = index.scores(query)
    rows = [row for row in np.lexsort((np.arange(index.size), -scores)) if matched[row]][:k]
    return [float(scores[row]) for row in rows], [int(row) for row in rows]


TEXTS_FOR_SEARCH = corpus(400, seed=2)
QUERIES = [
    "alpha", "sigma", "kappa lambda", "alpha beta gamma delta", "the and of", "unknown words",
    "running runner runs", "alpha alpha beta", "caf\u00e9 p53", "x_1 zeta theta epsilon kappa sigma lambda",
    "unique words here", "ALPHA, beta!",
]  # fmt: skip


@pytest.mark.parametrize(
    ("merge_factor", "dense_factor"),
    [(0, 0), (32, 4), (10**9, 0), (0, 10**9)],
    ids=["always merged", "default", "always masked", "always dense"],
)
@pytest.mark.parametrize("method", ["lucene", "robertson", "bm25+"])
def test_search_equals_brute_force(
    method: str, merge_factor: int, dense_factor: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bm25_module, "_MERGE_FACTOR", merge_factor)
    monkeypatch.setattr(bm25_module, "_DENSE_FACTOR", dense_factor)
    index = BM25Index.build(TEXTS_FOR_SEARCH, method=method)
    rng = np.random.default_rng(0)
    mask = rng.random(index.size) < 0.5
    for k in (1, 3, 10, 1000):
        for allowed in (None, mask):
            hits = index.search(QUERIES, k, mask=allowed)
            for query, (scores, rows) in zip(QUERIES, hits, strict=True):
                assert scores.dtype == np.float32 and rows.dtype == np.int64
                expected_scores, expected_rows = brute_force(index, query, k, allowed)
                assert rows.tolist() == expected_rows, (query, k)
                assert scores.tolist() == expected_scores, (query, k)  # the same float32 values
            # a batch is its queries one at a time
            for query, (scores, rows) in zip(QUERIES, hits, strict=True):
                single_scores, single_rows = index.search([query], k, mask=allowed)[0]
                assert np.array_equal(single_rows, rows) and np.array_equal(single_scores, scores)


def test_ties_at_the_cut_go_to_the_lower_row() -> None:
    texts = ["shared word"] * 6 + ["other"]
    index = BM25Index.build(texts, stopwords=None, stemmer=None)
    scores, rows = index.search(["shared"], 3)[0]
    assert rows.tolist() == [0, 1, 2] and len(set(scores.tolist())) == 1


def test_build_takes_any_sequence_and_refuses_bad_input() -> None:
    class Lazy:
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int) -> str:
            return ["alpha beta", "beta", "gamma"][i]

    from collections.abc import Sequence

    Sequence.register(Lazy)
    assert BM25Index.build(Lazy()).size == 3  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a single string"):
        BM25Index.build("alpha beta")
    with pytest.raises(ValueError, match=r"texts\[1\] must be a string"):
        BM25Index.build(["alpha", 3])  # type: ignore[list-item]
