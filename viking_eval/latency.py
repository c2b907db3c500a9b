"""Latency of one query at a time, split into query encoding and search.

The sample is drawn with a seeded RNG; ``warmup`` queries run first untimed (model and caches
warm). Encoding time is measured by wrapping the embedder, so the split works for any retriever
that embeds through it. Query embeddings are *not* cached here: latency is what a live query costs.
Batch throughput is measured separately with ``retrieve_batch`` over the same sample.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from retrievers.types import Embedder, EncodeKind, Retriever


class TimedEmbedder:
    """An Embedder that adds the wall time of every ``encode`` call to ``elapsed``."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.elapsed = 0.0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        start = time.perf_counter()
        try:
            return self.inner.encode(texts, kind=kind)
        finally:
            self.elapsed += time.perf_counter() - start


@dataclass(frozen=True)
class LatencyReport:
    n_queries: int
    warmup: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    qps: float  # 1000 / mean_ms: one query at a time
    encode_p50_ms: float
    encode_mean_ms: float
    search_p50_ms: float
    search_p95_ms: float
    search_mean_ms: float
    batch_qps: float  # retrieve_batch over the same sample

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def sample_queries(queries: Sequence[str], n: int, seed: int) -> list[str]:
    """``n`` queries drawn without replacement by a seeded RNG (all of them, in order, if n >= len)."""
    if n >= len(queries):
        return list(queries)
    picked = np.random.default_rng(seed).choice(len(queries), size=n, replace=False)
    return [queries[i] for i in sorted(picked.tolist())]


def _ms(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q)) if values else 0.0


def measure_latency(
    make_retriever: Callable[[Embedder], Retriever],
    embedder: Embedder,
    queries: Sequence[str],
    *,
    top_k: int,
    n_queries: int = 100,
    warmup: int = 10,
    seed: int = 0,
) -> LatencyReport | None:
    """Time ``retrieve`` one query at a time on a sample; None when the sample is empty."""
    sample = sample_queries(queries, n_queries, seed)
    if not sample:
        return None
    timed = TimedEmbedder(embedder)
    retriever = make_retriever(timed)
    for query in sample[:warmup]:
        retriever.retrieve(query, top_k)
    totals: list[float] = []
    encodes: list[float] = []
    for query in sample:
        timed.elapsed = 0.0
        start = time.perf_counter()
        retriever.retrieve(query, top_k)
        totals.append(time.perf_counter() - start)
        encodes.append(timed.elapsed)
    searches = [total - encode for total, encode in zip(totals, encodes, strict=True)]
    start = time.perf_counter()
    retriever.retrieve_batch(sample, top_k)
    batch_seconds = time.perf_counter() - start
    mean_ms = float(np.mean(totals) * 1000.0)
    return LatencyReport(
        n_queries=len(sample),
        warmup=min(warmup, len(sample)),
        p50_ms=_ms(totals, 50),
        p95_ms=_ms(totals, 95),
        p99_ms=_ms(totals, 99),
        mean_ms=mean_ms,
        qps=1000.0 / max(mean_ms, 1e-9),
        encode_p50_ms=_ms(encodes, 50),
        encode_mean_ms=float(np.mean(encodes) * 1000.0),
        search_p50_ms=_ms(searches, 50),
        search_p95_ms=_ms(searches, 95),
        search_mean_ms=float(np.mean(searches) * 1000.0),
        batch_qps=len(sample) / max(batch_seconds, 1e-12),
    )
