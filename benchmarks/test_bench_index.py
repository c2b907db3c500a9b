"""Speed of the search indexes on SciFact (5,183 documents) with pytest-benchmark.

Not part of the normal test run (``testpaths`` is ``tests``). Run with::

    python -m pytest benchmarks/test_bench_index.py -q --benchmark-only

Compared: our ``BM25Index.search`` (bm25s sparse scores + top-k) over 300 queries, rank-bm25's
``BM25Okapi.get_scores`` + ``argsort`` (the common pure-Python baseline; a subset of the queries
because it loops over documents in Python), and ``ExactVectorIndex.search`` on random
normalised 5k x 384 vectors. Both BM25 timings include query tokenization. Throughputs and the
BM25 speed ratio are stored in ``benchmark.extra_info`` (see ``--benchmark-json``) and printed.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from retrievers.index import BM25Index, ExactVectorIndex
from retrievers.text import tokenize

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact"
N_QUERIES = 300
N_RANK_BM25_QUERIES = 30  # rank-bm25 takes ~10 ms per query on 5k documents
TOP_K = 10


@pytest.fixture(scope="module")
def scifact() -> tuple[list[str], list[str]]:
    texts = []
    with gzip.open(SCIFACT / "corpus.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            texts.append(f"{record['title']} {record['text']}")
    queries = []
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as handle:
        for line in handle:
            queries.append(json.loads(line)["text"])
            if len(queries) == N_QUERIES:
                break
    return texts, queries


@pytest.fixture(scope="module")
def bm25_index(scifact: tuple[list[str], list[str]]) -> BM25Index:
    return BM25Index.build(scifact[0])


@pytest.fixture(scope="module")
def okapi(scifact: tuple[list[str], list[str]]) -> BM25Okapi:
    return BM25Okapi(tokenize(scifact[0]))


def rank_bm25_search(okapi: BM25Okapi, queries: list[str]) -> list[np.ndarray]:
    """Tokenize, score every document, take the top k by a full argsort (rank-bm25's own way)."""
    return [np.argsort(-okapi.get_scores(terms), kind="stable")[:TOP_K] for terms in tokenize(queries)]


def seconds_per_call(function: Callable[[], Any], repeats: int = 3) -> float:
    """Best of ``repeats`` wall-clock timings (a plain timer, independent of pytest-benchmark)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def mean_seconds(benchmark: Any) -> float | None:
    """Mean round time measured by pytest-benchmark (None when benchmarking is disabled)."""
    return float(benchmark.stats["mean"]) if benchmark.stats else None


@pytest.fixture(scope="module")
def rank_bm25_seconds_per_query(okapi: BM25Okapi, scifact: tuple[list[str], list[str]]) -> float:
    queries = scifact[1][:N_RANK_BM25_QUERIES]
    return seconds_per_call(lambda: rank_bm25_search(okapi, queries), repeats=2) / len(queries)


def test_bench_bm25index_search(
    benchmark: Any,
    bm25_index: BM25Index,
    scifact: tuple[list[str], list[str]],
    rank_bm25_seconds_per_query: float,
) -> None:
    queries = scifact[1]
    hits = benchmark.pedantic(bm25_index.search, args=(queries, TOP_K), rounds=5, warmup_rounds=1)
    assert len(hits) == len(queries)
    mean = mean_seconds(benchmark)
    if mean is not None:
        ours_qps = len(queries) / mean
        rank_qps = 1.0 / rank_bm25_seconds_per_query
        benchmark.extra_info.update(
            queries=len(queries),
            queries_per_s=ours_qps,
            ms_per_query=1000 * mean / len(queries),
            rank_bm25_queries_per_s=rank_qps,
            speedup_vs_rank_bm25=ours_qps / rank_qps,
        )
        print(
            f"\nBM25Index.search: {ours_qps:,.0f} queries/s; rank-bm25 BM25Okapi: {rank_qps:,.1f} queries/s; "
            f"ratio {ours_qps / rank_qps:,.1f}x"
        )


def test_bench_rank_bm25_okapi(
    benchmark: Any, okapi: BM25Okapi, scifact: tuple[list[str], list[str]]
) -> None:
    queries = scifact[1][:N_RANK_BM25_QUERIES]
    tops = benchmark.pedantic(rank_bm25_search, args=(okapi, queries), rounds=3, warmup_rounds=0)
    assert len(tops) == len(queries)
    mean = mean_seconds(benchmark)
    if mean is not None:
        benchmark.extra_info.update(
            queries=len(queries), queries_per_s=len(queries) / mean, ms_per_query=1000 * mean / len(queries)
        )
        print(f"\nrank-bm25 BM25Okapi get_scores+argsort: {len(queries) / mean:,.1f} queries/s")


def test_bench_exact_vector_search(benchmark: Any) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((5183, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((N_QUERIES, 384)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    index = ExactVectorIndex(vectors)
    hits = benchmark.pedantic(index.search, args=(queries, TOP_K), rounds=5, warmup_rounds=1)
    assert len(hits) == N_QUERIES
    mean = mean_seconds(benchmark)
    if mean is not None:
        benchmark.extra_info.update(queries=N_QUERIES, queries_per_s=N_QUERIES / mean)
        print(f"\nExactVectorIndex.search (5183 x 384): {N_QUERIES / mean:,.0f} queries/s")
