"""Cross-encoder reranker: a sentence-transformers ``CrossEncoder`` reads query and text together
(Nogueira & Cho, "Passage re-ranking with BERT", 2019); loaded lazily."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from retrievers.params import check_int
from retrievers.types import RetrievalResult

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

__all__ = ["CrossEncoderReranker"]


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` scoring ``(query, text)`` pairs.

    ``model_name`` is a local folder or a hub id (resolved like the embedders' names; no PyPI
    package ships cross-encoder weights, so offline it must be a folder). The model loads on the
    first :meth:`rerank`. ``max_length`` in [1, 8192] word pieces per pair or None (the model's);
    ``batch_size`` >= 1. Scores are the model's outputs after its default activation (a sigmoid
    for one-label models such as the MS MARCO cross-encoders, so in [0, 1]).
    """

    def __init__(
        self,
        model_name: str,
        *,
        max_length: int | None = 512,
        batch_size: int = 32,
        device: str = "cpu",
    ) -> None:
        if not isinstance(model_name, str) or not model_name.strip():
            raise ValueError(f"model_name must be a non-empty string, got {model_name!r}")
        check_int("max_length", max_length, 1, 8192, nullable=True)
        check_int("batch_size", batch_size, 1)
        if not isinstance(device, str) or not device:
            raise ValueError(f"device must be a non-empty string such as 'cpu', got {device!r}")
        self.model_name = model_name
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self._model: CrossEncoder | None = None
        self._lock = threading.Lock()

    @property
    def model(self) -> CrossEncoder:
        with self._lock:
            if self._model is None:
                from sentence_transformers import CrossEncoder

                from retrievers.embedders import resolve_model_path

                self._model = CrossEncoder(
                    resolve_model_path(self.model_name), device=self.device, max_length=self.max_length
                )
            return self._model

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        pairs = [(query, text) for text in texts]
        scores = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        return [float(score) for score in np.asarray(scores, dtype=np.float64).reshape(-1)]

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(model_name={self.model_name!r})"
