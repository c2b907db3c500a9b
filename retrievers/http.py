"""One small JSON-over-HTTP client for every remote model the library calls (stdlib only).

:class:`JsonEndpoint` POSTs a JSON body to one URL and returns the parsed JSON answer. It is
shared by the chat client (:mod:`retrievers.llm`), the embeddings client
(:mod:`retrievers.embedders.http`) and the ``/rerank`` client (:mod:`retrievers.rerank.http`):

* **Key.** The API key is read at call time from the environment variable the caller names
  (``api_key_env``) and sent as ``Authorization: Bearer <key>``; unset or empty sends no header
  (local servers need none). The key never appears in a message, a log line or a ``repr``: a
  server that echoes it in an error has it replaced by ``***``.
* **Time-out.** ``timeout_s`` in (0, 600] bounds every blocking socket operation of a request
  (connecting, and each read while waiting for the answer), so a dead server fails in about
  ``timeout_s``; a remote call always needs a limit.
* **Retries.** HTTP 429, any 5xx, a time-out and a dropped or refused connection are retried up
  to ``max_retries`` times. The wait before retry ``n`` (from 0) is the server's ``Retry-After``
  (seconds or an HTTP date) when it sends one, else ``backoff_s * 2**n``; either is capped at
  ``max_backoff_s`` so that a server asking for an hour cannot stall a run (the retry then most
  likely fails again, and the error says so). Each retry logs a warning (``retry_log_level``:
  the ``/rerank`` client logs them at DEBUG, its failures being summed up in one line a run). Worst case a call takes
  ``(max_retries + 1) * timeout_s`` plus the waits.
* **Redirects** are not followed (the key would go along to wherever they point): a 3xx is an
  error naming the ``Location`` to configure instead.
* **Failures** are :class:`EndpointError` with ``kind`` ``"timeout"`` or ``"http"`` (unreachable,
  a status >= 400, a body that is not JSON) and the HTTP ``status`` when there is one. Any other
  4xx fails at once (a bad request or key does not get better by retrying), with the server's
  own error message, which OpenAI, Cohere, Jina, TEI and vLLM all put in their JSON body.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from retrievers.params import ParamError, check_int, check_number

__all__ = [
    "MAX_TIMEOUT_S",
    "EndpointError",
    "JsonEndpoint",
    "check_base_url",
    "check_env_name",
    "check_timeout",
    "server_message",
]

ErrorKind = Literal["timeout", "http", "format"]
MAX_TIMEOUT_S = 600.0
MAX_RETRIES = 20
_MESSAGE_CHARS = 300
_USER_AGENT = "retrievers-http/1"
log = logging.getLogger(__name__)


class EndpointError(RuntimeError):
    """A call that gave no usable answer. ``kind``: ``timeout`` (no answer in time), ``http``
    (unreachable, HTTP status >= 400, a body that is not JSON) or ``format`` (JSON of the wrong
    shape, raised by callers); ``status`` is the HTTP status when there was one; ``attempts`` how
    many requests were sent."""

    def __init__(
        self, kind: ErrorKind, message: str, *, status: int | None = None, attempts: int = 1
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.status = status
        self.attempts = attempts


def check_base_url(value: object, name: str = "base_url") -> str:
    """``value`` without its trailing slashes if it is an http(s) URL with a host, else ParamError."""
    try:
        parts = urllib.parse.urlsplit(value) if isinstance(value, str) else None
    except ValueError:  # e.g. an unclosed IPv6 bracket
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ParamError(
            name, f"{name} must be an http(s) URL such as http://127.0.0.1:8000/v1, got {value!r}"
        )
    return str(value).rstrip("/")


def check_env_name(value: object, name: str = "api_key_env") -> str:
    """``value`` if it can name an environment variable (the key itself never goes in a config)."""
    if not isinstance(value, str) or not value or "=" in value or "\x00" in value or value != value.strip():
        raise ParamError(
            name, f"{name} must name an environment variable (e.g. OPENAI_API_KEY), got {value!r}"
        )
    return value


def check_timeout(value: object, name: str = "timeout_s") -> float:
    """``value`` as seconds in (0, 600], else ParamError (a remote call always needs a limit)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= MAX_TIMEOUT_S:
        raise ParamError(
            name, f"{name} must be in (0, 600] seconds (an HTTP call needs a limit), got {value!r}"
        )
    return float(value)


