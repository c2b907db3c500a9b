"""One OpenAI-compatible chat client for everything that asks an LLM (stdlib only).

``POST {base_url}/chat/completions`` with a system and a user message; the answer's
``choices[0].message.content`` is returned as text. The API key is read from the environment
variable ``api_key_env`` at call time (unset or empty: no ``Authorization`` header, which local
servers accept). Every failure is an :class:`LLMError` whose ``kind`` says what went wrong, so
each caller decides its own fallback: the LLM reranker (``rerank.py``), the intent analyser
(``intent.py``) and the LLM edge builder (``edges.py``).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["ChatClient", "LLMError", "parse_json_content"]

ErrorKind = Literal["timeout", "http", "format"]
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)
MAX_TIMEOUT_S = 600.0


class LLMError(RuntimeError):
    """A chat call that gave no usable answer. ``kind``: ``timeout`` (no answer in time),
    ``http`` (unreachable, HTTP status >= 400, a body that is not JSON) or ``format`` (JSON that
    is not a chat completion, or content that does not parse)."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


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
    ``temperature`` in [0, 2]."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 30.0,
        temperature: float = 0.0,
        timeout_name: str = "timeout_s",
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if not isinstance(api_key_env, str) or not api_key_env:
            raise ValueError(f"api_key_env must name an environment variable, got {api_key_env!r}")
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not 0 < timeout_s <= MAX_TIMEOUT_S
        ):
            raise ValueError(
                f"{timeout_name} must be in (0, 600] seconds (an HTTP call needs a limit), got {timeout_s!r}"
            )
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not 0 <= temperature <= 2
        ):
            raise ValueError(f"temperature must be in [0, 2], got {temperature!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.temperature = float(temperature)

    def complete(self, system: str, user: str) -> str:
        """The assistant's text for one system + user message; raises :class:`LLMError`."""
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        payload = {
            "model": self.model,
            "temperature": self.temperature,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        answer = self._post(payload, headers)
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise LLMError("format", f"answer is not a chat completion: {str(answer)[:80]!r}") from None
        if not isinstance(content, str):
            raise LLMError("format", f"message content is {type(content).__name__}, not text")
        return content

    def _post(self, payload: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        request = urllib.request.Request(
            self.url, data=json.dumps(payload).encode("utf-8"), headers=dict(headers), method="POST"
        )
        too_slow = f"no answer from {self.url} within {self.timeout_s:g} s"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            raise LLMError("http", f"HTTP {error.code} from {self.url}") from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, TimeoutError):
                raise LLMError("timeout", too_slow) from None
            raise LLMError("http", f"cannot reach {self.url}: {error.reason}") from None
        except TimeoutError:
            raise LLMError("timeout", too_slow) from None
        except OSError as error:
            raise LLMError("http", f"connection to {self.url} failed: {error}") from None
        try:
            return json.loads(body.decode("utf-8"))
        except ValueError:
            raise LLMError("http", f"bad answer from {self.url}: the body is not JSON") from None

    def __repr__(self) -> str:
        return f"ChatClient(url={self.url!r}, model={self.model!r})"
