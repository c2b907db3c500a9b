"""Search indexes: exact inner-product vector search (numpy) and BM25 (bm25s), plus top-k helpers.

Every ranking produced here follows the project rule: sort by ``(score desc, row index asc)``.
The store keeps documents sorted by id, so the row index order is the doc id order and breaking
ties by the lower row index is breaking them by doc id. Scores handed out are finite; items that
are masked out (or, for BM25, that match no query term) are left out, never padded with ``-inf``.

Why the pieces look the way they do:

* ``top_k_rows`` partitions first (``O(n)``) and sorts only the candidates. A plain
  ``argpartition`` is not enough on its own: when equal scores straddle the partition boundary it
  keeps an arbitrary subset of them, so every item that ties with the k-th score is re-admitted
  and the tie is settled by index.
* ``ExactVectorIndex`` never builds a full ``n_queries x n_items`` score matrix: it walks the
  corpus in row chunks (each chunk of a memory-mapped matrix is read once) and keeps a running
  top-k per query. Queries go to BLAS in blocks of a fixed size (zero-padded), because OpenBLAS
  computes a row of ``Q @ V.T`` with different rounding depending on how many rows ``Q`` has
  (a one-row product goes to a GEMV kernel); a fixed block shape makes a batch of queries give
  bit-identical scores to the same queries searched one at a time.
* ``BM25Index`` wraps ``bm25s`` (sparse, precomputed per-term document scores) over our own,
  documented tokenizer, so the same text always becomes the same tokens for documents and
  queries, and vocabulary ids are assigned deterministically (sorted tokens).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import bm25s
import bm25s.stopwords
import numpy as np
import numpy.typing as npt
import Stemmer

__all__ = [
    "BM25_METHODS",
    "STOPWORDS_EN",
    "TOKEN_PATTERN",
    "BM25Index",
    "ExactVectorIndex",
    "tokenize",
    "top_k_1d",
    "top_k_rows",
]

FloatArray = npt.NDArray[np.floating[Any]]
Float32Array = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Hits = list[tuple[Float32Array, IndexArray]]

T = TypeVar("T")

# --------------------------------------------------------------------------------------------
# Top-k selection
# --------------------------------------------------------------------------------------------


def _check_positive_int(value: object, name: str) -> int:
    """``value`` as an int if it is an integer >= 1 (bools are refused), else ValueError."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _check_mask(mask: object, n_items: int) -> BoolArray:
    """A boolean allow-mask of exactly ``n_items`` entries (True = the item may be returned)."""
    array = np.asarray(mask)
    if array.dtype != np.bool_ or array.shape != (n_items,):
        raise ValueError(
            f"mask must be a boolean array of shape ({n_items},), got dtype {array.dtype} shape {array.shape}"
        )
    return array


