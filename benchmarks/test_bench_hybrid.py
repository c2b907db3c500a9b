"""Speed of the hybrid retriever with pytest-benchmark.

Not part of the normal test run. Run with::

    python -m pytest benchmarks/test_bench_hybrid.py -q --benchmark-only

SciFact (5,183 documents, the 300 test queries, top 100, so each leg fetches 300), TF-IDF+SVD
(384 dimensions, MiniLM's width) standing in for the embedder so that the figures measure search
and fusion, not a transformer: BM25 and dense alone, the hybrid retriever's ``retrieve_batch``
with each fusion, with the legs run one after the other, with the context term over a chain of
edges, and the same 300 queries one ``retrieve`` call at a time (what ``retrieve_batch`` exists
to beat).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from retrievers import BM25Retriever, ContextStore, DenseRetriever, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.hybrid import HybridRetriever
from viking_eval.data import load_dataset

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact"
TOP_K = 100


@pytest.fixture(scope="module")
def scifact() -> tuple[ContextStore, TfidfEmbedder, list[str]]:
    dataset = load_dataset(str(SCIFACT), "test")
    documents = sorted(dataset.corpus.values(), key=lambda doc: doc.id)
    embedder = TfidfEmbedder(dim=384).fit([doc.full_text for doc in documents])
    queries = [query.text for query in dataset.queries.values()]
    return build_store(documents, embedder), embedder, queries


def test_bench_bm25(benchmark, scifact) -> None:  # type: ignore[no-untyped-def]
    store, _, queries = scifact
    benchmark(BM25Retriever(store).retrieve_batch, queries, TOP_K)


def test_bench_dense(benchmark, scifact) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = scifact
    benchmark(DenseRetriever(store, embedder).retrieve_batch, queries, TOP_K)


@pytest.mark.parametrize("fusion", ["rrf", "convex", "combmnz"])
def test_bench_hybrid_batch(benchmark, scifact, fusion: str) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = scifact
    benchmark(HybridRetriever(store, embedder, fusion=fusion).retrieve_batch, queries, TOP_K)


def test_bench_hybrid_batch_legs_in_series(benchmark, scifact) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = scifact
    benchmark(HybridRetriever(store, embedder, parallel=False).retrieve_batch, queries, TOP_K)


def test_bench_hybrid_one_query_at_a_time(benchmark, scifact) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = scifact
    retriever = HybridRetriever(store, embedder)
    benchmark(lambda: [retriever.retrieve(query, TOP_K) for query in queries])


@pytest.fixture(scope="module")
def scifact_chained(scifact):  # type: ignore[no-untyped-def]
    """SciFact with a synthetic sequence edge from each row to the next (5,182 edges): the
    context term's cost, not its quality (SciFact has no document order)."""
    from retrievers.store.edges import EdgeSet

    store, embedder, queries = scifact
    chained = build_store(sorted(store.documents, key=lambda doc: doc.id), embedder)
    rows = list(range(len(chained) - 1))
    chained = chained.with_parts(
        edges=EdgeSet.from_arrays(
            len(chained), rows, [row + 1 for row in rows], [1.0] * len(rows), [0] * len(rows), ["sequence"]
        )
    )
    return chained, embedder, queries


def test_bench_hybrid_batch_with_context(benchmark, scifact_chained) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = scifact_chained
    benchmark(HybridRetriever(store, embedder, context_weight=0.5).retrieve_batch, queries, TOP_K)
