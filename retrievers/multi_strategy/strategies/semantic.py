"""The semantic strategy: exact dense search over the store's embeddings (cosine on
L2-normalised vectors), restricted to the retriever's mask. Never filtered by the intent."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from retrievers.multi_strategy.analysis import QueryAnalysis
from retrievers.multi_strategy.strategies.base import Hits, QueryContext, hits
from retrievers.store import ContextStore

__all__ = ["SemanticStrategy"]


class SemanticStrategy:
    """Dense exact search over the store (cosine on L2-normalised vectors)."""

    name = "semantic"

    def __init__(self, store: ContextStore, mask: npt.NDArray[np.bool_] | None) -> None:
        self.store = store
        self.mask = mask

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        return None

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        vectors = [context.vector for context in contexts]
        if any(vector is None for vector in vectors):
            raise RuntimeError("no query vector (the embedder failed)")
        matrix = np.stack([vector for vector in vectors if vector is not None])
        return [
            hits(scores, rows) for scores, rows in self.store.vectors.search(matrix, depth, mask=self.mask)
        ]
