"""Per-query latency of the flat baselines through the ``retrievers`` API, and store build, on
SciFact (5,183 documents) with pytest-benchmark.

Not part of the normal test run (``testpaths`` is ``tests``). Save a run and compare the next one
with it (README, "Tests and benchmarks")::

    python -m pytest benchmarks/test_bench_baselines.py --benchmark-only --benchmark-autosave
    python -m pytest benchmarks/test_bench_baselines.py --benchmark-only --benchmark-compare

What is timed, one query at a time as a service calls it (``retrieve(query, top_k=10)``), over
the first 100 SciFact queries:

* ``bm25``: ``BM25Retriever`` (tokenise, stem, sparse scores, top-k).
* ``dense_search``: ``DenseRetriever`` with the query vectors computed beforehand, so the timing is
  exact search over the 5,183 x 256 TF-IDF+SVD matrix and the ranking, whatever the embedder.
* ``dense_end_to_end``: the same with TF-IDF+SVD encoding each query (no torch: a transformer's
  encoding would dominate and is measured by the harness's latency.json instead).

BLAS runs on one thread (threadpoolctl), as in the regression gate: a multi-threaded product of one
query waits on a descheduled thread whenever the machine is busy. ``extra_info`` holds the mean
ms per query. ``test_bench_store_build`` times ``ContextStore.build`` (embedding + BM25 index) with
an already fitted embedder.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from retrievers import BM25Retriever, ContextStore, DenseRetriever, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.types import EncodeKind

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact"
N_QUERIES = 100
TOP_K = 10


class Precomputed:
    """An embedder whose query vectors were computed beforehand (encoding costs nothing)."""

    def __init__(self, inner: TfidfEmbedder, queries: Sequence[str]) -> None:
        self.name = inner.name
        self.dim = inner.dim
        self.vectors = dict(zip(queries, inner.encode(list(queries), kind="query"), strict=True))

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        return np.stack([self.vectors[text] for text in texts])


@pytest.fixture(scope="module", autouse=True)
def one_blas_thread() -> Iterator[None]:
    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="module")
def scifact() -> tuple[list[Document], list[str], TfidfEmbedder]:
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
    embedder = TfidfEmbedder(dim=256, seed=0).fit(
        [doc.full_text for doc in sorted(documents, key=lambda d: d.id)]
    )
    return documents, queries, embedder


@pytest.fixture(scope="module")
def store(scifact: tuple[list[Document], list[str], TfidfEmbedder]) -> ContextStore:
    documents, _, embedder = scifact
    return build_store(documents, embedder, StoreConfig())


def _one_at_a_time(retriever: Any, queries: list[str]) -> None:
    for query in queries:
        retriever.retrieve(query, TOP_K)


@pytest.mark.parametrize("name", ["bm25", "dense_search", "dense_end_to_end"])
def test_bench_baseline_one_query_at_a_time(
    benchmark: Any,
    scifact: tuple[list[Document], list[str], TfidfEmbedder],
    store: ContextStore,
    name: str,
) -> None:
    _, queries, embedder = scifact
    retriever: Any
    if name == "bm25":
        retriever = BM25Retriever(store)
    elif name == "dense_search":
        retriever = DenseRetriever(store, Precomputed(embedder, queries))
    else:
        retriever = DenseRetriever(store, embedder)
    _one_at_a_time(retriever, queries[:10])  # warm up
    benchmark.pedantic(_one_at_a_time, args=(retriever, queries), rounds=5, iterations=1)
    if benchmark.stats:  # None with --benchmark-disable
        per_query_ms = benchmark.stats.stats.mean * 1000 / len(queries)
        benchmark.extra_info["ms_per_query"] = per_query_ms
        print(f"\n{name}: {per_query_ms:.3f} ms per query")


def test_bench_store_build(benchmark: Any, scifact: tuple[list[Document], list[str], TfidfEmbedder]) -> None:
    documents, _, embedder = scifact
    built = benchmark.pedantic(
        lambda: build_store(documents, embedder, StoreConfig()), rounds=3, iterations=1
    )
    assert len(built) == len(documents)
    benchmark.extra_info["documents"] = len(documents)
