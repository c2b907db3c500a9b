"""Parent-child chunks: split documents at store build, resolve matched chunks to their documents.

Chunking (``store.chunking: {size, overlap}``) splits each document's text into windows of
``size`` tokens, consecutive windows sharing ``overlap`` tokens (stride ``size - overlap``). A
*token* here is a run of non-whitespace characters (``\\S+``), not a model word piece: the count
does not depend on the embedder, so BM25 and every embedder see the same chunks, and a chunk's
text is the exact slice of the original text from its first token to its last (spacing and
punctuation kept). Scientific English runs at about 1.3-1.5 MiniLM word pieces per token:
SciFact's 128-token chunks with their title are 199 word pieces at the median and 275 at the
95th percentile (MiniLM reads 256). Every chunk keeps its document's title (so a chunk is
embedded as ``title + " " + chunk``, as BEIR embeds whole documents) and metadata, plus
``parent_id`` (the document id) and ``chunk`` (its 0-based position). Chunk ids are
``<doc_id>#<n>``. A document with no text gives one chunk with empty text (its title remains).

Parent resolution (used by every flat retriever over a chunked store, so that evaluation is
always at document level): a matched chunk is replaced by its document with the chunk's score;
several chunks of one document keep the best score (and say which chunk it came from). A
document's best chunk score is known once the chunk list has been read deeply enough:
:func:`search_documents` fetches more chunks until no unread chunk can change the top ``k``
documents.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.types import Document

__all__ = [
    "CHUNK_ID_SEPARATOR",
    "ChunkingConfig",
    "ParentHits",
    "chunk_documents",
    "resolve_parents",
    "search_documents",
]

CHUNK_ID_SEPARATOR = "#"
_TOKEN_RE = re.compile(r"\S+")
_MAX_SIZE = 100_000

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.floating[Any]]
#: one query's search result: (scores, rows) ordered by (score desc, row asc)
Hits = tuple[FloatArray, IntArray]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ChunkingConfig:
    """``size``: tokens per chunk in [1, 100000]; ``overlap``: tokens shared by consecutive
    chunks, in [0, size - 1]. Tokens are whitespace-separated (see the module docstring)."""

    size: int = 128
    overlap: int = 0

    def __post_init__(self) -> None:
        if not _is_int(self.size) or not 1 <= self.size <= _MAX_SIZE:
            raise ValueError(
                f"chunking.size must be an integer in [1, {_MAX_SIZE}] tokens, got {self.size!r}"
            )
        if not _is_int(self.overlap) or not 0 <= self.overlap < self.size:
            raise ValueError(
                f"chunking.overlap must be an integer in [0, size - 1] = [0, {self.size - 1}] tokens, "
                f"got {self.overlap!r}"
            )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ChunkingConfig:
        if not isinstance(values, Mapping):
            raise ValueError(f"store.chunking must be a mapping {{size, overlap}} or null, got {values!r}")
        unknown = sorted(set(values) - {"size", "overlap"})
        if unknown:
            raise ValueError(f"unknown store.chunking key(s) {unknown}; allowed: ['overlap', 'size']")
        return cls(**dict(values))


def chunk_text(text: str, config: ChunkingConfig) -> list[str]:
    """``text`` cut into windows of ``config.size`` whitespace tokens sharing ``config.overlap``;
    each window is the original text from its first token's start to its last token's end. The
    last window ends at the last token (it may be shorter); an empty text gives ``[""]``."""
    spans = [match.span() for match in _TOKEN_RE.finditer(text)]
    if not spans:
        return [""]
    stride = config.size - config.overlap
    windows: list[str] = []
    start = 0
    while True:
        end = min(start + config.size, len(spans))
        windows.append(text[spans[start][0] : spans[end - 1][1]])
        if end == len(spans):
            return windows
        start += stride


def chunk_documents(documents: Iterable[Document], config: ChunkingConfig) -> list[Document]:
    """Every document's chunks (ids ``<doc_id>#<n>``, title and metadata kept, ``parent_id``
    and ``chunk`` added), in input order."""
    chunks: list[Document] = []
    for doc in documents:
        for n, text in enumerate(chunk_text(doc.text, config)):
            metadata = {**doc.metadata, "parent_id": doc.id, "chunk": n}
            chunks.append(
                Document(id=f"{doc.id}{CHUNK_ID_SEPARATOR}{n}", text=text, title=doc.title, metadata=metadata)
            )
    return chunks


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
