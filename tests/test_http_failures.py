"""Remote models that fail, through the command line: every failure of the OpenAI-compatible
embedder (a hang, HTTP 500, a body that is not JSON, vectors of the wrong width, one vector too
few, NaN) ends the run with one line ``error: remote model call failed: <url>: <what>``, exit 1
(a failed run, not bad input), no traceback, and the run folder marked failed; a ``/rerank``
endpoint that fails on every query prints one warning line with the count, not one per query.

The models are a local server on 127.0.0.1 (tests/http_servers.py); ADI (82 documents) is the
corpus."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_cli, smoke_settings
from http_servers import ModelServer

from retrievers.http import EndpointError
from retrievers.rerank import fallback_summary
from retrievers.types import RetrievalResult
from viking_eval.run.experiment import run_experiment

SMOKE = ["experiment=smoke", "run.latency.n_queries=0", "show_progress=false"]
ADI_QUERIES = 35


@pytest.fixture
def server() -> Iterator[ModelServer]:
    started = ModelServer()
    yield started
    started.close()


def _cli(args: list[str], data: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, f"hydra.run.dir={out}", env={"VIKING_EVAL_DATA": str(data), **env}, timeout=300)


# mode -> (embedder overrides, what the one line must say)
EMBEDDER_FAILURES = {
    "hang": (
        ["embedder.timeout_s=1", "embedder.max_retries=0"],
        "no answer from {url}/embeddings within 1 s",
    ),
    "error": (
        ["embedder.max_retries=1", "embedder.backoff_s=0"],
        "HTTP 500 from {url}/embeddings: overloaded (after 2 attempts)",
    ),
    "not_json": (["embedder.max_retries=0"], "bad answer from {url}/embeddings: the body is not JSON"),
    "wrong_dim": (["embedder.max_retries=0"], "{url}/embeddings returned vectors of width [9], expected 8"),
    "wrong_count": (["embedder.max_retries=0"], "{url}/embeddings returned 81 vectors for 82 texts"),
    "nan": (["embedder.max_retries=0"], "{url}/embeddings returned a vector with NaN or infinity"),
}


@pytest.mark.needs_data
@pytest.mark.parametrize("mode", sorted(EMBEDDER_FAILURES))
def test_embedder_failure_is_the_endpoint_error_of_the_loop(
    mode: str, server: ModelServer, data_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every failure, through the experiment loop in this process: the EndpointError whose text
    the command line prints (``error: remote model call failed: <text>``, checked end to end for
    one mode below), and no retriever's result written."""
    overrides, expected = EMBEDDER_FAILURES[mode]
    server.mode = mode
    monkeypatch.setenv("VIKING_EVAL_EMBED_URL", server.url)
    monkeypatch.setenv("VIKING_EVAL_EMBED_MODEL", "test-model")
    out = tmp_path / "run"
    try:
        with pytest.raises(EndpointError) as caught:
            run_experiment(
                smoke_settings(*SMOKE[1:], "embedder=openai", "embedder.dimensions=8", *overrides), out
            )
    finally:
        server.release.set()
    assert str(caught.value) == expected.format(url=server.url)
    assert not (out / "results").exists() or not list((out / "results").iterdir())


@pytest.mark.needs_data
@pytest.mark.parametrize("mode", ["error"])
def test_embedder_failure_is_one_line_and_a_failed_run(
    mode: str, server: ModelServer, shared_datasets: Path, tmp_path: Path
) -> None:
    """The command line: one line, exit 1, no traceback, the run folder marked failed."""
    overrides, expected = EMBEDDER_FAILURES[mode]
    server.mode = mode
    out = tmp_path / "run"
    done = _cli(
        [*SMOKE, "embedder=openai", "embedder.dimensions=8", *overrides],
        shared_datasets,
        out,
        VIKING_EVAL_EMBED_URL=server.url,
        VIKING_EVAL_EMBED_MODEL="test-model",
    )
    server.release.set()
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr + done.stdout
    assert lines == [f"error: remote model call failed: {expected.format(url=server.url)}"], lines
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "failed" and expected.format(url=server.url) in status["error"]
    assert not (out / "results").exists() or not list((out / "results").iterdir())


@pytest.mark.needs_data
def test_reranker_falling_back_on_every_query_prints_one_line(
    server: ModelServer, shared_datasets: Path, tmp_path: Path
) -> None:
    server.mode = "error"
    done = _cli(
        [
            *SMOKE,
            "+retriever@retrievers.h=hybrid_rrf",
            "+reranker@retrievers.h.reranker=http",
            f"retrievers.h.reranker.base_url={server.url}",
            "retrievers.h.reranker.backoff_s=0",
        ],
        shared_datasets,
        tmp_path / "run",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    mentions = [line for line in output.splitlines() if "/v1/rerank" in line]
    assert len(mentions) == 1, mentions[:5]
    assert (
        f"retriever h: its reranker fell back on {ADI_QUERIES} of {ADI_QUERIES} reranked queries"
        in mentions[0]
    )
    assert "HTTP 500 from" in mentions[0] and "(after 3 attempts)" in mentions[0]
    assert len(server.requests) == 3 * ADI_QUERIES  # every query tried, with its 2 retries


def _result(doc_id: str, fallback: str | None, fallbacks: int) -> RetrievalResult:
    return RetrievalResult(
        doc_id=doc_id,
        score=1.0,
        provenance={"rerank_fallback": fallback, "stats": {"rerank_fallbacks": fallbacks}},
    )


def test_fallback_summary_counts_queries_and_names_the_commonest_reason() -> None:
    run = {
        "q1": [_result("a", "timed out after 2 s", 1), _result("b", "timed out after 2 s", 1)],
        "q2": [_result("a", None, 0)],
        "q3": [_result("c", "timed out after 2 s", 1)],
        "q4": [_result("c", "returned None", 1)],
        "q5": [],  # no results: nothing reranked
        "q6": [RetrievalResult(doc_id="x", score=0.5)],  # no reranker stats
    }
    assert fallback_summary(run) == (
        "fell back on 3 of 4 reranked queries (timed out after 2 s; 1 other reasons)"
    )
    assert fallback_summary({"q2": run["q2"], "q5": []}) is None
