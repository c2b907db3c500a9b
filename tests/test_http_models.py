"""Remote models over HTTP against a local server on 127.0.0.1: the shared transport
(retrievers.http.JsonEndpoint), the OpenAI-compatible embedder (retrievers.embedders.http) and the
``/rerank`` reranker (retrievers.rerank.http). No test touches the network.

The server (tests/http_servers.py's ScriptedServer) plays a script: each request takes the next
scripted answer (status, headers, body) or, when the script is empty, the answer of the ``reply``
function; ``slow`` holds the answer until the client has given up. Waits between retries go to a recorder, not to ``time.sleep``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from http_servers import Reply, ScriptedServer, json_reply, started, unreachable_url

from retrievers.builders import build_store
from retrievers.embedders import OpenAIEmbedder
from retrievers.http import EndpointError, JsonEndpoint, server_message
from retrievers.params import ParamError
from retrievers.rerank import HTTPReranker, RerankError, rerank_with_fallback
from retrievers.types import Embedder, RetrievalResult
from viking_eval.run.cache import ArtifactCache, clear_memo
from viking_eval.run.cached_embedder import CachedEmbedder

KEY = "sk-test-0123456789"


def ok(data: Any) -> Reply:
    return json_reply(data)


def status(code: int, body: Any = None, **headers: str) -> Reply:
    text = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode("utf-8"))
    return Reply(code, text, {"Content-Type": "application/json", **headers})


def vector_of(text: str, width: int = 4) -> list[float]:
    """A deterministic, not normalised vector for a text (length and letters)."""
    return [float(len(text)), float(sum(map(ord, text)) % 97), 1.0, float(text.count("a"))][:width] + [
        0.5
    ] * max(0, width - 4)


def embeddings_reply(path: str, body: dict[str, Any]) -> Reply:
    """OpenAI's answer shape, items in reverse order (clients must sort by index)."""
    if path != "/v1/embeddings":
        return status(404, {"error": {"message": f"no route {path}"}})
    width = body.get("dimensions", 4)
    data = [
        {"object": "embedding", "index": i, "embedding": vector_of(text, width)}
        for i, text in enumerate(body["input"])
    ]
    return ok({"object": "list", "data": data[::-1], "model": body["model"]})


def rerank_reply(path: str, body: dict[str, Any]) -> Reply:
    """Cohere's shape: results sorted by score, score = number of query words in the document."""
    if path != "/v1/rerank":
        return status(404, {"detail": "Not Found"})
    words = set(body["query"].split())
    texts = body.get("documents", body.get("texts"))
    scores = [len(words & set(text.split())) / 10 for text in texts]
    order = sorted(range(len(texts)), key=lambda i: -scores[i])
    if "texts" in body:  # TEI: a bare list with "score"
        return ok([{"index": i, "score": scores[i]} for i in order])
    return ok({"results": [{"index": i, "relevance_score": scores[i]} for i in order[: body["top_n"]]]})


@pytest.fixture
def server_factory() -> Iterator[Callable[[Callable[[str, Any], Reply]], ScriptedServer]]:
    yield from started(ScriptedServer)


@pytest.fixture
def embed_server(server_factory: Callable[..., ScriptedServer]) -> ScriptedServer:
    return server_factory(embeddings_reply)


@pytest.fixture
def rerank_server(server_factory: Callable[..., ScriptedServer]) -> ScriptedServer:
    return server_factory(rerank_reply)


