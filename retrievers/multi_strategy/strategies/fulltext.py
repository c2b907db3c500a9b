"""The full-text strategy: the store's BM25 index (``fulltext_scoring: bm25``), or the seed
design's keyword score (``seed``)::

    matches / keywords * 0.6 + importance / 10 * 0.4

``matches`` counts the analyser's keywords found as whole words (:func:`retrievers.text.words`)
in the title and text, ``importance`` is ``metadata.importance`` clipped to 0..10; a document without a
numeric one gets ``default_importance`` (the retriever's; 0 by default, Memory-Arc's 5 in its preset).
Both are restricted to the retriever's mask; with ``seed`` a row matching no keyword never scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.multi_strategy.analysis import QueryAnalysis
from retrievers.multi_strategy.strategies.base import Hits, QueryContext, SharedIndexes, hits
from retrievers.params import is_number
from retrievers.ranking import top_k_1d
from retrievers.store import ContextStore
from retrievers.text import words

__all__ = ["FullTextStrategy"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def _token_rows(documents: Sequence[Any]) -> dict[str, IntArray]:
    """word -> rows holding it (the words of each row's title and text)."""
    postings: dict[str, list[int]] = {}
    for row, doc in enumerate(documents):
        for token in set(words(doc.full_text)):
            postings.setdefault(token, []).append(row)
    return {token: np.asarray(rows, dtype=np.int64) for token, rows in postings.items()}


def _importance(documents: Sequence[Any], default: float) -> FloatArray:
    values = np.full(len(documents), default, dtype=np.float64)
    for row, doc in enumerate(documents):
        raw = doc.metadata.get("importance")
        if is_number(raw) and math.isfinite(float(raw)):
            values[row] = min(max(float(raw), 0.0), 10.0)
    return values


class FullTextStrategy:
    """BM25 over the store's index, or the seed design's keyword-ratio-plus-importance score."""

    name = "fulltext"

    def __init__(
        self,
        store: ContextStore,
        mask: BoolArray | None,
        scope: BoolArray,
        scoring: str,
        default_importance: float = 0.0,
    ) -> None:
        self.store = store
        self.mask = mask
        self.scope = scope
        self.scoring = scoring
        self.default_importance = default_importance

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        if self.scoring == "seed" and not analysis.keywords:
            return "the query has no keyword"
        return None

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        if self.scoring == "bm25":
            queries = [context.analysis.query for context in contexts]
            return [hits(s, r) for s, r in self.store.bm25.search(queries, depth, mask=self.mask)]
        documents = self.store.documents
        postings: dict[str, IntArray] = SharedIndexes.get(documents, "tokens", lambda: _token_rows(documents))
        default = self.default_importance
        importance: FloatArray = SharedIndexes.get(
            documents, f"importance:{default!r}", lambda: _importance(documents, default)
        )
        results: list[Hits] = []
        for context in contexts:
            keywords = context.analysis.keywords
            matches = np.zeros(len(self.store), dtype=np.float64)
            for keyword in keywords:
                rows = postings.get(keyword)
                if rows is not None:
                    matches[rows] += 1.0
            candidates = self.scope & (matches > 0)
            if not keywords or not candidates.any():
                results.append(hits([], []))
                continue
            scores = matches / len(keywords) * 0.6 + importance / 10.0 * 0.4
            results.append(hits(*top_k_1d(scores, depth, mask=candidates)))
        return results
