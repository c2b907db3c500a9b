"""Latency of one query at a time, split into query encoding and search, and into stages.

The sample is drawn with a seeded RNG; ``warmup`` queries run first untimed (model and caches
warm). Encoding time is measured by wrapping the embedder, so the split works for any retriever
that embeds through it. Query embeddings are *not* cached here: latency is what a live query costs.
Batch throughput is measured separately with ``retrieve_batch`` over the same sample.

One query at a time runs with ``blas_threads`` BLAS threads (1 by default), as a serving worker
is usually configured. With more, numpy's OpenBLAS threads keep spinning after each small
product and take the cores from torch's threads encoding the next query: MiniLM + exact search
on SciFact measured 47.8 ms encode / 2.7 ms search per query (p50) with two BLAS threads on two
cores, 21.1 / 1.1 ms with one. ``retrieve_batch`` throughput uses every thread the process has.

The same limit applies to torch's intra-op threads (once an embedder has imported torch; this
module never imports it): on two cores shared with other jobs (load average 9), MiniLM encoded one
SciFact query in 300-1,200 ms with two torch threads, whose every small operation waits for a
descheduled partner, and in 46 ms with one -- the warm quickstart took 45-76 s instead of seconds.
It applies to OpenMP threads as well (faiss's, for an ANN store: retrievers/index/ann.py).
``blas_threads: null`` leaves them all as the process has them.

Stages: every timed query runs inside a span recording (retrievers/spans.py); its spans are kept
(``LatencyReport.queries``: the spans files) and summed per stage (viking_eval/run/stages.py:
``stages``). Memory: ``index_bytes`` per store part the retriever reads and ``rss_growth_mb``,
how far the resident set rose above its level before the warm-up while the queries ran
(viking_eval/run/memory.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import numpy as np
from threadpoolctl import threadpool_limits

from retrievers.spans import recording
from retrievers.types import Embedder, EncodeKind, Retriever
from viking_eval.progress import progress_bar
from viking_eval.run.memory import index_bytes, rss_bytes
from viking_eval.run.stages import QuerySpans, StageSummary, summarize

T = TypeVar("T")


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
    blas_threads: int | None = None  # BLAS threads while timing one query at a time (None: as they were)
    # each timed query's total ms, in sample order: the distribution plots of report.html
    samples_ms: tuple[float, ...] = ()
    stages: tuple[StageSummary, ...] = ()  # per-stage time (viking_eval/run/stages.py)
    index_bytes: dict[str, int] = field(default_factory=dict)  # per store part read, own, total
    rss_growth_mb: float = 0.0  # resident set's rise above its pre-warm-up level during the queries
    queries: tuple[QuerySpans, ...] = ()  # each timed query's spans: the spans files, not latency.json

    def as_dict(self) -> dict[str, Any]:
        values = {key: value for key, value in asdict(self).items() if key != "queries"}
        values["stages"] = [stage.as_dict() for stage in self.stages]
        return values


class _TorchThreads:
    """Holds torch's intra-op threads at ``limit`` from when torch is first seen imported (an
    embedder may load its model, and torch, during the warm-up), restoring them on exit."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.before: int | None = None

    def apply(self) -> None:
        torch = sys.modules.get("torch")
        if self.limit is None or self.before is not None or torch is None:
            return
        self.before = int(torch.get_num_threads())
        torch.set_num_threads(self.limit)

    def restore(self) -> None:
        torch = sys.modules.get("torch")
        if self.before is not None and torch is not None:
            torch.set_num_threads(self.before)
        self.before = None


@contextmanager
def _threads(limit: int | None) -> Iterator[_TorchThreads]:
    """BLAS and OpenMP threads (threadpoolctl) and torch's threads at ``limit`` (None: untouched).
    OpenMP too: faiss searches with it, and one query with two threads took twice as long as with
    one (IndexFlatIP at 100k rows: 14.4 vs 6.4 ms)."""
    torch_threads = _TorchThreads(limit)
    blas = nullcontext() if limit is None else threadpool_limits(limit, user_api=None)
    with blas:
        try:
            yield torch_threads
        finally:
            torch_threads.restore()


