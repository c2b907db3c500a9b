"""Shared fixtures. Tests never touch the network or the user's cache."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The shared BEIR datasets folder (../shared/datasets from the repo root)."""
    if not (SHARED_DATASETS / "adi").is_dir():
        raise RuntimeError(
            f"shared datasets not found at {SHARED_DATASETS}; tests need ../shared beside the repo"
        )
    return SHARED_DATASETS


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own embedding/store cache, and the in-process memo starts empty."""
    from viking_eval.cache import clear_memo

    monkeypatch.setenv("VIKING_EVAL_CACHE", str(tmp_path_factory.mktemp("cache")))
    clear_memo()


class ChatServer:
    """An OpenAI-compatible ``POST /v1/chat/completions`` on 127.0.0.1 (``url`` ends in ``/v1``).

    ``reply(body, mode) -> str`` gives the assistant's message content for a request body. The
    server itself plays the transport failures by ``mode``: ``slow`` (waits for ``release``, up to
    10 s, then replies), ``error`` (HTTP 500), ``not_json`` (a body that is not JSON) and
    ``not_chat`` (JSON that is not a chat completion); any other mode is the reply function's to
    interpret. Every request is kept in ``requests`` (path, JSON body, headers)."""

    def __init__(self, reply: Callable[[dict[str, Any], str], str]) -> None:
        self.reply = reply
        self.mode = "good"
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                mode = server.mode
                server.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                if mode == "error":
                    self.send_error(500, "overloaded")
                    return
                if mode == "slow":
                    server.release.wait(10)
                if mode == "not_json":
                    data = b"<html>not json</html>"
                elif mode == "not_chat":
                    data = b'{"result": "ok"}'
                else:
                    content = server.reply(body, mode)
                    answer = {"choices": [{"message": {"role": "assistant", "content": content}}]}
                    data = json.dumps(answer).encode("utf-8")
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (slow mode)
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


@pytest.fixture
def chat_server_factory() -> Iterator[Callable[[Callable[[dict[str, Any], str], str]], ChatServer]]:
    """Start :class:`ChatServer` instances with a reply function; all are closed after the test."""
    started: list[ChatServer] = []

    def start(reply: Callable[[dict[str, Any], str], str]) -> ChatServer:
        started.append(ChatServer(reply))
        return started[-1]

    yield start
    for server in started:
        server.close()


def unreachable_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens (a port bound, then released)."""
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = probe.server_address[1]
    probe.server_close()
    return f"http://127.0.0.1:{port}/v1"
