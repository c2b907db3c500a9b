"""The multi-strategy retriever inside the harness: configs compose and validate, a scoped
LoCoMo-like run works end to end, query metadata (which carries answers) never reaches the
retriever, the temporal reference time comes from each query's own scope, and the store's
timestamp parse counts reach environment.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from retrievers.multi_strategy import DEFAULT_WEIGHTS, MultiStrategyRetriever
from retrievers.types import RetrievalResult
from viking_eval.config import ConfigError, load_settings
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
SECRET = "ANSWER-5e1d"


def _write_dataset(folder: Path) -> Path:
    turns = [
        ("A_D1:1", "A", "Caroline: I went to a support group yesterday", "1:56 pm on 8 May, 2023"),
        ("A_D1:2", "A", "Melanie: I painted a sunrise by the lake", "1:56 pm on 8 May, 2023"),
        ("A_D2:1", "A", "Caroline: my parse_config helper broke again", "10:00 am on 20 June, 2023"),
        ("B_D1:1", "B", "Jon: I went to a support group for dancers", "9:00 am on 3 March, 2022"),
        ("B_D2:1", "B", "Gina: the bakery opened", "not a date"),
    ]
    folder.mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        for doc_id, conversation, text, when in turns:
            metadata = {"conversation": conversation, "session_date_time": when}
            handle.write(json.dumps({"_id": doc_id, "title": "", "text": text, "metadata": metadata}) + "\n")
    queries = [
        ("qa", "When did Caroline go to the support group?", "A", "temporal"),
        ("qb", "Who went to a support group?", "B", "single-hop"),
        ("qc", "What did Melanie paint in May 2023?", "A", "single-hop"),
        ("qd", "Where is parse_config?", "A", "single-hop"),
    ]
    with open(folder / "queries.jsonl", "w") as handle:
        for qid, text, conversation, category in queries:
            metadata = {"conversation": conversation, "category_name": category, "answer": SECRET}
            handle.write(json.dumps({"_id": qid, "text": text, "metadata": metadata}) + "\n")
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nqa\tA_D1:1\t1\nqb\tB_D1:1\t1\nqc\tA_D1:2\t1\nqd\tA_D2:1\t1\n"
    )
    return folder


def _compose(*overrides: str) -> Any:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("experiment", ["multi_strategy_locomo", "multi_strategy_cosqa"])
def test_experiments_compose_and_validate(experiment: str) -> None:
    settings = load_settings(_compose(f"experiment={experiment}"))
    targets = {spec.name: spec.target for spec in settings.retrievers}
    assert "retrievers.multi_strategy.MultiStrategyRetriever" in targets.values()
    assert settings.store.timestamps is not None


def test_retriever_config_is_the_default_table() -> None:
    settings = load_settings(_compose("experiment=multi_strategy_locomo"))
    spec = next(spec for spec in settings.retrievers if spec.name == "multi_strategy")
    assert spec.params["weights"] == {intent: dict(row) for intent, row in DEFAULT_WEIGHTS.items()}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "retrievers.multi_strategy.decay_days=-5",
            r"retrievers.multi_strategy: decay_days must be a number in \(0, 1000000\], got -5",
        ),
        (
            "+retrievers.multi_strategy.weights.URGENT={semantic: 1.0}",
            r"retrievers.multi_strategy: weights key must be one of \[.*\], got 'URGENT'",
        ),
        (
            "+retrievers.multi_strategy.weights.FACTUAL.graph=1.0",
            r"retrievers.multi_strategy: weights.FACTUAL key must be one of \[.*\], got 'graph'",
        ),
        (
            "retrievers.multi_strategy.strategies=[semantic,graph]",
            r"retrievers.multi_strategy: strategies\[1\] must be one of \[.*\], got 'graph'",
        ),
        ("~retrievers.multi_strategy.weights.MIXED", r"weights has no row for intent\(s\) \['MIXED'\]"),
        ("retrievers.multi_strategy.rules.0.weight=-1", r"rules\[0\].weight must be a number in \(0, inf\]"),
        ("+retrievers.multi_strategy.decay=3", r"unknown key\(s\) \['decay'\]"),
        ("store.timestamps.fields=[]", "store: timestamps.fields must not be empty"),
        ("+store.timestamps.zone=UTC", r"unknown store.timestamps key\(s\) \['zone'\]"),
    ],
)
def test_bad_config_is_a_clear_error(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(_compose("experiment=multi_strategy_locomo", override))


SEEN: list[Any] = []


class SpyMultiStrategy(MultiStrategyRetriever):
    """Records everything the harness hands to the retriever, and each scope's reference time."""

    def __init__(self, store: Any, embedder: Any = None, **params: Any) -> None:
        super().__init__(store, embedder, **params)
        SEEN.append(
            ("init", sorted(params), getattr(self.strategies.get("temporal"), "reference_epoch", None))
        )

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        SEEN.append(("batch", list(queries), top_k))
        return super().retrieve_batch(queries, top_k)

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        SEEN.append(("retrieve", query, top_k))
        return super().retrieve(query, top_k)