class Waits(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def embedder(server: ScriptedServer, **settings: Any) -> tuple[OpenAIEmbedder, Waits]:
    made = OpenAIEmbedder("emb-model", base_url=server.url, api_key_env="TEST_EMBED_KEY", **settings)
    waits = Waits()
    made.endpoint.sleep = waits
    return made, waits


def unit(rows: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float64)
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


# ---------------------------------------------------------------------------------------------------
# OpenAIEmbedder


def test_embeddings_in_input_order_normalised_with_the_key(
    embed_server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    client, _ = embedder(embed_server)
    texts = ["alpha", "a banana", "cherry pie"]
    vectors = client.encode(texts, kind="document")
    assert vectors.dtype == np.float32 and vectors.shape == (3, 4)
    np.testing.assert_allclose(vectors, unit([vector_of(t) for t in texts]), atol=1e-6)
    request = embed_server.requests[0]
    assert request["path"] == "/v1/embeddings"
    assert request["body"] == {"model": "emb-model", "input": texts}  # no dimensions when unset
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert client.dim == 4 and len(embed_server.requests) == 1  # width learnt from the answer
    assert client.name == f"openai:127.0.0.1:{embed_server.port}/emb-model:default"
    assert KEY not in client.name and KEY not in repr(client) and KEY not in repr(client.endpoint)
    assert isinstance(client, Embedder)


def test_key_read_at_call_time_and_absent_when_unset(
    embed_server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_EMBED_KEY", raising=False)
    client, _ = embedder(embed_server)
    client.encode(["x"], kind="query")
    assert "Authorization" not in embed_server.requests[-1]["headers"]
    monkeypatch.setenv("TEST_EMBED_KEY", "rotated")
    client.encode(["x"], kind="query")
    assert embed_server.requests[-1]["headers"]["Authorization"] == "Bearer rotated"


def test_batching_prefixes_dimensions_and_blank_texts(embed_server: ScriptedServer) -> None:
    client, _ = embedder(embed_server, batch_size=2, dimensions=6, query_prefix="query: ")
    texts = ["one", "  ", "three", "four", "five"]
    vectors = client.encode(texts, kind="query")
    sent = [request["body"]["input"] for request in embed_server.requests]
    assert sent == [["query: one", "query: three"], ["query: four", "query: five"]]  # blank not sent
    assert all(request["body"]["dimensions"] == 6 for request in embed_server.requests)
    assert vectors.shape == (5, 6)
    assert np.array_equal(vectors[1], np.zeros(6, dtype=np.float32))
    np.testing.assert_allclose(
        vectors[[0, 2, 3, 4]], unit([vector_of("query: " + t, 6) for t in texts if t.strip()])
    )
    assert client.dim == 6
    assert client.name == f'openai:127.0.0.1:{embed_server.port}/emb-model:6|query_prefix="query: "'
    client.encode(["doc"], kind="document")
    assert embed_server.requests[-1]["body"]["input"] == ["doc"]  # no document prefix
    assert client.encode([], kind="document").shape == (0, 6)


def test_dim_before_any_encode_is_one_probe_request(embed_server: ScriptedServer) -> None:
    client, _ = embedder(embed_server)
    assert client.dim == 4
    assert [request["body"]["input"] for request in embed_server.requests] == [["dimension probe"]]


def test_429_then_success_honours_retry_after(embed_server: ScriptedServer) -> None:
    client, waits = embedder(embed_server, backoff_s=0.25)
    embed_server.script = [
        status(429, {"error": {"message": "Rate limit reached"}}, **{"Retry-After": "7"}),
        status(503, {"error": "loading"}),
    ]
    vectors = client.encode(["alpha"], kind="document")
    np.testing.assert_allclose(vectors, unit([vector_of("alpha")]), atol=1e-6)
    assert len(embed_server.requests) == 3
    assert waits == [7.0, 0.5]  # the server's Retry-After, then backoff_s * 2**1


def test_retry_after_as_a_date_and_capped(embed_server: ScriptedServer) -> None:
    client, waits = embedder(embed_server, max_backoff_s=3.0)
    later = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)
    embed_server.script = [status(429, None, **{"Retry-After": later})]
    client.encode(["alpha"], kind="document")
    assert waits == [3.0]  # an hour asked, max_backoff_s waited


def test_permanent_500_fails_after_max_retries(
    embed_server: ScriptedServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    client, waits = embedder(embed_server, max_retries=3, backoff_s=0.1)
    embed_server.script = [status(500, {"error": {"message": "overloaded"}})] * 4
    with caplog.at_level(logging.WARNING, logger="retrievers.http"), pytest.raises(EndpointError) as caught:
        client.encode(["alpha"], kind="document")
    assert str(caught.value) == f"HTTP 500 from {embed_server.url}/embeddings: overloaded (after 4 attempts)"
    assert caught.value.status == 500 and caught.value.attempts == 4 and caught.value.kind == "http"
    assert len(embed_server.requests) == 4
    assert waits == pytest.approx([0.1, 0.2, 0.4])
    assert "retry 3 of 3" in caplog.text and KEY not in caplog.text


def test_client_errors_fail_at_once_with_the_servers_message(
    embed_server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    client, waits = embedder(embed_server)
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}.", "type": "invalid_request_error"}}
    embed_server.script = [status(401, echo)]
    with pytest.raises(EndpointError) as caught:
        client.encode(["alpha"], kind="document")
    assert (
        str(caught.value) == f"HTTP 401 from {embed_server.url}/embeddings: Incorrect API key provided: ***."
    )
    assert caught.value.status == 401 and caught.value.attempts == 1
    assert len(embed_server.requests) == 1 and waits == []
    embed_server.script = [status(400, {"detail": "input too long"})]
    with pytest.raises(EndpointError, match=r"HTTP 400 from .*: input too long$"):
        client.encode(["alpha"], kind="document")


def test_timeout_is_retried_then_fails(embed_server: ScriptedServer) -> None:
    client, waits = embedder(embed_server, timeout_s=0.2, max_retries=1, backoff_s=0.0)
    embed_server.script = ["slow", "slow"]
    with pytest.raises(EndpointError) as caught:
        client.encode(["alpha"], kind="document")
    url = f"{embed_server.url}/embeddings"
    assert str(caught.value) == f"no answer from {url} within 0.2 s (after 2 attempts)"
    assert caught.value.kind == "timeout" and len(embed_server.requests) == 2 and waits == [0.0]


def test_slow_once_then_answered(embed_server: ScriptedServer) -> None:
    client, _ = embedder(embed_server, timeout_s=0.2, max_retries=2, backoff_s=0.0)
    embed_server.script = ["slow"]
    assert client.encode(["alpha"], kind="document").shape == (1, 4)


def test_unreachable_server() -> None:
    client = OpenAIEmbedder("m", base_url=unreachable_url(), max_retries=0, timeout_s=2)
    with pytest.raises(EndpointError, match="cannot reach"):
        client.encode(["alpha"], kind="document")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (Reply(200, b"<html>busy</html>"), "the body is not JSON"),
        (ok({"object": "list"}), "has no 'data' list"),
        (ok({"data": [{"index": 0, "embedding": [1.0, 0.0]}] * 2}), "returned 2 vectors for 3 texts"),
        (
            ok({"data": [{"index": i % 2, "embedding": [1.0, 0.0]} for i in range(3)]}),
            "index 0 appears twice",
        ),
        (
            ok({"data": [{"index": i + 1, "embedding": [1.0]} for i in range(3)]}),
            r"has index 3, not in \[0, 2\]",
        ),
        (
            ok({"data": [{"index": i, "embedding": [1.0] * (i + 1)} for i in range(3)]}),
            r"vectors of width \[1, 2, 3\]",
        ),
        (ok({"data": [{"index": i, "embedding": ["1", "2"]} for i in range(3)]}), "not all numbers"),
        (ok({"data": [{"index": i, "embedding": None} for i in range(3)]}), "not a list of numbers"),
    ],
)
def test_answers_of_the_wrong_shape_are_errors(
    embed_server: ScriptedServer, answer: Reply, message: str
) -> None:
    client, waits = embedder(embed_server)
    embed_server.script = [answer]
    with pytest.raises(EndpointError, match=message):
        client.encode(["a", "b", "c"], kind="document")
    assert waits == []  # a wrong answer is not retried


def test_width_must_match_dimensions_and_earlier_batches(embed_server: ScriptedServer) -> None:
    client, _ = embedder(embed_server, dimensions=8)
    embed_server.script = [ok({"data": [{"index": 0, "embedding": [1.0, 2.0]}]})]
    with pytest.raises(EndpointError, match=r"width \[2\], expected 8"):
        client.encode(["a"], kind="document")
    plain, _ = embedder(embed_server, batch_size=1)
    embed_server.script = [
        ok({"data": [{"index": 0, "embedding": [1.0, 2.0]}]}),
        ok({"data": [{"index": 0, "embedding": [1.0, 2.0, 3.0]}]}),
    ]
    with pytest.raises(EndpointError, match=r"width \[3\], expected 2"):
        plain.encode(["a", "b"], kind="document")


def test_cached_like_any_embedder(embed_server: ScriptedServer, tmp_path: Path) -> None:
    client, _ = embedder(embed_server)
    cached = CachedEmbedder(client, ArtifactCache(tmp_path / "cache"))
    texts = ["alpha", "beta", "gamma"]
    first = cached.encode(texts, kind="document")
    assert len(embed_server.requests) == 1
    assert np.array_equal(cached.encode(texts, kind="document"), first)  # memo
    clear_memo()
    again = CachedEmbedder(embedder(embed_server)[0], ArtifactCache(tmp_path / "cache"))
    assert np.array_equal(again.encode(texts, kind="document"), first)  # disk
    assert len(embed_server.requests) == 1  # the second and third encode made no HTTP call
    cached.encode(texts, kind="query")  # another kind is another entry
    assert len(embed_server.requests) == 2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"base_url": "ftp://host/v1"}, "base_url must be an http"),
        ({"base_url": "http://"}, "base_url must be an http"),
        ({"api_key_env": "OPENAI_API_KEY=sk-123"}, "api_key_env must name an environment variable"),
        ({"api_key_env": ""}, "api_key_env must name an environment variable"),
        ({"timeout_s": 0}, r"timeout_s must be in \(0, 600\]"),
        ({"batch_size": 0}, r"batch_size must be an integer in \[1, 2048\]"),
        ({"dimensions": 0}, r"dimensions must be an integer in \[1, 65536\] or null"),
        ({"max_retries": -1}, r"max_retries must be an integer in \[0, 20\]"),
        ({"backoff_s": -1}, r"backoff_s must be a number in \[0, 600\]"),
        ({"model": " "}, "model must be a non-empty string"),
    ],
)
def test_embedder_settings_are_checked(settings: dict[str, Any], message: str) -> None:
    values: dict[str, Any] = {"model": "m", **settings}
    with pytest.raises(ParamError, match=message):
        OpenAIEmbedder(**values)


