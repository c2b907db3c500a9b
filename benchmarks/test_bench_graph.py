"""Speed of the graph retriever with pytest-benchmark.

Not part of the normal test run. Run with::

    python -m pytest benchmarks/test_bench_graph.py -q --benchmark-only

Two graphs:

* CISI's citations (1,460 documents, 77,344 edges, mean out-degree 53: two hops reach most of
  the corpus), TF-IDF+SVD (256 dimensions) standing in for the embedder so that the figures
  measure seeds + traversal, not a transformer. ``retrieve_batch`` over the 112 queries for
  dense, both scoring modes, three bidirectional hops, and a frontier cap; the mean traversal
  cost per query goes to ``extra_info``.
* A synthetic 1M-edge graph (200,000 documents, 5 random out-edges each, random 64-d vectors)
  for the cost of building the CSR arrays and of a 2- and 3-hop walk at that size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrievers import ContextStore, DenseRetriever, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.graph import GraphRetriever
from retrievers.store.edges import EdgeSet

CISI = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "cisi"
TOP_K = 100


@pytest.fixture(scope="module")
def cisi() -> tuple[ContextStore, TfidfEmbedder, list[str]]:
    documents = []
    with open(CISI / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            documents.append(Document(record["_id"], record["text"], record["title"], record["metadata"]))
    with open(CISI / "queries.jsonl", encoding="utf-8") as handle:
        queries = [json.loads(line)["text"] for line in handle]
    embedder = TfidfEmbedder(dim=256).fit([doc.full_text for doc in sorted(documents, key=lambda d: d.id)])
    config = StoreConfig.from_dict({"edges": {"references": {"fields": ["xrefs"]}}})
    return build_store(documents, embedder, config), embedder, queries


#: oasis's list (seeds + graph-found, bonus only), as conf/retriever/oasis_graph.yaml and the
#: walks of the project default before ALGORITHM_VERSION 2
WALKS_ONLY: dict[str, Any] = {"rescore_reached": False, "vector_fill": False}
GRAPH_SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},  # propagated, rescore_reached and vector_fill (conf/retriever/graph.yaml)
    "propagated": dict(WALKS_ONLY),
    "oasis": {"scoring": "oasis", **WALKS_ONLY},
    "propagated_3hops_both_ways": {"max_hops": 3, "bidirectional": True, **WALKS_ONLY},
    "oasis_3hops_both_ways": {"max_hops": 3, "bidirectional": True, "scoring": "oasis", **WALKS_ONLY},
    "propagated_frontier_50": {"max_frontier": 50, **WALKS_ONLY},
    "propagated_rescored": {"rescore_reached": True, "vector_fill": False},
}


def test_bench_cisi_dense(benchmark, cisi) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = cisi
    retriever = DenseRetriever(store, embedder)
    benchmark(retriever.retrieve_batch, queries, TOP_K)
    benchmark.extra_info["ms_per_query"] = 1000 * benchmark.stats.stats.mean / len(queries)


@pytest.mark.parametrize("setting", list(GRAPH_SETTINGS))
def test_bench_cisi_graph(benchmark, cisi, setting: str) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = cisi
    retriever = GraphRetriever(store, embedder, **GRAPH_SETTINGS[setting])
    results = benchmark(retriever.retrieve_batch, queries, TOP_K)
    benchmark.extra_info["ms_per_query"] = 1000 * benchmark.stats.stats.mean / len(queries)
    for key in ("edges_scanned", "edges_followed", "nodes_reached"):
        benchmark.extra_info[key] = float(np.mean([r[0].provenance["stats"][key] for r in results]))


N_NODES = 200_000
OUT_DEGREE = 5


@pytest.fixture(scope="module")
def synthetic_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    src = np.repeat(np.arange(N_NODES), OUT_DEGREE)
    dst = rng.integers(0, N_NODES, size=src.size)
    return src, dst, rng.uniform(0.1, 1.0, size=src.size)


class _Fixed:
    """An embedder over pre-made vectors; query "query i" is document i's vector."""

    name = "fixed-random-64"
    dim = 64

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors

    def encode(self, texts: list[str], *, kind: str) -> np.ndarray:
        if kind == "document":
            return self.vectors
        return np.stack([self.vectors[int(text.split()[-1])] for text in texts])


@pytest.fixture(scope="module")
def synthetic(synthetic_arrays) -> tuple[ContextStore, _Fixed]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((N_NODES, 64)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    embedder = _Fixed(vectors)
    documents = [Document(f"d{i:06d}", f"document number{i % 1000}") for i in range(N_NODES)]
    store = build_store(documents, embedder, StoreConfig(timestamps=None))
    src, dst, weight = synthetic_arrays
    store = store.with_parts(
        edges=EdgeSet.from_arrays(N_NODES, src, dst, weight, np.zeros(src.size, dtype=np.int64), ["r"])
    )
    return store, embedder


def test_bench_build_1m_edges(benchmark, synthetic_arrays) -> None:  # type: ignore[no-untyped-def]
    src, dst, weight = synthetic_arrays
    relation = np.zeros(src.size, dtype=np.int64)
    edge_set = benchmark(EdgeSet.from_arrays, N_NODES, src, dst, weight, relation, ["r"])
    benchmark.extra_info["n_edges"] = edge_set.n_edges


@pytest.mark.parametrize(("scoring", "hops"), [("propagated", 2), ("propagated", 3), ("oasis", 3)])
def test_bench_synthetic_walk(benchmark, synthetic, scoring: str, hops: int) -> None:  # type: ignore[no-untyped-def]
    store, embedder = synthetic
    retriever = GraphRetriever(
        store,
        embedder,
        scoring=scoring,
        max_hops=hops,
        bidirectional=True,
        rescore_reached=False,
        vector_fill=False,
    )
    queries = [f"query {i}" for i in range(20)]
    results = benchmark(retriever.retrieve_batch, queries, TOP_K)
    benchmark.extra_info["ms_per_query"] = 1000 * benchmark.stats.stats.mean / len(queries)
    benchmark.extra_info["nodes_reached"] = float(
        np.mean([r[0].provenance["stats"]["nodes_reached"] for r in results])
    )