def test_scoped_run_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from viking_eval.run import evaluate as evaluating

    folder = _write_dataset(tmp_path / "tiny")
    SEEN.clear()
    monkeypatch.setattr(evaluating, "resolve", lambda *_: SpyMultiStrategy)
    cfg = _compose(
        "experiment=smoke",
        f"dataset.path={folder}",
        "dataset.scope_key=conversation",
        "dataset.group_key=category_name",
        "+retriever@retrievers.ms=multi_strategy",
        "run.latency.n_queries=4",
        "run.latency.warmup=1",
    )
    settings = load_settings(cfg)
    settings = type(settings)(
        **{**settings.__dict__, "retrievers": [s for s in settings.retrievers if s.name == "ms"]}
    )
    summary = run_experiment(settings, tmp_path / "run")

    # metadata never reaches the retriever: only query texts, top_k and the configured parameters
    assert SEEN and SECRET not in repr(SEEN) and "temporal" not in {e[1] for e in SEEN if e[0] == "retrieve"}
    texts = {text for entry in SEEN if entry[0] == "batch" for text in entry[1]}
    texts |= {entry[1] for entry in SEEN if entry[0] == "retrieve"}
    assert texts == {
        "When did Caroline go to the support group?",
        "Who went to a support group?",
        "What did Melanie paint in May 2023?",
        "Where is parse_config?",
    }
    # each scope's reference time is its own latest turn (A: 20 June 2023; B: 3 March 2022,
    # its other turn's date does not parse), never a value from the query
    references = {entry[2] for entry in SEEN if entry[0] == "init"}
    assert references == {1687255200.0, 1646298000.0}

    lines = [line.split() for line in (tmp_path / "run/runs/ms.trec").read_text().splitlines()]
    by_query: dict[str, list[str]] = {}
    for qid, _, doc_id, *_ in lines:
        by_query.setdefault(qid, []).append(doc_id)
    assert all(doc.startswith("A_") for doc in by_query["qa"] + by_query["qc"] + by_query["qd"])
    assert by_query["qb"][0] == "B_D1:1"
    assert by_query["qc"][0] == "A_D1:2"  # in May 2023 and about painting
    assert by_query["qd"][0] == "A_D2:1"  # the structural strategy: parse_config (names in text only)
    assert summary.results[0].metrics["nDCG@10"] > 0.5

    environment = json.loads((tmp_path / "run/environment.json").read_text())
    report = environment["timestamps"]
    assert (report["parsed"], report["unparseable"], report["missing"]) == (4, 1, 0)
    assert report["examples"] == [{"doc_id": "B_D2:1", "field": "session_date_time", "value": "not a date"}]


def test_export_and_load_tuned_reproduce_the_run(tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from retrievers import load_tuned
    from viking_eval.data import load_dataset
    from viking_eval.sweep.export import export

    folder = _write_dataset(tmp_path / "tiny")
    cfg = _compose(
        "experiment=smoke",
        f"dataset.path={folder}",
        "+retriever@retrievers.ms=multi_strategy",
        "retrievers.ms.consensus_boost=0.2",
        "run.latency.n_queries=0",
    )
    settings = load_settings(cfg)
    settings = type(settings)(
        **{**settings.__dict__, "retrievers": [s for s in settings.retrievers if s.name == "ms"]}
    )
    run_experiment(settings, tmp_path / "run", config_yaml=OmegaConf.to_yaml(cfg, resolve=True))
    path = export(tmp_path / "run", "ms-tiny", retriever="ms", out_dir=tmp_path)
    dataset = load_dataset(str(folder))
    retriever = load_tuned(path, documents=dataset.corpus.values())
    assert isinstance(retriever, MultiStrategyRetriever) and retriever.params.consensus_boost == 0.2
    expected: dict[str, list[str]] = {}
    for line in (tmp_path / "run/runs/ms.trec").read_text().splitlines():
        qid, _, doc_id, *_ = line.split()
        expected.setdefault(qid, []).append(doc_id)
    for qid, query in dataset.queries.items():
        assert [r.doc_id for r in retriever.retrieve(query.text, 100)] == expected.get(qid, []), qid
