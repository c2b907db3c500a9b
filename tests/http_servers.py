"""The tests' local HTTP servers (tests only; nothing here touches the network): one threaded
server on 127.0.0.1, :class:`LocalServer`, and the answers the test files need from it.

- :class:`ModelServer`: remote models, misbehaving by ``mode`` (``POST /v1/embeddings`` in
  OpenAI's shape, ``/v1/rerank`` in Cohere's, ``/v1/chat/completions`` with a ``usage`` block).
- :class:`ChatServer`: an OpenAI-compatible chat endpoint answering with a reply function.
- :class:`ScriptedServer`: each request takes the next scripted answer, else the reply function's.
- :class:`FileServer`: ``GET`` of files (dataset zips, raw releases), cut short, held or altered
  on demand.
- :func:`unreachable_url`: a URL where nothing listens.

Every server keeps each request it received in ``requests`` (``method``, ``path``, ``headers``,
``data``: the body's bytes, and ``body``: their JSON value, or the bytes when they are no JSON), and waits that a test releases
(``hang``, ``slow``) end when ``release`` is set or the server closes (at most 10 s).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- the one server

HOLD_S = 10.0
"""How long a held answer waits for ``release`` at most."""


@dataclass(frozen=True)
class Reply:
    """One HTTP answer. ``reason``: the status line's phrase (the standard one when None).
    ``length``: the Content-Length announced (``len(body)`` when None; more than the body's
    length plays a transfer cut short). ``close_delimited``: no Content-Length at all, the body
    ends when the connection closes (HTTP/1.0 style)."""

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    reason: str | None = None
    length: int | None = None
    close_delimited: bool = False


def json_reply(data: Any, status: int = 200, **headers: str) -> Reply:
    """``data`` as a JSON body with ``Content-Type: application/json`` and ``headers``."""
    return Reply(status, json.dumps(data).encode("utf-8"), {"Content-Type": "application/json", **headers})


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 (``base_url``; ``url`` adds ``/v1``) answering every
    GET and POST with ``respond(request)``, where ``request`` is the dict kept in ``requests``.
    ``respond`` runs on the request's own thread, so it may wait (``release``)."""

    def __init__(self, respond: Callable[[dict[str, Any]], Reply]) -> None:
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body: Any = raw
                if raw:
                    with suppress(ValueError):
                        body = json.loads(raw)
                request = {
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": body,
                    "data": raw,
                }
                server.requests.append(request)
                reply = server.respond(request)
                try:
                    self.send_response(reply.status, reply.reason)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    if not reply.close_delimited:
                        length = len(reply.body) if reply.length is None else reply.length
                        self.send_header("Content-Length", str(length))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except OSError:  # the client gave up (a held answer)
                    pass
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base_url}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def hold(self) -> None:
        """Wait until ``release`` is set (at most ``HOLD_S``): a server that does not answer."""
        self.release.wait(HOLD_S)

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unreachable_url(path: str = "/v1") -> str:
    """An http URL on 127.0.0.1 where nothing listens (a port bound, then released), ending in ``path``."""
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = probe.server_address[1]
    probe.server_close()
    return f"http://127.0.0.1:{port}{path}"


