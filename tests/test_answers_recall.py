"""Answer recall through the experiment loop (viking_eval/answers/evaluate.py, run/experiment.py)
on a tiny scoped dataset whose top-1 rankings and answer metrics are worked out by hand; the
outputs that carry them; the settings' checks; and the spy: gold answers never reach a retriever."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import compose_settings

from retrievers.baselines import BM25Retriever
from retrievers.types import RetrievalResult
from viking_eval.config import ConfigError
from viking_eval.run import evaluate as evaluating
from viking_eval.run.experiment import run_experiment

DOCS = [  # id, text, conversation
    ("a1", "Caroline joined group 7 May 2023", "A"),
    ("a2", "Melanie painted sunrise", "A"),
    ("b1", "Jon opened studio Paris", "B"),
    ("b2", "Gina lost job", "B"),
]
QUERIES: list[tuple[str, str, str, str, Any]] = [  # id, text, conversation, kind, answer
    ("qa", "When Caroline group?", "A", "temporal", "7 May 2023"),
    ("qb", "What Melanie painted?", "A", "single-hop", "A sunrise."),
    ("qc", "Where Jon studio?", "B", "single-hop", ["Paris", "France"]),
    ("qd", "Gina dentist?", "B", "adversarial", None),
]
QRELS = {"qa": "a1", "qb": "a2", "qc": "b1", "qd": "b2"}


def write_dataset(folder: Path) -> Path:
    """Four documents in two conversations; four queries, one (qd) without a gold answer."""
    folder.mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        for doc_id, text, conversation in DOCS:
            handle.write(
                json.dumps({"_id": doc_id, "title": "", "text": text, "metadata": {"conv": conversation}})
                + "\n"
            )
    with open(folder / "queries.jsonl", "w") as handle:
        for qid, text, conversation, kind, answer in QUERIES:
            metadata: dict[str, Any] = {"conv": conversation, "kind": kind}
            if answer is not None:
                metadata["answer"] = answer
            handle.write(json.dumps({"_id": qid, "text": text, "metadata": metadata}) + "\n")
    (folder / "qrels").mkdir()
    lines = "".join(f"{qid}\t{doc}\t1\n" for qid, doc in QRELS.items())
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)
    return folder


def tiny_overrides(folder: Path, *more: str) -> list[str]:
    """BM25 alone over the tiny dataset, each query in its own conversation, no latency timing."""
    return [
        "experiment=smoke",
        f"dataset.path={folder}",
        "dataset.scope_key=conv",
        "dataset.group_key=kind",
        "~retrievers.dense",
        "+retriever@retrievers.bm25b=bm25",  # a second retriever: paired tests have a pair
        "run.latency.n_queries=0",
        "run.significance.bootstrap=200",
        "run.significance.permutations=200",
        *more,
    ]


@pytest.fixture
def recall_run(tmp_path: Path) -> tuple[Any, Path]:
    folder = write_dataset(tmp_path / "tiny")
    settings = compose_settings(*tiny_overrides(folder, "answers.enabled=true", "answers.k=1"))
    return run_experiment(settings, tmp_path / "run"), tmp_path / "run"


def test_answer_recall_by_hand(recall_run: tuple[Any, Path]) -> None:
    summary, out = recall_run
    top1 = {
        line.split()[0]: line.split()[2]
        for line in (out / "runs" / "bm25.trec").read_text().splitlines()
        if line.split()[3] == "1"
    }
    assert top1 == QRELS  # the rankings the figures below assume
    # qa: "7 may 2023" in a1 -> 1; qb: "sunrise" in a2 -> 1; qc: "paris france" not in b1 -> 0,
    # its tokens {paris, france}: paris found -> 1/2; qd has no gold answer: left out
    metrics = summary.results[0].metrics
    assert metrics["answer_recall@1"] == pytest.approx(2 / 3)
    assert metrics["answer_token_recall@1"] == pytest.approx((1 + 1 + 0.5) / 3)
    per_query = summary.results[0].per_query
    assert per_query["answer_token_recall@1"] == {"qa": 1.0, "qb": 1.0, "qc": 0.5}
    answers = summary.results[0].answers
    assert (answers["n_with_answer"], answers["n_without_answer"]) == (3, 1)
    groups = answers["groups"]
    assert groups["adversarial"] == {"n_queries": 1, "n_with_answer": 0}
    assert groups["single-hop"]["metrics"]["answer_recall@1"] == 0.5
    assert summary.results[0].groups["single-hop"]["metrics"]["answer_token_recall@1"] == 0.75


def test_answer_metrics_reach_every_output(recall_run: tuple[Any, Path]) -> None:
    summary, out = recall_run
    document = json.loads((out / "metrics.json").read_text())
    entry = document["retrievers"]["bm25"]
    assert entry["metrics"]["answer_recall@1"] == pytest.approx(2 / 3)
    assert entry["answers"]["n_without_answer"] == 1
    with open(out / "per_query.csv", newline="") as handle:
        rows = {row["query_id"]: row for row in csv.DictReader(handle) if row["retriever"] == "bm25"}
    assert rows["qc"]["answer_token_recall@1"] == "0.5"
    assert rows["qd"]["answer_recall@1"] == ""  # not measured: no gold answer
    assert "answer_recall@1" in (out / "metrics.csv").read_text().splitlines()[0]
    report = (out / "report.md").read_text()
    assert "## Answers (top 1)" in report and "answer_token_recall@1" in report.split("## Latency")[0]
    compared = {c.metric for c in summary.significance.comparisons}
    assert {"answer_recall@1", "answer_token_recall@1"} <= compared  # the same paired tests
    tested = next(c for c in summary.significance.comparisons if c.metric == "answer_recall@1")
    assert tested.n_queries == 3  # answered queries only


def test_per_query_csv_with_answer_columns_reads_back(recall_run: tuple[Any, Path]) -> None:
    from viking_eval.results.run_folder import read_per_query

    _, out = recall_run
    values = read_per_query(out / "per_query.csv")
    assert values["bm25"]["answer_recall@1"] == {"qa": 1.0, "qb": 1.0, "qc": 0.0}
    assert len(values["bm25"]["R@10"]) == 4


def test_answers_off_changes_nothing(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "tiny")
    summary = run_experiment(compose_settings(*tiny_overrides(folder)), tmp_path / "run")
    assert not any(name.startswith("answer") for name in summary.results[0].metrics)
    assert summary.results[0].answers == {}
    assert "## Answers" not in (tmp_path / "run" / "report.md").read_text()


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("answers.k=500", "answers.k"),  # deeper than run.top_k (100)
        ("answers.k=0", "answers.k"),
        ("llm.base_url=http://127.0.0.1:9/v1", "llm.model"),  # base_url without model
        ("llm.model=m", "llm.base_url"),
        ("llm.concurrency=0", "llm.concurrency"),
        ("llm.timeout_s=0", "llm.timeout_s"),
    ],
)
def test_bad_answer_settings_name_their_key(tmp_path: Path, override: str, key: str) -> None:
    folder = write_dataset(tmp_path / "tiny")
    with pytest.raises(ConfigError) as raised:
        compose_settings(*tiny_overrides(folder, "answers.enabled=true", override))
    assert key in str(raised.value)


def test_a_missing_prompt_file_is_refused_before_anything_runs(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "tiny")
    settings = compose_settings(
        *tiny_overrides(
            folder,
            "answers.enabled=true",
            "llm.base_url=http://127.0.0.1:9/v1",
            "llm.model=m",
            f"answers.reader_prompt={tmp_path}/none.txt",
        )
    )
    with pytest.raises(ConfigError) as raised:
        run_experiment(settings, tmp_path / "run")
    assert "answers.reader_prompt" in str(raised.value) and "none.txt" in str(raised.value)
    assert not (tmp_path / "run" / "runs").exists()  # nothing was retrieved


def test_answers_without_a_run_folder_are_refused(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "tiny")
    settings = compose_settings(*tiny_overrides(folder, "answers.enabled=true"))
    with pytest.raises(ConfigError, match=r"answers\.enabled"):
        run_experiment(settings, None)


SEEN: list[Any] = []


class SpyRetriever(BM25Retriever):
    """BM25 that records every argument it receives (as tests/test_scoping.py's spy)."""

    def __init__(self, store: Any, embedder: Any = None, **params: Any) -> None:
        SEEN.append(("init", params, embedder))
        super().__init__(store, embedder, **params)

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        SEEN.append(("retrieve", query, top_k))
        return super().retrieve(query, top_k)

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        SEEN.append(("batch", list(queries), top_k))
        return super().retrieve_batch(queries, top_k)


def test_gold_answers_never_reach_a_retriever(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_dataset(tmp_path / "tiny")
    SEEN.clear()
    monkeypatch.setattr(evaluating, "resolve", lambda *_: SpyRetriever)
    settings = compose_settings(*tiny_overrides(folder, "answers.enabled=true", "answers.k=1"))
    summary = run_experiment(settings, tmp_path / "run")
    assert summary.results[0].metrics["answer_recall@1"] == pytest.approx(2 / 3)  # answers were used
    assert SEEN, "the spy retriever was not used"
    seen = repr(SEEN).lower()
    for answer in ("7 may 2023", "sunrise", "france"):
        assert answer not in seen
    texts = {text for entry in SEEN if entry[0] == "batch" for text in entry[1]}
    assert texts == {query[1] for query in QUERIES}


def test_a_dataset_without_gold_answers_is_refused_before_retrieval(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "tiny")
    settings = compose_settings(*tiny_overrides(folder, "answers.enabled=true", "answers.answer_key=gold"))
    with pytest.raises(ConfigError) as raised:
        run_experiment(settings, tmp_path / "run")
    assert "answers.answer_key" in str(raised.value) and "'answer'" in str(raised.value)
    assert not (tmp_path / "run" / "runs").exists()


def test_the_shipped_presets_compose() -> None:
    settings = compose_settings("experiment=smoke", "answers=locomo", "llm=openai")
    assert (settings.answers.enabled, settings.answers.k, settings.answers.context_keys) == (
        True,
        10,
        ("session_date_time",),
    )
    assert settings.llm.model == "gpt-4o-mini" and settings.llm.api_key_env == "OPENAI_API_KEY"
    assert compose_settings("experiment=smoke").answers.enabled is False  # off unless asked
