"""The TF-IDF of directory key terms, counted without scikit-learn, for the faiss tree builder.

:func:`retrievers.text.fit_tfidf` over :data:`retrievers.text.LABEL_PATTERN` words (what the
extractive abstracts' key terms are made of) spends most of its time in scikit-learn's Python
loop over every token. :class:`LabelTerms` counts the same terms and gives the same weights, bit
for bit (``tests/test_tree_label_terms.py`` compares them with :func:`fit_tfidf`'s matrix):

* **Words.** Each text is lowercased and split at whitespace; when every piece is made of letters
  (``str.isalpha``), the pieces of 3+ characters are exactly the pattern's matches (letters are
  word characters that are neither digits nor ``_``, whitespace is not a word character), else
  the pattern's ``findall`` runs on the text. scikit-learn's English stop words are dropped.
* **Ids.** Terms are numbered in order of first appearance over the corpus (as scikit-learn's
  vocabulary is while it counts); a row keeps its terms in that order, the order scikit-learn
  sums a row's squares in for its L2 norm. The terms are then renamed to their alphabetical
  position (scikit-learn's ``get_feature_names_out`` order).
* **Weights.** ``(1 + ln count) * idf`` with the smooth idf ``ln((1 + n) / (1 + df)) + 1``,
  divided by the row's L2 norm: the same float64 operations in the same order as scikit-learn's
  ``TfidfTransformer`` and ``normalize``. Only the counts (2 bytes a pair when they fit) and one
  norm per row are kept; :meth:`LabelTerms.rows` computes the weights of the rows asked for.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from retrievers.text import LABEL_PATTERN

__all__ = ["LabelTerms", "label_stop_words"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: texts tokenized at a time (bounds the temporary lists of words)
CHUNK = 8192
_LABEL_RE = re.compile(LABEL_PATTERN)
_SKIP = -1  # a stop word or a piece shorter than 3 characters
_MISSING = -2  # not seen yet


def label_stop_words() -> frozenset[str]:
    """scikit-learn's English stop words (what ``fit_tfidf`` drops)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