def test_name_leaves_out_credentials_and_path() -> None:
    assert (
        OpenAIEmbedder("text-embedding-3-small").name
        == "openai:api.openai.com/text-embedding-3-small:default"
    )
    assert (
        OpenAIEmbedder("m", base_url="https://user:secret@[::1]:8443/proxy/v1", dimensions=256).name
        == "openai:[::1]:8443/m:256"
    )


# ---------------------------------------------------------------------------------------------------
# HTTPReranker

CANDIDATES = [RetrievalResult(doc_id=f"d{i}", score=1.0 - i / 10) for i in range(3)]
INCOMING = [1.0, 0.9, 0.8]
TEXTS = ["red apple pie", "green apple", "blue sky"]


def reranker(server: ScriptedServer, **settings: Any) -> tuple[HTTPReranker, Waits]:
    made = HTTPReranker(server.url, "rr-model", api_key_env="TEST_RERANK_KEY", **settings)
    waits = Waits()
    made.endpoint.sleep = waits
    return made, waits


def test_rerank_scores_in_input_order(rerank_server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_RERANK_KEY", KEY)
    client, _ = reranker(rerank_server)
    # the server answers in score order: blue sky (2 words), red apple pie (1), green apple (0)
    assert client.rerank("blue sky pie", CANDIDATES, TEXTS) == [0.1, 0.0, 0.2]
    request = rerank_server.requests[0]
    assert request["path"] == "/v1/rerank"
    assert request["body"] == {"model": "rr-model", "query": "blue sky pie", "documents": TEXTS, "top_n": 3}
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(client)
    scores, reason = rerank_with_fallback(client, "blue sky pie", CANDIDATES, TEXTS)
    assert (scores, reason) == ([0.1, 0.0, 0.2], None)


def test_rerank_batches_and_cuts_texts(rerank_server: ScriptedServer) -> None:
    client, _ = reranker(rerank_server, batch_size=2, max_text_chars=9)
    # "green apple" cut to 9 characters is "green app": the query word "apple" is gone
    assert client.rerank("apple sky", CANDIDATES, TEXTS) == [0.1, 0.0, 0.1]
    bodies = [request["body"] for request in rerank_server.requests]
    assert [body["documents"] for body in bodies] == [["red apple", "green app"], ["blue sky"]]
    assert [body["top_n"] for body in bodies] == [2, 1]


def test_rerank_tei_shape(rerank_server: ScriptedServer) -> None:
    client, _ = reranker(rerank_server, api="tei")
    assert client.rerank("green apple", CANDIDATES, TEXTS) == [0.1, 0.2, 0.0]
    assert rerank_server.requests[0]["body"] == {"query": "green apple", "texts": TEXTS}


def test_document_missing_from_results_keeps_first_stage_order(rerank_server: ScriptedServer) -> None:
    client, _ = reranker(rerank_server)
    cut = ok({"results": [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]})
    rerank_server.script = [cut]
    with pytest.raises(RerankError, match=r"scores 2 of 3 documents; missing indexes \[1\]"):
        client.rerank("q", CANDIDATES, TEXTS)
    rerank_server.script = [cut]
    scores, reason = rerank_with_fallback(client, "q", CANDIDATES, TEXTS)
    assert scores == INCOMING
    assert (
        reason is not None and reason.startswith("raised RerankError: ") and "missing indexes [1]" in reason
    )


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (Reply(200, b"not json"), "the body is not JSON"),
        (ok({"data": []}), "has no 'results' list"),
        (ok({"results": [{"index": 0, "relevance_score": 0.5}] * 2}), "document 0 is scored twice"),
        (ok({"results": [{"index": 5, "relevance_score": 0.5}]}), r"index 5, not in \[0, 2\]"),
        (ok({"results": [{"index": 0, "relevance_score": "high"}]}), "score 'high', not a finite number"),
        (ok({"results": [{"index": 0}]}), "score None, not a finite number"),
    ],
)
def test_rerank_bad_answers(rerank_server: ScriptedServer, answer: Reply, message: str) -> None:
    client, _ = reranker(rerank_server)
    rerank_server.script = [answer]
    with pytest.raises(RerankError, match=message):
        client.rerank("q", CANDIDATES, TEXTS)


