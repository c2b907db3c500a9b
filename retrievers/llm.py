"""One OpenAI-compatible chat client for everything that asks an LLM (stdlib only).

``POST {base_url}/chat/completions`` with a system and a user message; the answer's
``choices[0].message.content`` is returned as text. The API key is read from the environment
variable ``api_key_env`` at call time (unset or empty: no ``Authorization`` header, which local
servers accept). Every failure is an :class:`LLMError` whose ``kind`` says what went wrong, so
each caller decides its own fallback: the LLM reranker (``rerank/llm.py``), the intent analyser
(``intent.py``) and the LLM edge builder (``build/edges.py``). The HTTP transport (time-out,
retries, key) is :class:`retrievers.http.JsonEndpoint`, shared with the embeddings and ``/rerank``
clients.
"""

from __future__ import annotations

import json
import re
from typing import Any

from retrievers.http import MAX_TIMEOUT_S, EndpointError, JsonEndpoint, check_base_url
from retrievers.params import ParamError, check_number
from retrievers.spans import span

__all__ = ["MAX_TIMEOUT_S", "ChatClient", "LLMError", "parse_json_content"]

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class LLMError(EndpointError):
    """A chat call that gave no usable answer. ``kind``: ``timeout`` (no answer in time),
    ``http`` (unreachable, HTTP status >= 400, a body that is not JSON) or ``format`` (JSON that
    is not a chat completion, or content that does not parse)."""


def parse_json_content(content: str) -> Any:
    """The JSON value in a message's content, optionally inside a Markdown code fence
    (```json ... ```); raises ``LLMError("format")`` when it is not JSON."""
    fenced = _FENCE.match(content)
    text = fenced.group(1) if fenced else content.strip()
    try:
        return json.loads(text)
    except ValueError:
        raise LLMError("format", f"answer is not JSON: {content[:80]!r}") from None


class ChatClient:
    """Validated settings of one endpoint and model; :meth:`complete` sends one conversation.

    ``timeout_s`` in (0, 600] bounds each HTTP request (a call to an LLM always needs a limit);
    ``temperature`` in [0, 2]; ``max_retries`` (default 0: callers fall back at once) retries
    429, 5xx and time-outs with back-off (:class:`retrievers.http.JsonEndpoint`)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 30.0,
        temperature: float = 0.0,
        timeout_name: str = "timeout_s",
        max_retries: int = 0,
    ) -> None:
        base_url = check_base_url(base_url)
        if not isinstance(model, str) or not model:
            raise ParamError("model", f"model must be a non-empty string, got {model!r}")
        self.endpoint = JsonEndpoint(
            base_url + "/chat/completions",
            api_key_env=api_key_env,
            timeout_s=timeout_s,
            timeout_name=timeout_name,
            max_retries=max_retries,
        )
        self.url = self.endpoint.url
        self.model = model
        self.api_key_env = self.endpoint.api_key_env
        self.timeout_s = self.endpoint.timeout_s
        self.temperature = check_number("temperature", temperature, 0.0, 2.0)

    def complete(self, system: str, user: str) -> str:
        """The assistant's text for one system + user message; raises :class:`LLMError`."""
        payload = {
            "model": self.model,
            "temperature": self.temperature,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        try:
            with span("llm"):
                answer = self.endpoint.post(payload)
        except EndpointError as error:
            raise LLMError(error.kind, str(error), status=error.status, attempts=error.attempts) from None
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise LLMError("format", f"answer is not a chat completion: {str(answer)[:80]!r}") from None
        if not isinstance(content, str):
            raise LLMError("format", f"message content is {type(content).__name__}, not text")
        return content

    def __repr__(self) -> str:
        return f"ChatClient(url={self.url!r}, model={self.model!r})"