def sample_queries(queries: Sequence[T], n: int, seed: int) -> list[T]:
    """``n`` queries drawn without replacement by a seeded RNG (all of them, in order, if n >= len)."""
    if n >= len(queries):
        return list(queries)
    picked = np.random.default_rng(seed).choice(len(queries), size=n, replace=False)
    return [queries[i] for i in sorted(picked.tolist())]


def _ms(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q)) if values else 0.0


def measure_latency(
    make_retriever: Callable[[Embedder, Hashable], Retriever],
    embedder: Embedder,
    queries: Sequence[tuple[str, Hashable]],
    *,
    top_k: int,
    n_queries: int = 100,
    warmup: int = 10,
    seed: int = 0,
    blas_threads: int | None = 1,
    label: str = "",
    show_progress: bool | None = False,
) -> LatencyReport | None:
    """Time ``retrieve`` one query at a time on a sample; None when the sample is empty.

    ``queries`` are (text, scope) pairs; ``make_retriever(embedder, scope)`` gives the retriever
    that serves a scope (scope is None when queries are not scoped). Retrievers are built before
    timing starts. A progress bar ``timing <label>: <n> queries`` counts the warm-up and timed
    queries (``show_progress``: True, False, or None for a terminal only); it is updated between
    queries, outside the timed calls."""
    sample = sample_queries(queries, n_queries, seed)
    if not sample:
        return None
    timed = TimedEmbedder(embedder)
    retrievers: dict[Hashable, Retriever] = {}
    for _, scope in sample:  # one retriever per scope, built before timing starts
        if scope not in retrievers:
            retrievers[scope] = make_retriever(timed, scope)
    totals: list[float] = []
    encodes: list[float] = []
    recorded: list[QuerySpans] = []
    warm = sample[:warmup]
    desc = f"timing {label + ': ' if label else ''}{len(sample):,} queries"
    if warm:
        desc += f" (+{len(warm)} warm-up)"
    bar = progress_bar(total=len(warm) + len(sample), desc=desc, unit="q", show=show_progress)
    rss_before = rss_peak = rss_bytes()
    with _threads(blas_threads) as torch_threads, bar:
        for text, scope in warm:
            torch_threads.apply()
            retrievers[scope].retrieve(text, top_k)
            rss_peak = max(rss_peak, rss_bytes())
            bar.update()
        for position, (text, scope) in enumerate(sample):
            torch_threads.apply()
            timed.elapsed = 0.0
            with recording() as recorder:
                start = time.perf_counter()
                retrievers[scope].retrieve(text, top_k)
                end = time.perf_counter()
            totals.append(end - start)
            encodes.append(timed.elapsed)
            # spans read perf_counter_ns: the same clock in nanoseconds
            bounds = round(start * 1e9), round(end * 1e9)
            recorded.append(QuerySpans(position, *bounds, recorder.epoch_offset_ns, recorder.spans))
            rss_peak = max(rss_peak, rss_bytes())
            bar.update()
    searches = [total - encode for total, encode in zip(totals, encodes, strict=True)]
    by_scope: dict[Hashable, list[str]] = {}
    for text, scope in sample:
        by_scope.setdefault(scope, []).append(text)
    start = time.perf_counter()
    for scope, texts in by_scope.items():
        retrievers[scope].retrieve_batch(texts, top_k)
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
        blas_threads=blas_threads,
        samples_ms=tuple(round(total * 1000.0, 6) for total in totals),
        stages=summarize(recorded),
        index_bytes=index_bytes(next(iter(retrievers.values()))),
        rss_growth_mb=round((rss_peak - rss_before) / 2**20, 3),
        queries=tuple(recorded),
    )
