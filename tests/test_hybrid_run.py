"""The hybrid retriever in the harness: a run with a reranker object built from config (stats and
fallbacks in metrics.json), a chunked store evaluated at document level by every flat retriever,
config errors at start, and a keyword_weight x rrf_k multirun."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import smoke_multirun, smoke_settings
from hydra import compose, initialize_config_dir

from retrievers.types import RetrievalResult
from viking_eval.config import ConfigError, instantiate_objects, load_settings
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
HYBRID = ["+retriever@retrievers.hybrid=hybrid_rrf", "run.latency.n_queries=3", "run.latency.warmup=1"]


class ShortestFirst:
    """A reranker for harness tests: shorter documents first (it only has to be deterministic)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        if self.fail:
            raise RuntimeError("reranker service down")
        return [1.0 / (1 + len(text)) for text in texts]


def _trec(path: Path) -> dict[str, list[str]]:
    ranking: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc_id, *_ = line.split()
        ranking.setdefault(qid, []).append(doc_id)
    return ranking


@pytest.mark.needs_data
def test_reranker_object_from_config_and_fallbacks_in_metrics(
    data_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VIKING_EVAL_ALLOW_TARGETS", "test_hybrid_run")  # ShortestFirst, an own reranker
    settings = smoke_settings(
        *HYBRID,
        "+retriever@retrievers.reranked=hybrid_rrf",
        "+retriever@retrievers.failing=hybrid_rrf",
        "retrievers.reranked.reranker={_target_:test_hybrid_run.ShortestFirst}",
        "retrievers.failing.reranker={_target_:test_hybrid_run.ShortestFirst,fail:true}",
        "run.top_k=10",
    )
    spec = {s.name: s for s in settings.retrievers}["reranked"]
    assert spec.params["reranker"] == {
        "_target_": "test_hybrid_run.ShortestFirst"
    }  # plain data: hashable key
    assert isinstance(instantiate_objects(spec.params)["reranker"], ShortestFirst)
    run_experiment(settings, tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())["retrievers"]
    assert "rerank_fallbacks" not in metrics["hybrid"]["stats"]  # no reranker, nothing to count
    assert metrics["reranked"]["stats"]["rerank_fallbacks"] == 0
    assert metrics["failing"]["stats"]["rerank_fallbacks"] == 1.0  # every query fell back ...
    hybrid, failing = (_trec(tmp_path / "run" / "runs" / f"{name}.trec") for name in ("hybrid", "failing"))
    assert failing == hybrid  # ... and kept the fused ranking
    reranked = _trec(tmp_path / "run" / "runs" / "reranked.trec")
    assert reranked != hybrid
    assert {q: sorted(docs) for q, docs in reranked.items()} == {
        q: sorted(docs) for q, docs in hybrid.items()
    }
    assert metrics["hybrid"]["stats"]["fused_candidates"] >= 10.0


@pytest.mark.needs_data
def test_chunked_store_is_evaluated_at_document_level(data_env: Path, tmp_path: Path) -> None:
    settings = smoke_settings(*HYBRID, "+store.chunking={size:24,overlap:8}", "run.top_k=20")
    assert settings.store.chunking is not None and settings.store.chunking.size == 24
    run_experiment(settings, tmp_path / "run")
    corpus_ids = {
        json.loads(line)["_id"] for line in (data_env / "adi" / "corpus.jsonl").read_text().splitlines()
    }
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())["retrievers"]
    for name in ("bm25", "dense", "hybrid"):
        ranking = _trec(tmp_path / "run" / "runs" / f"{name}.trec")
        for docs in ranking.values():
            assert len(docs) == len(set(docs)) and set(docs) <= corpus_ids  # documents, each once, no chunks
        assert metrics[name]["metrics"]["nDCG@10"] > 0.1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["retrievers.hybrid.keyword_weight=1.2"],
            r"retrievers.hybrid: keyword_weight must be a number in \[0, 1\], got 1.2",
        ),
        (["retrievers.hybrid.rrf_k=0"], r"retrievers.hybrid: rrf_k must be an integer in \[1, 1000000\]"),
        (
            ["retrievers.hybrid.overfetch_multiplier=0"],
            r"overfetch_multiplier must be an integer in \[1, 1000\]",
        ),
        (
            ["retrievers.hybrid.fusion=borda"],
            r"fusion must be one of \['rrf', 'convex', 'combsum', 'combmnz'\]",
        ),
        (["retrievers.hybrid.filters={lang:en}"], r"retrievers.hybrid: unknown filters key\(s\) \['lang'\]"),
        (
            ["retrievers.hybrid.filters={time_range:{start:soon}}"],
            "filters.time_range.start is not an ISO 8601 time or epoch seconds: 'soon'",
        ),
        (
            ["+reranker@retrievers.hybrid.reranker=llm", "retrievers.hybrid.reranker.timeout_s=0"],
            r"retrievers.hybrid.reranker: timeout_s must be in \(0, 600\] seconds",
        ),
        (
            ["+store.chunking={size:16,overlap:16}"],
            r"store: chunking.overlap must be an integer in \[0, size - 1\]",
        ),
    ],
)
def test_config_errors_stop_the_run_at_start(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        smoke_settings(*HYBRID, *overrides)


def test_reranker_group_options_build() -> None:
    none = smoke_settings(*HYBRID, "+reranker@retrievers.hybrid.reranker=none")
    assert instantiate_objects(none.retrievers[-1].params)["reranker"] is None
    for option, cls in (
        ("embedding", "EmbeddingReranker"),
        ("cross_encoder", "CrossEncoderReranker"),
        ("llm", "LLMReranker"),
    ):
        settings = smoke_settings(*HYBRID, f"+reranker@retrievers.hybrid.reranker={option}")
        reranker = instantiate_objects(settings.retrievers[-1].params)["reranker"]
        assert type(reranker).__name__ == cls  # built lazily: no model is loaded here


@pytest.mark.slow
@pytest.mark.needs_data
def test_multirun_over_keyword_weight_and_rrf_k(data_env: Path, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    done = smoke_multirun(
        sweep_dir,
        "+retriever@retrievers.hybrid=hybrid_rrf",
        "~retrievers.bm25",
        "~retrievers.dense",
        "run.latency.n_queries=0",
        "retrievers.hybrid.keyword_weight=0.0,1.0",
        "retrievers.hybrid.rrf_k=10,60",
        "sweep.evaluate_best=false",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open(sweep_dir / "sweep.csv") as handle:
        rows = list(csv.DictReader(handle))
    grid = {(row["retrievers.hybrid.keyword_weight"], row["retrievers.hybrid.rrf_k"]): row for row in rows}
    assert set(grid) == {("0.0", "10"), ("0.0", "60"), ("1.0", "10"), ("1.0", "60")}
    # one leg alone: k changes the scores, never the order, so the metrics do not move
    assert grid[("0.0", "10")]["nDCG@10"] == grid[("0.0", "60")]["nDCG@10"]
    assert grid[("1.0", "10")]["nDCG@10"] == grid[("1.0", "60")]["nDCG@10"]
    assert grid[("0.0", "10")]["nDCG@10"] != grid[("1.0", "10")]["nDCG@10"]
    assert float(grid[("1.0", "60")]["stats.vector_candidates"]) == 0  # the vector leg did not run


@pytest.mark.needs_data
def test_exported_hybrid_loads_through_load_tuned_and_reproduces_its_run(
    data_env: Path, tmp_path: Path
) -> None:
    from omegaconf import OmegaConf

    from retrievers import HybridRetriever, load_tuned
    from viking_eval.data import load_dataset
    from viking_eval.sweep.export import export

    overrides = [
        "experiment=smoke",
        *HYBRID,
        "retrievers.hybrid.keyword_weight=0.6",
        "retrievers.hybrid.rrf_k=10",
        "retrievers.hybrid.fusion=combmnz",
        "+store.chunking={size:24,overlap:8}",
        "run.latency.n_queries=0",
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    run_experiment(load_settings(cfg), tmp_path / "run", config_yaml=OmegaConf.to_yaml(cfg, resolve=True))
    path = export(tmp_path / "run", "hybrid-adi", retriever="hybrid", out_dir=tmp_path)
    dataset = load_dataset(str(data_env / "adi"), "test")
    retriever = load_tuned(path, documents=dataset.corpus.values())
    assert isinstance(retriever, HybridRetriever) and retriever.store.chunked
    assert retriever.params.fusion == "combmnz" and retriever.params.rrf_k == 10
    queries = list(dataset.queries.values())
    results = retriever.retrieve_batch([query.text for query in queries], 100)
    ranking = {query.id: [r.doc_id for r in rs] for query, rs in zip(queries, results, strict=True) if rs}
    assert ranking == _trec(tmp_path / "run" / "runs" / "hybrid.trec")  # same documents, same order