def top_k_rows(scores: npt.ArrayLike, k: int) -> tuple[FloatArray, IndexArray]:
    """Top ``k`` of every row of ``scores``, ordered by score desc, then column index asc.

    ``scores`` is ``(n_queries, n_items)``; the result is ``(top_scores, top_indices)``, both of
    shape ``(n_queries, k')`` with ``k' = min(k, n_items)``; indices are int64 and the scores keep
    the input's floating dtype (integer input is converted to float64).

    Method: ``argpartition`` finds, per row, a set holding ``k'`` best scores and so the k'-th best
    score ``t``. Every item with score ``>= t`` is then a candidate (this re-admits items tying
    with ``t`` that the partition happened to leave out), and the candidates are lexsorted by
    (row, -score, index); the first ``k'`` of each row are the answer. With all scores equal this
    returns indices ``0..k'-1``.

    ``-inf`` marks an item that must not win; it sorts last, but it *is* returned when a row has
    fewer than ``k'`` finite scores. Use :func:`top_k_1d` (which drops them) or cut the rows.
    NaN scores have no place in a ranking and raise ValueError; ``k < 1`` raises ValueError.
    """
    k = _check_positive_int(k, "k")
    values = np.asarray(scores)
    if values.ndim != 2:
        raise ValueError(f"scores must be 2-D (n_queries, n_items), got shape {values.shape}")
    if not np.issubdtype(values.dtype, np.floating):
        if not (np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_):
            raise ValueError(f"scores must be real numbers, got dtype {values.dtype}")
        values = values.astype(np.float64)
    n_rows, n_items = values.shape
    kk = min(k, n_items)
    if kk == 0 or n_rows == 0:
        return np.empty((n_rows, kk), dtype=values.dtype), np.empty((n_rows, kk), dtype=np.int64)
    if np.isnan(values).any():
        raise ValueError("scores contain NaN; every score must be a number (use -inf to exclude an item)")

    # Work with negated scores so that "ascending" means "best first".
    negated = -values
    if kk < n_items:
        part = np.argpartition(negated, kk - 1, axis=1)[:, :kk]
        kth = np.take_along_axis(negated, part, axis=1).max(axis=1)
        rows, cols = np.nonzero(negated <= kth[:, None])
    else:
        rows = np.repeat(np.arange(n_rows), n_items)
        cols = np.tile(np.arange(n_items), n_rows)
    # np.nonzero lists candidates row by row, columns ascending; lexsort is stable and sorts by
    # its last key first: rows, then negated score, then column index.
    order = np.lexsort((cols, negated[rows, cols], rows))
    counts = np.bincount(rows, minlength=n_rows)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    picked = order[starts[:, None] + np.arange(kk)[None, :]]
    top_indices = cols[picked].astype(np.int64, copy=False)
    top_scores = np.take_along_axis(values, top_indices, axis=1)
    return top_scores, top_indices


def top_k_1d(
    scores: npt.ArrayLike, k: int, mask: npt.ArrayLike | None = None
) -> tuple[FloatArray, IndexArray]:
    """Top ``k`` of one score vector, by score desc then index asc, leaving out excluded items.

    ``mask`` (bool, ``n_items``) says which items may be returned (True = allowed). Items with
    score ``-inf`` are excluded too. The result therefore has ``min(k, allowed items)`` entries
    and may be shorter than ``k``; returned scores are never ``-inf``.
    """
    k = _check_positive_int(k, "k")
    values = np.asarray(scores)
    if values.ndim != 1:
        raise ValueError(f"scores must be 1-D (n_items,), got shape {values.shape}")
    allowed: IndexArray | None = None
    if mask is not None:
        allowed = np.flatnonzero(_check_mask(mask, values.shape[0])).astype(np.int64)
        values = values[allowed]
    top_scores, top_indices = top_k_rows(values[None, :], k)
    kept_scores, kept = top_scores[0], top_indices[0]
    # -inf sorts last, so the excluded ones are a suffix.
    n_keep = int(np.count_nonzero(kept_scores != -np.inf))
    kept_scores, kept = kept_scores[:n_keep], kept[:n_keep]
    if allowed is not None:
        # ``allowed`` is increasing, so mapping back keeps the index-ascending tie order.
        kept = allowed[kept]
    return kept_scores, kept


