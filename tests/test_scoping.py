"""Query scoping (per-conversation retrieval), per-group metrics, and the guarantee that query
metadata (LoCoMo's carry their answers) never reaches a retriever."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from retrievers.baselines import BM25Params, BM25Retriever
from retrievers.types import RetrievalResult
from viking_eval.config import load_settings
from viking_eval.run import evaluate as evaluating
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
SECRET = "ANSWER-7c1f"


def _write_dataset(folder: Path) -> Path:
    docs = [
        ("a1", "alpha", "the red fox jumps", "A"),
        ("a2", "alpha", "a quiet river", "A"),
        ("b1", "beta", "the red fox sleeps", "B"),
        ("b2", "beta", "mountain snow", "B"),
    ]
    folder.mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        for doc_id, title, text, conversation in docs:
            handle.write(
                json.dumps({"_id": doc_id, "title": title, "text": text, "metadata": {"conv": conversation}})
                + "\n"
            )
    queries = [
        ("qa", "red fox", "A", "kind-1"),
        ("qb", "red fox", "B", "kind-2"),
        ("qc", "river", "A", "kind-1"),
    ]
    with open(folder / "queries.jsonl", "w") as handle:
        for qid, text, conversation, kind in queries:
            metadata = {"conv": conversation, "kind": kind, "answer": SECRET}
            handle.write(json.dumps({"_id": qid, "text": text, "metadata": metadata}) + "\n")
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nqa\ta1\t1\nqb\tb1\t1\nqc\ta2\t1\n"
    )
    return folder


@dataclass(frozen=True)
class SpyParams(BM25Params):
    """No parameters beyond the kernel's, as BM25."""


SEEN: list[Any] = []


class SpyRetriever(BM25Retriever):
    """BM25 that records every argument it receives."""

    Params = SpyParams

    def __init__(self, store: Any, embedder: Any = None, **params: Any) -> None:
        SEEN.append(("init", params, embedder))
        super().__init__(store, embedder)

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        SEEN.append(("retrieve", query, top_k))
        return super().retrieve(query, top_k)

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        SEEN.append(("batch", list(queries), top_k))
        results = super().retrieve_batch(queries, top_k)
        SEEN.append(("allowed", sorted(self.store.doc_ids[row] for row in self.store.allowed.nonzero()[0])))
        return results


@pytest.fixture
def scoped_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    folder = _write_dataset(tmp_path / "tiny")
    SEEN.clear()
    monkeypatch.setattr(evaluating, "resolve", lambda *_: SpyRetriever)
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "experiment=smoke",
                f"dataset.path={folder}",
                "dataset.scope_key=conv",
                "dataset.group_key=kind",
                "run.latency.n_queries=3",
                "run.latency.warmup=1",
            ],
        )
    settings = load_settings(cfg)
    settings = type(settings)(**{**settings.__dict__, "retrievers": settings.retrievers[:1]})
    return run_experiment(settings, tmp_path / "run"), tmp_path / "run"


def test_each_query_searches_only_its_scope(scoped_run) -> None:  # type: ignore[no-untyped-def]
    summary, out = scoped_run
    allowed = [entry[1] for entry in SEEN if entry[0] == "allowed"]
    assert ["a1", "a2"] in allowed and ["b1", "b2"] in allowed
    lines = [line.split() for line in (out / "runs" / "bm25.trec").read_text().splitlines()]
    by_query: dict[str, list[str]] = {}
    for qid, _, doc_id, *_ in lines:
        by_query.setdefault(qid, []).append(doc_id)
    assert by_query["qa"] == ["a1"]  # "b1" also says "red fox" but is in the other conversation
    assert by_query["qb"] == ["b1"]
    assert summary.results[0].metrics["nDCG@10"] == 1.0


def test_query_metadata_never_reaches_a_retriever(scoped_run) -> None:  # type: ignore[no-untyped-def]
    assert SEEN, "the spy retriever was not used"
    assert SECRET not in repr(SEEN)
    assert "kind-1" not in repr(SEEN)
    texts = {text for entry in SEEN if entry[0] == "batch" for text in entry[1]}
    texts |= {entry[1] for entry in SEEN if entry[0] == "retrieve"}
    assert texts == {"red fox", "river"}


def test_metrics_by_group(scoped_run) -> None:  # type: ignore[no-untyped-def]
    _, out = scoped_run
    document = json.loads((out / "metrics.json").read_text())
    groups = document["retrievers"]["bm25"]["groups"]
    assert {group: entry["n_queries"] for group, entry in groups.items()} == {"kind-1": 2, "kind-2": 1}
    assert "## Metrics by kind" in (out / "report.md").read_text()


def test_missing_scope_key_is_a_clear_error(tmp_path: Path) -> None:
    folder = _write_dataset(tmp_path / "tiny")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=["experiment=smoke", f"dataset.path={folder}", "dataset.scope_key=room"],
        )
    with pytest.raises(ValueError, match="scope_key='room': 3 queries have no such metadata key"):
        run_experiment(load_settings(cfg), tmp_path / "run")
