"""Speed of the hierarchical retriever on SciFact (5,183 documents) with pytest-benchmark.

Not part of the normal test run. Run with::

    python -m pytest benchmarks/test_bench_hierarchical.py -q --benchmark-only

TF-IDF + SVD vectors (384 wide, no torch) stand in for MiniLM: the tree and the traversal cost
the same for any 384-wide embedder. Queries are encoded once beforehand, so the timings are
search only (the global search, the traversal and the ranking), one query at a time, next to
exact flat dense search over the same vectors. Built once: the k-means tree (timed separately).
The mean fraction of tree nodes scored is stored in ``benchmark.extra_info``.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrievers import (
    ContextStore,
    DenseRetriever,
    Document,
    HierarchicalRetriever,
    StoreConfig,
    TfidfEmbedder,
)
from retrievers.builders import build_store
from retrievers.builders.hierarchy import build_tree
from retrievers.store.hierarchy_config import HierarchyConfig
from retrievers.types import EncodeKind

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact"
N_QUERIES = 100
TOP_K = 10
TREE = {
    "builder": "kmeans",
    "branching_factor": 8,
    "max_leaf_size": 32,
    "directory_vector": "centroid",
    "overview": False,
}


class Precomputed:
    """Query vectors computed beforehand: encoding costs nothing during the timed search."""

    def __init__(self, inner: TfidfEmbedder, queries: Sequence[str]) -> None:
        self.name = inner.name
        self.dim = inner.dim
        self.vectors = dict(zip(queries, inner.encode(list(queries), kind="query"), strict=True))

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        return np.stack([self.vectors[text] for text in texts])


@pytest.fixture(scope="module")
def setting() -> tuple[ContextStore, Precomputed, list[str]]:
    documents = []
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            documents.append(Document(id=record["_id"], title=record["title"], text=record["text"]))
    queries = []
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            queries.append(json.loads(line)["text"])
            if len(queries) == N_QUERIES:
                break
    embedder = TfidfEmbedder(dim=384, seed=0).fit(
        [doc.full_text for doc in sorted(documents, key=lambda d: d.id)]
    )
    store = build_store(documents, embedder, StoreConfig.from_dict({"hierarchy": TREE}))
    return store, Precomputed(embedder, queries), queries


def test_tree_build(benchmark: Any, setting: tuple[ContextStore, Precomputed, list[str]]) -> None:
    store, embedder, _ = setting
    config = HierarchyConfig.from_dict(TREE)
    tree = benchmark.pedantic(
        lambda: build_tree(store.documents, store.embeddings, embedder, config), rounds=3, iterations=1
    )
    benchmark.extra_info["n_nodes"] = len(tree)
    benchmark.extra_info["n_directories"] = tree.n_directories


def _one_at_a_time(retriever: Any, queries: list[str]) -> None:
    for query in queries:
        retriever.retrieve(query, TOP_K)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("dense", None),
        ("hier_openviking_defaults", {}),
        ("hier_dirs_50_rounds", {"alpha": 1.0, "max_convergence_rounds": 50}),
        (
            "hier_leaves_50_rounds",
            {"alpha": 1.0, "max_convergence_rounds": 50, "global_search_levels": [0, 1, 2]},
        ),
        (  # experiments/tuned/hierarchical-scifact.yaml: hybrid leaf scores (one BM25 lookup per query)
            "hier_tuned_hybrid_leaves",
            {
                "alpha": 1.0,
                "max_convergence_rounds": 40,
                "global_search_topk": 20,
                "leaf_keyword_weight": 0.4,
            },
        ),
    ],
)
def test_search_one_query_at_a_time(
    benchmark: Any,
    setting: tuple[ContextStore, Precomputed, list[str]],
    name: str,
    params: dict[str, Any] | None,
) -> None:
    store, embedder, queries = setting
    retriever = (
        DenseRetriever(store, embedder)
        if params is None
        else HierarchicalRetriever(store, embedder, **params)
    )
    _one_at_a_time(retriever, queries[:10])  # warm up
    benchmark.pedantic(_one_at_a_time, args=(retriever, queries), rounds=3, iterations=1)
    per_query_ms = benchmark.stats.stats.mean * 1000 / len(queries)
    benchmark.extra_info["ms_per_query"] = per_query_ms
    if params is not None:
        start = time.perf_counter()
        results = retriever.retrieve_batch(queries, TOP_K)
        benchmark.extra_info["batch_ms_per_query"] = (time.perf_counter() - start) * 1000 / len(queries)
        fractions = [r[0].provenance["stats"]["nodes_scored_fraction"] for r in results if r]
        benchmark.extra_info["nodes_scored_fraction"] = float(np.mean(fractions))
    print(f"\n{name}: {per_query_ms:.3f} ms per query (search only)", benchmark.extra_info)