def started(factory: Callable[..., LocalServer]) -> Iterator[Callable[..., Any]]:
    """A fixture body: ``factory(...)`` for the test, every server it started closed after it."""
    servers: list[LocalServer] = []

    def start(*args: Any, **kwargs: Any) -> Any:
        servers.append(factory(*args, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


# --------------------------------------------------------------------------- remote models by mode

DIM = 8


def vector(text: str, dim: int = DIM) -> list[float]:
    """A deterministic embedding of ``text``: its sha256 bytes, scaled."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [digest[i] / 255.0 + 0.01 for i in range(dim)]


class ModelServer(LocalServer):
    """``POST /v1/embeddings`` (OpenAI's shape), ``/v1/rerank`` (Cohere's) and, given ``chat``,
    ``/v1/chat/completions``, misbehaving on demand.

    ``mode`` (set between requests): ``good``; ``error`` (HTTP 500); ``hang`` (no answer until
    ``release`` is set, at most 10 s); ``not_json``; ``wrong_count`` (one vector fewer than texts);
    ``wrong_dim`` (vectors one wider than asked); ``nan`` (a NaN in the first vector). Good
    embeddings are :func:`vector` of each text (``DIM`` wide), rerank scores the length of each
    document. Chat answers ``chat(body)`` as the message content and a ``usage`` block counting
    whitespace-separated words: ``prompt_tokens`` over every message's content,
    ``completion_tokens`` over the reply; it also plays ``malformed`` (a reply that is no chat
    completion). ``script``: modes taken one per request, first in first out, before ``mode``
    applies (a 500, then a good reply)."""

    def __init__(self, mode: str = "good", chat: Callable[[dict[str, Any]], str] | None = None) -> None:
        self.mode = mode
        self.chat = chat
        self.script: list[str] = []
        self.lock = threading.Lock()
        super().__init__(self._answer)

    def _answer(self, request: dict[str, Any]) -> Reply:
        body, path = request["body"], request["path"]
        with self.lock:
            mode = self.script.pop(0) if self.script else self.mode
        if mode == "error":
            return json_reply({"error": {"message": "overloaded"}}, 500)
        if mode == "hang":
            self.hold()
        if path == "/v1/embeddings":
            dim = body.get("dimensions", DIM) + (mode == "wrong_dim")
            rows = [vector(text, dim) for text in body["input"]]
            if mode == "wrong_count":
                rows = rows[:-1]
            if mode == "nan":
                rows[0][0] = float("nan")
            answer: Any = {"data": [{"index": i, "embedding": row} for i, row in enumerate(rows)]}
        elif path == "/v1/chat/completions" and self.chat is not None:
            content = self.chat(body)
            words = sum(len(str(message["content"]).split()) for message in body["messages"])
            answer = {
                "choices": [{"message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": words, "completion_tokens": len(content.split())},
            }
            if mode == "malformed":
                answer = {"choices": []}
        elif path == "/v1/rerank":
            documents = body["documents"]
            answer = {"results": [{"index": i, "relevance_score": len(d)} for i, d in enumerate(documents)]}
        else:
            return Reply(404, b"no such route")
        if mode == "not_json":
            return Reply(200, b"<html>oops", {"Content-Type": "application/json"})
        return json_reply(answer)


# --------------------------------------------------------------------------- chat with a reply function


class ChatServer(LocalServer):
    """An OpenAI-compatible ``POST /v1/chat/completions`` (``url`` ends in ``/v1``).

    ``reply(body, mode) -> str`` gives the assistant's message content for a request body. The
    server itself plays the transport failures by ``mode``: ``slow`` (waits for ``release``, up to
    10 s, then replies), ``error`` (HTTP 500), ``not_json`` (a body that is not JSON) and
    ``not_chat`` (JSON that is not a chat completion); any other mode is the reply function's to
    interpret."""

    def __init__(self, reply: Callable[[dict[str, Any], str], str]) -> None:
        self.reply = reply
        self.mode = "good"
        super().__init__(self._answer)

    def _answer(self, request: dict[str, Any]) -> Reply:
        mode = self.mode
        if request["path"] != "/v1/chat/completions":
            return Reply(404, b"no such route")
        if mode == "error":
            return Reply(500, b"overloaded", reason="overloaded")
        if mode == "slow":
            self.hold()
        if mode == "not_json":
            return Reply(200, b"<html>not json</html>", {"Content-Type": "application/json"})
        if mode == "not_chat":
            return json_reply({"result": "ok"})
        content = self.reply(request["body"], mode)
        return json_reply({"choices": [{"message": {"role": "assistant", "content": content}}]})


# --------------------------------------------------------------------------- a script of answers


class ScriptedServer(LocalServer):
    """Each request takes the next answer of ``script`` (a :class:`Reply`, or ``"slow"``: the
    reply function's answer once ``release`` is set) or, when the script is empty, the answer of
    ``reply(path, body)``."""

    def __init__(self, reply: Callable[[str, Any], Reply]) -> None:
        self.reply = reply
        self.script: list[Reply | str] = []
        super().__init__(self._answer)

    def _answer(self, request: dict[str, Any]) -> Reply:
        step = self.script.pop(0) if self.script else None
        if step == "slow":
            self.hold()
        return step if isinstance(step, Reply) else self.reply(request["path"], request["body"])


# --------------------------------------------------------------------------- files


class FileServer(LocalServer):
    """``GET PATH`` answers with what :meth:`serve` routed at PATH (bytes, or a file read at
    request time); 404 elsewhere. On demand: ``short_by[path]`` announces that many bytes more
    than it sends (a transfer cut short); ``holds[path]`` waits for that event before answering
    (``held`` is set when such a request arrives); ``altered`` paths are served with their first
    byte changed; ``close_delimited`` sends no Content-Length (the body ends when the connection
    closes)."""

    def __init__(self, *, close_delimited: bool = False, content_type: str = "application/zip") -> None:
        self.routes: dict[str, bytes | Path] = {}
        self.short_by: dict[str, int] = {}
        self.holds: dict[str, threading.Event] = {}
        self.held = threading.Event()
        self.altered: set[str] = set()
        self.close_delimited = close_delimited
        self.content_type = content_type
        super().__init__(self._answer)

    def serve(self, path: str, body: bytes | Path) -> str:
        """Route ``path`` to ``body``; returns its URL."""
        self.routes[path] = body
        return self.base_url + path

    @property
    def hits(self) -> list[str]:
        """The paths asked for, in order."""
        return [request["path"] for request in self.requests]

    def _answer(self, request: dict[str, Any]) -> Reply:
        path = request["path"]
        if path in self.holds:
            self.held.set()
            self.holds[path].wait(HOLD_S)
        source = self.routes.get(path)
        if source is None:
            return Reply(404, b"not here", reason="not here")
        body = source.read_bytes() if isinstance(source, Path) else source
        if path in self.altered:
            body = bytes([body[0] ^ 1]) + body[1:]
        return Reply(
            200,
            body,
            {"Content-Type": self.content_type},
            length=len(body) + self.short_by.get(path, 0),
            close_delimited=self.close_delimited,
        )
