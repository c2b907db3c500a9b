"""What every strategy shares: the per-query input, the interface, per-corpus caches.

A strategy answers a block of queries at once with, per query, up to ``depth`` store rows and
their raw scores as :data:`~retrievers.parents.Hits` (``(scores, rows)`` by score desc, row
asc), restricted to the retriever's mask (its scope and filters). It may say a query does not
apply to it (:meth:`Strategy.unavailable`): the retriever then skips it and records why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from retrievers.multi_strategy.analysis import QueryAnalysis
from retrievers.parents import Hits

__all__ = ["Hits", "QueryContext", "SharedIndexes", "Strategy", "hits"]


@dataclass(frozen=True)
class QueryContext:
    """What a strategy gets for one query: its analysis and (for vector strategies) its vector."""

    analysis: QueryAnalysis
    vector: npt.NDArray[np.float32] | None


class Strategy(Protocol):
    name: str

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        """Why this strategy cannot apply to this query (None = it applies)."""

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        """Up to ``depth`` (scores, rows) per query, by (score desc, row asc)."""


def hits(scores: npt.ArrayLike, rows: npt.ArrayLike) -> Hits:
    """``(scores, rows)`` as float64 and int64 arrays."""
    return np.asarray(scores, dtype=np.float64), np.asarray(rows, dtype=np.int64)


class SharedIndexes:
    """Per-corpus structures (token sets, name parts) built once and shared by every retriever
    and scoped view over the same documents list (the runner makes one retriever per scope)."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _entries: ClassVar[dict[tuple[int, str], tuple[object, object]]] = {}
    _max_entries: ClassVar[int] = 8

    @classmethod
    def get(cls, documents: object, key: str, build: Callable[[], Any]) -> Any:
        with cls._lock:
            entry = cls._entries.get((id(documents), key))
            if entry is not None and entry[0] is documents:
                return entry[1]
            value = build()
            if len(cls._entries) >= cls._max_entries:
                cls._entries.pop(next(iter(cls._entries)))
            # the documents list is kept alive with the entry, so its id cannot be reused
            cls._entries[(id(documents), key)] = (documents, value)
            return value
