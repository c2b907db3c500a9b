"""One query at a time: exact search, its floor and faiss's indexes at 10k, 100k and 1M rows.

The table of issue 17, redone in one process with the batch-invariant exact kernel and the ANN
backends. Not part of the test run (``testpaths`` is ``tests``)::

    python -m pytest benchmarks/test_bench_ann.py -q --benchmark-only            # 10k and 100k
    VIKING_EVAL_BENCH_1M=1 python -m pytest benchmarks/test_bench_ann.py -q --benchmark-only
    python benchmarks/test_bench_ann.py --sizes 10000,100000,1000000             # prints the table

Data: 384-d float32 clustered synthetic vectors (:func:`clustered_vectors`): ``n / 1000``
centres (at least 16) drawn from a standard normal and L2-normalised; each row is a centre plus
gaussian noise of norm ~1 (``0.05 N(0, I)`` in 384 dimensions; cosine ~0.5 to its own centre's
other rows, ~0 to others'), L2-normalised; rows are generated in chunks with a seeded generator,
straight into faiss's HNSW storage (1M rows: 1.5 GB, held once; the exact index, numpy and
``IndexFlatIP`` read the same memory). Queries: 64 more rows of the same mixture.

Methods, each timed one query at a time with 1 BLAS/OpenMP thread (threadpoolctl and
``faiss.omp_set_num_threads(1)``), top 10:

* ``ExactVectorIndex.search`` (retrievers/index/vectors.py): candidates from one einsum sum of
  products per chunk, batch-invariant rescoring.
* numpy ``V @ q`` + ``argpartition`` and a sort of the top 10.
* faiss ``IndexFlatIP.search`` (the HNSW index's own storage).
* streaming the matrix once, the floor: the fastest way this machine streams the matrix, the
  minimum of a column sum ``np.add.reduce(V, axis=0)`` (one add per float), ``np.einsum('ij,j->i',
  V, q)`` and faiss's ``IndexFlatIP`` search, all timed in the same run. (A GEMV ``V @ q`` is not a
  floor: OpenBLAS 0.3.31's single-precision GEMV streamed at half the speed of the others on an
  AMD EPYC.) At 10k the matrix (15 MB) stays in the CPU's caches, so this floor is a compute floor
  there, not a memory one. (The pytest-benchmark row times the einsum pass.)
* faiss HNSW (``IndexHNSWFlat``, M 32, efConstruction 40 (faiss's default), efSearch 128), raw.
* ``FaissVectorIndex.search`` on that HNSW (retrievers/index/ann.py): efSearch 128 plus exact
  rescoring of its 128 candidates and the ranking order, what retrievers get.

A run times 32 queries after 4 warm-up queries and takes their p50; the table gives the median
of 3 runs. Recall@10 of the HNSW rows against exact search is printed beside them. The built
HNSW graph is kept in ``$VIKING_EVAL_BENCH_CACHE`` (default ``~/.cache/viking_eval/bench_ann``)
so that a second run does not rebuild it (1M: minutes).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrievers.index import ExactVectorIndex, FaissVectorIndex

DIM = 384
TOP_K = 10
HNSW_M = 32
EF_CONSTRUCTION = 40
EF_SEARCH = 128
N_QUERIES = 64
TIMED_QUERIES = 32
WARMUP = 4
RUNS = 3
SIZES = [10_000, 100_000] + ([1_000_000] if os.environ.get("VIKING_EVAL_BENCH_1M") else [])
METHODS = [
    "ExactVectorIndex.search",
    "numpy V @ q + argpartition",
    "faiss IndexFlatIP",
    "streaming the matrix once (floor)",
    f"faiss HNSW (M {HNSW_M}, efSearch {EF_SEARCH})",
    f"FaissVectorIndex hnsw (efSearch {EF_SEARCH}, rescored)",
]
_CHUNK = 100_000


def _faiss() -> Any:
    import faiss

    return faiss


def clustered_vectors(start: int, stop: int, *, n_clusters: int, seed: int = 0) -> np.ndarray:
    """Rows ``start:stop`` of the synthetic corpus (see the module docstring); any range of
    rows is the same whatever the chunking (one generator per chunk of ``_CHUNK`` rows)."""
    centres = np.random.default_rng([seed, 0]).standard_normal((n_clusters, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    parts = []
    for chunk in range(start // _CHUNK, (stop - 1) // _CHUNK + 1):
        rng = np.random.default_rng([seed, 1, chunk])
        lo = chunk * _CHUNK
        rows = centres[rng.integers(0, n_clusters, _CHUNK)]
        rows += 0.05 * rng.standard_normal((_CHUNK, DIM), dtype=np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        parts.append(rows[max(start, lo) - lo : min(stop, lo + _CHUNK) - lo])
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def _clusters(n_rows: int) -> int:
    return max(16, n_rows // 1000)


def _cache_dir() -> Path:
    root = os.environ.get("VIKING_EVAL_BENCH_CACHE") or Path.home() / ".cache" / "viking_eval" / "bench_ann"
    return Path(root)


class Corpus:
    """One size: the HNSW index (built or read from the cache), the matrix as a view of its
    storage, the exact index over that view, the queries and the exact top 10 of each."""

    def __init__(self, n_rows: int) -> None:
        faiss = _faiss()
        self.n_rows = n_rows
        clusters = _clusters(n_rows)
        path = _cache_dir() / f"hnsw_n{n_rows}_d{DIM}_m{HNSW_M}_efc{EF_CONSTRUCTION}_c{clusters}.faiss"
        started = time.perf_counter()
        if path.is_file():
            self.hnsw = faiss.read_index(str(path))
            self.built_seconds = None
        else:
            self.hnsw = faiss.IndexHNSWFlat(DIM, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            self.hnsw.hnsw.efConstruction = EF_CONSTRUCTION
            for start in range(0, n_rows, _CHUNK):
                self.hnsw.add(clustered_vectors(start, min(n_rows, start + _CHUNK), n_clusters=clusters))
            self.built_seconds = time.perf_counter() - started
            path.parent.mkdir(parents=True, exist_ok=True)
            faiss.write_index(self.hnsw, str(path) + ".tmp")
            os.replace(str(path) + ".tmp", path)
        self.hnsw.hnsw.efSearch = EF_SEARCH
        self.flat = faiss.downcast_index(self.hnsw.storage)  # an IndexFlatIP over the same rows
        self.vectors = faiss.rev_swig_ptr(self.flat.get_xb(), n_rows * DIM).reshape(n_rows, DIM)
        self.exact = ExactVectorIndex(self.vectors)  # a view: float32 and contiguous, never copied
        self.wrapper = FaissVectorIndex(self.hnsw, "hnsw", self.exact, settings={"kind": "hnsw"})
        queries = clustered_vectors(n_rows, n_rows + N_QUERIES, n_clusters=clusters)
        # queries must come from the same mixture but be new rows: draw them past the corpus
        self.queries = queries
        self.truth = [rows for _, rows in self.exact.search(queries, TOP_K)]

    def method(self, name: str) -> Callable[[np.ndarray], Any]:
        vectors = self.vectors

        def numpy_top_k(query: np.ndarray) -> np.ndarray:
            scores = vectors @ query
            top = np.argpartition(-scores, TOP_K)[:TOP_K]
            return top[np.lexsort((top, -scores[top]))]

        methods: dict[str, Callable[[np.ndarray], Any]] = {
            METHODS[0]: lambda query: self.exact.search(query, TOP_K),
            METHODS[1]: numpy_top_k,
            METHODS[2]: lambda query: self.flat.search(query[None, :], TOP_K),
            METHODS[3]: lambda query: np.einsum("ij,j->i", vectors, query),  # the table: the fastest of 3
            METHODS[4]: lambda query: self.hnsw.search(query[None, :], TOP_K),
            METHODS[5]: lambda query: self.wrapper.search(query, TOP_K, ef_search=EF_SEARCH),
        }
        return methods[name]

    def recall(self, name: str) -> float | None:
        """Recall@10 against exact search over the queries (HNSW rows only)."""
        if name == METHODS[4]:
            found = [self.hnsw.search(query[None, :], TOP_K)[1][0] for query in self.queries]
        elif name == METHODS[5]:
            found = [rows for _, rows in self.wrapper.search(self.queries, TOP_K, ef_search=EF_SEARCH)]
        else:
            return None
        return float(
            np.mean([np.intersect1d(f, t).size / TOP_K for f, t in zip(found, self.truth, strict=True)])
        )


@cache
def corpus(n_rows: int) -> Corpus:
    return Corpus(n_rows)


class one_thread:
    """1 BLAS thread (threadpoolctl) and 1 faiss OpenMP thread inside the block."""

    def __enter__(self) -> one_thread:
        from threadpoolctl import threadpool_limits

        faiss = _faiss()
        self._threads = faiss.omp_get_max_threads()
        self._limits = threadpool_limits(1)
        faiss.omp_set_num_threads(1)
        return self

    def __exit__(self, *exc: object) -> None:
        _faiss().omp_set_num_threads(self._threads)
        self._limits.unregister()


def p50_ms(function: Callable[[np.ndarray], Any], queries: np.ndarray) -> float:
    """One run: WARMUP queries untimed, then the p50 of TIMED_QUERIES one-query timings (ms)."""
    for query in queries[:WARMUP]:
        function(query)
    times = []
    for query in queries[WARMUP : WARMUP + TIMED_QUERIES]:
        started = time.perf_counter()
        function(query)
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def floor_ms(data: Corpus) -> float:
    """One run of the floor: the fastest of the three single passes (see the module docstring)."""
    vectors, flat = data.vectors, data.flat
    column_sum = p50_ms(lambda query: np.add.reduce(vectors, axis=0), data.queries)
    einsum = p50_ms(lambda query: np.einsum("ij,j->i", vectors, query), data.queries)
    faiss_flat = p50_ms(lambda query: flat.search(query[None, :], TOP_K), data.queries)
    return min(column_sum, einsum, faiss_flat)


# --------------------------------------------------------------------------- pytest-benchmark


@pytest.mark.parametrize("n_rows", SIZES, ids=lambda n: f"{n // 1000}k")
@pytest.mark.parametrize("name", METHODS)
def test_one_query(benchmark: Any, n_rows: int, name: str) -> None:
    data = corpus(n_rows)
    function = data.method(name)
    queries: Iterator[np.ndarray] = iter(np.tile(data.queries, (64, 1)))
    with one_thread():
        benchmark.pedantic(
            function, setup=lambda: ((next(queries),), {}), rounds=TIMED_QUERIES, warmup_rounds=WARMUP
        )
    recall = data.recall(name)
    benchmark.extra_info.update(n_rows=n_rows, recall_at_10=recall, load=os.getloadavg()[0])


# --------------------------------------------------------------------------- the table


def table(sizes: list[int]) -> str:
    """Markdown: one row per method, one column per size (median of RUNS runs' p50), the HNSW
    rows with their recall@10; methods interleaved within each run."""
    cells: dict[tuple[str, int], str] = {}
    notes = []
    for n_rows in sizes:
        started = time.perf_counter()
        data = corpus(n_rows)
        built = "" if data.built_seconds is None else f", HNSW built in {data.built_seconds:.0f} s"
        notes.append(f"{n_rows:,} rows ready in {time.perf_counter() - started:.0f} s{built}")
        runs: dict[str, list[float]] = {name: [] for name in METHODS}
        with one_thread():
            for _ in range(RUNS):
                for name in METHODS:
                    floor = name == METHODS[3]
                    runs[name].append(floor_ms(data) if floor else p50_ms(data.method(name), data.queries))
        for name in METHODS:
            value = statistics.median(runs[name])
            recall = data.recall(name)
            cells[name, n_rows] = (f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms") + (
                f" (R@10 {recall:.3f})" if recall is not None else ""
            )
    header = (
        "| one query, p50 | "
        + " | ".join(f"{n // 1000:,}k" if n < 1_000_000 else f"{n // 1_000_000}M" for n in sizes)
        + " |"
    )
    lines = [header, "|---|" + "---|" * len(sizes)]
    lines += [f"| {name} | " + " | ".join(cells[name, n] for n in sizes) + " |" for name in METHODS]
    faiss = _faiss()
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    lines += [
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {load} at the end; "
        f"numpy {np.__version__}, faiss {faiss.__version__}. " + "; ".join(notes) + ".",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated row counts")
    args = parser.parse_args()
    print(f"load average at the start: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(table([int(size) for size in args.sizes.split(",")]))


if __name__ == "__main__":
    main()