def test_rerank_retries_429_then_succeeds(rerank_server: ScriptedServer) -> None:
    client, waits = reranker(rerank_server, backoff_s=0.2)
    rerank_server.script = [status(429, {"message": "too many requests"})]
    assert client.rerank("blue", CANDIDATES, TEXTS) == [0.0, 0.0, 0.1]
    assert waits == [0.2] and len(rerank_server.requests) == 2


def test_rerank_permanent_500_falls_back_after_retries(rerank_server: ScriptedServer) -> None:
    client, waits = reranker(rerank_server, max_retries=2, backoff_s=0.1)
    rerank_server.script = [status(502, b"<html>bad gateway</html>")] * 3
    scores, reason = rerank_with_fallback(client, "q", CANDIDATES, TEXTS)
    assert scores == INCOMING
    assert reason == (
        f"raised RerankError: HTTP 502 from {rerank_server.url}/rerank: <html>bad gateway</html> (after 3 attempts)"
    )
    assert waits == pytest.approx([0.1, 0.2])


def test_rerank_client_error_and_timeout(rerank_server: ScriptedServer) -> None:
    client, waits = reranker(rerank_server, timeout_s=0.2, max_retries=0)
    rerank_server.script = [status(422, {"detail": [{"msg": "field required"}]})]
    with pytest.raises(RerankError, match=r"HTTP 422 from .*field required"):
        client.rerank("q", CANDIDATES, TEXTS)
    rerank_server.script = ["slow"]
    scores, reason = rerank_with_fallback(client, "q", CANDIDATES, TEXTS)
    assert scores == INCOMING
    assert reason == f"raised RerankError: no answer from {rerank_server.url}/rerank within 0.2 s"
    assert waits == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"base_url": "localhost:8000"}, "base_url must be an http"),
        ({"model": ""}, "model must be a non-empty string"),
        ({"api": "openai"}, r"api must be one of \['cohere', 'tei'\]"),
        ({"batch_size": 0}, r"batch_size must be an integer in \[1, 10000\]"),
        ({"max_text_chars": 0}, r"max_text_chars must be an integer in \[1, 10000000\] or null"),
        ({"timeout_s": 601}, r"timeout_s must be in \(0, 600\]"),
        ({"api_key_env": "A B=c"}, "api_key_env must name an environment variable"),
    ],
)
def test_reranker_settings_are_checked(settings: dict[str, Any], message: str) -> None:
    values: dict[str, Any] = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **settings}
    with pytest.raises(ParamError, match=message):
        HTTPReranker(**values)


