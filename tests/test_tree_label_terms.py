"""The faiss tree builder's key-term counting (retrievers/builders/label_terms.py) and its bottom-up
sums: the same terms and TF-IDF weights as scikit-learn's ``fit_tfidf`` bit for bit, whatever the
chunking, and the same tree as when the sums are taken from scikit-learn's matrix."""

from __future__ import annotations

import itertools
import re
from urllib.parse import quote

import numpy as np
import pytest
from test_tree_kmeans import FAISS, corpus, digest

from retrievers.builders import kmeans_tree, label_terms
from retrievers.builders.kmeans_tree import _merge_terms, faiss_kmeans_nodes
from retrievers.builders.label_terms import LabelTerms
from retrievers.store.hierarchy_config import HierarchyConfig
from retrievers.store.tree_uris import _SAFE_SEGMENT, uri_segment
from retrievers.text import LABEL_PATTERN, fit_tfidf

MIXED = [
    "The p53 gene, x_1 and Ünïcödé words: naïve café! résumé résumé RÉSUMÉ",
    "",
    "12 34 ab x",
    "İstanbul ﬁne theatre; theatre's under_score co-operation e-mail",
    "the and of with",  # stop words only
    "alpha beta gamma alpha alpha beta delta",
    "Gamma\tdelta\nepsilon  zeta² eta½ theta",  # whitespace runs; letters beside numeric signs
    "zeta eta theta iota kappa lambda alpha",
    "ÀÉÎ àéî ßtraße straße",
]


