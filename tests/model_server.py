"""A local stand-in for remote models (tests only): ``POST /v1/embeddings`` (OpenAI's shape) and
``POST /v1/rerank`` (Cohere's shape) on 127.0.0.1, misbehaving on demand.

``mode`` (set between requests): ``good``; ``error`` (HTTP 500); ``hang`` (no answer until
``release`` is set, at most 10 s); ``not_json``; ``wrong_count`` (one vector fewer than texts);
``wrong_dim`` (vectors one wider than asked); ``nan`` (a NaN in the first vector). Good
embeddings are a deterministic function of each text (``DIM`` wide), rerank scores the length
of each document.

``POST /v1/chat/completions`` (OpenAI's shape) answers with ``chat(body)`` as the message content
and a ``usage`` block counting whitespace-separated words: ``prompt_tokens`` over every message's
content, ``completion_tokens`` over the reply. ``script``: modes taken one per request, first
in first out, before ``mode`` applies (a 500, then a good reply); chat also plays ``malformed``
(a reply that is no chat completion)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIM = 8


def vector(text: str, dim: int = DIM) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [digest[i] / 255.0 + 0.01 for i in range(dim)]


class ModelServer:
    def __init__(self, mode: str = "good", chat: Callable[[dict[str, Any]], str] | None = None) -> None:
        self.mode = mode
        self.chat = chat
        self.script: list[str] = []
        self.lock = threading.Lock()
        self.requests = 0
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests += 1
                    mode = server.script.pop(0) if server.script else server.mode
                if mode == "error":
                    data = b'{"error": {"message": "overloaded"}}'
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if mode == "hang":
                    server.release.wait(10)
                if self.path == "/v1/embeddings":
                    texts = body["input"]
                    dim = body.get("dimensions", DIM) + (mode == "wrong_dim")
                    rows = [vector(text, dim) for text in texts]
                    if mode == "wrong_count":
                        rows = rows[:-1]
                    if mode == "nan":
                        rows[0][0] = float("nan")
                    answer: Any = {"data": [{"index": i, "embedding": row} for i, row in enumerate(rows)]}
                elif self.path == "/v1/chat/completions" and server.chat is not None:
                    content = server.chat(body)
                    words = sum(len(str(message["content"]).split()) for message in body["messages"])
                    answer = {
                        "choices": [{"message": {"role": "assistant", "content": content}}],
                        "usage": {"prompt_tokens": words, "completion_tokens": len(content.split())},
                    }
                    if mode == "malformed":
                        answer = {"choices": []}
                elif self.path == "/v1/rerank":
                    documents = body["documents"]
                    answer = {
                        "results": [{"index": i, "relevance_score": len(d)} for i, d in enumerate(documents)]
                    }
                else:
                    self.send_error(404)
                    return
                data = b"<html>oops" if mode == "not_json" else json.dumps(answer).encode("utf-8")
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (hang)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
