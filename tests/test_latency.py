"""viking_eval.run.latency: the seeded sample, the encode / search split (on a fake clock, no sleeps)
and the BLAS thread limit that applies to one-query timing only."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from retrievers.types import Embedder, EncodeKind, RetrievalResult
from viking_eval.run import latency
from viking_eval.run.latency import measure_latency, sample_queries


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def blas_threads() -> int:
    return max(info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas")


class ClockEmbedder:
    """Encoding a query costs 2 ms of the fake clock."""

    name = "clock"
    dim = 2

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        self.clock.now += 0.002 * len(texts)
        return np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2)


class ClockRetriever:
    """Encodes through its embedder, then searches for ``search_ms[query]`` of the fake clock;
    records the BLAS thread count it runs under."""

    def __init__(self, embedder: Embedder, clock: FakeClock, search_ms: dict[str, float]) -> None:
        self.embedder = embedder
        self.clock = clock
        self.search_ms = search_ms
        self.threads_single: list[int] = []
        self.threads_batch: list[int] = []

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        self.embedder.encode([query], kind="query")
        self.clock.now += self.search_ms[query] / 1000.0
        self.threads_single.append(blas_threads())
        return [RetrievalResult("d1", 1.0)]

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        self.threads_batch.append(blas_threads())
        self.clock.now += 0.001
        return [[RetrievalResult("d1", 1.0)] for _ in queries]


QUERIES = [f"q{i}" for i in range(10)]


def test_sample_is_seeded_ordered_and_whole_when_small() -> None:
    assert sample_queries(QUERIES, 20, seed=0) == QUERIES
    first = sample_queries(QUERIES, 4, seed=3)
    assert first == sample_queries(QUERIES, 4, seed=3)
    assert len(first) == 4 and first == sorted(first, key=QUERIES.index)
    assert sample_queries(QUERIES, 4, seed=4) != first


def test_encode_and_search_are_split_on_a_fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(latency.time, "perf_counter", clock)
    search_ms = {query: float(i + 1) for i, query in enumerate(QUERIES)}  # 1..10 ms
    made: list[ClockRetriever] = []

    def make(embedder: Embedder, scope: Hashable) -> ClockRetriever:
        made.append(ClockRetriever(embedder, clock, search_ms))
        return made[-1]

    report = measure_latency(
        make, ClockEmbedder(clock), [(q, None) for q in QUERIES], top_k=5, n_queries=10, warmup=2
    )
    assert report is not None
    assert report.n_queries == 10 and report.warmup == 2
    assert report.encode_p50_ms == pytest.approx(2.0) and report.encode_mean_ms == pytest.approx(2.0)
    assert report.search_p50_ms == pytest.approx(5.5)  # median of 1..10
    assert report.search_mean_ms == pytest.approx(5.5)
    assert report.p50_ms == pytest.approx(7.5) and report.mean_ms == pytest.approx(7.5)
    assert report.p95_ms == pytest.approx(2.0 + np.percentile(np.arange(1, 11), 95))
    assert report.qps == pytest.approx(1000 / 7.5)
    assert report.samples_ms == pytest.approx(tuple(2.0 + i for i in range(1, 11)))
    assert report.batch_qps == pytest.approx(10 / 0.001)
    assert len(made) == 1  # one retriever per scope, built before timing


@pytest.mark.parametrize("limit", [1, None])
def test_blas_limit_applies_to_one_query_timing_only(limit: int | None) -> None:
    before = blas_threads()
    clock = FakeClock()
    made: list[ClockRetriever] = []

    def make(embedder: Embedder, scope: Hashable) -> ClockRetriever:
        made.append(ClockRetriever(embedder, clock, dict.fromkeys(QUERIES, 1.0)))
        return made[-1]

    report = measure_latency(
        make, ClockEmbedder(clock), [(q, None) for q in QUERIES], top_k=5, n_queries=4, blas_threads=limit
    )
    assert report is not None and report.blas_threads == limit
    assert set(made[0].threads_single) == {before if limit is None else limit}
    assert made[0].threads_batch == [before]  # batch throughput uses every thread
    assert blas_threads() == before  # restored


def test_empty_sample_gives_no_report() -> None:
    assert measure_latency(lambda e, s: None, ClockEmbedder(FakeClock()), [], top_k=5) is None  # type: ignore[arg-type,return-value]
