"""Parent resolution: matched chunks become the documents they came from.

In a chunked store (``store.chunking``) rows are chunks and every retriever answers with
documents: a matched chunk is replaced by its document with the chunk's score, and several chunks
of one document keep the best score (and say which chunk it came from). A document's best chunk
score is known once a ranked chunk list has been read deeply enough: :func:`search_documents`
fetches more chunks until no unread chunk can change the top ``k`` documents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Hits", "ParentHits", "resolve_parents", "search_documents"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.floating[Any]]
#: one query's search result: (scores, rows) ordered by (score desc, row asc)
Hits = tuple[FloatArray, IntArray]


@dataclass(frozen=True)
class ParentHits:
    """Documents found through their chunks, ordered by (score desc, document index asc):
    ``parents[i]`` is an index into the store's parent documents, ``scores[i]`` its best chunk
    score and ``rows[i]`` the store row of that chunk."""

    parents: IntArray
    scores: FloatArray
    rows: IntArray

    def __len__(self) -> int:
        return int(self.parents.shape[0])

    def head(self, k: int) -> ParentHits:
        return ParentHits(self.parents[:k], self.scores[:k], self.rows[:k])


def resolve_parents(parent_of: npt.ArrayLike, rows: npt.ArrayLike, scores: npt.ArrayLike) -> ParentHits:
    """Replace each row by its parent document, keeping each parent's best score.

    ``parent_of[row]`` is the parent index of a store row; parent indices follow document id
    order, so ordering parents by (score desc, parent index asc) is the project's ranking rule.
    When a parent has several rows with its best score, the lowest row is reported.
    """
    parent_map = np.asarray(parent_of, dtype=np.int64)
    row_array = np.asarray(rows, dtype=np.int64)
    score_array = np.asarray(scores)
    if row_array.shape != score_array.shape or row_array.ndim != 1:
        raise ValueError(
            f"rows {row_array.shape} and scores {score_array.shape} must be 1-D and equal in length"
        )
    if row_array.size == 0:
        return ParentHits(np.empty(0, np.int64), score_array[:0], np.empty(0, np.int64))
    by_chunk = np.lexsort((row_array, -score_array))  # score desc, row asc
    parents = parent_map[row_array[by_chunk]]
    # first occurrence of each parent in that order = its best chunk
    _, first = np.unique(parents, return_index=True)
    best = by_chunk[first]
    best_parents = parent_map[row_array[best]]
    best_scores = score_array[best]
    order = np.lexsort((best_parents, -best_scores))
    return ParentHits(best_parents[order], best_scores[order], row_array[best][order])


def search_documents(
    search: Callable[[Sequence[int], int], Sequence[Hits]],
    n_queries: int,
    top_k: int,
    parent_of: npt.ArrayLike,
    *,
    first_fetch: int | None = None,
    growth: int = 4,
) -> list[ParentHits]:
    """The top ``top_k`` documents per query from a chunk-level search, exactly.

    ``search(query_indices, k)`` returns each listed query's top ``k`` chunks by (score desc,
    row asc). A query is settled when its search returned fewer than ``k`` chunks (all
    candidates read) or when the last chunk read scores strictly below the ``top_k``-th
    document's best score (no unread chunk can enter or tie the top ``top_k``); otherwise it is
    searched again ``growth`` times deeper. The first search reads ``first_fetch`` chunks
    (default ``4 * top_k``).
    """
    parent_map = np.asarray(parent_of, dtype=np.int64)
    fetch = first_fetch if first_fetch is not None else 4 * top_k
    if fetch < 1 or growth < 2:
        raise ValueError(f"first_fetch must be >= 1 and growth >= 2, got {fetch}, {growth}")
    results: list[ParentHits | None] = [None] * n_queries
    pending = list(range(n_queries))
    n_rows = int(parent_map.shape[0])
    while pending:
        still: list[int] = []
        for query, (scores, rows) in zip(pending, search(pending, fetch), strict=True):
            hits = resolve_parents(parent_map, rows, scores)
            exhausted = len(rows) < fetch or fetch >= n_rows
            settled = len(hits) >= top_k and float(scores[-1]) < float(hits.scores[top_k - 1])
            if exhausted or settled:
                results[query] = hits.head(top_k)
            else:
                still.append(query)
        pending = still
        fetch *= growth
    return [hits for hits in results if hits is not None]
