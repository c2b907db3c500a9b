"""The TF-IDF of directory labels without scikit-learn's per-token Python loop, for big corpora.

:func:`label_tfidf` computes what :func:`retrievers.text.fit_tfidf` with
``token_pattern=LABEL_PATTERN`` computes (lowercased text, the pattern's words, scikit-learn's
English stop words dropped, terms numbered in sorted order, sublinear tf ``1 + log(count)``,
smooth idf ``log((1 + n) / (1 + df)) + 1``, L2-normalised rows, float64), with the counting done
in numpy: each block of :data:`CHUNK` texts is tokenised with one ``findall`` per text, its words
mapped to ids through a dict in one pass and the (text, term) pairs counted by sorting. The values
equal scikit-learn's to rounding (``tests/test_tree_kmeans.py``); the faiss tree builder
(:mod:`retrievers.builders.kmeans_tree`) uses it, the default builder keeps scikit-learn's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from retrievers.text import LABEL_PATTERN

__all__ = ["CHUNK", "label_tfidf"]

CHUNK = 20_000


def label_tfidf(texts: Sequence[str]) -> tuple[list[str], Any]:
    """``(terms, csr matrix)``: the sorted terms and one L2-normalised TF-IDF row per text.
    Raises ValueError when no text holds a term (as scikit-learn does)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    pattern = re.compile(LABEL_PATTERN)
    ids: dict[str, int] = {}  # word -> first-seen id (-1 for a stop word)
    for word in ENGLISH_STOP_WORDS:
        ids[word] = -1
    n = len(texts)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    for start in range(0, n, CHUNK):
        words: list[str] = []
        lengths = np.empty(min(CHUNK, n - start), dtype=np.int64)
        for i, text in enumerate(texts[start : start + CHUNK]):
            found = pattern.findall(text.lower())
            lengths[i] = len(found)
            words += found
        for word in words:  # new words get the next id, in order of first sight
            if word not in ids:
                ids[word] = len(ids)
        term = np.fromiter(map(ids.__getitem__, words), dtype=np.int64, count=len(words))
        owner = np.repeat(np.arange(start, start + lengths.size, dtype=np.int64), lengths)
        keep = term >= 0
        key = owner[keep] * (len(ids) + 1) + term[keep]
        unique, count = np.unique(key, return_counts=True)
        rows.append(unique // (len(ids) + 1))
        cols.append(unique % (len(ids) + 1))
        counts.append(count)
    vocabulary = sorted((word, first) for word, first in ids.items() if first >= 0)
    if not vocabulary:
        raise ValueError("empty vocabulary; perhaps the documents only contain stop words")
    rank = np.full(len(ids) + 1, -1, dtype=np.int64)  # first-seen id -> sorted id
    rank[[first for _, first in vocabulary]] = np.arange(len(vocabulary))
    row = np.concatenate(rows)
    col = rank[np.concatenate(cols)]
    tf = 1.0 + np.log(np.concatenate(counts).astype(np.float64))
    df = np.bincount(col, minlength=len(vocabulary)).astype(np.float64)
    idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
    matrix = sp.csr_matrix((tf * idf[col], (row, col)), shape=(n, len(vocabulary)), dtype=np.float64)
    matrix.sort_indices()
    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    norms[norms == 0.0] = 1.0
    matrix = sp.csr_matrix(sp.diags(1.0 / norms) @ matrix)
    return [word for word, _ in vocabulary], matrix