def _merge_top_k(
    scores_a: FloatArray, index_a: IndexArray, scores_b: FloatArray, index_b: IndexArray, k: int
) -> tuple[FloatArray, IndexArray]:
    """Row-wise top ``k`` of two candidate sets (same rows), by score desc then global index asc."""
    scores = np.concatenate((scores_a, scores_b), axis=1)
    indices = np.concatenate((index_a, index_b), axis=1)
    order = np.lexsort((indices, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(indices, order, axis=1)


# --------------------------------------------------------------------------------------------
# Exact vector search
# --------------------------------------------------------------------------------------------

#: Queries are multiplied against the corpus in blocks of exactly this many rows (the last block
#: zero-padded), so that a query's scores do not depend on how many queries came with it.
#: 16 measured best here (5,183 x 384, 2 cores): one query 0.66 ms (64: 1.75 ms, 1: 0.19 ms),
#: 300 queries batched 37 ms (64: 37 ms, 1: 56 ms).
QUERY_BLOCK = 16


class ExactVectorIndex:
    """Exact (brute-force) inner-product search over a float32 matrix, one row per item.

    Rows are expected to be L2-normalised, which makes the inner product the cosine similarity.
    The matrix may be a read-only ``np.memmap``; it is never copied when it is a C-contiguous
    float32 array, and search reads it in chunks of rows.
    """

    def __init__(self, vectors: npt.ArrayLike) -> None:
        """Validate ``vectors``: 2-D ``(n, dim)`` with ``dim >= 1``, every value finite.

        Non-float32 input is converted to float32 (a copy); so is non-contiguous input.
        """
        matrix = np.asarray(vectors)
        if matrix.ndim != 2:
            raise ValueError(f"vectors must be 2-D (n_items, dim), got shape {matrix.shape}")
        if matrix.shape[1] < 1:
            raise ValueError(f"vectors must have dim >= 1, got shape {matrix.shape}")
        if not (np.issubdtype(matrix.dtype, np.floating) or np.issubdtype(matrix.dtype, np.integer)):
            raise ValueError(f"vectors must be real numbers, got dtype {matrix.dtype}")
        matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        # Check finiteness chunk by chunk: a full isfinite() of a 1M x 384 memmap would allocate
        # a 384 MB temporary.
        step = 65536
        for start in range(0, matrix.shape[0], step):
            if not np.isfinite(matrix[start : start + step]).all():
                raise ValueError("vectors contain NaN or infinite values; every value must be finite")
        self._vectors: Float32Array = matrix
        self.size: int = int(matrix.shape[0])
        self.dim: int = int(matrix.shape[1])

    @property
    def vectors(self) -> Float32Array:
        """The indexed matrix (read-only use)."""
        return self._vectors

    def _check_queries(self, queries: npt.ArrayLike) -> Float32Array:
        array = np.asarray(queries)
        if array.ndim == 1:
            array = array[None, :]
        if array.ndim != 2 or array.shape[1] != self.dim:
            raise ValueError(
                f"queries must have shape ({self.dim},) or (n_queries, {self.dim}), got {array.shape}"
            )
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise ValueError(f"queries must be real numbers, got dtype {array.dtype}")
        array = np.asarray(array, dtype=np.float32)
        if not np.isfinite(array).all():
            raise ValueError("queries contain NaN or infinite values; every value must be finite")
        return array

    @staticmethod
    def _blocks(queries: Float32Array) -> list[Float32Array]:
        """Split ``queries`` into zero-padded blocks of exactly ``QUERY_BLOCK`` rows."""
        n_queries = queries.shape[0]
        n_blocks = -(-n_queries // QUERY_BLOCK)
        padded = np.zeros((n_blocks * QUERY_BLOCK, queries.shape[1]), dtype=np.float32)
        padded[:n_queries] = queries
        return [padded[i * QUERY_BLOCK : (i + 1) * QUERY_BLOCK] for i in range(n_blocks)]

    def search(
        self,
        queries: npt.ArrayLike,
        k: int,
        *,
        mask: npt.ArrayLike | None = None,
        chunk_size: int = 65536,
    ) -> Hits:
        """Top ``k`` items by inner product for each query, by score desc then row index asc.

        ``queries`` is ``(n_queries, dim)`` or a single ``(dim,)`` vector (then one result).
        ``mask`` (bool, ``n_items``) restricts the result to items marked True.
        Returns one ``(scores float32, indices int64)`` pair per query, each of length
        ``min(k, allowed items)``.

        The corpus is read in chunks of ``chunk_size`` rows (1..any); for each chunk, each block of
        ``QUERY_BLOCK`` queries gets a ``(QUERY_BLOCK, chunk)`` score matrix, its row-wise top-k
        (:func:`top_k_rows`) and a merge into the running top-k of those queries. Memory is
        ``O(QUERY_BLOCK * chunk_size + n_queries * k)``, never ``n_queries * n_items``.
        A batch returns exactly what the same queries return one at a time (same chunk_size).
        """
        k = _check_positive_int(k, "k")
        chunk_size = _check_positive_int(chunk_size, "chunk_size")
        query_matrix = self._check_queries(queries)
        allowed = None if mask is None else _check_mask(mask, self.size)
        n_queries = query_matrix.shape[0]
        n_allowed = self.size if allowed is None else int(np.count_nonzero(allowed))
        length = min(k, n_allowed)

        blocks = self._blocks(query_matrix)
        best: list[tuple[FloatArray, IndexArray]] = []
        for i in range(len(blocks)):
            rows = min(QUERY_BLOCK, n_queries - i * QUERY_BLOCK)
            best.append((np.empty((rows, 0), dtype=np.float32), np.empty((rows, 0), dtype=np.int64)))

        if length > 0:
            for start in range(0, self.size, chunk_size):
                stop = min(start + chunk_size, self.size)
                excluded: BoolArray | None = None
                if allowed is not None:
                    chunk_allowed = allowed[start:stop]
                    if not chunk_allowed.any():
                        continue
                    if not chunk_allowed.all():
                        excluded = ~chunk_allowed
                chunk = self._vectors[start:stop]
                for i, block in enumerate(blocks):
                    best_scores, best_index = best[i]
                    rows = best_scores.shape[0]
                    # chunk @ block.T (not block @ chunk.T): OpenBLAS runs this shape about twice
                    # as fast; transposed back to one row per query for top_k_rows.
                    scores = np.ascontiguousarray((chunk @ block.T)[:, :rows].T)
                    if excluded is not None:
                        scores[:, excluded] = -np.inf
                    chunk_scores, chunk_index = top_k_rows(scores, length)
                    best[i] = _merge_top_k(best_scores, best_index, chunk_scores, chunk_index + start, length)

        results: Hits = []
        for best_scores, best_index in best:
            for row in range(best_scores.shape[0]):
                row_scores = best_scores[row, :length].astype(np.float32)
                if not np.isfinite(row_scores).all():
                    raise ValueError(
                        "a similarity score overflowed to a non-finite value; rows and queries should be "
                        "L2-normalised"
                    )
                results.append((row_scores, best_index[row, :length].copy()))
        return results

    def scores(self, query: npt.ArrayLike, *, chunk_size: int = 65536) -> Float32Array:
        """Inner product of one ``(dim,)`` query with every item: ``(n_items,)`` float32.

        Computed with the same blocked products as :meth:`search`, so the values are identical
        to the scores search returns for the same ``chunk_size``.
        """
        chunk_size = _check_positive_int(chunk_size, "chunk_size")
        array = np.asarray(query)
        if array.ndim != 1:
            raise ValueError(f"query must be one vector of shape ({self.dim},), got {array.shape}")
        block = self._blocks(self._check_queries(array))[0]
        out = np.empty(self.size, dtype=np.float32)
        for start in range(0, self.size, chunk_size):
            stop = min(start + chunk_size, self.size)
            out[start:stop] = (self._vectors[start:stop] @ block.T)[:, 0]
        return out


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

#: scikit-learn's default token pattern: runs of 2 or more word characters.
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
_TOKEN_RE = re.compile(TOKEN_PATTERN)

#: bm25s's English stopword list (the 33 words of Lucene's / Pyserini's English analyzer).
STOPWORDS_EN: frozenset[str] = frozenset(bm25s.stopwords.STOPWORDS_EN)

_STOPWORD_LISTS: dict[str, frozenset[str]] = {"en": STOPWORDS_EN}


def _stopword_set(stopwords: str | None) -> frozenset[str]:
    if stopwords is None:
        return frozenset()
    if not isinstance(stopwords, str) or stopwords not in _STOPWORD_LISTS:
        raise ValueError(f"stopwords must be one of {sorted(_STOPWORD_LISTS)} or None, got {stopwords!r}")
    return _STOPWORD_LISTS[stopwords]


def _check_stemmer(stemmer: str | None) -> str | None:
    if stemmer is None:
        return None
    algorithms = sorted(Stemmer.algorithms())
    if not isinstance(stemmer, str) or stemmer not in algorithms:
        raise ValueError(
            f"stemmer must be None or a Snowball algorithm name, one of {algorithms}; got {stemmer!r}"
        )
    return stemmer


def _progress(items: Iterable[T], total: int, desc: str, enabled: bool) -> Iterator[T]:
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


def _check_texts(texts: object, name: str) -> list[str]:
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise ValueError(
            f"{name} must be a sequence of strings (not a single string), got {type(texts).__name__}"
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{name}[{i}] must be a string, got {type(text).__name__}")
    return list(texts)


def tokenize(
    texts: Sequence[str],
    *,
    stopwords: str | None = "en",
    stemmer: str | None = "english",
    show_progress: bool = False,
) -> list[list[str]]:
    """Turn each text into BM25 terms; the one tokenizer used for documents and for queries.

    Steps, in order: lowercase; take the tokens matched by ``TOKEN_PATTERN`` (words of 2+ word
    characters, so punctuation and 1-character tokens are separators); drop stopwords
    (``"en"`` = bm25s's English list, ``None`` = keep all); stem with the Snowball ``stemmer``
    via PyStemmer (``None`` = no stemming). Query syntax has no meaning: ``"what's NOT (p53)?"``
    gives ``["what", "p53"]`` ("not" is a stopword, "s" is too short); terms are OR-ed by BM25.

    Stems are computed once per distinct word per call (most words repeat).
    """
    items = _check_texts(texts, "texts")
    stop = _stopword_set(stopwords)
    stemmer = _check_stemmer(stemmer)
    stem_word = Stemmer.Stemmer(stemmer).stemWord if stemmer is not None else None
    # word -> its term, or None for a stopword; filled lazily, one entry per distinct word.
    cache: dict[str, str | None] = {}
    out: list[list[str]] = []
    for text in _progress(items, len(items), "tokenize", show_progress):
        terms: list[str] = []
        for word in _TOKEN_RE.findall(text.lower()):
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


# --------------------------------------------------------------------------------------------
# BM25
# --------------------------------------------------------------------------------------------

#: bm25s scoring variants (Kamphuis et al., ECIR 2020). With N documents, df documents holding the
#: term, tf its count in a document of length dl, and avgdl the mean length:
#:   lucene:    idf = ln(1 + (N - df + 0.5) / (df + 0.5));  tfc = tf / (tf + k1 * (1 - b + b * dl / avgdl))
#:   robertson: idf = ln(max(1, (N - df + 0.5) / (df + 0.5)));  tfc as lucene
#:   atire:     idf = ln(N / df);  tfc = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
#:   bm25l:     idf = ln((N + 1) / (df + 0.5));  c = tf / (1 - b + b * dl / avgdl);
#:              tfc = (k1 + 1) * (c + delta) / (k1 + c + delta)
#:   bm25+:     idf = ln((N + 1) / df);  tfc = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)) + delta
#: A document's score is the sum over query terms (repeats counted) of idf * tfc.
BM25_METHODS = ("robertson", "atire", "lucene", "bm25l", "bm25+")

_PARAMS_FILE = "bm25_index.json"
_FORMAT = "viking_eval.retrievers.BM25Index"
_FORMAT_VERSION = 1


def _check_bm25_params(
    k1: object, b: object, method: object, delta: object, stopwords: str | None, stemmer: str | None
) -> dict[str, object]:
    """Validated parameters as the dict stored in ``BM25Index.params``."""
    if isinstance(k1, bool) or not isinstance(k1, int | float) or not (math.isfinite(k1) and k1 > 0):
        raise ValueError(f"k1 must be a finite number > 0, got {k1!r}")
    if isinstance(b, bool) or not isinstance(b, int | float) or not 0.0 <= b <= 1.0:
        raise ValueError(f"b must be in [0, 1], got {b!r}")
    if method not in BM25_METHODS:
        raise ValueError(f"method must be one of {list(BM25_METHODS)}, got {method!r}")
    if (
        isinstance(delta, bool)
        or not isinstance(delta, int | float)
        or not (math.isfinite(delta) and delta >= 0)
    ):
        raise ValueError(f"delta must be a finite number >= 0, got {delta!r}")
    _stopword_set(stopwords)
    _check_stemmer(stemmer)
    return {
        "k1": float(k1),
        "b": float(b),
        "method": method,
        "delta": float(delta),
        "stopwords": stopwords,
        "stemmer": stemmer,
        "token_pattern": TOKEN_PATTERN,
    }


class BM25Index:
    """BM25 over :func:`tokenize` terms, scored by bm25s's precomputed sparse index.

    bm25s stores, for every (term, document) pair, the document's score contribution in a CSC
    matrix (one column per term), so a query's scores are the sum of a few columns: no loop over
    documents. Build with :meth:`build`; ``params`` holds every setting that changes scores.
    """

    def __init__(self, model: Any, params: dict[str, object], size: int) -> None:
        """Wrap a built or loaded ``bm25s.BM25``; use :meth:`build` or :meth:`load` instead."""
        self._model = model
        self.params: dict[str, object] = dict(params)
        stopwords, stemmer = params["stopwords"], params["stemmer"]
        self._stopwords: str | None = stopwords if isinstance(stopwords, str) else None
        self._stemmer: str | None = stemmer if isinstance(stemmer, str) else None
        self.size: int = size
        self._vocab: dict[str, int] = model.vocab_dict
        self._indptr: npt.NDArray[np.integer[Any]] = model.scores["indptr"]
        self._indices: npt.NDArray[np.integer[Any]] = model.scores["indices"]

    @classmethod
    def build(
        cls,
        texts: Sequence[str],
        *,
        k1: float = 0.9,
        b: float = 0.4,
        method: str = "lucene",
        delta: float = 0.5,
        stopwords: str | None = "en",
        stemmer: str | None = "english",
        show_progress: bool = False,
    ) -> BM25Index:
        """Index ``texts`` (row i = document i).

        Defaults k1=0.9, b=0.4 with Lucene idf are Pyserini's BEIR "flat" settings. ``k1 > 0``,
        ``0 <= b <= 1``, ``method`` in ``BM25_METHODS``, ``delta >= 0`` (used by bm25l/bm25+ only).
        At least one document must keep a term after tokenization.
        """
        params = _check_bm25_params(k1, b, method, delta, stopwords, stemmer)
        items = _check_texts(texts, "texts")
        if not items:
            raise ValueError("texts must hold at least 1 document, got 0")
        corpus_tokens = tokenize(items, stopwords=stopwords, stemmer=stemmer, show_progress=show_progress)
        vocabulary = sorted({term for terms in corpus_tokens for term in terms})
        if not vocabulary:
            raise ValueError(
                "no document has an indexable term after tokenization (words of 2+ characters that "
                "are not stopwords); cannot build a BM25 index"
            )
        vocab = {term: i for i, term in enumerate(vocabulary)}
        corpus_ids = [[vocab[term] for term in terms] for terms in corpus_tokens]
        model = bm25s.BM25(
            k1=float(k1),
            b=float(b),
            delta=float(delta),
            method=method,
            dtype="float32",
            int_dtype="int32",
            backend="numpy",
            csc_backend="numpy",
        )
        # A (token ids, vocabulary) tuple is bm25s's input for pre-tokenized corpora: the
        # vocabulary ids stay ours (sorted terms), so saved indexes are byte-reproducible.
        model.index((corpus_ids, vocab), create_empty_token=False, show_progress=show_progress)
        return cls(model, params, len(items))

    def _term_ids(self, terms: Sequence[str]) -> list[int]:
        """Vocabulary ids of the known ``terms`` (unknown terms score nothing; repeats kept)."""
        return [self._vocab[term] for term in terms if term in self._vocab]

    def _scores_from_ids(self, term_ids: list[int]) -> Float32Array:
        if not term_ids:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._model.get_scores_from_ids(term_ids), dtype=np.float32)

    def _tokenize(self, texts: Sequence[str], show_progress: bool = False) -> list[list[str]]:
        return tokenize(texts, stopwords=self._stopwords, stemmer=self._stemmer, show_progress=show_progress)

    def scores(self, query: str) -> Float32Array:
        """BM25 score of ``query`` for every document: ``(size,)`` float32.

        Documents holding no query term score 0 with robertson/atire/lucene; bm25l and bm25+ give
        them a constant floor (sum over query terms of idf * tfc(tf=0)).
        """
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {type(query).__name__}")
        return self._scores_from_ids(self._term_ids(self._tokenize([query])[0]))

    def search(
        self,
        queries: Sequence[str],
        k: int,
        *,
        mask: npt.ArrayLike | None = None,
        show_progress: bool = False,
    ) -> Hits:
        """Top ``k`` documents per query by (score desc, row index asc).

        Only documents containing at least one query term are candidates (with the default
        lucene method these are exactly the documents with a score > 0), so a query whose terms
        are all stopwords or unknown gets an empty result. ``mask`` (bool, ``size``) further
        restricts candidates to True entries. Returns one ``(scores float32, indices int64)``
        pair per query, each of length ``min(k, candidates)``.
        """
        k = _check_positive_int(k, "k")
        items = _check_texts(queries, "queries")
        allowed = None if mask is None else _check_mask(mask, self.size)
        results: Hits = []
        for terms in _progress(self._tokenize(items), len(items), "bm25 search", show_progress):
            term_ids = self._term_ids(terms)
            if not term_ids:
                results.append((np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64)))
                continue
            matched = np.zeros(self.size, dtype=np.bool_)
            for term_id in term_ids:
                matched[self._indices[self._indptr[term_id] : self._indptr[term_id + 1]]] = True
            if allowed is not None:
                matched &= allowed
            top_scores, top_index = top_k_1d(self._scores_from_ids(term_ids), k, mask=matched)
            results.append((top_scores.astype(np.float32, copy=False), top_index))
        return results

    def save(self, folder: Path) -> None:
        """Write the index into ``folder`` (created if needed): bm25s's own files (``.npy`` arrays,
        JSON vocabulary and parameters) plus ``bm25_index.json`` with our parameters. No pickle."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._model.save(str(folder), show_progress=False)
        meta = {"format": _FORMAT, "version": _FORMAT_VERSION, "size": self.size, "params": self.params}
        (folder / _PARAMS_FILE).write_text(
            json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> BM25Index:
        """Read an index written by :meth:`save`; with ``mmap`` the score arrays are memory-mapped
        read-only instead of loaded. Scores equal those of the saved index exactly."""
        folder = Path(folder)
        meta_path = folder / _PARAMS_FILE
        if not meta_path.is_file():
            raise ValueError(f"{folder} is not a saved BM25Index (missing {_PARAMS_FILE})")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != _FORMAT or meta.get("version") != _FORMAT_VERSION:
            raise ValueError(
                f"{meta_path}: format {meta.get('format')!r} version {meta.get('version')!r} is not "
                f"{_FORMAT!r} version {_FORMAT_VERSION}; rebuild the index"
            )
        saved = meta["params"]
        params = _check_bm25_params(
            saved["k1"], saved["b"], saved["method"], saved["delta"], saved["stopwords"], saved["stemmer"]
        )
        if params != saved:
            raise ValueError(
                f"{meta_path}: parameters {saved} do not match this version's tokenizer ({params})"
            )
        model = bm25s.BM25.load(str(folder), mmap=bool(mmap), load_corpus=False, show_progress=False)
        for key in ("k1", "b", "method", "delta"):
            found = _model_value(model, key)
            if found != params[key]:
                raise ValueError(
                    f"{folder}: bm25s files say {key}={found!r}, {_PARAMS_FILE} says {params[key]!r}"
                )
        size = int(meta["size"])
        if int(model.scores["num_docs"]) != size:
            raise ValueError(
                f"{folder}: bm25s files hold {model.scores['num_docs']} documents, expected {size}"
            )
        return cls(model, params, size)


def _model_value(model: Any, key: str) -> object:
    """A scoring parameter of a ``bm25s.BM25`` (floats as float, for comparison with params)."""
    value = getattr(model, key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
