"""The reader and judge against a scripted local server (tests/http_servers.py's chat endpoint):
hand-computed J, F1, tokens, costs and cache hits, and a run that survives a 500, a time-out and
a malformed reply. No real model is run here: the server's answers and verdicts are a script."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import compose_settings
from http_servers import ModelServer
from test_answers_recall import tiny_overrides, write_dataset

from retrievers.llm import LLMError
from viking_eval.run.experiment import run_experiment

READER = "### system\nRead.\n### user\nQ: {question} C: {context}\n"
JUDGE = "### system\nGrade.\n### user\nQ: {question} G: {gold} A: {answer}\n"
ANSWERS = {
    "When Caroline group?": "May 7, 2023",
    "What Melanie painted?": "a sunrise",
    "Where Jon studio?": "Paris",
}
VERDICTS = {"May 7, 2023": '{"label": "CORRECT"}', "a sunrise": "CORRECT", "Paris": '{"label": "WRONG"}'}


def scripted(body: dict[str, Any]) -> str:
    """The reader's answer by question; the judge's verdict by the answer it grades."""
    system, user = (message["content"] for message in body["messages"])
    if system.startswith("Read."):
        return next(answer for question, answer in ANSWERS.items() if f"Q: {question} C:" in user)
    return VERDICTS[user.rsplit(" A: ", 1)[1]]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    started = ModelServer(chat=scripted)
    yield started
    started.close()


def llm_settings(tmp_path: Path, server: ModelServer, *more: str, pair: bool = False) -> Any:
    """BM25 alone (``pair``: and the second BM25 of tiny_overrides) with the scripted reader and judge."""
    folder = tmp_path / "tiny" if (tmp_path / "tiny").exists() else write_dataset(tmp_path / "tiny")
    (tmp_path / "reader.txt").write_text(READER)
    (tmp_path / "judge.txt").write_text(JUDGE)
    return compose_settings(
        *tiny_overrides(
            folder,
            *([] if pair else ["~retrievers.bm25b"]),
            "answers.enabled=true",
            "answers.k=1",
            f"answers.reader_prompt={tmp_path}/reader.txt",
            f"answers.judge_prompt={tmp_path}/judge.txt",
            f"llm.base_url={server.url}",
            "llm.model=scripted",
            "llm.concurrency=1",  # the script's failures fall on known requests
            "llm.max_retries=1",
            "llm.timeout_s=1",
            "llm.price_input_per_mtok=2000",  # $0.002 a prompt token
            "llm.price_output_per_mtok=10000",  # $0.01 a completion token
            *more,
        )
    )


# Tokens are the server's word counts (http_servers.py). Reader prompt words: system "Read." 1;
# user "Q: <question> C: 1. <top-1 text>": qa 1+3+1+1+6 = 12, qb 1+3+1+1+3 = 9, qc 1+3+1+1+4 = 10.
# Judge: system "Grade." 1; user "Q: <question> G: <gold> A: <answer>": qa 1+3+1+3+1+3 = 12,
# qb 1+3+1+2+1+2 = 10, qc 1+3+1+2+1+1 = 9. Replies: qa "May 7, 2023" 3 and '{"label": "CORRECT"}' 2;
# qb "a sunrise" 2 and "CORRECT" 1; qc "Paris" 1 and '{"label": "WRONG"}' 2.
TOKENS = {"qa": 13 + 3 + 13 + 2, "qb": 10 + 2 + 11 + 1, "qc": 11 + 1 + 10 + 2}  # 31, 24, 24
COST = {  # prompt tokens x 0.002 + completion tokens x 0.01
    "qa": (13 + 13) * 0.002 + (3 + 2) * 0.01,  # 0.102
    "qb": (10 + 11) * 0.002 + (2 + 1) * 0.01,  # 0.072
    "qc": (11 + 10) * 0.002 + (1 + 2) * 0.01,  # 0.072
}


def test_j_f1_tokens_cost_and_cache_by_hand(tmp_path: Path, server: ModelServer) -> None:
    settings = llm_settings(tmp_path, server)
    summary = run_experiment(settings, tmp_path / "run")
    result = summary.results[0]
    assert result.per_query["J"] == {"qa": 1.0, "qb": 1.0, "qc": 0.0}
    # F1: "may 7 2023" vs "7 may 2023" 1; "sunrise" vs "sunrise" 1; "paris" vs "paris france" 2/3
    assert result.per_query["answer_F1"] == pytest.approx({"qa": 1.0, "qb": 1.0, "qc": 2 / 3})
    assert result.metrics["J"] == pytest.approx(2 / 3)
    assert result.per_query["llm_tokens"] == TOKENS
    assert result.per_query["llm_cost_usd"] == pytest.approx(COST)
    usage = result.answers["llm"]
    assert (usage["calls"], usage["cache_hits"], usage["prompt_tokens"], usage["completion_tokens"]) == (
        6,
        0,
        68,
        11,
    )
    assert usage["cost_usd"] == pytest.approx(0.246) and usage["cost_usd_this_run"] == pytest.approx(0.246)
    assert len(server.requests) == 6
    entries = sorted(
        (Path(settings.cache_dir or os.environ["VIKING_EVAL_CACHE"]) / "answers").rglob("*.json")
    )
    assert len(entries) == 6  # one JSON entry per reply, named by its content key
    assert {json.loads(path.read_text())["content"] for path in entries} >= {"May 7, 2023", "CORRECT"}
    assert (
        "J" in result.answers["intervals"] and result.answers["groups"]["single-hop"]["metrics"]["J"] == 0.5
    )

    again = run_experiment(settings, tmp_path / "run2")  # a fresh folder, the same cache
    usage = again.results[0].answers["llm"]
    assert len(server.requests) == 6  # nothing asked again
    assert (usage["cache_hits"], usage["cost_usd"], usage["cost_usd_this_run"]) == (
        6,
        pytest.approx(0.246),
        0.0,
    )
    assert again.results[0].per_query["J"] == result.per_query["J"]
    document = json.loads((tmp_path / "run2" / "metrics.json").read_text())
    assert document["retrievers"]["bm25"]["metrics"]["llm_cost_usd"] == pytest.approx(0.246)
    assert "llm_cost_usd" in (tmp_path / "run2" / "per_query.csv").read_text().splitlines()[0]


def test_survives_a_500_a_timeout_and_a_malformed_reply(tmp_path: Path, server: ModelServer) -> None:
    server.script = ["error", "good", "hang", "good", "malformed"]  # reader qa, qa again, qb, qb again, qc
    summary = run_experiment(llm_settings(tmp_path, server), tmp_path / "run")
    result = summary.results[0]
    assert result.per_query["J"] == {"qa": 1.0, "qb": 1.0, "qc": 0.0}  # as without failures
    assert result.per_query["llm_tokens"] == TOKENS
    assert len(server.requests) == 6 + 3  # each failure asked once more
    assert result.answers["llm"]["reader"]["retried_format"] == 1


def test_a_reply_that_never_parses_stops_the_run_naming_the_query(
    tmp_path: Path, server: ModelServer
) -> None:
    server.mode = "malformed"
    with pytest.raises(LLMError) as raised:
        run_experiment(llm_settings(tmp_path, server), tmp_path / "run")
    assert raised.value.kind == "format" and "query qa" in str(raised.value)
    assert len(server.requests) == 2  # llm.max_retries=1: asked twice, then stopped


def test_an_answer_is_cached_once_per_content(tmp_path: Path, server: ModelServer) -> None:
    summary = run_experiment(llm_settings(tmp_path, server, pair=True), tmp_path / "run")
    assert (
        len(server.requests) == 6
    )  # the second BM25 retrieves the same contexts: every reply from the cache
    assert summary.results[1].answers["llm"]["cache_hits"] == 6
    assert summary.results[1].per_query["J"] == summary.results[0].per_query["J"]
    judged = next(c for c in summary.significance.comparisons if c.metric == "J")
    assert (judged.n_queries, judged.ties) == (3, 3)  # J in the paired tests, on answered queries


def test_the_cache_key_is_the_content(tmp_path: Path, server: ModelServer) -> None:
    run_experiment(llm_settings(tmp_path, server), tmp_path / "run")
    assert len(server.requests) == 6
    settings = llm_settings(tmp_path, server)
    (tmp_path / "reader.txt").write_text(READER.replace("Read.", "Read. Please."))  # another reader prompt
    summary = run_experiment(settings, tmp_path / "run2")
    usage = summary.results[0].answers["llm"]
    # the reader is asked again (its system text changed); the judge sees the same question, gold
    # and answer: its 3 verdicts come from the cache
    assert len(server.requests) == 6 + 3
    assert (usage["reader"]["asked"], usage["reader"]["cache_hits"]) == (3, 0)
    assert (usage["judge"]["asked"], usage["judge"]["cache_hits"]) == (0, 3)


def test_concurrent_requests_give_the_same_results_in_query_order(
    tmp_path: Path, server: ModelServer
) -> None:
    summary = run_experiment(llm_settings(tmp_path, server, "llm.concurrency=4"), tmp_path / "run")
    result = summary.results[0]
    assert list(result.per_query["J"]) == ["qa", "qb", "qc"]
    assert result.per_query["J"] == {"qa": 1.0, "qb": 1.0, "qc": 0.0}
    assert result.per_query["llm_tokens"] == TOKENS
    assert len(server.requests) == 6