def reference(texts: list[str]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    vectorizer, matrix = fit_tfidf(texts, token_pattern=LABEL_PATTERN, dtype=np.float64)
    return [str(t) for t in vectorizer.get_feature_names_out()], matrix.indptr, matrix.indices, matrix.data


def assert_equals_sklearn(texts: list[str], counted: LabelTerms) -> None:
    terms, indptr, indices, data = reference(texts)
    assert list(counted.terms) == terms
    assert np.array_equal(counted.indptr, indptr)
    found_terms, weights = counted.rows(np.arange(len(texts)))
    assert np.array_equal(found_terms, indices)  # the same terms in the same order in each row
    assert np.array_equal(weights, data)  # bit for bit, not merely close


def assert_same_counts(part: LabelTerms, whole: LabelTerms) -> None:
    """Two counts of the same texts are equal in every array, bit for bit."""
    assert part.terms == whole.terms
    for name in ("indptr", "term_ids", "counts", "idf", "norms"):
        assert np.array_equal(getattr(part, name), getattr(whole, name)), name


def synthetic_texts(n: int) -> list[str]:
    documents, _ = corpus(n)
    return [doc.full_text for doc in documents]


def test_terms_and_weights_equal_fit_tfidf_bit_for_bit() -> None:
    texts = MIXED + synthetic_texts(300)
    assert_equals_sklearn(texts, LabelTerms.count(texts))
    # a generator is read once, the same result
    assert_equals_sklearn(texts, LabelTerms.count(text for text in texts))


def test_chunks_of_any_size_give_the_same_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = MIXED + synthetic_texts(50)
    whole = LabelTerms.count(texts)
    for size in (1, 2, 7):
        monkeypatch.setattr(label_terms, "CHUNK", size)
        part = LabelTerms.count(texts)
        assert_same_counts(part, whole)
    assert_equals_sklearn(texts, part)


def random_ascii_texts(n: int, seed: int) -> list[str]:
    """ASCII texts that probe the byte-level word cutter: words of 1-30 letters (in and across
    8-byte slices, some sharing their first 8 or 16 letters), mixed case, digits and ``_`` beside
    letters, punctuation, and every ASCII whitespace and control character as separators."""
    rng = np.random.default_rng(seed)
    stems = ["abcdefgh", "abcdefghijklmnop", "zzzzzzzz"]
    separators = [chr(c) for c in range(0, 128) if not chr(c).isalnum() and chr(c) != "_"]
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(int(rng.integers(0, 40))):
            length = int(rng.integers(1, 31))
            word = "".join(chr(97 + int(c)) for c in rng.integers(0, 26, length))
            if rng.random() < 0.2:
                word = stems[int(rng.integers(0, 3))] + word[: int(rng.integers(0, 9))]
            if rng.random() < 0.2:
                word = word.upper() if rng.random() < 0.5 else word.capitalize()
            if rng.random() < 0.1:
                word = rng.choice(["1", "_", "x9", "__"]) + word if rng.random() < 0.5 else word + "_2"
            parts.append(word)
            parts.append("".join(rng.choice(separators, size=int(rng.integers(1, 3)))))
        texts.append("".join(parts))
    return texts


def test_the_byte_level_cut_of_ascii_texts_equals_the_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    """ASCII texts are cut without Python's regex; mixed with other texts in one chunk, and in
    chunks of every size, the terms, their order and weights are scikit-learn's bit for bit."""
    texts = random_ascii_texts(400, seed=5)
    assert_equals_sklearn(texts, LabelTerms.count(texts))
    mixed = [text for pair in zip(texts[:60], itertools.cycle(MIXED)) for text in pair]
    whole = LabelTerms.count(mixed)
    assert_equals_sklearn(mixed, whole)
    for size in (1, 3, 64):
        monkeypatch.setattr(label_terms, "CHUNK", size)
        part = LabelTerms.count(mixed)
        assert_same_counts(part, whole)


def test_words_sharing_their_first_eight_bytes_stay_apart() -> None:
    texts = ["abcdefgh abcdefghx abcdefghxy", "abcdefghxy abcdefgh", "abcdefghabcdefghq abcdefghabcdefgh"]
    counted = LabelTerms.count(texts)
    assert counted.terms == ("abcdefgh", "abcdefghabcdefgh", "abcdefghabcdefghq", "abcdefghx", "abcdefghxy")
    assert_equals_sklearn(texts, counted)
    # each distinct word once, in order of first appearance, whatever follows it in the text
    words = label_terms._ChunkWords.cut([text.lower() for text in texts + MIXED])
    codes, first, _ = words.factorized()
    distinct = words.text_of(first)
    pattern = re.compile(LABEL_PATTERN)
    found = [w for text in texts + MIXED for w in pattern.findall(text.lower()) if len(w) >= 3]
    assert distinct == list(dict.fromkeys(found))
    assert [distinct[c] for c in codes.tolist()] == found


def test_counts_beyond_two_bytes_are_kept_exactly() -> None:
    texts = ["word " * 70_000 + "other", "word other third"]
    counted = LabelTerms.count(texts)
    assert counted.counts.dtype == np.int64 and int(counted.counts.max()) == 70_000
    assert_equals_sklearn(texts, counted)


def test_no_term_anywhere_gives_an_empty_vocabulary_and_a_tree_of_snippets() -> None:
    assert LabelTerms.count(["the of and", "12 34", ""]).terms == ()
    documents, vectors = corpus(100)
    documents = [doc.__class__(id=doc.id, text="and the 12", title="") for doc in documents]
    nodes, _ = faiss_kmeans_nodes(documents, vectors, HierarchyConfig.from_dict(FAISS))
    assert all("Key terms" not in node.abstract for node in nodes)
    assert all(node.abstract for node in nodes)


def test_dense_and_sorted_merges_are_equal_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    parts = []
    for _ in range(6):
        terms = np.sort(rng.choice(400, size=rng.integers(1, 120), replace=False)).astype(np.int64)
        parts.append((terms, rng.random(terms.size) / 7.0))
    sorted_terms, sorted_sums = _merge_terms(parts, 400)  # below the dense threshold: sorted
    dense_terms, dense_sums = _merge_terms(parts, 400, unique_parts=True)  # dense
    assert np.array_equal(sorted_terms, dense_terms) and np.array_equal(sorted_sums, dense_sums)
    # a direct count: each term's weights added in the parts' order
    for term, total in zip(dense_terms.tolist(), dense_sums.tolist(), strict=True):
        expected = 0.0
        for terms, weights in parts:
            expected += float(weights[terms == term].sum()) if (terms == term).any() else 0.0
        assert total == expected


class _SklearnTerms:
    """The sums' input taken from scikit-learn's TF-IDF matrix (what the builder read before)."""

    def __init__(self, texts: object) -> None:
        vectorizer, self.matrix = fit_tfidf(list(texts), token_pattern=LABEL_PATTERN)  # type: ignore[call-overload]
        self.terms = tuple(str(t) for t in vectorizer.get_feature_names_out())

    def rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        block = self.matrix[rows]
        return block.indices.astype(np.int64), block.data.astype(np.float64)


@pytest.mark.parametrize("overview", [False, True])
def test_the_tree_equals_the_one_built_from_sklearns_matrix(
    monkeypatch: pytest.MonkeyPatch, overview: bool
) -> None:
    documents, vectors = corpus(1200)
    config = HierarchyConfig.from_dict({**FAISS, "overview": overview})
    counted = digest(*faiss_kmeans_nodes(documents, vectors, config))
    monkeypatch.setattr(LabelTerms, "count", _SklearnTerms)
    monkeypatch.setattr(kmeans_tree, "DENSE_MERGE", 0)  # and every merge sorted
    assert digest(*faiss_kmeans_nodes(documents, vectors, config)) == counted


def test_uri_segment_fast_path_equals_quote() -> None:
    """Segments quote keeps as they are skip it (the faiss tree's leaves: a million ids); every
    character up to U+2FFF and every pair of ASCII characters gives quote's result."""
    for code in range(1, 0x3000):
        text = chr(code)
        assert uri_segment(text) == quote(text, safe=_SAFE_SEGMENT), repr(text)
    for a, b in itertools.product([chr(c) for c in range(1, 128)], repeat=2):
        assert uri_segment(a + b) == quote(a + b, safe=_SAFE_SEGMENT), repr(a + b)
    assert uri_segment("d0001234") == "d0001234" and uri_segment("a b/c") == "a%20b%2Fc"


def test_first_appearance_codes_number_keys_as_a_dictionary_would() -> None:
    """The compiled numbering (the library's stand-in for pandas.factorize): every key's number in
    order of first appearance, with colliding slots (10,000 keys, many repeated, 0 and 2^64 - 1
    among them) and the empty case."""
    rng = np.random.default_rng(4)
    keys = np.concatenate(
        [
            rng.integers(0, 2**63, 3000, dtype=np.uint64) * np.uint64(2),
            np.array([0, 2**64 - 1], dtype=np.uint64),
        ]
    )
    keys = keys[rng.integers(0, keys.size, 10_000)]
    numbers: dict[int, int] = {}
    expected = [numbers.setdefault(int(key), len(numbers)) for key in keys.tolist()]
    codes, n_distinct = label_terms.first_appearance_codes(keys)
    assert codes.tolist() == expected and n_distinct == len(numbers)
    empty_codes, none = label_terms.first_appearance_codes(np.zeros(0, dtype=np.uint64))
    assert empty_codes.size == 0 and none == 0