@dataclass(frozen=True)
class LabelTerms:
    """Every text's label terms and their counts (CSR: row ``i``'s pairs are
    ``indptr[i]:indptr[i + 1]``, in order of the terms' first appearance in the corpus), the
    terms in alphabetical order (``term_ids`` index them), their idf and each row's L2 norm."""

    terms: tuple[str, ...]
    indptr: IntArray
    term_ids: npt.NDArray[np.int32]
    counts: npt.NDArray[np.integer]
    idf: FloatArray
    norms: FloatArray

    @classmethod
    def count(cls, texts: Iterable[str]) -> LabelTerms:
        """Count the label terms of ``texts`` (read once, :data:`CHUNK` at a time: a generator
        keeps only that many in memory); no term anywhere gives an empty vocabulary."""
        stop = label_stop_words()
        word_ids: dict[str, int] = {}
        n_terms = 0
        chunk_ids: list[npt.NDArray[np.int32]] = []
        chunk_counts: list[npt.NDArray[np.integer]] = []
        chunk_sizes: list[IntArray] = []
        stream = iter(texts)
        while chunk := list(itertools.islice(stream, CHUNK)):
            words: list[str] = []
            sizes = np.empty(len(chunk), dtype=np.int64)
            for i, text in enumerate(chunk):
                low = text.lower()
                pieces = low.split()
                found = pieces if "".join(pieces).isalpha() else _LABEL_RE.findall(low)
                sizes[i] = len(found)
                words += found
            del chunk
            ids = np.fromiter(
                map(word_ids.get, words, itertools.repeat(_MISSING)), dtype=np.int64, count=len(words)
            )
            missing = np.flatnonzero(ids == _MISSING)
            if missing.size:  # new words, numbered in order of first appearance
                unseen = [words[p] for p in missing.tolist()]
                fresh: dict[str, int] = {}
                for word in dict.fromkeys(unseen):
                    if len(word) < 3 or word in stop:
                        fresh[word] = _SKIP
                    else:
                        fresh[word] = n_terms
                        n_terms += 1
                ids[missing] = np.fromiter(map(fresh.__getitem__, unseen), dtype=np.int64, count=len(unseen))
                # the vocabulary keeps copies made once the chunk's words are freed: keeping the
                # words themselves would pin the memory of the whole chunk (scattered small objects)
                joined, values = "\n".join(fresh), list(fresh.values())
                del unseen, fresh, words
                word_ids.update(zip(joined.split("\n"), values, strict=True))
            else:
                del words
            owner = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
            keep = ids >= 0
            width = max(n_terms, 1)
            pairs, pair_counts = np.unique(owner[keep] * width + ids[keep], return_counts=True)
            rows = pairs // width
            chunk_sizes.append(np.bincount(rows, minlength=sizes.size))
            chunk_ids.append((pairs - rows * width).astype(np.int32))
            narrow = pair_counts.max(initial=0) <= np.iinfo(np.uint16).max
            chunk_counts.append(pair_counts.astype(np.uint16 if narrow else np.int64))
        row_sizes = np.concatenate(chunk_sizes) if chunk_sizes else np.zeros(0, dtype=np.int64)
        n_texts = row_sizes.size
        indptr = np.zeros(n_texts + 1, dtype=np.int64)
        np.cumsum(row_sizes, out=indptr[1:])
        vocabulary = [word for word, term in word_ids.items() if term >= 0]  # first-appearance order
        alphabetical = sorted(range(len(vocabulary)), key=vocabulary.__getitem__)
        rename = np.empty(len(vocabulary), dtype=np.int32)
        rename[np.asarray(alphabetical, dtype=np.int64)] = np.arange(len(vocabulary), dtype=np.int32)
        term_ids = np.concatenate(chunk_ids) if chunk_ids else np.zeros(0, dtype=np.int32)
        del chunk_ids
        term_ids = rename[term_ids] if term_ids.size else term_ids.astype(np.int32)
        counts: npt.NDArray[np.integer] = (
            np.concatenate(chunk_counts) if chunk_counts else np.zeros(0, dtype=np.uint16)
        )  # uint16 unless a count passes 65,535 (then int64)
        del chunk_counts
        df = np.bincount(term_ids, minlength=len(vocabulary)).astype(np.float64)
        df += 1.0
        idf = np.full_like(df, fill_value=n_texts + 1, dtype=np.float64)
        idf /= df
        np.log(idf, out=idf)
        idf += 1.0
        terms = tuple(vocabulary[i] for i in alphabetical)
        norms = _row_norms(indptr, term_ids, counts, idf)
        return cls(terms=terms, indptr=indptr, term_ids=term_ids, counts=counts, idf=idf, norms=norms)

    def rows(self, rows: IntArray) -> tuple[IntArray, FloatArray]:
        """The pairs of ``rows`` one row after the other: ``(term ids, normalised weights)``."""
        starts = self.indptr[rows]
        sizes = self.indptr[rows + 1] - starts
        positions = _ranges(starts, sizes)
        terms = self.term_ids[positions].astype(np.int64)
        weights = _tf_idf(self.counts[positions], self.idf[terms])
        weights /= np.repeat(self.norms[rows], sizes)
        return terms, weights


def _ranges(starts: IntArray, sizes: IntArray) -> IntArray:
    """``concatenate([arange(s, s + k) for s, k in zip(starts, sizes)])`` without the loop."""
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(sizes)
    return np.repeat(starts - (ends - sizes), sizes) + np.arange(total, dtype=np.int64)


def _tf_idf(counts: npt.NDArray[np.generic], idf: FloatArray) -> FloatArray:
    weights = counts.astype(np.float64)
    np.log(weights, out=weights)
    weights += 1.0
    weights *= idf
    return weights


def _row_norms(
    indptr: IntArray, term_ids: npt.NDArray[np.int32], counts: npt.NDArray[np.generic], idf: FloatArray
) -> FloatArray:
    """Each row's L2 norm of its weights before normalising, its squares summed one after the
    other in the row's order (as scikit-learn's ``inplace_csr_row_normalize_l2`` does); 1 for a
    row without terms (nothing to divide)."""
    n = indptr.size - 1
    norms = np.ones(n, dtype=np.float64)
    for first in range(0, n, CHUNK):
        last = min(n, first + CHUNK)
        lo, hi = int(indptr[first]), int(indptr[last])
        squares = _tf_idf(counts[lo:hi], idf[term_ids[lo:hi]])
        squares *= squares
        starts = indptr[first:last] - lo
        sizes = indptr[first + 1 : last + 1] - indptr[first:last]
        total = np.zeros(last - first, dtype=np.float64)
        order = np.argsort(-sizes, kind="stable")  # rows still summing are a prefix of this order
        longest = int(sizes.max()) if sizes.size else 0
        active = order.size
        for j in range(longest):
            while active and sizes[order[active - 1]] <= j:
                active -= 1
            rows = order[:active]
            total[rows] += squares[starts[rows] + j]
        nonzero = total > 0.0
        norms[first:last][nonzero] = np.sqrt(total[nonzero])
    return norms
