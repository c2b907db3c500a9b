"""Rerankers and the fallback around them: every failure keeps the incoming scores and says why;
the bi-encoder reranker's cosines by hand; a tiny randomly initialised BERT cross-encoder built
here (wiring only, never quality); the LLM reranker against a local OpenAI-compatible server on
127.0.0.1 that answers well, slowly, with garbage and with HTTP errors."""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from http_servers import ChatServer, unreachable_url

from retrievers.rerank import (
    CrossEncoderReranker,
    EmbeddingReranker,
    LLMReranker,
    RerankError,
    rerank_with_fallback,
)
from retrievers.rerank.llm import parse_grades
from retrievers.types import EncodeKind, RetrievalResult

CANDIDATES = [RetrievalResult("d1", 0.9), RetrievalResult("d2", 0.5), RetrievalResult("d3", 0.1)]
TEXTS = ["first text", "second text", "third text"]
INCOMING = [0.9, 0.5, 0.1]


class Answer:
    """A reranker that returns (or raises) a fixed answer and records what it was sent."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.sent: list[tuple[list[str], list[str]]] = []

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> Any:
        self.sent.append(([c.doc_id for c in candidates], list(texts)))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Blocked:
    """Answers only when released: a reranker that misses any time limit (no sleeping)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        self.release.wait(10)
        return [1.0] * len(candidates)


def test_successful_rerank_returns_the_rerankers_scores() -> None:
    reranker = Answer([0.2, 0.8, 0.5])
    scores, reason = rerank_with_fallback(reranker, "q", CANDIDATES, TEXTS)
    assert scores == [0.2, 0.8, 0.5] and reason is None
    assert reranker.sent == [(["d1", "d2", "d3"], TEXTS)]
    scores, reason = rerank_with_fallback(Answer(np.array([1, 2, 3])), "q", CANDIDATES, TEXTS)
    assert scores == [1.0, 2.0, 3.0] and reason is None


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (RuntimeError("model exploded"), "raised RuntimeError: model exploded"),
        (None, "returned None"),
        ([0.1, 0.2], "returned 2 scores for 3 candidates"),
        ([0.1, 0.2, 0.3, 0.4], "returned 4 scores for 3 candidates"),
        ([0.1, math.nan, 0.3], "returned nan for 'd2', not a finite number"),
        ([0.1, 0.2, math.inf], "returned inf for 'd3', not a finite number"),
        ([0.1, "high", 0.3], "returned 'high' for 'd2', not a finite number"),
        ([True, 0.2, 0.3], "returned True for 'd1', not a finite number"),
        ("0.1 0.2 0.3", "returned str, not a list of scores"),
        ({"d1": 0.1}, "returned dict, not a list of scores"),
    ],
)
def test_every_failure_keeps_the_incoming_scores_and_says_why(answer: object, reason: str) -> None:
    scores, got = rerank_with_fallback(Answer(answer), "q", CANDIDATES, TEXTS)
    assert scores == INCOMING  # incoming scores, so the incoming order is kept
    assert got == reason


def test_time_limit_falls_back_without_waiting_for_the_reranker() -> None:
    blocked = Blocked()
    try:
        scores, reason = rerank_with_fallback(blocked, "q", CANDIDATES, TEXTS, timeout_s=0.05)
    finally:
        blocked.release.set()
    assert scores == INCOMING and reason == "timed out after 0.05 s"
    # within the limit the answer is used
    blocked_done = Blocked()
    blocked_done.release.set()
    assert rerank_with_fallback(blocked_done, "q", CANDIDATES, TEXTS, timeout_s=5) == ([1.0] * 3, None)
    scores, reason = rerank_with_fallback(Answer(ValueError("bad")), "q", CANDIDATES, TEXTS, timeout_s=5)
    assert scores == INCOMING and reason == "raised ValueError: bad"


def test_empty_texts_are_not_sent_and_rank_after_every_reranked_candidate() -> None:
    reranker = Answer([0.4, 0.7])
    scores, reason = rerank_with_fallback(reranker, "q", CANDIDATES, ["first", "  ", "third"])
    assert reranker.sent == [(["d1", "d3"], ["first", "third"])]
    assert reason is None
    assert scores == [0.4, 0.4 - 1.0, 0.7]  # d2: the lowest reranker score minus 1
    nothing = Answer([1.0])
    scores, reason = rerank_with_fallback(nothing, "q", CANDIDATES, ["", "", " "])
    assert nothing.sent == [] and scores == INCOMING and reason == "no candidate has text to rerank"
    assert rerank_with_fallback(nothing, "q", [], []) == ([], None)
    with pytest.raises(ValueError, match="got 2 texts for 3 candidates"):
        rerank_with_fallback(nothing, "q", CANDIDATES, ["a", "b"])


