"""Reranker for the common ``/rerank`` HTTP API (stdlib only).

``POST {base_url}/rerank`` with ``{"model", "query", "documents": [texts], "top_n": n}``
answering ``{"results": [{"index": i, "relevance_score": s}, ...]}`` (in any order) is the
shape of Cohere, Jina, vLLM, Infinity, Xinference, LiteLLM's proxy and OpenVINO Model Server
(``api="cohere"``). Hugging Face TEI's own ``/rerank`` takes ``{"query", "texts"}`` and answers
a bare list of ``{"index", "score"}`` (``api="tei"``). The transport (time-out, retries with
back-off on 429, 5xx and time-outs honouring ``Retry-After``, a key from the environment
variable the caller names) is :class:`retrievers.http.JsonEndpoint`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, Literal

from retrievers.http import EndpointError, JsonEndpoint, check_base_url
from retrievers.params import ParamError, check_choice, check_int, is_number
from retrievers.rerank.policy import RerankError
from retrievers.types import RetrievalResult

__all__ = ["HTTPReranker", "parse_rerank_answer"]

RerankAPI = Literal["cohere", "tei"]
_APIS: tuple[str, ...] = ("cohere", "tei")


def parse_rerank_answer(answer: Any, n_documents: int, where: str = "the answer") -> list[float]:
    """One score per sent document, in the order sent, from a ``/rerank`` answer.

    Accepts ``{"results": [...]}`` or a bare list of items with ``index`` and
    ``relevance_score`` (or ``score``). Raises :class:`RerankError` when an index is missing (the
    server cut the list: a document without a score cannot be placed), repeated or out of range,
    or a score is not a finite number."""
    items = answer.get("results") if isinstance(answer, dict) else answer
    if not isinstance(items, list):
        raise RerankError(f"{where} has no 'results' list: {str(answer)[:80]!r}")
    scores: list[float | None] = [None] * n_documents
    for position, item in enumerate(items):
        index = item.get("index") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < n_documents:
            raise RerankError(
                f"{where}: results[{position}] has index {index!r}, not in [0, {n_documents - 1}]"
            )
        if scores[index] is not None:
            raise RerankError(f"{where}: document {index} is scored twice")
        value = item.get("relevance_score", item.get("score"))
        if not is_number(value) or not math.isfinite(float(value)):
            raise RerankError(f"{where}: results[{position}] has score {value!r}, not a finite number")
        scores[index] = float(value)
    missing = [i for i, score in enumerate(scores) if score is None]
    if missing:
        raise RerankError(
            f"{where} scores {n_documents - len(missing)} of {n_documents} documents; missing indexes {missing[:10]}"
        )
    return [float(score) for score in scores if score is not None]


class HTTPReranker:
    """Scores from a ``/rerank`` endpoint (see the module docstring); one score per candidate,
    in input order, higher is better.

    ``base_url`` ends before ``/rerank`` (e.g. ``https://api.cohere.com/v2``,
    ``https://api.jina.ai/v1``, ``http://127.0.0.1:8000/v1``); ``model`` the served reranker's
    id. Candidates go ``batch_size`` at a time with ``top_n`` = the batch's size, so every one is
    scored; cross-encoder scores are per (query, document) pair, so batches of one query
    compare. ``max_text_chars`` cuts each text (None sends it whole; servers truncate to their
    model's limit). ``timeout_s``, ``max_retries``, ``backoff_s`` and ``max_backoff_s`` are
    :class:`retrievers.http.JsonEndpoint`'s; the retriever's ``rerank_timeout`` bounds the whole
    call on top. The key is read at call time from the environment variable ``api_key_env``.

    Any failure (HTTP error after the retries, time-out, an answer that misses a document or is
    not scores) raises :class:`RerankError`; :func:`retrievers.rerank.rerank_with_fallback` turns
    that into a recorded fallback that keeps the first-stage order.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "RERANK_API_KEY",
        api: RerankAPI = "cohere",
        batch_size: int = 64,
        max_text_chars: int | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
    ) -> None:
        base_url = check_base_url(base_url)
        if not isinstance(model, str) or not model.strip():
            raise ParamError(
                "model", f"model must be a non-empty string (the served reranker's id), got {model!r}"
            )
        check_choice("api", api, _APIS)
        check_int("batch_size", batch_size, 1, 10_000)
        check_int("max_text_chars", max_text_chars, 1, 10_000_000, nullable=True)
        self.endpoint = JsonEndpoint(
            base_url + "/rerank",
            api_key_env=api_key_env,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
            retry_log_level=logging.DEBUG,  # failures become fallbacks, counted once a run
        )
        self.base_url = base_url
        self.model = model
        self.api: RerankAPI = api
        self.batch_size = batch_size
        self.max_text_chars = max_text_chars

    def _payload(self, query: str, texts: list[str]) -> dict[str, Any]:
        if self.api == "tei":
            return {"query": query, "texts": texts}
        return {"model": self.model, "query": query, "documents": texts, "top_n": len(texts)}

    def _score(self, query: str, texts: list[str]) -> list[float]:
        try:
            answer = self.endpoint.post(self._payload(query, texts))
        except EndpointError as error:
            raise RerankError(str(error)) from None
        return parse_rerank_answer(answer, len(texts), f"answer from {self.endpoint.url}")

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        if len(texts) != len(candidates):
            raise ValueError(f"got {len(texts)} texts for {len(candidates)} candidates")
        cut = [text if self.max_text_chars is None else text[: self.max_text_chars] for text in texts]
        scores: list[float] = []
        for start in range(0, len(cut), self.batch_size):
            scores += self._score(query, cut[start : start + self.batch_size])
        return scores

    def __repr__(self) -> str:
        return (
            f"HTTPReranker(url={self.endpoint.url!r}, model={self.model!r}, api={self.api!r}, "
            f"api_key_env={self.endpoint.api_key_env!r})"
        )
