"""The semantic strategy: dense search over the store's embeddings (cosine on L2-normalised
vectors) through the store's vector index (exact, or ANN with the retriever's knobs:
``ef_search``, ``nprobe``, ``refine_factor``), restricted to the retriever's mask. Never filtered by the intent.
With ``min_score`` (the retriever's ``semantic_min_score``; Memory-Arc's ``min_score`` 0.5) hits whose
cosine is below it are dropped (a hit equal to it is kept, as a vector store's score threshold does)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from retrievers.kernel import RetrieverParams
from retrievers.multi_strategy.analysis import QueryAnalysis
from retrievers.multi_strategy.strategies.base import Hits, QueryContext, hits
from retrievers.store import ContextStore
from retrievers.vector_search import search_vectors

__all__ = ["SemanticStrategy"]


class SemanticStrategy:
    """Dense search over the store's vector index (cosine on L2-normalised vectors); ``params``
    gives the ANN knobs (None: the index's defaults)."""

    name = "semantic"

    def __init__(
        self,
        store: ContextStore,
        mask: npt.NDArray[np.bool_] | None,
        params: RetrieverParams | None = None,
        min_score: float | None = None,
    ) -> None:
        self.store = store
        self.mask = mask
        self.params = params if params is not None else RetrieverParams()
        self.min_score = min_score

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        return None

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        vectors = [context.vector for context in contexts]
        if any(vector is None for vector in vectors):
            raise RuntimeError("no query vector (the embedder failed)")
        matrix = np.stack([vector for vector in vectors if vector is not None])
        found = search_vectors(self.store, matrix, depth, mask=self.mask, params=self.params)
        if self.min_score is None:
            return [hits(scores, rows) for scores, rows in found]
        kept = []
        for scores, rows in found:
            keep = np.asarray(scores) >= self.min_score
            kept.append(hits(np.asarray(scores)[keep], np.asarray(rows)[keep]))
        return kept