# --------------------------------------------------------------------------------------------
# Bi-encoder reranker
# --------------------------------------------------------------------------------------------


class TableEmbedder:
    """Fixed unit vectors by text; counts what it encodes."""

    name = "table"
    dim = 2

    def __init__(self) -> None:
        self.encoded: list[tuple[str, list[str]]] = []

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        self.encoded.append((kind, list(texts)))
        table = {"q": (1.0, 0.0), "x": (0.6, 0.8), "y": (0.0, 1.0), "z": (-1.0, 0.0)}
        return np.asarray([table[text] for text in texts], dtype=np.float32)


def test_embedding_reranker_scores_are_cosines_and_documents_are_encoded_once() -> None:
    embedder = TableEmbedder()
    reranker = EmbeddingReranker(embedder, cache_size=2)
    candidates = [RetrievalResult(doc, 0.0) for doc in ("a", "b", "c")]
    assert reranker.rerank("q", candidates, ["x", "y", "z"]) == pytest.approx([0.6, 0.0, -1.0])
    assert embedder.encoded == [("query", ["q"]), ("document", ["x", "y", "z"])]
    embedder.encoded.clear()
    # cache_size 2 kept the two newest texts (y, z); x is encoded again, once even if repeated
    assert reranker.rerank("q", candidates, ["z", "x", "x"]) == pytest.approx([-1.0, 0.6, 0.6])
    assert embedder.encoded == [("query", ["q"]), ("document", ["x"])]
    with pytest.raises(ValueError, match=r"cache_size must be an integer in \[0, 10000000\]"):
        EmbeddingReranker(embedder, cache_size=-1)


# --------------------------------------------------------------------------------------------
# Cross-encoder reranker: a tiny random BERT built here
# --------------------------------------------------------------------------------------------

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "cells",
    "cancer",
    "protein",
    "gene",
    "the",
    "of",
    "p53",
    "?",
]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 64-wide BERT sequence classifier with one label and a 13-word WordPiece
    vocabulary, randomly initialised (seeded) and saved as a local model folder."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        num_labels=1,
        initializer_range=0.5,  # wide random weights, so different pairs get visibly different scores
    )
    BertForSequenceClassification(config).save_pretrained(folder)
    # transformers 5 takes the vocabulary itself (a vocab_file argument would be ignored there)
    tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)})
    assert tokenizer.tokenize("The p53 protein?") == ["the", "p53", "protein", "?"]
    tokenizer.save_pretrained(folder)
    return folder


def test_cross_encoder_loads_lazily_and_scores_each_pair(tiny_cross_encoder: Path) -> None:
    reranker = CrossEncoderReranker(str(tiny_cross_encoder), max_length=32, batch_size=2)
    assert reranker._model is None  # nothing loaded before the first rerank
    texts = ["the p53 protein", "cells of cancer", "gene"]
    scores = reranker.rerank("p53 ?", CANDIDATES, texts)
    assert len(scores) == 3 and all(0.0 < score < 1.0 for score in scores)  # sigmoid of one logit
    assert len(set(scores)) == 3  # different pairs, different scores
    # one pair at a time gives the same scores (padding does not change them)
    one_by_one = [
        reranker.rerank("p53 ?", [candidate], [text])[0]
        for candidate, text in zip(CANDIDATES, texts, strict=True)
    ]
    assert one_by_one == pytest.approx(scores, abs=1e-6)
    fused, reason = rerank_with_fallback(reranker, "p53 ?", CANDIDATES, texts, timeout_s=60)
    assert reason is None and fused == pytest.approx(scores, abs=1e-6)


def test_cross_encoder_that_cannot_load_falls_back(tmp_path: Path) -> None:
    reranker = CrossEncoderReranker(str(tmp_path / "no-such-model"))
    scores, reason = rerank_with_fallback(reranker, "q", CANDIDATES, TEXTS)
    assert scores == INCOMING and reason is not None and reason.startswith("raised ")
    with pytest.raises(ValueError, match=r"max_length must be an integer in \[1, 8192\]"):
        CrossEncoderReranker("m", max_length=0)


# --------------------------------------------------------------------------------------------
# LLM reranker against a local OpenAI-compatible server
# --------------------------------------------------------------------------------------------


def grades_reply(body: dict[str, Any], mode: str) -> str:
    """Grades = passage length in words (capped at 10), shaped by ``mode``: good, slow, fenced,
    garbage (prose), wrong_count, out_of_range."""
    passages = [
        line.split("] ", 1)[1] for line in body["messages"][1]["content"].splitlines() if line.startswith("[")
    ]
    grades = [min(len(text.split()), 10) for text in passages]
    return {
        "good": json.dumps({"scores": grades}),
        "slow": json.dumps({"scores": grades}),
        "fenced": "```json\n" + json.dumps(grades) + "\n```",
        "garbage": "Sure! The first passage is the most relevant.",
        "wrong_count": json.dumps({"scores": grades[:-1]}),
        "out_of_range": json.dumps({"scores": [11] * len(grades)}),
    }[mode]