# ---------------------------------------------------------------------------------------------------
# the shared transport


def test_server_message_shapes() -> None:
    assert server_message(b'{"error": {"message": "bad key", "code": 401}}') == "bad key"
    assert server_message(b'{"error": "Model is loading"}') == "Model is loading"
    assert server_message(b'{"message": "invalid request: too many documents"}') == (
        "invalid request: too many documents"
    )
    assert server_message(b'{"detail": "Not Found"}') == "Not Found"
    assert server_message(b"  plain\n text  ") == "plain text"
    assert server_message(b"", "Internal Server Error") == "Internal Server Error"
    assert server_message(b"x" * 1000).endswith("...") and len(server_message(b"x" * 1000)) == 303


def test_endpoint_sends_json_and_returns_json(server_factory: Callable[..., ScriptedServer]) -> None:
    server = server_factory(lambda path, body: ok({"echo": body, "path": path}))
    endpoint = JsonEndpoint(server.url + "/anything", api_key_env="UNSET_TEST_KEY_VARIABLE")
    assert endpoint.post({"x": [1, 2]}) == {"echo": {"x": [1, 2]}, "path": "/v1/anything"}
    headers = server.requests[0]["headers"]
    assert headers["Content-Type"] == "application/json" and "Authorization" not in headers


def test_redirects_are_not_followed(
    server_factory: Callable[..., ScriptedServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    elsewhere = server_factory(embeddings_reply)
    server = server_factory(lambda path, body: status(302, None, Location=elsewhere.url + "/embeddings"))
    client, waits = embedder(server)
    with pytest.raises(
        EndpointError, match=r"HTTP 302 from .*redirects to http://127\.0\.0\.1:\d+/v1/embeddings are not"
    ):
        client.encode(["alpha"], kind="document")
    assert elsewhere.requests == [] and waits == []


def test_remote_embedder_and_reranker_through_the_kernel(
    embed_server: ScriptedServer, rerank_server: ScriptedServer
) -> None:
    """A store built with the remote embedder, a dense retriever reranked by the remote reranker;
    when the reranker's answer misses a document, the first-stage order stays, and says why."""
    from retrievers import DenseRetriever, Document, StoreConfig

    texts = ["red apple", "green apple pie", "blue sky", "apple"]
    docs = [Document(id=f"d{i}", text=text) for i, text in enumerate(texts)]
    remote, _ = embedder(embed_server)
    store = build_store(docs, remote, StoreConfig.from_dict({}))
    plain = DenseRetriever(store, remote).retrieve("apple pie", 4)
    client, _ = reranker(rerank_server, max_retries=0)
    reranked = DenseRetriever(store, remote, reranker=client).retrieve("apple pie", 4)
    # rerank scores: query words found / 10; ties broken by doc id
    assert [(r.doc_id, r.score) for r in reranked] == [("d1", 0.2), ("d0", 0.1), ("d3", 0.1), ("d2", 0.0)]
    assert all(r.provenance.get("rerank_fallback") is None for r in reranked)
    rerank_server.script = [ok({"results": [{"index": 0, "relevance_score": 1.0}]})]
    kept = DenseRetriever(store, remote, reranker=client).retrieve("apple pie", 4)
    assert [(r.doc_id, r.score) for r in kept] == [(r.doc_id, r.score) for r in plain]
    reasons = {r.provenance.get("rerank_fallback") for r in kept}
    assert len(reasons) == 1 and "missing indexes" in str(next(iter(reasons)))
