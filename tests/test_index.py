"""Tests for retrievers.index: top-k helpers, exact vector search, tokenizer and BM25.

Rankings are checked against brute force with the project rule written out literally:
``sorted(range(n), key=lambda i: (-s[i], i))``. BM25 scores are checked against rank-bm25 (an
independent implementation) on SciFact, against the published formulas, and against numbers
worked out by hand.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi, BM25Plus

from retrievers.index import BM25Index, ExactVectorIndex
from retrievers.ranking import top_k_1d, top_k_rows
from retrievers.text import tokenize


def brute_force(scores: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[int]:
    """The ranking rule, spelled out: score desc, then index asc; only allowed items."""
    items = range(len(scores)) if allowed is None else np.flatnonzero(allowed).tolist()
    return sorted(items, key=lambda i: (-scores[i], i))[:k]


# ------------------------------------------------------------------------------------------
# top_k_rows / top_k_1d
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_top_k_rows_matches_brute_force_with_many_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_rows, n_items = int(rng.integers(1, 6)), int(rng.integers(1, 80))
    scores = np.round(rng.random((n_rows, n_items)), 1)  # ~11 distinct values: ties everywhere
    for k in sorted({1, 2, 5, max(1, n_items - 1), n_items, n_items + 3}):
        top_scores, top_index = top_k_rows(scores, k)
        assert top_index.dtype == np.int64
        assert top_index.shape == top_scores.shape == (n_rows, min(k, n_items))
        for row in range(n_rows):
            expected = brute_force(scores[row], k)
            assert top_index[row].tolist() == expected
            np.testing.assert_array_equal(top_scores[row], scores[row, expected])


def test_top_k_rows_ties_straddling_the_partition_boundary_keep_lowest_indices() -> None:
    scores = np.zeros((2, 1000))
    scores[1, 900] = 1.0  # one clear winner, then 999 tied items
    _, top_index = top_k_rows(scores, 10)
    assert top_index[0].tolist() == list(range(10))
    assert top_index[1].tolist() == [900, *range(9)]


def test_top_k_rows_k_larger_than_n_returns_every_item_sorted() -> None:
    scores = np.array([[0.2, 0.9, 0.2], [0.0, 0.0, -1.0]], dtype=np.float32)
    top_scores, top_index = top_k_rows(scores, 50)
    assert top_index.tolist() == [[1, 0, 2], [0, 1, 2]]
    assert top_scores.dtype == np.float32
    np.testing.assert_array_equal(top_scores, np.array([[0.9, 0.2, 0.2], [0.0, 0.0, -1.0]], dtype=np.float32))


@pytest.mark.parametrize("k", [0, -1, 2.5])
def test_top_k_rejects_k_below_one_or_not_integer(k: object) -> None:
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        top_k_rows(np.zeros((1, 3)), k)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        top_k_1d(np.zeros(3), k)  # type: ignore[arg-type]


def test_top_k_rows_rejects_nan_and_wrong_shape() -> None:
    with pytest.raises(ValueError, match="NaN"):
        top_k_rows(np.array([[0.1, np.nan]]), 1)
    with pytest.raises(ValueError, match="2-D"):
        top_k_rows(np.zeros(3), 1)


@pytest.mark.parametrize("seed", range(8))
def test_top_k_1d_with_mask_matches_brute_force_and_never_returns_excluded(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 60))
    scores = np.round(rng.random(n), 1)
    mask = rng.random(n) < 0.6
    for k in (1, 3, n, n + 5):
        top_scores, top_index = top_k_1d(scores, k, mask=mask)
        expected = brute_force(scores, k, allowed=mask)
        assert top_index.tolist() == expected
        np.testing.assert_array_equal(top_scores, scores[expected])
        assert len(top_index) == min(k, int(mask.sum()))


def test_top_k_1d_drops_minus_inf_so_result_can_be_shorter_than_k() -> None:
    scores = np.array([0.5, -np.inf, 0.5, 1.0, -np.inf])
    top_scores, top_index = top_k_1d(scores, 10)
    assert top_index.tolist() == [3, 0, 2]
    assert np.isfinite(top_scores).all()
    empty_scores, empty_index = top_k_1d(scores, 3, mask=np.zeros(5, dtype=bool))
    assert empty_scores.shape == empty_index.shape == (0,)


def test_top_k_1d_rejects_a_mask_of_the_wrong_shape_or_type() -> None:
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        top_k_1d(np.zeros(4), 1, mask=np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="boolean"):
        top_k_1d(np.zeros(4), 1, mask=np.ones(4, dtype=np.int64))


# ------------------------------------------------------------------------------------------
# ExactVectorIndex
# ------------------------------------------------------------------------------------------


def exact_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """Multiples of 1/4 in [-0.5, 0.5]: every dot product is exact in float32 whatever the
    summation order, and many of them tie."""
    return (rng.integers(-2, 3, size=(n, dim)) * 0.25).astype(np.float32)


@pytest.mark.parametrize("chunk_size", [1, 7, 53, 1000])
@pytest.mark.parametrize("n_queries", [1, 3, 21])
@pytest.mark.parametrize("with_mask", [False, True])
def test_exact_search_matches_brute_force(chunk_size: int, n_queries: int, with_mask: bool) -> None:
    rng = np.random.default_rng(chunk_size * 31 + n_queries)
    n, dim = 53, 4
    vectors = exact_vectors(rng, n, dim)
    queries = exact_vectors(rng, n_queries, dim)
    mask = rng.random(n) < 0.5 if with_mask else None
    index = ExactVectorIndex(vectors)
    full = queries.astype(np.float64) @ vectors.T.astype(np.float64)
    for k in (1, 6, n + 4):
        hits = index.search(queries, k, mask=mask, chunk_size=chunk_size)
        assert len(hits) == n_queries
        for q, (scores, rows) in enumerate(hits):
            expected = brute_force(full[q], k, allowed=mask)
            assert rows.dtype == np.int64 and scores.dtype == np.float32
            assert rows.tolist() == expected
            np.testing.assert_array_equal(scores, full[q, expected].astype(np.float32))


def test_exact_search_batch_equals_one_query_at_a_time_bit_for_bit() -> None:
    # Real-valued vectors: BLAS multiplies a batch (GEMM, 256 queries a block) and a single query
    # (GEMV) with different rounding; the scores returned must not show it. Duplicate rows make
    # exact ties that only the row order may break.
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((500, 48)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[100:150] = vectors[:50]
    queries = rng.standard_normal((300, 48)).astype(np.float32)
    queries[7] = vectors[3]
    index = ExactVectorIndex(vectors)
    mask = rng.random(500) < 0.7
    for chunk_size in (7, 65536):
        batch = index.search(queries, 20, mask=mask, chunk_size=chunk_size)
        for query, (scores, rows) in zip(queries, batch, strict=True):
            [(one_scores, one_rows)] = index.search(query, 20, mask=mask, chunk_size=chunk_size)
            np.testing.assert_array_equal(one_scores, scores)
            np.testing.assert_array_equal(one_rows, rows)


def test_scores_and_search_scores_are_the_inner_products() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    query = rng.standard_normal(16).astype(np.float32)
    index = ExactVectorIndex(vectors)
    truth = vectors.astype(np.float64) @ query.astype(np.float64)
    all_scores = index.scores(query)
    assert all_scores.shape == (300,) and all_scores.dtype == np.float32
    np.testing.assert_allclose(all_scores, truth, rtol=1e-5, atol=1e-5)
    [(scores, rows)] = index.search(query, 300)
    np.testing.assert_allclose(scores, truth[rows], rtol=1e-6, atol=1e-6)
    # the search's scores are pairwise sums of the float32 products, row by row
    expected = (vectors * query).sum(axis=1)
    np.testing.assert_array_equal(scores, expected[rows])
    assert rows.tolist() == brute_force(expected, 300)


def test_candidates_always_hold_the_true_top_k_however_blas_rounds() -> None:
    # Many near-ties just around the k-th score: a candidate set cut without the rounding band
    # would lose some of them in one of the two BLAS paths (GEMV vs GEMM).
    rng = np.random.default_rng(5)
    base = rng.standard_normal(384).astype(np.float32)
    vectors = base + 1e-4 * rng.standard_normal((4000, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = (base + 1e-3 * rng.standard_normal((40, 384))).astype(np.float32)
    index = ExactVectorIndex(vectors)
    batch = index.search(queries, 50, chunk_size=1000)
    for query, (scores, rows) in zip(queries, batch, strict=True):
        pairwise = (vectors * query).sum(axis=1)
        assert rows.tolist() == brute_force(pairwise, 50)
        [(one_scores, one_rows)] = index.search(query, 50)
        np.testing.assert_array_equal(one_rows, rows)
        np.testing.assert_array_equal(one_scores, scores)


def test_exact_index_works_on_a_read_only_memmap(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    vectors = exact_vectors(rng, 40, 6)
    np.save(tmp_path / "vectors.npy", vectors)
    mapped = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    index = ExactVectorIndex(mapped)
    assert (index.size, index.dim) == (40, 6)
    queries = exact_vectors(rng, 5, 6)
    for (s1, r1), (s2, r2) in zip(
        index.search(queries, 8, chunk_size=7), ExactVectorIndex(vectors).search(queries, 8), strict=True
    ):
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(r1, r2)


def test_exact_index_validates_its_inputs() -> None:
    with pytest.raises(ValueError, match="2-D"):
        ExactVectorIndex(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="finite"):
        ExactVectorIndex(np.array([[0.0, np.nan]], dtype=np.float32))
    index = ExactVectorIndex(np.eye(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \(3,\) or \(n_queries, 3\)"):
        index.search(np.zeros((1, 4), dtype=np.float32), 1)
    with pytest.raises(ValueError, match="finite"):
        index.search(np.array([np.inf, 0, 0], dtype=np.float32), 1)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        index.search(np.zeros(3, dtype=np.float32), 0)
    with pytest.raises(ValueError, match="chunk_size must be an integer >= 1"):
        index.search(np.zeros(3, dtype=np.float32), 1, chunk_size=0)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        index.search(np.zeros(3, dtype=np.float32), 1, mask=np.ones(2, dtype=bool))


# ------------------------------------------------------------------------------------------
# Tokenizer
# ------------------------------------------------------------------------------------------


def test_tokenize_lowercases_drops_stopwords_and_stems() -> None:
    assert tokenize(["The Running DOGS are running"]) == [["run", "dog", "run"]]
    assert tokenize(["The Running DOGS are running"], stopwords=None, stemmer=None) == [
        ["the", "running", "dogs", "are", "running"]
    ]
    assert tokenize(["Studies"], stemmer=None) == [["studies"]]
    assert tokenize(["Studies"]) == [["studi"]]


def test_tokenize_treats_punctuation_and_operators_as_separators() -> None:
    # "s" is one character (dropped by the 2+ character pattern); "not" is a stopword.
    assert tokenize(["what's NOT (p53)?"]) == [["what", "p53"]]
    assert tokenize(["x-ray, IL-6; A+B"]) == [["ray", "il"]]


def test_tokenize_validates_options() -> None:
    with pytest.raises(ValueError, match="stopwords must be one of"):
        tokenize(["text"], stopwords="fr")
    with pytest.raises(ValueError, match="Snowball algorithm"):
        tokenize(["text"], stemmer="klingon")
    with pytest.raises(ValueError, match="not a single string"):
        tokenize("text")


# ------------------------------------------------------------------------------------------
# BM25: exact scores
# ------------------------------------------------------------------------------------------


def test_lucene_scores_equal_the_hand_computed_formula() -> None:
    # N = 3 documents, lengths 3, 2, 4 -> avgdl = 3. Defaults k1 = 0.9, b = 0.4.
    # idf(df) = ln(1 + (N - df + 0.5) / (df + 0.5)):
    #   apple (df 1): ln(1 + 2.5/1.5) = ln(8/3) = 0.98082925
    #   cherry, banana (df 2): ln(1 + 1.5/2.5) = ln(1.6) = 0.47000363
    # tf part = tf / (tf + k1 * (1 - b + b * dl / avgdl)):
    #   d0 apple  tf 2, dl 3: 2 / (2 + 0.9 * 1.0)       = 0.68965517 -> 0.98082925 * that = 0.67643397
    #   d1 cherry tf 1, dl 2: 1 / (1 + 0.9 * 0.8666667) = 0.56179775 -> 0.47000363 * that = 0.26404698
    #   d2 cherry tf 3, dl 4: 3 / (3 + 0.9 * 1.1333333) = 0.74626866 -> 0.47000363 * that = 0.35074898
    #   d0 banana tf 1, dl 3: 1 / (1 + 0.9 * 1.0)       = 0.52631579 -> 0.47000363 * that = 0.24737033
    docs = ["apple banana apple", "banana cherry", "cherry cherry cherry date"]
    index = BM25Index.build(docs, stopwords=None, stemmer=None)
    np.testing.assert_allclose(index.scores("apple cherry"), [0.67643397, 0.26404698, 0.35074898], rtol=1e-6)
    np.testing.assert_allclose(index.scores("banana"), [0.24737033, 0.26404698, 0.0], rtol=1e-6)
    [(scores, rows)] = index.search(["apple cherry"], 10)
    assert rows.tolist() == [0, 2, 1]
    np.testing.assert_allclose(scores, [0.67643397, 0.35074898, 0.26404698], rtol=1e-6)


def load_scifact(scifact: Path, n_docs: int, n_queries: int) -> tuple[list[str], list[str]]:
    texts: list[str] = []
    corpus = scifact / "corpus.jsonl.gz"  # the shared copy; BEIR's download is not compressed
    with (
        gzip.open(corpus, "rt", encoding="utf-8")
        if corpus.is_file()
        else open(scifact / "corpus.jsonl", encoding="utf-8")
    ) as handle:
        for line in handle:
            record = json.loads(line)
            texts.append(f"{record['title']} {record['text']}")
            if len(texts) == n_docs:
                break
    queries: list[str] = []
    with open(scifact / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            queries.append(json.loads(line)["text"])
            if len(queries) == n_queries:
                break
    return texts, queries


@pytest.fixture(scope="module")
def scifact_small(shared_datasets: Path) -> tuple[list[str], list[str]]:
    """The first 500 SciFact documents (title + " " + text) and the first 50 queries."""
    return load_scifact(shared_datasets / "scifact", 500, 50)


@pytest.mark.needs_data
def test_robertson_times_k1_plus_1_equals_rank_bm25_okapi_without_idf_floor(
    scifact_small: tuple[list[str], list[str]],
) -> None:
    # rank-bm25's BM25Okapi: idf = ln((N - df + 0.5) / (df + 0.5)), negative idf replaced by
    # epsilon * mean idf; tf part = tf * (k1 + 1) / (tf + k1 * norm). bm25s's "robertson" clamps
    # negative idf to 0 and leaves out the (k1 + 1) factor. With epsilon = 0 the two agree up to
    # that constant factor.
    texts, queries = scifact_small
    k1, b = 1.2, 0.75
    index = BM25Index.build(texts, k1=k1, b=b, method="robertson")
    oracle = BM25Okapi(tokenize(texts), k1=k1, b=b, epsilon=0.0)
    matched = 0
    for query, terms in zip(queries, tokenize(queries), strict=True):
        ours = index.scores(query).astype(np.float64) * (k1 + 1)
        np.testing.assert_allclose(ours, oracle.get_scores(terms), rtol=1e-5)
        matched += int(np.count_nonzero(ours))
    assert matched > 1000  # the comparison is not vacuous


@pytest.mark.needs_data
def test_bm25plus_equals_rank_bm25_bm25plus(scifact_small: tuple[list[str], list[str]]) -> None:
    # Both: idf = ln((N + 1) / df), score = idf * (delta + tf * (k1 + 1) / (tf + k1 * norm)),
    # summed over query terms, including delta * idf for documents without the term.
    texts, queries = scifact_small
    k1, b, delta = 1.1, 0.6, 0.7
    index = BM25Index.build(texts, k1=k1, b=b, method="bm25+", delta=delta)
    oracle = BM25Plus(tokenize(texts), k1=k1, b=b, delta=delta)
    for query, terms in zip(queries, tokenize(queries), strict=True):
        np.testing.assert_allclose(index.scores(query), oracle.get_scores(terms), rtol=1e-5)


def reference_bm25(
    corpus: list[list[str]], query: list[str], method: str, k1: float, b: float, delta: float
) -> np.ndarray:
    """Kamphuis et al. (ECIR 2020) formulas, written independently of bm25s, in float64."""
    n_docs = len(corpus)
    lengths = np.array([len(doc) for doc in corpus], dtype=np.float64)
    norm = 1 - b + b * lengths / lengths.mean()
    df: dict[str, int] = {}
    for doc in corpus:
        for term in set(doc):
            df[term] = df.get(term, 0) + 1
    total = np.zeros(n_docs)
    for term in query:
        if term not in df:
            continue
        n = df[term]
        tf = np.array([doc.count(term) for doc in corpus], dtype=np.float64)
        if method == "lucene":
            total += math.log(1 + (n_docs - n + 0.5) / (n + 0.5)) * tf / (tf + k1 * norm)
        elif method == "robertson":
            total += max(0.0, math.log((n_docs - n + 0.5) / (n + 0.5))) * tf / (tf + k1 * norm)
        elif method == "atire":
            total += math.log(n_docs / n) * tf * (k1 + 1) / (tf + k1 * norm)
        elif method == "bm25l":
            c = tf / norm
            total += math.log((n_docs + 1) / (n + 0.5)) * (k1 + 1) * (c + delta) / (k1 + c + delta)
        elif method == "bm25+":
            total += math.log((n_docs + 1) / n) * (tf * (k1 + 1) / (tf + k1 * norm) + delta)
    return total


@pytest.mark.needs_data
@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_every_method_equals_its_published_formula(
    method: str, scifact_small: tuple[list[str], list[str]]
) -> None:
    texts, queries = scifact_small
    texts, queries = texts[:150], queries[:15]
    k1, b, delta = 1.3, 0.55, 0.8
    index = BM25Index.build(texts, k1=k1, b=b, method=method, delta=delta)
    corpus = tokenize(texts)
    for query, terms in zip(queries, tokenize(queries), strict=True):
        expected = reference_bm25(corpus, terms, method, k1, b, delta)
        np.testing.assert_allclose(index.scores(query), expected, rtol=1e-5, atol=1e-6)


def test_params_hold_every_setting_that_changes_scores() -> None:
    index = BM25Index.build(
        ["alpha beta", "beta gamma"], k1=1.5, b=0.3, method="bm25l", delta=0.2, stemmer=None
    )
    assert index.params["k1"] == 1.5
    assert index.params["b"] == 0.3
    assert index.params["method"] == "bm25l"
    assert index.params["delta"] == 0.2
    assert index.params["stopwords"] == "en"
    assert index.params["stemmer"] is None
    assert index.size == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k1": 0.0}, r"k1 must be a finite number > 0"),
        ({"k1": float("inf")}, r"k1 must be a finite number > 0"),
        ({"b": 1.5}, r"b must be in \[0, 1\]"),
        ({"b": -0.1}, r"b must be in \[0, 1\]"),
        ({"method": "bm42"}, r"method must be one of \['robertson', 'atire', 'lucene', 'bm25l', 'bm25\+'\]"),
        ({"delta": -1.0}, r"delta must be a finite number >= 0"),
        ({"stemmer": "klingon"}, r"Snowball algorithm"),
    ],
)
def test_build_validates_parameters(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BM25Index.build(["some text"], **kwargs)  # type: ignore[arg-type]


def test_build_rejects_an_empty_corpus_or_one_without_terms() -> None:
    with pytest.raises(ValueError, match="at least 1 document"):
        BM25Index.build([])
    with pytest.raises(ValueError, match="no document has an indexable term"):
        BM25Index.build(["the and of", "a"])


# ------------------------------------------------------------------------------------------
# BM25: search
# ------------------------------------------------------------------------------------------


def test_punctuation_heavy_query_finds_the_p53_document() -> None:
    docs = ["Cats are not dogs.", "The p53 protein suppresses tumours.", "Gene expression in mice."]
    index = BM25Index.build(docs)
    [(scores, rows)] = index.search(["what's NOT (p53)?"], 10)
    assert rows.tolist() == [1]  # "not" is a stopword, so the cats document does not match
    assert scores[0] > 0


def test_query_without_known_terms_returns_an_empty_result() -> None:
    index = BM25Index.build(["The p53 protein.", "Gene expression."])
    for query in ["the and of not", "zzzz unknownword", "?!", ""]:
        [(scores, rows)] = index.search([query], 5)
        assert scores.shape == rows.shape == (0,)
        assert rows.dtype == np.int64 and scores.dtype == np.float32


def test_search_returns_only_matching_documents_with_ties_by_lower_index() -> None:
    docs = ["gene p53", "unrelated words here", "gene p53", "p53 gene", "cell biology"]
    index = BM25Index.build(docs)
    [(scores, rows)] = index.search(["p53"], 10)
    assert rows.tolist() == [0, 2, 3]  # identical scores, so index order; docs 1 and 4 excluded
    assert scores[0] == scores[1] == scores[2] > 0


@pytest.mark.needs_data
def test_search_equals_brute_force_over_scores_with_mask(scifact_small: tuple[list[str], list[str]]) -> None:
    texts, queries = scifact_small
    index = BM25Index.build(texts)
    mask = np.random.default_rng(5).random(len(texts)) < 0.5
    hits = index.search(queries, 15, mask=mask)
    nonempty = 0
    for query, (scores, rows) in zip(queries, hits, strict=True):
        all_scores = index.scores(query)
        expected = brute_force(all_scores, 15, allowed=mask & (all_scores > 0))
        assert rows.tolist() == expected
        np.testing.assert_array_equal(scores, all_scores[expected])
        nonempty += bool(len(rows))
    assert nonempty > 40


@pytest.mark.needs_data
def test_search_batch_equals_single_queries(scifact_small: tuple[list[str], list[str]]) -> None:
    texts, queries = scifact_small
    index = BM25Index.build(texts)
    batch = index.search(queries, 10)
    for query, (scores, rows) in zip(queries, batch, strict=True):
        [(one_scores, one_rows)] = index.search([query], 10)
        np.testing.assert_array_equal(one_scores, scores)
        np.testing.assert_array_equal(one_rows, rows)


def test_search_validates_its_inputs() -> None:
    index = BM25Index.build(["alpha beta", "beta gamma"])
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        index.search(["beta"], 0)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        index.search(["beta"], 1, mask=np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="not a single string"):
        index.search("beta", 1)


# ------------------------------------------------------------------------------------------
# BM25: save / load
# ------------------------------------------------------------------------------------------


@pytest.mark.needs_data
@pytest.mark.parametrize("method", ["lucene", "bm25+"])
@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip_gives_identical_scores(
    method: str, mmap: bool, tmp_path: Path, scifact_small: tuple[list[str], list[str]]
) -> None:
    texts, queries = scifact_small
    index = BM25Index.build(texts[:200], method=method, k1=1.1, b=0.5, delta=0.3)
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25", mmap=mmap)
    assert loaded.params == index.params
    assert loaded.size == index.size
    for query in queries[:20]:
        np.testing.assert_array_equal(loaded.scores(query), index.scores(query))
    for (s1, r1), (s2, r2) in zip(loaded.search(queries, 10), index.search(queries, 10), strict=True):
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(r1, r2)
    assert isinstance(loaded._indices, np.memmap) == mmap
    assert not list((tmp_path / "bm25").glob("*.pkl"))


def test_load_refuses_a_folder_that_is_not_an_index(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a saved BM25Index"):
        BM25Index.load(tmp_path)
