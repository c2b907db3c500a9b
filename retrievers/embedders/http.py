"""Embeddings from an OpenAI-compatible HTTP endpoint (OpenAI, Azure-style gateways, vLLM,
Hugging Face TEI, LiteLLM, Ollama, llama.cpp's server, ...), stdlib only.

``POST {base_url}/embeddings`` with ``{"model": ..., "input": [texts], "dimensions": n}``
(``dimensions`` only when set) answers ``{"data": [{"index": i, "embedding": [...]}, ...]}``.
The transport (time-out per request, retries with exponential back-off on 429, 5xx and
time-outs honouring ``Retry-After``, the API key read at call time from the environment variable
the caller names) is :class:`retrievers.http.JsonEndpoint`. Caching is not this class's job: the
harness caches any embedder by ``name`` and text content (``viking_eval.run.cache.CachedEmbedder``),
so a corpus is sent once per machine.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from typing import Any

import numpy as np

from retrievers.embedders.base import (
    EncodeKind,
    FloatMatrix,
    check_kind,
    check_string,
    check_texts,
    unit_rows,
)
from retrievers.http import EndpointError, JsonEndpoint, check_base_url
from retrievers.params import check_int

__all__ = ["OpenAIEmbedder"]

_BATCH_LIMIT = 2048  # OpenAI's limit on inputs per request
_DIM_LIMIT = 65_536


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint behind the ``Embedder`` protocol.

    ``model`` is the served model's id; ``base_url`` ends before ``/embeddings`` (e.g.
    ``https://api.openai.com/v1``, ``http://127.0.0.1:8080/v1``). ``dimensions`` asks a model that
    supports it (OpenAI text-embedding-3-*) for shorter vectors; None keeps the model's width.
    ``batch_size`` texts go in one request, in input order. ``query_prefix``/``document_prefix``
    are prepended to texts of that kind, for served models that expect them (e5, BGE on TEI or
    vLLM); OpenAI's models need none. ``timeout_s``, ``max_retries``, ``backoff_s`` and
    ``max_backoff_s`` are :class:`retrievers.http.JsonEndpoint`'s. The key is read from the
    environment variable named by ``api_key_env`` on every request and never stored, logged or
    put in :attr:`name`.

    Rows come back in input order (sorted by the answer's ``index``), as float32 with unit L2
    norm. A blank text is not sent (OpenAI refuses empty input) and gets an all-zero row. Any
    failure raises :class:`retrievers.http.EndpointError`: HTTP 4xx other than 429 at once, naming
    the status and the server's message; 429, 5xx and time-outs after ``max_retries`` retries;
    an answer of the wrong shape (a missing, repeated or extra ``index``, vectors of different
    widths, not ``dimensions`` wide, or not finite numbers) with ``kind="format"``.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key_env: str = "OPENAI_API_KEY",
        dimensions: int | None = None,
        batch_size: int = 128,
        query_prefix: str = "",
        document_prefix: str = "",
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
    ) -> None:
        check_string("model", model, hint="the served model's id, e.g. text-embedding-3-small")
        base_url = check_base_url(base_url)
        check_int("dimensions", dimensions, 1, _DIM_LIMIT, nullable=True)
        check_int("batch_size", batch_size, 1, _BATCH_LIMIT)
        check_string("query_prefix", query_prefix, non_empty=False)
        check_string("document_prefix", document_prefix, non_empty=False)
        self.endpoint = JsonEndpoint(
            base_url + "/embeddings",
            api_key_env=api_key_env,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
        )
        self.model = model
        self.base_url = base_url
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._dim: int | None = dimensions

    # -- identity ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``openai:<host[:port]>/<model>:<dimensions or "default">``, then ``|query_prefix=".."`` /
        ``|document_prefix=".."`` when set. The host names the deployment (the same model id on
        another server may be another model); user, password, path and key are left out."""
        parts = urllib.parse.urlsplit(self.base_url)
        host = parts.hostname or ""
        if ":" in host:  # an IPv6 address keeps its brackets
            host = f"[{host}]"
        if parts.port is not None:
            host += f":{parts.port}"
        width = "default" if self.dimensions is None else str(self.dimensions)
        name = f"openai:{host}/{self.model}:{width}"
        if self.query_prefix:
            name += f"|query_prefix={json.dumps(self.query_prefix)}"
        if self.document_prefix:
            name += f"|document_prefix={json.dumps(self.document_prefix)}"
        return name

    # Setters only so that mypy accepts this class as an ``Embedder`` (see SentenceTransformerEmbedder).

    @property
    def dim(self) -> int:
        """``dimensions`` when set; else the width of the vectors seen so far, or, before any,
        the width of one probe request (embedding the text ``"dimension probe"``)."""
        if self._dim is None:
            self._embed(["dimension probe"])
        if self._dim is None:  # _embed sets it or raises; this only narrows the type
            raise RuntimeError(f"{self.endpoint.url} did not report a width")
        return self._dim

    # -- encoding ---------------------------------------------------------------------------------

    def _embed(self, texts: list[str]) -> FloatMatrix:
        """One request: the vectors of ``texts`` in input order, checked (not yet normalised)."""
        payload: dict[str, Any] = {"model": self.model, "input": texts}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        answer = self.endpoint.post(payload)
        url = self.endpoint.url
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise EndpointError("format", f"answer from {url} has no 'data' list: {str(answer)[:80]!r}")
        if len(data) != len(texts):
            raise EndpointError("format", f"{url} returned {len(data)} vectors for {len(texts)} texts")
        by_index: dict[int, list[Any]] = {}
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            vector = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(texts):
                raise EndpointError(
                    "format", f"{url}: data[{position}] has index {index!r}, not in [0, {len(texts) - 1}]"
                )
            if index in by_index:
                raise EndpointError("format", f"{url}: index {index} appears twice in the answer")
            if not isinstance(vector, list) or not vector:
                raise EndpointError("format", f"{url}: data[{position}].embedding is not a list of numbers")
            by_index[index] = vector
        expected = self.dimensions if self.dimensions is not None else self._dim
        widths = {len(vector) for vector in by_index.values()}
        if len(widths) != 1 or (expected is not None and widths != {expected}):
            want = f", expected {expected}" if expected is not None else ""
            raise EndpointError("format", f"{url} returned vectors of width {sorted(widths)}{want}")
        try:  # no dtype given: strings or nulls then show in the dtype instead of being converted
            raw = np.array([by_index[i] for i in range(len(texts))])
        except (TypeError, ValueError):
            raw = np.array([], dtype=object)
        if raw.dtype.kind not in "iuf":
            raise EndpointError("format", f"{url} returned an embedding that is not all numbers")
        matrix = raw.astype(np.float64)
        if not np.isfinite(matrix).all():
            raise EndpointError("format", f"{url} returned a vector with NaN or infinity")
        self._dim = int(matrix.shape[1])
        return matrix.astype(np.float32)

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> FloatMatrix:
        """Embed ``texts`` as ``kind``: float32 ``(len(texts), dim)``, unit rows (all-zero for blank texts)."""
        check_kind(kind)
        items = check_texts(texts, "OpenAIEmbedder.encode")
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        sent = [i for i, text in enumerate(items) if text.strip()]
        blocks: list[FloatMatrix] = []
        for start in range(0, len(sent), self.batch_size):
            blocks.append(self._embed([prefix + items[i] for i in sent[start : start + self.batch_size]]))
        if not sent:  # nothing to send; the width may still need a probe request
            return np.zeros((len(items), self.dim), dtype=np.float32)
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        out[sent] = np.concatenate(blocks)
        return unit_rows(out)

    def __repr__(self) -> str:
        return (
            f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key_env={self.endpoint.api_key_env!r}, dimensions={self.dimensions})"
        )
