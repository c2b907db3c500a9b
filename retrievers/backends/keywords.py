"""A backend's keyword search behind the store's ``bm25`` attribute, so every family's keyword
leg (``store.bm25.search`` / ``store.bm25.scores``) runs in the database unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from retrievers.backends.base import SearchBackend
from retrievers.index.bm25 import BM25Index
from retrievers.index.vectors import Hits
from retrievers.ranking import check_mask, check_positive_int

__all__ = ["BackendKeywords", "allowed_rows"]


def allowed_rows(mask: npt.ArrayLike | None, size: int) -> npt.NDArray[np.int64] | None:
    """A search mask as the sorted rows it allows (None: every row), what backends filter on."""
    if mask is None:
        return None
    return np.flatnonzero(check_mask(mask, size)).astype(np.int64)


class BackendKeywords(BM25Index):
    """``search`` and ``scores`` of :class:`BM25Index`, answered by a backend's keyword search
    (its own scoring: FTS5 ``bm25()``, ``ts_rank_cd``, Qdrant sparse BM25)."""

    def __init__(self, backend: SearchBackend, local: BM25Index) -> None:
        # the local index's settings describe the store; its postings are not searched
        self.params = dict(local.params)
        self.size = local.size
        self.backend = backend

    def scores(self, query: str) -> npt.NDArray[np.float32]:
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {type(query).__name__}")
        return self.backend.keyword_scores(query)

    def search(
        self,
        queries: Sequence[str],
        k: int,
        *,
        mask: npt.ArrayLike | None = None,
        show_progress: bool = False,
    ) -> Hits:
        k = check_positive_int(k, "k")
        return self.backend.keyword_search(list(queries), k, allowed_rows(mask, self.size))

    def save(self, folder: Path) -> None:
        raise ValueError(
            f"a store served by store.backend={self.backend.kind} is not saved to files; save the local store"
        )
