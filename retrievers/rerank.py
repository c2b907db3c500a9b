"""Rerankers and the fallback every retriever uses to call them.

A reranker is anything with ``rerank(query, candidates, texts) -> list[float]``
(:class:`retrievers.types.Reranker`): one score per candidate, higher is better. Three here:

* :class:`EmbeddingReranker` — a bi-encoder reranker: the cosine of the query vector and the
  vector of each candidate's full text, from any :class:`~retrievers.types.Embedder` (typically
  a dense model given a longer input limit than the index was built with, or a stronger model
  than the first stage). Document vectors are kept in a bounded in-memory cache by text.
* :class:`CrossEncoderReranker` — a sentence-transformers ``CrossEncoder`` (query and text read
  together; Nogueira & Cho, "Passage re-ranking with BERT", 2019), loaded lazily.
* :class:`LLMReranker` — asks an OpenAI-compatible chat-completions endpoint for a 0-10 relevance
  grade per candidate as JSON (pointwise LLM grading, e.g. Sun et al., "Is ChatGPT good at
  search?", EMNLP 2023, compare listwise), scores = grade / 10 in [0, 1].

:func:`rerank_with_fallback` is how retrievers call one: a reranker that raises, times out,
returns None, a list of the wrong length or any non-finite (or non-numeric) score is not
trusted at all — the incoming scores come back unchanged, so the incoming order is kept, with a
reason to record. One bad item voids the whole answer rather than only that item: reranker
scores and first-stage scores are on different scales, and mixing them in one list would order
that item arbitrarily against the others.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from retrievers.llm import ChatClient, LLMError, parse_json_content
from retrievers.types import Embedder, Reranker, RetrievalResult

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

__all__ = [
    "CrossEncoderReranker",
    "EmbeddingReranker",
    "LLMReranker",
    "RerankError",
    "rerank_with_fallback",
]


class RerankError(RuntimeError):
    """A reranker could not produce scores (bad HTTP answer, unparseable grades, ...)."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def check_timeout(value: object, name: str, limit: float = 3600.0) -> float | None:
    """``value`` as seconds in (0, limit], or None (no limit); else ValueError."""
    if value is None:
        return None
    if not _is_number(value) or not 0 < float(value) <= limit:  # type: ignore[arg-type]
        raise ValueError(f"{name} must be in (0, {limit:g}] seconds or null (no limit), got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _call_with_timeout(call: Callable[[], Any], timeout_s: float | None) -> tuple[Any, str | None]:
    """``(answer, None)``, or ``(None, reason)`` when ``call`` raises or, with a ``timeout_s``,
    takes longer. A timed-out call keeps running in a daemon thread; its answer is dropped."""
    if timeout_s is None:
        try:
            return call(), None
        except Exception as error:  # any failure of a reranker means: keep the incoming scores
            return None, f"raised {type(error).__name__}: {error}"
    box: list[tuple[Any, str | None]] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append((call(), None))
        except Exception as error:
            box.append((None, f"raised {type(error).__name__}: {error}"))
        finally:
            done.set()

    threading.Thread(target=run, name="rerank", daemon=True).start()
    if not done.wait(timeout_s):
        return None, f"timed out after {timeout_s:g} s"
    return box[0]


def rerank_with_fallback(
    reranker: Reranker,
    query: str,
    candidates: Sequence[RetrievalResult],
    texts: Sequence[str],
    *,
    timeout_s: float | None = None,
) -> tuple[list[float], str | None]:
    """Scores for ``candidates`` from ``reranker``, or their own scores and the reason why not.

    Returns ``(scores, None)`` on success, ``scores[i]`` being the reranker's score of
    ``candidates[i]``; ``(incoming scores, reason)`` when the reranker raises, exceeds
    ``timeout_s`` seconds, returns None, not a list, a list of the wrong length, or a value that
    is not a finite number (see the module docstring). Candidates whose text is empty or blank
    are not sent; they get the lowest reranker score minus 1 (after every reranked candidate,
    tied among themselves, so the doc id breaks their ties). No candidate with text: incoming
    scores and a reason. ``texts[i]`` is the text of ``candidates[i]``.
    """
    if len(texts) != len(candidates):
        raise ValueError(f"got {len(texts)} texts for {len(candidates)} candidates")
    incoming = [float(candidate.score) for candidate in candidates]
    if not candidates:
        return incoming, None
    sent = [i for i, text in enumerate(texts) if isinstance(text, str) and text.strip()]
    if not sent:
        return incoming, "no candidate has text to rerank"
    sent_candidates = [candidates[i] for i in sent]
    sent_texts = [texts[i] for i in sent]
    answer, failure = _call_with_timeout(
        lambda: reranker.rerank(query, sent_candidates, sent_texts), timeout_s
    )
    if failure is not None:
        return incoming, failure
    if answer is None:
        return incoming, "returned None"
    if isinstance(answer, np.ndarray):
        answer = answer.tolist()
    if isinstance(answer, str | bytes) or not isinstance(answer, Sequence):
        return incoming, f"returned {type(answer).__name__}, not a list of scores"
    if len(answer) != len(sent):
        return incoming, f"returned {len(answer)} scores for {len(sent)} candidates"
    values: list[float] = []
    for candidate, value in zip(sent_candidates, answer, strict=True):
        if not _is_number(value) or not math.isfinite(float(value)):
            return incoming, f"returned {value!r} for {candidate.doc_id!r}, not a finite number"
        values.append(float(value))
    if len(sent) == len(candidates):
        return values, None
    scores = [min(values) - 1.0] * len(candidates)
    for i, value in zip(sent, values, strict=True):
        scores[i] = value
    return scores, None


# --------------------------------------------------------------------------------------------
# Bi-encoder reranker
# --------------------------------------------------------------------------------------------


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
        if not _is_int(cache_size) or not 0 <= cache_size <= 10_000_000:
            raise ValueError(f"cache_size must be an integer in [0, 10000000], got {cache_size!r}")
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


# --------------------------------------------------------------------------------------------
# Cross-encoder reranker
# --------------------------------------------------------------------------------------------


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
        if max_length is not None and (not _is_int(max_length) or not 1 <= max_length <= 8192):
            raise ValueError(f"max_length must be an integer in [1, 8192] or null, got {max_length!r}")
        if not _is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
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


# --------------------------------------------------------------------------------------------
# LLM reranker (OpenAI-compatible HTTP)
# --------------------------------------------------------------------------------------------

_SYSTEM_PROMPT = (
    "You grade how relevant passages are to a search query. Grade every passage on its own, "
    "from 0 (unrelated) to 10 (answers the query directly). Reply with JSON only, exactly "
    '{"scores": [g0, g1, ...]}: one number per passage, in the order given.'
)
MAX_GRADE = 10.0


def parse_grades(content: str, n_passages: int) -> list[float]:
    """The grades in an LLM answer, mapped to [0, 1] (grade / 10).

    Accepts ``{"scores": [...]}`` or a bare JSON list, optionally inside a Markdown code fence.
    Raises :class:`RerankError` unless there are exactly ``n_passages`` numbers in [0, 10]."""
    try:
        data = parse_json_content(content)
    except LLMError as error:
        raise RerankError(str(error)) from None
    grades = data.get("scores") if isinstance(data, dict) else data
    if not isinstance(grades, list):
        raise RerankError(f'answer has no "scores" list: {content[:80]!r}')
    if len(grades) != n_passages:
        raise RerankError(f"answer grades {len(grades)} passages, {n_passages} were sent")
    out: list[float] = []
    for i, grade in enumerate(grades):
        if not _is_number(grade) or not 0.0 <= float(grade) <= MAX_GRADE:
            raise RerankError(f"grade {i} is {grade!r}, not a number in [0, 10]")
        out.append(float(grade) / MAX_GRADE)
    return out


class LLMReranker:
    """Pointwise relevance grades from an OpenAI-compatible ``POST {base_url}/chat/completions``
    (:class:`retrievers.llm.ChatClient`).

    Each request holds the query and up to ``batch_size`` numbered passages (each cut to
    ``max_text_chars`` characters) and asks for ``{"scores": [...]}``, one 0-10 grade per
    passage; scores are grade / 10. Grades are absolute, so batches of one query compare.
    The API key is read at call time from the environment variable ``api_key_env`` (unset or
    empty: no Authorization header, which local servers accept). ``timeout_s`` in (0, 600]
    bounds each HTTP request. Any failure (HTTP error, time-out, an answer that does not parse)
    raises :class:`RerankError`; :func:`rerank_with_fallback` turns that into a recorded fallback.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 30.0,
        batch_size: int = 20,
        max_text_chars: int = 2000,
        temperature: float = 0.0,
    ) -> None:
        self.client = ChatClient(
            base_url, model, api_key_env=api_key_env, timeout_s=timeout_s, temperature=temperature
        )
        if not _is_int(batch_size) or not 1 <= batch_size <= 1000:
            raise ValueError(f"batch_size must be an integer in [1, 1000], got {batch_size!r}")
        if not _is_int(max_text_chars) or not 1 <= max_text_chars <= 1_000_000:
            raise ValueError(f"max_text_chars must be an integer in [1, 1000000], got {max_text_chars!r}")
        self.batch_size = batch_size
        self.max_text_chars = max_text_chars

    def _prompt(self, query: str, texts: Sequence[str]) -> str:
        passages = "\n".join(
            f"[{i}] {' '.join(text[: self.max_text_chars].split())}" for i, text in enumerate(texts)
        )
        return f"Query: {' '.join(query.split())}\n\nPassages:\n{passages}\n\nJSON grades for {len(texts)} passages:"

    def _grade(self, query: str, texts: Sequence[str]) -> list[float]:
        try:
            content = self.client.complete(_SYSTEM_PROMPT, self._prompt(query, texts))
        except LLMError as error:
            raise RerankError(str(error)) from None
        return parse_grades(content, len(texts))

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            scores += self._grade(query, texts[start : start + self.batch_size])
        return scores

    def __repr__(self) -> str:
        return f"LLMReranker(url={self.client.url!r}, model={self.client.model!r})"
