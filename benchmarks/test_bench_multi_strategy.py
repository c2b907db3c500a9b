"""Speed of the multi-strategy retriever on LoCoMo (5,882 turns) with pytest-benchmark.

Not part of the normal test run. Run with::

    python -m pytest benchmarks/test_bench_multi_strategy.py -q --benchmark-only

TF-IDF+SVD (256 dimensions) stands in for the embedder so that the figures measure the
retriever (analysis, strategy threads, four strategies, fusion), not a transformer. Compared over the
questions of one conversation, scoped to that conversation as in the per-conversation setting:
the query analyser alone, ``retrieve_batch`` of the multi-strategy retriever, one ``retrieve``
call, and the dense and BM25 baselines on the same scope. Throughputs go to ``extra_info``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrievers import BM25Retriever, ContextStore, DenseRetriever, Document, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.multi_strategy import MultiStrategyRetriever, QueryAnalyzer

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo"
CONVERSATION = "conv-26"
TOP_K = 100


@pytest.fixture(scope="module")
def locomo() -> tuple[ContextStore, TfidfEmbedder, list[str]]:
    documents = []
    with open(LOCOMO / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            documents.append(Document(record["_id"], record["text"], record["title"], record["metadata"]))
    queries = []
    with open(LOCOMO / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record["metadata"]["conversation"] == CONVERSATION:
                queries.append(record["text"])
    embedder = TfidfEmbedder(dim=256).fit([doc.full_text for doc in sorted(documents, key=lambda d: d.id)])
    store = build_store(documents, embedder)
    return store.restricted(store.metadata_mask("conversation", CONVERSATION)), embedder, queries


def test_bench_analyzer(benchmark, locomo) -> None:  # type: ignore[no-untyped-def]
    _, _, queries = locomo
    analyzer = QueryAnalyzer()
    benchmark(lambda: [analyzer.analyze(query) for query in queries])
    benchmark.extra_info["queries_per_second"] = len(queries) / benchmark.stats.stats.mean


def test_bench_multi_strategy_batch(benchmark, locomo) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = locomo
    retriever = MultiStrategyRetriever(store, embedder)
    benchmark(retriever.retrieve_batch, queries, TOP_K)
    benchmark.extra_info["queries_per_second"] = len(queries) / benchmark.stats.stats.mean


def test_bench_multi_strategy_one_query(benchmark, locomo) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = locomo
    retriever = MultiStrategyRetriever(store, embedder)
    benchmark(retriever.retrieve, queries[0], TOP_K)


@pytest.mark.parametrize("kind", ["dense", "bm25"])
def test_bench_baselines_batch(benchmark, locomo, kind: str) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = locomo
    retriever = DenseRetriever(store, embedder) if kind == "dense" else BM25Retriever(store)
    benchmark(retriever.retrieve_batch, queries, TOP_K)
    benchmark.extra_info["queries_per_second"] = len(queries) / benchmark.stats.stats.mean
