"""Text to terms: the one tokenizer, stemmer and TF-IDF of the project.

Every component that turns text into words goes through here, so a document and a query are
always cut the same way:

* :data:`WORD_PATTERN` — runs of 2 or more word characters (scikit-learn's default token
  pattern). :func:`words` lowercases and applies it; it is what BM25, the TF-IDF embedder, the
  query analyser's keywords and the keyword strategies see. Punctuation and 1-character tokens
  are separators, so query syntax means nothing: ``"what's NOT (p53)?"`` is ``what``, ``not``,
  ``p53``.
* :func:`tokenize` — BM25 terms: :func:`words`, minus a stopword list, stemmed with a Snowball
  stemmer (PyStemmer).
* :data:`LABEL_PATTERN` — words a person can read as a label (3+ letters, no digits or
  underscores): the key terms of a directory's extractive abstract. It is deliberately not
  :data:`WORD_PATTERN`: ``p53`` and ``x_1`` are good search terms but poor labels.
* :func:`fit_tfidf` — scikit-learn's ``TfidfVectorizer`` with sublinear tf (``1 + ln tf``),
  English stop words and smooth idf (``ln((1 + N) / (1 + df)) + 1``), rows L2-normalised: the
  TF-IDF of the TF-IDF+SVD embedder, of directory key terms and of shared-term edges.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

import bm25s.stopwords
import numpy as np
import Stemmer

if TYPE_CHECKING:
    from sklearn.feature_extraction.text import TfidfVectorizer

__all__ = [
    "LABEL_PATTERN",
    "STOPWORDS_EN",
    "WORD_PATTERN",
    "TermIds",
    "check_stemmer",
    "check_texts",
    "fit_tfidf",
    "stem",
    "stopword_set",
    "tfidf_rows",
    "tfidf_vectorizer",
    "tokenize",
    "words",
]

T = TypeVar("T")

#: runs of 2 or more word characters (scikit-learn's default token pattern)
WORD_PATTERN = r"(?u)\b\w\w+\b"
#: words of 3+ letters (no digits, no underscores): readable labels
LABEL_PATTERN = r"(?u)\b[^\W\d_]{3,}\b"
_WORD_RE = re.compile(WORD_PATTERN)

#: bm25s's English stopword list (the 33 words of Lucene's / Pyserini's English analyzer)
STOPWORDS_EN: frozenset[str] = frozenset(bm25s.stopwords.STOPWORDS_EN)
_STOPWORD_LISTS: dict[str, frozenset[str]] = {"en": STOPWORDS_EN}


def words(text: str) -> list[str]:
    """Lowercase :data:`WORD_PATTERN` tokens of ``text``, in order, repeats kept."""
    return _WORD_RE.findall(text.lower())


def stopword_set(stopwords: str | None) -> frozenset[str]:
    """The stopword list named ``stopwords`` (``"en"``), or none for None."""
    if stopwords is None:
        return frozenset()
    if not isinstance(stopwords, str) or stopwords not in _STOPWORD_LISTS:
        raise ValueError(f"stopwords must be one of {sorted(_STOPWORD_LISTS)} or None, got {stopwords!r}")
    return _STOPWORD_LISTS[stopwords]


def check_stemmer(stemmer: str | None) -> str | None:
    """``stemmer`` if it is None or a Snowball algorithm PyStemmer knows, else ValueError."""
    if stemmer is None:
        return None
    algorithms = _algorithms()
    if not isinstance(stemmer, str) or stemmer not in algorithms:
        raise ValueError(
            f"stemmer must be None or a Snowball algorithm name, one of {algorithms}; got {stemmer!r}"
        )
    return stemmer


@lru_cache(maxsize=1)
def _algorithms() -> list[str]:
    return sorted(Stemmer.algorithms())


@lru_cache(maxsize=65536)
def stem(word: str, algorithm: str = "english") -> str:
    """``word`` stemmed by the Snowball ``algorithm`` (cached per word)."""
    return str(_stemmer(algorithm).stemWord(word))


@lru_cache(maxsize=32)
def _stemmer(algorithm: str) -> Any:
    return Stemmer.Stemmer(algorithm)


def check_texts(texts: object, name: str) -> list[str]:
    """``texts`` as a list of strings; a bare string or a non-string item is a ValueError."""
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise ValueError(
            f"{name} must be a sequence of strings (not a single string), got {type(texts).__name__}"
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{name}[{i}] must be a string, got {type(text).__name__}")
    return list(texts)


def progress(items: Iterable[T], total: int, desc: str, enabled: bool) -> Iterator[T]:
    """Yield ``items``, writing ``desc: done/total`` to stderr about every 5% when enabled."""
    if not enabled:
        yield from items
        return
    step = max(1, total // 20)
    for done, item in enumerate(items, start=1):
        yield item
        if done % step == 0 or done == total:
            sys.stderr.write(f"\r{desc}: {done}/{total}")
            sys.stderr.flush()
    sys.stderr.write("\n")


def tokenize(
    texts: Sequence[str],
    *,
    stopwords: str | None = "en",
    stemmer: str | None = "english",
    show_progress: bool = False,
) -> list[list[str]]:
    """Turn each text into BM25 terms; the one tokenizer used for documents and for queries.

    Steps, in order: :func:`words` (lowercase, :data:`WORD_PATTERN`); drop stopwords (``"en"``
    = bm25s's English list, ``None`` = keep all); stem with the Snowball ``stemmer`` via
    PyStemmer (``None`` = no stemming). ``"what's NOT (p53)?"`` gives ``["what", "p53"]``
    ("not" is a stopword, "s" is too short); terms are OR-ed by BM25.

    Stems are computed once per distinct word per call (most words repeat).
    """
    items = check_texts(texts, "texts")
    stop = stopword_set(stopwords)
    stemmer = check_stemmer(stemmer)
    stem_word = _stemmer(stemmer).stemWord if stemmer is not None else None
    # word -> its term, or None for a stopword; filled lazily, one entry per distinct word.
    cache: dict[str, str | None] = {}
    out: list[list[str]] = []
    for text in progress(items, len(items), "tokenize", show_progress):
        terms: list[str] = []
        for word in _WORD_RE.findall(text.lower()):
            if word in cache:
                term = cache[word]
            else:
                if word in stop:
                    term = None
                elif stem_word is not None:
                    term = str(stem_word(word))
                else:
                    term = word
                cache[word] = term
            if term is not None:
                terms.append(term)
        out.append(terms)
    return out


class TermIds:
    """:func:`tokenize` for a corpus read in chunks, as integer term ids instead of strings.

    The same steps as :func:`tokenize` (words, stopwords, stemming), but each chunk of texts
    becomes one flat int32 array of term ids and one int64 array of per-text term counts: a
    million documents of 150 words are 600 MB of ids, where lists of strings are 1.2 GB of
    pointers alone. Ids are given in order of first appearance; :attr:`terms` lists the terms
    by id. Each distinct word is looked up (and stemmed) once over the whole corpus.
    """

    _MISSING = -2  # a word not seen yet (a stopword maps to -1)

    def __init__(self, *, stopwords: str | None = "en", stemmer: str | None = "english") -> None:
        self._stop = stopword_set(stopwords)
        algorithm = check_stemmer(stemmer)
        self._stem_words = _stemmer(algorithm).stemWords if algorithm is not None else None
        self._word_ids: dict[str, int] = {}
        self._term_ids: dict[str, int] = {}
        #: term of every id
        self.terms: list[str] = []

    def _add_words(self, words: list[str]) -> None:
        """Give ids to ``words`` (distinct, none seen yet), in their order: stopwords -1, the
        others their stem's id (a new stem gets the next id). Stemmed in one call."""
        fresh = [word for word in words if word not in self._stop]
        for word in words:
            if word in self._stop:
                self._word_ids[word] = -1
        stems = fresh if self._stem_words is None else self._stem_words(fresh)
        term_ids, terms = self._term_ids, self.terms
        for word, term in zip(fresh, stems, strict=True):
            term_id = term_ids.setdefault(term, len(terms))
            if term_id == len(terms):
                terms.append(term)
            self._word_ids[word] = term_id

    def encode(self, texts: Sequence[str], *, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, counts)``: the term ids of ``texts`` one after the other (int32) and the
        number of terms of each text (int64); ``tokenize(texts)[i]`` is
        ``[terms[t] for t in ids[sum(counts[:i]) : sum(counts[:i + 1])]]``. ``first`` is the
        position of ``texts[0]`` in the corpus (for error messages)."""
        words: list[str] = []
        word_counts = np.empty(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"texts[{first + i}] must be a string, got {type(text).__name__}")
            found = _WORD_RE.findall(text.lower())
            word_counts[i] = len(found)
            words += found
        known = self._word_ids
        ids = np.fromiter(
            map(known.get, words, itertools.repeat(self._MISSING)), dtype=np.int64, count=len(words)
        )
        missing = np.flatnonzero(ids == self._MISSING)
        if missing.size:  # words first seen here: ids in order of first appearance, stemmed at once
            unseen = words if missing.size == len(words) else [words[p] for p in missing.tolist()]
            self._add_words(list(dict.fromkeys(unseen)))
            ids[missing] = np.fromiter(map(known.__getitem__, unseen), dtype=np.int64, count=len(unseen))
        keep = ids >= 0
        owner = np.repeat(np.arange(len(texts)), word_counts)
        counts = np.bincount(owner[keep], minlength=len(texts)).astype(np.int64)
        return ids[keep].astype(np.int32), counts


def fit_tfidf(
    texts: Sequence[str],
    *,
    token_pattern: str = WORD_PATTERN,
    min_df: int = 1,
    max_features: int | None = None,
    dtype: type = np.float64,
) -> tuple[TfidfVectorizer, Any]:
    """Fit the project's TF-IDF on ``texts``: ``(vectorizer, csr matrix of texts)``.

    Sublinear tf, scikit-learn's English stop words, smooth idf, L2-normalised rows (see the
    module docstring). Raises ValueError when no term survives (as scikit-learn does)."""
    vectorizer = tfidf_vectorizer(
        token_pattern=token_pattern, min_df=min_df, max_features=max_features, dtype=dtype
    )
    matrix = vectorizer.fit_transform(list(texts)).tocsr()
    return vectorizer, matrix


def tfidf_rows(texts: Sequence[str], vocabulary: Mapping[str, int], idf: np.ndarray) -> Any:
    """The rows :func:`fit_tfidf`'s fitted vectorizer gives ``texts`` (``vectorizer.transform``),
    equal bit for bit, without importing scikit-learn (1.2 s a process): a scipy CSR matrix of
    ``len(texts)`` rows over ``vocabulary`` in ``idf``'s dtype.

    The same steps in the same order: lowercase, :data:`WORD_PATTERN`, each known term counted
    (stop words are never in a fitted vocabulary, so skipping unknown words drops them), a row's
    columns ascending; then ``1 + ln tf``, times idf, and each row divided by its L2 norm, whose
    squares (in the rows' dtype) are summed one after the other in float64 as scikit-learn's
    ``inplace_csr_row_normalize_l2`` does (numpy's pairwise sums would round otherwise)."""
    from scipy.sparse import csr_matrix

    columns: list[int] = []
    counts: list[int] = []
    ends = [0]
    for text in texts:
        counter: dict[int, int] = {}
        for word in _WORD_RE.findall(text.lower()):
            column = vocabulary.get(word)
            if column is not None:
                counter[column] = counter.get(column, 0) + 1
        for column in sorted(counter):
            columns.append(column)
            counts.append(counter[column])
        ends.append(len(columns))
    dtype = idf.dtype
    indices = np.asarray(columns, dtype=np.int32)
    data = np.asarray(counts, dtype=dtype)
    np.log(data, data)
    data += 1.0
    data *= idf[indices]
    squares = (data * data).astype(np.float64)
    for start, end in itertools.pairwise(ends):
        if end > start:
            total = float(np.cumsum(squares[start:end])[-1])
            if total != 0.0:
                data[start:end] = data[start:end].astype(np.float64) / np.sqrt(total)
    return csr_matrix(
        (data, indices, np.asarray(ends, dtype=np.int32)), shape=(len(ends) - 1, len(idf)), copy=False
    )


def tfidf_vectorizer(
    *,
    token_pattern: str = WORD_PATTERN,
    min_df: int = 1,
    max_features: int | None = None,
    dtype: type = np.float64,
    vocabulary: dict[str, int] | None = None,
) -> TfidfVectorizer:
    """The project's (unfitted) TF-IDF vectorizer; ``vocabulary`` fixes a saved one (then set
    ``idf_`` to restore a fitted vectorizer without pickle)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(
        sublinear_tf=True,
        stop_words="english",
        token_pattern=token_pattern,
        min_df=min_df,
        max_features=max_features,
        dtype=dtype,
        vocabulary=vocabulary,
    )
