"""Bi-encoder reranker: the cosine of the query and each candidate's full text."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from retrievers.params import check_int
from retrievers.rerank.policy import RerankError
from retrievers.types import Embedder, RetrievalResult

__all__ = ["EmbeddingReranker"]


class EmbeddingReranker:
    """Re-scores candidates by ``cos(query, text) = q . d`` with ``embedder``'s L2-normalised
    query and document vectors of the candidates' full texts.

    The first stage may have matched a chunk or a truncated document; this reads the text it
    is given (up to the embedder's own input limit). Document vectors are cached by text (at
    most ``cache_size`` in [0, 10000000] texts, oldest dropped first; 0 = no cache), so a
    document reranked for many queries is encoded once. Thread-safe.
    """

    def __init__(self, embedder: Embedder, *, cache_size: int = 100_000) -> None:
        if not callable(getattr(embedder, "encode", None)):
            raise ValueError(f"embedder must be an Embedder (with encode()), got {embedder!r}")
        check_int("cache_size", cache_size, 0, 10_000_000)
        self.embedder = embedder
        self.cache_size = cache_size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def _document_vectors(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            missing = list(dict.fromkeys(text for text in texts if text not in self._vectors))
        fresh: dict[str, np.ndarray] = {}
        if missing:
            encoded = np.asarray(self.embedder.encode(missing, kind="document"), dtype=np.float32)
            if encoded.shape[0] != len(missing):
                raise RerankError(f"embedder returned {encoded.shape[0]} vectors for {len(missing)} texts")
            fresh = dict(zip(missing, encoded, strict=True))
        with self._lock:
            rows = [fresh[text] if text in fresh else self._vectors[text] for text in texts]
            if self.cache_size:
                self._vectors.update(fresh)
                while len(self._vectors) > self.cache_size:
                    self._vectors.popitem(last=False)
        return np.stack(rows)

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        query_vector = np.asarray(self.embedder.encode([query], kind="query"), dtype=np.float32)[0]
        scores = self._document_vectors(texts).astype(np.float64) @ query_vector.astype(np.float64)
        return [float(score) for score in scores]

    def __repr__(self) -> str:
        return f"EmbeddingReranker(embedder={getattr(self.embedder, 'name', self.embedder)!r})"
