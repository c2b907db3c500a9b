"""Issue 30's acceptance figures in ONE run: exact search against the machine's streaming floor,
batches against GEMM and faiss, and the faiss wrapper against raw faiss.

    python benchmarks/speed.py                                   # 10k, 100k and 1M rows
    python benchmarks/speed.py --sizes 10000,100000 --json /tmp/speed.json

Not part of the test run (``testpaths`` is ``tests``). Data: the clustered 384-d float32 vectors
of ``test_bench_ann.py`` (``n / 1000`` centres, at least 16), queries 64 further rows of the
mixture. The exact index and numpy read the generated matrix in place; ``IndexFlatIP`` and the
HNSW (M 16, efConstruction 40) / IVF indexes hold faiss's own copies, as a store's index file
does beside its embeddings (so the wrapper's rescoring reads rows faiss did not touch).

Every section interleaves its methods within each round and gives the median of ``--rounds``
rounds; a round's value of a one-query method is the p50 of ``--queries`` one-query calls after
4 warm-up calls. One query runs with 1 BLAS thread and 1 faiss OpenMP thread; batches with every
thread of the process (BLAS and faiss alike). ``--clock cpu`` reads the process's CPU time
instead of wall time: on a machine shared with other work, a one-query figure then leaves out
the time the process waited for a core (a batch's sums every thread's, spinning included).

* **One query** (10k, 100k, 1M): ``ExactVectorIndex.search`` (top 10), numpy GEMV ``V @ q``
  (no top-k), numpy ``V @ q`` + argpartition, ``np.einsum('ij,j->i', V, q)``, a column sum
  ``np.add.reduce(V, axis=0)`` (one add per float), faiss ``IndexFlatIP.search`` and
  ``FaissVectorIndex`` kind flat. **The floor** is the fastest way this machine streams the
  matrix once: min(column sum, einsum, faiss flat) of the same run.
* **Batch of 512** (100k): ``ExactVectorIndex.search``, numpy GEMM ``Q @ V.T`` (no top-k), raw
  ``IndexFlatIP.search`` of the batch and ``FaissVectorIndex`` flat.
* **Wrapper overhead** (10k, 100k, 1M, one query): raw faiss HNSW (efSearch 64), IVF-Flat
  (nprobe 16) and ``IndexRefineFlat`` over IVF-PQ (k_factor 10) against ``FaissVectorIndex``
  hnsw / ivf_flat / ivf_pq (refine_factor 10) over the same faiss indexes, with each one's R@10
  against exact search (IVF-PQ: the same candidates, so the same recall). IVF: ``nlist`` =
  ``4 sqrt(n)`` (at most n / 39), trained on at most 50,000 rows; IVF-PQ 48 x 8-bit codes.
  Each method starts from evicted caches (:func:`evict_caches`, then its warm-up): a wrapper
  runs right after its raw reference on the same queries, and without the eviction it read the
  lists, graph and codes that the reference had just brought into the cache (at 10k the whole
  index fits in the 32 MB L3), which flattered HNSW and IVF-Flat most (docs/scale.md).
  ``--no-evict`` measures as before. A wrapper's ratio is the median of its rounds' ratios (each
  round measures the wrapper right after its reference: a paired figure), printed with their
  range and with the ratio of the two medians.

Built indexes are kept in ``$VIKING_EVAL_BENCH_CACHE`` (default ``~/.cache/viking_eval/bench_speed``),
named by their settings (faiss's own file format, never pickled).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from test_bench_ann import DIM, _clusters, clustered_vectors
from threadpoolctl import threadpool_limits

from retrievers.index import ExactVectorIndex, FaissVectorIndex

TOP_K = 10
N_QUERIES = 64
BATCH = 512
HNSW_M, EF_CONSTRUCTION, EF_SEARCH = 16, 40, 64
NPROBE, PQ_M, REFINE = 16, 48, 10
#: IVF lists at most (4 sqrt(n) = 4,000 at 1M: k-means of that many takes long on 2 shared cores)
MAX_NLIST = 2048
WARMUP = 4
#: what :func:`evict_caches` reads (twice the 32 MB L3 of the machine docs/scale.md names)
EVICT_BYTES = 64 << 20
_EVICT: np.ndarray | None = None
#: the wrapper section evicts the caches before each method (``--no-evict``: it does not)
EVICT = True
_CHUNK = 100_000
#: the clock every figure is read from (``--clock``): wall time, or the process's CPU time (every
#: thread's; on a machine shared with other work it leaves out the time spent waiting for a core)
CLOCK: Callable[[], float] = time.perf_counter


def _faiss() -> Any:
    import faiss

    return faiss


def _cache(name: str) -> Path:
    root = os.environ.get("VIKING_EVAL_BENCH_CACHE") or Path.home() / ".cache" / "viking_eval" / "bench_speed"
    return Path(root) / name


def _built(name: str, make: Callable[[], Any]) -> Any:
    """The faiss index cached as ``name`` (faiss's file format), built by ``make`` when absent."""
    faiss = _faiss()
    path = _cache(name)
    if path.is_file():
        return faiss.read_index(str(path))
    started = time.perf_counter()
    index = make()
    print(f"  built {name} in {time.perf_counter() - started:.0f} s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    faiss.write_index(index, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)
    return index


class Corpus:
    """One size: the matrix, the exact index over it, ``IndexFlatIP`` (faiss's copy), the queries
    and the exact top 10 of each; with ``ann`` the HNSW / IVF / IVF-PQ indexes too."""

    def __init__(self, n_rows: int, *, ann: bool = True) -> None:
        faiss = _faiss()
        self.n_rows = n_rows
        clusters = _clusters(n_rows)
        tag = f"n{n_rows}_d{DIM}_c{clusters}"

        def rows() -> Any:
            for start in range(0, n_rows, _CHUNK):
                yield clustered_vectors(start, min(n_rows, start + _CHUNK), n_clusters=clusters)

        def hnsw() -> Any:
            index = faiss.IndexHNSWFlat(DIM, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = EF_CONSTRUCTION
            for part in rows():
                index.add(part)
            return index

        self.vectors = np.concatenate(list(rows()))
        self.exact = ExactVectorIndex(self.vectors)  # the matrix itself, never copied
        self.flat = faiss.IndexFlatIP(DIM)  # faiss's own copy
        self.flat.add(self.vectors)
        self.queries = clustered_vectors(n_rows, n_rows + N_QUERIES, n_clusters=clusters)
        self.truth = [rows for _, rows in self.exact.search(self.queries, TOP_K)]
        self.wrapped = {"flat": FaissVectorIndex(self.flat, "flat", self.exact, settings={"kind": "flat"})}
        if not ann:
            return
        self.hnsw = _built(f"hnsw_{tag}_m{HNSW_M}_efc{EF_CONSTRUCTION}.faiss", hnsw)
        self.hnsw.hnsw.efSearch = EF_SEARCH
        nlist = max(1, min(int(4 * math.sqrt(n_rows)), n_rows // 39, MAX_NLIST))
        rng = np.random.default_rng(0)
        sample = np.sort(rng.choice(n_rows, size=min(n_rows, 50_000), replace=False))

        def ivf(pq: bool) -> Callable[[], Any]:
            def make() -> Any:
                quantizer = faiss.IndexFlatIP(DIM)
                if pq:
                    index = faiss.IndexIVFPQ(quantizer, DIM, nlist, PQ_M, 8, faiss.METRIC_INNER_PRODUCT)
                else:
                    index = faiss.IndexIVFFlat(quantizer, DIM, nlist, faiss.METRIC_INNER_PRODUCT)
                index.train(np.ascontiguousarray(self.vectors[sample]))
                for start in range(0, n_rows, _CHUNK):
                    index.add(self.vectors[start : start + _CHUNK])
                return index

            return make

        self.ivf = _built(f"ivfflat_{tag}_nlist{nlist}.faiss", ivf(False))
        self.ivf.nprobe = NPROBE
        self.ivfpq = _built(f"ivfpq_{tag}_nlist{nlist}_m{PQ_M}.faiss", ivf(True))
        self.ivfpq.nprobe = NPROBE
        self.refine = faiss.IndexRefine(self.ivfpq, self.flat)  # refined over faiss's flat copy
        self.refine.k_factor = REFINE
        self.nlist = nlist
        for kind, index in (("hnsw", self.hnsw), ("ivf_flat", self.ivf), ("ivf_pq", self.ivfpq)):
            self.wrapped[kind] = FaissVectorIndex(index, kind, self.exact, settings={"kind": kind})

    def recall(self, found: list[np.ndarray]) -> float:
        return float(
            np.mean([np.intersect1d(f, t).size / TOP_K for f, t in zip(found, self.truth, strict=True)])
        )


class one_thread:
    """1 BLAS thread and 1 faiss OpenMP thread inside the block."""

    def __enter__(self) -> one_thread:
        faiss = _faiss()
        self._before = faiss.omp_get_max_threads()
        self._limits = threadpool_limits(1)
        faiss.omp_set_num_threads(1)
        return self

    def __exit__(self, *exc: object) -> None:
        _faiss().omp_set_num_threads(self._before)
        self._limits.unregister()


def evict_caches() -> None:
    """Read :data:`EVICT_BYTES` of other data, so that what the previous method read is no longer
    in the CPU's caches (the next method starts as cold as the one before it)."""
    global _EVICT
    if _EVICT is None:
        _EVICT = np.ones(EVICT_BYTES // 4, dtype=np.float32)
    float(np.add.reduce(_EVICT))


def p50_ms(
    function: Callable[[np.ndarray], Any], queries: np.ndarray, n_timed: int, *, evict: bool = False
) -> float:
    """The median time of ``n_timed`` one-query calls after :data:`WARMUP` warm-up calls; with
    ``evict``, after :func:`evict_caches` (before the warm-up)."""
    if evict:
        evict_caches()
    for query in queries[:WARMUP]:
        function(query)
    times = []
    for query in queries[WARMUP : WARMUP + n_timed]:
        started = CLOCK()
        function(query)
        times.append(CLOCK() - started)
    return 1e3 * statistics.median(times)


def seconds(function: Callable[[], Any]) -> float:
    started = CLOCK()
    function()
    return CLOCK() - started


def interleaved(methods: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each method once per round, in order, ``rounds`` times; the median of each."""
    return {name: statistics.median(found) for name, found in per_round(methods, rounds).items()}


def per_round(methods: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each method once per round, in order, ``rounds`` times; every round's value of each."""
    values: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(rounds):
        for name, measure in methods.items():
            values[name].append(measure())
    return values


def one_query(data: Corpus, rounds: int, n_timed: int) -> dict[str, float]:
    vectors, queries, flat = data.vectors, data.queries, data.flat
    wrapped_flat = data.wrapped["flat"]

    def numpy_top_k(query: np.ndarray) -> np.ndarray:
        scores = vectors @ query
        top = np.argpartition(-scores, TOP_K)[:TOP_K]
        return top[np.lexsort((top, -scores[top]))]

    functions: dict[str, Callable[[np.ndarray], Any]] = {
        "ExactVectorIndex.search": lambda q: data.exact.search(q, TOP_K),
        "numpy GEMV V @ q": lambda q: vectors @ q,
        "numpy V @ q + argpartition": numpy_top_k,
        "einsum ij,j->i": lambda q: np.einsum("ij,j->i", vectors, q),
        "column sum": lambda q: np.add.reduce(vectors, axis=0),
        "faiss IndexFlatIP": lambda q: flat.search(q[None, :], TOP_K),
        "FaissVectorIndex flat": lambda q: wrapped_flat.search(q, TOP_K),
    }
    with one_thread():
        found = interleaved(
            {name: (lambda f=f: p50_ms(f, queries, n_timed)) for name, f in functions.items()}, rounds
        )
    found["floor"] = min(found["column sum"], found["einsum ij,j->i"], found["faiss IndexFlatIP"])
    return found


def batch(data: Corpus, rounds: int) -> dict[str, float]:
    """Queries per second of a batch of BATCH queries, every thread."""
    clusters = _clusters(data.n_rows)
    queries = clustered_vectors(data.n_rows, data.n_rows + BATCH, n_clusters=clusters)
    vectors, flat, wrapped = data.vectors, data.flat, data.wrapped["flat"]
    methods = {
        "ExactVectorIndex.search": lambda: data.exact.search(queries, TOP_K),
        "numpy GEMM Q @ V.T": lambda: queries @ vectors.T,
        "faiss IndexFlatIP batch": lambda: flat.search(queries, TOP_K),
        "FaissVectorIndex flat": lambda: wrapped.search(queries, TOP_K),
    }
    data.exact.search(queries[:64], TOP_K)  # warm-up
    found = interleaved({name: (lambda m=m: seconds(m)) for name, m in methods.items()}, rounds)
    return {name: BATCH / value for name, value in found.items()}


#: each wrapper and its raw faiss reference (measured one after the other in every round)
WRAPPED = (
    ("faiss HNSW", "FaissVectorIndex hnsw", 1.2),
    ("faiss IVF-Flat", "FaissVectorIndex ivf_flat", 1.2),
    ("faiss IndexRefine(IVF-PQ)", "FaissVectorIndex ivf_pq", 1.1),
)


def wrappers(
    data: Corpus, rounds: int, n_timed: int
) -> tuple[dict[str, float], dict[str, float], dict[str, list[float]]]:
    """Each method's median p50 (ms), its R@10 against exact search, and each wrapper's ratio to
    its raw reference in every round (the pair measured back to back: a paired figure, which the
    machine's drift between rounds moves less than either p50)."""
    faiss = _faiss()
    hnsw_params = faiss.SearchParametersHNSW(efSearch=EF_SEARCH)
    w = data.wrapped
    functions: dict[str, Callable[[np.ndarray], Any]] = {
        "faiss HNSW": lambda q: data.hnsw.search(q[None, :], TOP_K, params=hnsw_params),
        "FaissVectorIndex hnsw": lambda q: w["hnsw"].search(q, TOP_K, ef_search=EF_SEARCH),
        "faiss IVF-Flat": lambda q: data.ivf.search(q[None, :], TOP_K),
        "FaissVectorIndex ivf_flat": lambda q: w["ivf_flat"].search(q, TOP_K, nprobe=NPROBE),
        "faiss IndexRefine(IVF-PQ)": lambda q: data.refine.search(q[None, :], TOP_K),
        "FaissVectorIndex ivf_pq": lambda q: w["ivf_pq"].search(
            q, TOP_K, nprobe=NPROBE, refine_factor=REFINE
        ),
    }
    with one_thread():
        rounds_ms = per_round(
            {
                name: (lambda f=f: p50_ms(f, data.queries, n_timed, evict=EVICT))
                for name, f in functions.items()
            },
            rounds,
        )
        recall = {name: data.recall([_rows(f(q)) for q in data.queries]) for name, f in functions.items()}
    found = {name: statistics.median(values) for name, values in rounds_ms.items()}
    ratios = {
        ours: [mine / theirs for mine, theirs in zip(rounds_ms[ours], rounds_ms[raw], strict=True)]
        for raw, ours, _ in WRAPPED
    }
    return found, recall, ratios


def _rows(found: Any) -> np.ndarray:
    """The rows of one query's result: faiss's (distances, labels) or the wrapper's hits."""
    if isinstance(found, list):
        return np.asarray(found[0][1])
    return np.asarray(found[1]).reshape(-1)


def label(n_rows: int) -> str:
    return f"{n_rows // 1_000_000}M" if n_rows >= 1_000_000 else f"{n_rows // 1000}k"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated row counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=24, help="timed one-query calls per round")
    parser.add_argument(
        "--ann-sizes", default=None, help="the sizes with the ANN wrapper rows (default: all)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="wall time or the process's CPU time"
    )
    parser.add_argument(
        "--no-evict",
        action="store_true",
        help="wrapper section: do not evict the caches before each method (the protocol before "
        "2026-11-26, which let each wrapper read what its raw faiss reference had just cached)",
    )
    args = parser.parse_args()
    global CLOCK, EVICT
    EVICT = not args.no_evict
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    ann_sizes = None if args.ann_sizes is None else {int(size) for size in args.ann_sizes.split(",")}
    faiss = _faiss()
    sizes = [int(size) for size in args.sizes.split(",")]
    out: dict[str, Any] = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "numpy": np.__version__,
        "faiss": faiss.__version__,
        "clock": args.clock,
        "evict": EVICT,
        "load_start": os.getloadavg(),
        "sizes": {},
    }
    print(f"load average at the start: {out['load_start']}", flush=True)
    for n_rows in sizes:
        started = time.perf_counter()
        with_ann = ann_sizes is None or n_rows in ann_sizes
        data = Corpus(n_rows, ann=with_ann)
        print(
            f"{label(n_rows)}: ready in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        entry: dict[str, Any] = {"one_query_ms": one_query(data, args.rounds, args.queries)}
        if n_rows == 100_000:
            entry["batch_qps"] = batch(data, args.rounds)
        if with_ann:
            entry["wrapper_ms"], entry["wrapper_recall"], entry["wrapper_ratios"] = wrappers(
                data, args.rounds, args.queries
            )
        entry["load"] = os.getloadavg()
        out["sizes"][label(n_rows)] = entry
        print(json.dumps({label(n_rows): entry}, indent=1), flush=True)
        del data
    out["load_end"] = os.getloadavg()
    print(f"clock: {args.clock}; load average at the end: {out['load_end']}")
    print(report(out))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


def report(out: dict[str, Any]) -> str:
    """The acceptance table: measured, reference, ratio, pass."""
    rows = ["| figure | measured | reference | ratio | limit | pass |", "|---|---|---|---|---|---|"]

    def add(
        figure: str,
        value: float,
        reference: float,
        ref_name: str,
        limit: float,
        unit: str,
        rounds: list[float] | None = None,
    ) -> None:
        ratio = value / reference if unit == "ms" else reference / value
        shown = f"{ratio:.2f}x"
        if rounds:  # the paired figure: the median of the rounds' ratios, their range beside it
            ratio = statistics.median(rounds)
            shown = f"{ratio:.2f}x (rounds {min(rounds):.2f}-{max(rounds):.2f}; medians' {shown})"
        rows.append(
            f"| {figure} | {value:,.3g} {unit} | {reference:,.3g} {unit} ({ref_name}) | {shown} | "
            f"{limit}x | {'pass' if ratio <= limit else 'FAIL'} |"
        )

    for size, entry in out["sizes"].items():
        one = entry["one_query_ms"]
        add(
            f"{size} one query: ExactVectorIndex",
            one["ExactVectorIndex.search"],
            one["floor"],
            "floor",
            1.3,
            "ms",
        )
        add(
            f"{size} one query: FaissVectorIndex flat",
            one["FaissVectorIndex flat"],
            one["floor"],
            "floor",
            1.3,
            "ms",
        )
        if "batch_qps" in entry:
            qps = entry["batch_qps"]
            best = max(qps["numpy GEMM Q @ V.T"], qps["faiss IndexFlatIP batch"])
            add(
                f"{size} batch {BATCH}: ExactVectorIndex",
                qps["ExactVectorIndex.search"],
                best,
                "best of GEMM, faiss",
                1.2,
                "q/s",
            )
            add(
                f"{size} batch {BATCH}: FaissVectorIndex flat",
                qps["FaissVectorIndex flat"],
                qps["faiss IndexFlatIP batch"],
                "faiss batch",
                1.5,
                "q/s",
            )
        if "wrapper_ms" not in entry:
            continue
        ms, recall, ratios = entry["wrapper_ms"], entry["wrapper_recall"], entry.get("wrapper_ratios", {})
        for raw, ours, limit in WRAPPED:
            add(
                f"{size} {ours} (R@10 {recall[ours]:.3f}; raw {recall[raw]:.3f})",
                ms[ours],
                ms[raw],
                raw,
                limit,
                "ms",
                ratios.get(ours),
            )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
