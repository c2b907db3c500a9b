"""The reader's and judge's calls: one OpenAI-compatible ``/chat/completions`` request per
question (temperature 0, ``llm.max_tokens``), through the project's JSON client
(:class:`retrievers.http.JsonEndpoint`: time-out, retries of 429/5xx/time-outs with back-off, the
key from ``llm.api_key_env``), the reply's ``usage`` kept for tokens and cost, every reply cached
by content key (``cache.py``), at most ``llm.concurrency`` requests at once.

A reply whose content its caller cannot parse (a judge that gives no verdict) is asked again, up
to ``llm.max_retries`` times, like a 5xx; when every try failed the run stops with an
:class:`retrievers.llm.LLMError` naming the query (exit status 1, one line): the replies already
cached are not asked again by the next run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from retrievers.http import EndpointError, JsonEndpoint
from retrievers.llm import LLMError
from viking_eval.answers.cache import CachedReply, ReplyCache, reply_key
from viking_eval.answers.prompts import Prompt
from viking_eval.answers.settings import LlmSettings

__all__ = ["Asked", "ChatUsage", "LlmCaller", "Request"]

log = logging.getLogger(__name__)
T = TypeVar("T")
TEMPERATURE = 0.0


@dataclass(frozen=True)
class Request:
    """One question to the model: its label for messages (the query id), the prompt and its values."""

    label: str
    prompt: Prompt
    values: dict[str, str]


@dataclass(frozen=True)
class Asked(Generic[T]):
    """A parsed reply, its raw text, its tokens (as recorded when asked) and whether the cache had it."""

    value: T
    content: str
    prompt_tokens: int
    completion_tokens: int
    usage_known: bool
    cached: bool


@dataclass
class ChatUsage:
    """Counts over one kind of call (reader or judge) in this run."""

    asked: int = 0  # questions sent (retries not counted)
    cache_hits: int = 0
    retried_format: int = 0  # replies that did not parse and were asked again
    usage_missing: int = 0  # replies without a usage block (their tokens count as 0)


class LlmCaller:
    """One kind of call (``kind``: ``reader`` or ``judge``) to the configured model."""

    def __init__(self, settings: LlmSettings, cache: ReplyCache, kind: str) -> None:
        if settings.base_url is None or settings.model is None:
            raise ValueError("llm.base_url and llm.model must be set to ask a model")
        self.settings = settings
        self.model = settings.model
        self.kind = kind
        self.cache = cache
        self.endpoint = JsonEndpoint(
            settings.base_url.rstrip("/") + "/chat/completions",
            api_key_env=settings.api_key_env,
            timeout_s=settings.timeout_s,
            max_retries=settings.max_retries,
            timeout_name="llm.timeout_s",
        )
        self.params = {"temperature": TEMPERATURE, "max_tokens": settings.max_tokens}
        self.usage = ChatUsage()
        self._lock = threading.Lock()

    def ask_all(self, requests: Sequence[Request], parse: Callable[[str], T]) -> list[Asked[T]]:
        """Every request's parsed reply, in the order given (``llm.concurrency`` at once)."""
        if self.settings.concurrency == 1 or len(requests) <= 1:
            return [self.ask(request, parse) for request in requests]
        with ThreadPoolExecutor(max_workers=self.settings.concurrency) as pool:
            return list(pool.map(lambda request: self.ask(request, parse), requests))

    def ask(self, request: Request, parse: Callable[[str], T]) -> Asked[T]:
        """One request: from the cache when it holds the reply, else asked (and cached once parsed)."""
        system, user = request.prompt.system, request.prompt.render(request.values)
        key = reply_key(self.kind, self.model, system, user, self.params)
        cached = self.cache.get(key)
        if cached is not None:
            try:
                value = parse(cached.content)
            except LLMError:
                cached = None  # an entry its parser now refuses: asked again
            else:
                with self._lock:
                    self.usage.cache_hits += 1
                return Asked(
                    value,
                    cached.content,
                    cached.prompt_tokens,
                    cached.completion_tokens,
                    cached.usage_known,
                    True,
                )
        with self._lock:
            self.usage.asked += 1
        for attempt in range(self.settings.max_retries + 1):
            reply = self._post(request.label, system, user)
            try:
                if reply is None:
                    raise LLMError(
                        "format", "the reply is not a chat completion (no choices[0].message.content text)"
                    )
                value = parse(reply.content)
            except LLMError as error:
                if attempt == self.settings.max_retries:
                    raise LLMError(
                        "format",
                        f"llm {self.kind} of query {request.label}: {error} (after {attempt + 1} tries; "
                        f"llm.max_retries={self.settings.max_retries})",
                    ) from None
                log.warning("llm %s of query %s: %s; asking again", self.kind, request.label, error)
                with self._lock:
                    self.usage.retried_format += 1
                continue
            if not reply.usage_known:
                with self._lock:
                    self.usage.usage_missing += 1
            self.cache.put(key, self.kind, self.model, reply)
            return Asked(
                value, reply.content, reply.prompt_tokens, reply.completion_tokens, reply.usage_known, False
            )
        raise AssertionError("unreachable: the loop returns or raises")

    def _post(self, label: str, system: str, user: str) -> CachedReply | None:
        payload = {
            "model": self.model,
            **self.params,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        try:
            answer = self.endpoint.post(payload)
        except EndpointError as error:
            raise LLMError(
                error.kind,
                f"llm {self.kind} of query {label}: {error}",
                status=error.status,
                attempts=error.attempts,
            ) from None
        return _reply(answer)


def _reply(answer: Any) -> CachedReply | None:
    """The content and usage of a chat completion; None when it is not one (no text content)."""
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(content, str):
        return None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = [
        usage.get(name) if isinstance(usage, dict) else None
        for name in ("prompt_tokens", "completion_tokens")
    ]
    known = all(isinstance(count, int) and not isinstance(count, bool) and count >= 0 for count in tokens)
    return CachedReply(
        content=content,
        prompt_tokens=int(tokens[0]) if known and tokens[0] is not None else 0,
        completion_tokens=int(tokens[1]) if known and tokens[1] is not None else 0,
        usage_known=known,
    )