def server_message(body: bytes, fallback: str = "") -> str:
    """The error message in an HTTP error body: ``error.message`` (OpenAI), ``error`` (TEI),
    ``message`` (Cohere), ``detail`` (vLLM, Jina, FastAPI), else the body's first characters."""
    text = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    found: Any = None
    if isinstance(data, Mapping):
        error = data.get("error")
        if isinstance(error, Mapping):
            found = error.get("message")
        elif isinstance(error, str):
            found = error
        for key in ("message", "detail"):
            if found is None and data.get(key) is not None:
                found = data[key]
    if found is None:
        found = text
    message = " ".join(str(found).split())
    if not message:
        message = fallback
    return message if len(message) <= _MESSAGE_CHARS else message[:_MESSAGE_CHARS] + "..."


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: urllib would follow one with the ``Authorization`` header, to any host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class JsonEndpoint:
    """POST JSON to ``url`` with a time-out, retries and a key from the environment (see the
    module docstring). ``sleep`` is how waits happen (tests pass a recorder)."""

    def __init__(
        self,
        url: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 30.0,
        max_retries: int = 0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        timeout_name: str = "timeout_s",
        sleep: Callable[[float], None] = time.sleep,
        retry_log_level: int = logging.WARNING,
    ) -> None:
        self.url = check_base_url(url, "url")
        self.api_key_env = check_env_name(api_key_env)
        self.timeout_s = check_timeout(timeout_s, timeout_name)
        self.max_retries = check_int("max_retries", max_retries, 0, MAX_RETRIES)
        self.backoff_s = check_number("backoff_s", backoff_s, 0.0, 600.0)
        self.max_backoff_s = check_number("max_backoff_s", max_backoff_s, 0.0, 3600.0)
        self.sleep = sleep
        #: the level of the line logged before each retry (a caller that reports failures itself,
        #: such as a reranker's fallback summary, passes DEBUG: one line per run, not per query)
        self.retry_log_level = retry_log_level

    def _headers(self) -> tuple[dict[str, str], str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": _USER_AGENT,
        }
        key = os.environ.get(self.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers, key

    def post(self, payload: Mapping[str, Any]) -> Any:
        """The parsed JSON answer to ``payload``; raises :class:`EndpointError` after the retries."""
        data = json.dumps(payload).encode("utf-8")
        attempt = 0
        while True:
            headers, key = self._headers()
            try:
                return self._send(data, headers, key)
            except _Retryable as failure:
                if attempt >= self.max_retries:
                    tried = f" (after {attempt + 1} attempts)" if attempt else ""
                    raise EndpointError(
                        failure.kind, f"{failure}{tried}", status=failure.status, attempts=attempt + 1
                    ) from None
                wait = failure.retry_after if failure.retry_after is not None else self.backoff_s * 2**attempt
                wait = min(wait, self.max_backoff_s)
                log.log(
                    self.retry_log_level,
                    "%s; retry %d of %d in %.3g s",
                    failure,
                    attempt + 1,
                    self.max_retries,
                    wait,
                )
                self.sleep(wait)
                attempt += 1
            except EndpointError as error:
                error.attempts = attempt + 1
                raise

    def _send(self, data: bytes, headers: dict[str, str], key: str) -> Any:
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        too_slow = f"no answer from {self.url} within {self.timeout_s:g} s"
        try:
            with _OPENER.open(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            try:
                detail = server_message(error.read(), str(error.reason or ""))
            except OSError:  # the error body itself could not be read (TimeoutError is an OSError)
                detail = str(error.reason or "")
            finally:
                error.close()
            if key:
                detail = detail.replace(key, "***")
            message = f"HTTP {error.code} from {self.url}" + (f": {detail}" if detail else "")
            if 300 <= error.code < 400:
                where = error.headers.get("Location", "elsewhere")
                message += f" (redirects to {where} are not followed, the key would go along: use that URL)"
            if error.code == 429 or error.code >= 500:
                retry_after = _retry_after(error.headers.get("Retry-After"))
                raise _Retryable("http", message, error.code, retry_after) from None
            raise EndpointError("http", message, status=error.code) from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, TimeoutError):
                raise _Retryable("timeout", too_slow) from None
            raise _Retryable("http", f"cannot reach {self.url}: {error.reason}") from None
        except TimeoutError:
            raise _Retryable("timeout", too_slow) from None
        except OSError as error:  # connection reset or dropped mid-answer
            raise _Retryable("http", f"connection to {self.url} failed: {error}") from None
        try:
            return json.loads(body.decode("utf-8"))
        except ValueError:
            raise EndpointError("http", f"bad answer from {self.url}: the body is not JSON") from None

    def __repr__(self) -> str:
        return f"JsonEndpoint(url={self.url!r}, api_key_env={self.api_key_env!r})"


class _Retryable(Exception):
    """A failure worth retrying (429, 5xx, time-out, connection); internal to :class:`JsonEndpoint`."""

    def __init__(
        self, kind: ErrorKind, message: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.status = status
        self.retry_after = retry_after