@pytest.fixture()
def chat_server(chat_server_factory: Callable[..., ChatServer]) -> ChatServer:
    return chat_server_factory(grades_reply)


LLM_TEXTS = ["one", "two words", "a passage of four"]


def test_llm_grades_are_normalised_and_the_request_is_well_formed(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "sekret")
    reranker = LLMReranker(chat_server.url, "grader-1", api_key_env="TEST_LLM_KEY", timeout_s=5)
    assert reranker.rerank("what's NOT (p53)?", CANDIDATES, LLM_TEXTS) == pytest.approx([0.1, 0.2, 0.4])
    request = chat_server.requests[0]["body"]
    assert request["model"] == "grader-1" and request["temperature"] == 0.0
    assert (
        request["messages"][0]["role"] == "system"
        and "0 (unrelated) to 10" in request["messages"][0]["content"]
    )
    user = request["messages"][1]["content"]
    assert "Query: what's NOT (p53)?" in user
    assert "[0] one\n[1] two words\n[2] a passage of four" in user
    assert chat_server.requests[0]["headers"]["Authorization"] == "Bearer sekret"


def test_llm_batches_and_fenced_answers(chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chat_server.mode = "fenced"
    reranker = LLMReranker(chat_server.url, "m", batch_size=2, max_text_chars=6, timeout_s=5)
    # "a passage of four" cut to 6 characters is "a pass": 2 words
    assert reranker.rerank("q", CANDIDATES, LLM_TEXTS) == pytest.approx([0.1, 0.2, 0.2])
    assert len(chat_server.requests) == 2  # passages 0-1, then passage 2, numbered from 0 again
    assert "[0] a pass" in chat_server.requests[1]["body"]["messages"][1]["content"]
    assert "Authorization" not in chat_server.requests[0]["headers"]  # no key in the environment: no header


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("garbage", "answer is not JSON"),
        ("wrong_count", "answer grades 2 passages, 3 were sent"),
        ("out_of_range", "grade 0 is 11, not a number in [0, 10]"),
        ("not_chat", "answer is not a chat completion"),
        ("error", "HTTP 500 from"),
    ],
)
def test_llm_failures_fall_back_with_the_reason(chat_server: ChatServer, mode: str, reason: str) -> None:
    chat_server.mode = mode
    reranker = LLMReranker(chat_server.url, "m", timeout_s=5)
    with pytest.raises(RerankError, match=re.escape(reason)):
        reranker.rerank("q", CANDIDATES, LLM_TEXTS)
    scores, got = rerank_with_fallback(reranker, "q", CANDIDATES, LLM_TEXTS)
    assert scores == INCOMING
    assert got is not None and got.startswith("raised RerankError: ") and reason in got


def test_llm_slow_server_times_out(chat_server: ChatServer) -> None:
    chat_server.mode = "slow"
    reranker = LLMReranker(chat_server.url, "m", timeout_s=0.1)
    scores, reason = rerank_with_fallback(reranker, "q", CANDIDATES, LLM_TEXTS)
    assert scores == INCOMING
    assert reason == f"raised RerankError: no answer from {chat_server.url}/chat/completions within 0.1 s"


def test_llm_unreachable_server_and_bad_settings() -> None:
    # a port nobody listens on: bind one, close it, use its number
    scores, reason = rerank_with_fallback(
        LLMReranker(unreachable_url(), "m", timeout_s=2), "q", CANDIDATES, LLM_TEXTS
    )
    assert scores == INCOMING and reason is not None and "cannot reach" in reason
    with pytest.raises(ValueError, match="base_url must be an http"):
        LLMReranker("ftp://x", "m")
    with pytest.raises(ValueError, match=r"timeout_s must be in \(0, 600\]"):
        LLMReranker("http://x", "m", timeout_s=0)
    with pytest.raises(ValueError, match=r"batch_size must be an integer in \[1, 1000\]"):
        LLMReranker("http://x", "m", batch_size=0)


def test_parse_grades_accepts_a_bare_list_and_rejects_non_numbers() -> None:
    assert parse_grades("[10, 0, 5.5]", 3) == [1.0, 0.0, 0.55]
    assert parse_grades('{"scores": [7]}', 1) == [0.7]
    with pytest.raises(RerankError, match='no "scores" list'):
        parse_grades('{"grades": [1]}', 1)
    with pytest.raises(RerankError, match="grade 0 is 'high'"):
        parse_grades('["high"]', 1)
    with pytest.raises(RerankError, match="grade 0 is True"):
        parse_grades("[true]", 1)
