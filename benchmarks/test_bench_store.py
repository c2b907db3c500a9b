"""Loading a store, and building and querying BM25, at 100k and 1M synthetic documents.

The figures of issue 17's store items: how long ``ContextStore.load`` takes and how much memory
it holds (documents, tree nodes, the id index), how long and how much memory a BM25 build
takes, and one BM25 query through the project against bm25s's own scoring plus
``argpartition``. Data: :mod:`synthetic` (token documents with titles and metadata, clustered
vectors, a k-means-shaped context tree). Each measurement runs in a fresh process so that one
does not inherit another's memory::

    python benchmarks/test_bench_store.py --sizes 100000,1000000 --folder /tmp/vk_store
    python -m pytest benchmarks/test_bench_store.py -q --benchmark-only      # 10k and 100k
    VIKING_EVAL_BENCH_1M=1 python -m pytest benchmarks/test_bench_store.py -q --benchmark-only

The command uses only the store's public API (the constructor, ``save``, ``load``), so the same
command measured the code before and after the columnar store (``PYTHONPATH`` at an older
checkout; ``--before``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import PeakMemory, rss_mb
from synthetic import clustered_vectors, token_documents, token_queries, token_texts, tree_nodes

SIZES = [10_000, 100_000] + ([1_000_000] if os.environ.get("VIKING_EVAL_BENCH_1M") else [])
N_QUERIES = 200
TOP_K = 10


def make_store(n_rows: int, folder: Path) -> dict[str, Any]:
    """Build the synthetic store of ``n_rows`` (documents, vectors, BM25, tree) into ``folder``."""
    from retrievers.index import BM25Index
    from retrievers.store import ContextStore, ContextTree, StoreConfig

    started = time.perf_counter()
    documents = list(token_documents(0, n_rows))
    embeddings = clustered_vectors(0, n_rows, n_clusters=max(16, n_rows // 1000))
    bm25 = BM25Index.build([doc.text for doc in documents])  # type: ignore[attr-defined]
    nodes, records = tree_nodes(n_rows)
    directories = [i for i, node in enumerate(sorted(nodes, key=lambda n: n.uri)) if node.level != 2]  # type: ignore[attr-defined]
    tree = ContextTree(
        nodes,  # type: ignore[arg-type]
        record_nodes=np.asarray(directories, dtype=np.int64),
        record_levels=np.zeros(len(directories), dtype=np.int64),
        record_vectors=records,
    )
    store = ContextStore(documents, embeddings, bm25, embedder_name="synthetic", config=StoreConfig())  # type: ignore[arg-type]
    store = store.with_parts(tree=tree)
    if folder.exists():
        shutil.rmtree(folder)
    store.save(folder)
    sizes = {path.name: path.stat().st_size for path in folder.rglob("*") if path.is_file()}
    return {"seconds": time.perf_counter() - started, "bytes": sum(sizes.values())}


def measure_load(folder: Path) -> dict[str, Any]:
    """Load the store in this process: seconds, RSS and anonymous memory it added, then the
    cost of a few lookups (a document, a row by id, a tree node)."""
    import retrievers.builders  # noqa: F401  (imported before timing: the old loader did not import it either)
    from retrievers.store import ContextStore

    before = rss_mb()
    started = time.perf_counter()
    store = ContextStore.load(folder)
    seconds = time.perf_counter() - started
    after = rss_mb()
    n_rows = len(store)
    rng = np.random.default_rng(0)
    rows = rng.integers(0, n_rows, 1000).tolist()
    ids = [store.doc_ids[row] for row in rows]
    started = time.perf_counter()
    for row in rows:
        store.documents[row].full_text  # noqa: B018
    document_us = 1e6 * (time.perf_counter() - started) / len(rows)
    started = time.perf_counter()
    for doc_id in ids:
        store.row_of[doc_id]
    row_of_us = 1e6 * (time.perf_counter() - started) / len(ids)
    tree = store.tree
    assert tree is not None
    started = time.perf_counter()
    for row in rows:
        tree.nodes[row].abstract  # noqa: B018
    node_us = 1e6 * (time.perf_counter() - started) / len(rows)
    return {
        "seconds": seconds,
        "rss_mb": after["VmRSS"] - before["VmRSS"],
        "anon_mb": after["RssAnon"] - before["RssAnon"],
        "document_us": document_us,
        "row_of_us": row_of_us,
        "node_us": node_us,
    }


def measure_bm25(n_rows: int) -> dict[str, Any]:
    """Build BM25 over ``n_rows`` token texts (peak memory above the texts), then time one query
    at a time through ``BM25Index.search`` and through bm25s + argpartition."""
    from retrievers.index import BM25Index
    from retrievers.text import tokenize

    texts = list(token_texts(0, n_rows))
    with PeakMemory() as peak:
        started = time.perf_counter()
        index = BM25Index.build(texts)
        build_seconds = time.perf_counter() - started
    index_bytes = sum(
        int(array.nbytes)
        for array in (
            index._model.scores["data"],
            index._model.scores["indices"],
            index._model.scores["indptr"],
        )
    )
    del texts
    queries = token_queries(N_QUERIES)
    model = index._model

    def bm25s_top_k(query: str) -> Any:
        ids = model.get_tokens_ids(tokenize([query])[0])
        scores = model.get_scores_from_ids(ids)
        top = np.argpartition(-scores, TOP_K)[:TOP_K]
        return top[np.argsort(-scores[top], kind="stable")]

    timings: dict[str, list[float]] = {"project": [], "bm25s": []}
    for _ in range(3):
        for name, function in (("project", lambda q: index.search([q], TOP_K)), ("bm25s", bm25s_top_k)):
            for query in queries[:10]:
                function(query)
            times = []
            for query in queries:
                started = time.perf_counter()
                function(query)
                times.append(time.perf_counter() - started)
            timings[name].append(1e3 * statistics.median(times))
    return {
        "build_seconds": build_seconds,
        "build_peak_rss_mb": peak.rss,
        "build_peak_anon_mb": peak.anon,
        "index_mb": index_bytes / 2**20,
        "query_ms": statistics.median(timings["project"]),
        "bm25s_argpartition_ms": statistics.median(timings["bm25s"]),
    }


def _run(command: str, *args: str) -> dict[str, Any]:
    """Run one measurement in a fresh process (this file with ``--child``); its JSON result."""
    output = subprocess.run(
        [sys.executable, __file__, "--child", command, *args], check=True, capture_output=True, text=True
    ).stdout
    return dict(json.loads(output.strip().splitlines()[-1]))


# --------------------------------------------------------------------------- pytest-benchmark


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"{n // 1000}k")
def saved_store(request: Any, tmp_path_factory: Any) -> tuple[int, Path]:
    folder = tmp_path_factory.mktemp("store") / f"n{request.param}"
    make_store(request.param, folder)
    return request.param, folder


def test_load(benchmark: Any, saved_store: tuple[int, Path]) -> None:
    from retrievers.store import ContextStore

    n_rows, folder = saved_store
    store = benchmark.pedantic(lambda: ContextStore.load(folder), rounds=3, iterations=1)
    assert len(store) == n_rows
    benchmark.extra_info.update(n_rows=n_rows, **_run("load", str(folder)))


# --------------------------------------------------------------------------- the table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000", help="comma-separated document counts")
    parser.add_argument("--folder", default="/tmp/vk_bench_store", help="where the stores are saved")
    parser.add_argument("--skip-bm25", action="store_true", help="load only")
    parser.add_argument("--keep", action="store_true", help="keep the saved stores")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        command, *rest = args.child
        if command == "make":
            result = make_store(int(rest[0]), Path(rest[1]))
        elif command == "load":
            result = measure_load(Path(rest[0]))
        else:
            result = measure_bm25(int(rest[0]))
        print(json.dumps(result))
        return
    print(f"load average at the start: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for size in (int(text) for text in args.sizes.split(",")):
        folder = Path(args.folder) / f"n{size}"
        made = _run("make", str(size), str(folder))
        loads = [_run("load", str(folder)) for _ in range(3)]
        load = {key: statistics.median(run[key] for run in loads) for key in loads[0]}
        print(
            json.dumps(
                {
                    "n_rows": size,
                    "store_bytes": made["bytes"],
                    "make_seconds": round(made["seconds"], 1),
                    "load": load,
                }
            )
        )
        if not args.keep:
            shutil.rmtree(folder)
        if not args.skip_bm25:
            print(json.dumps({"n_rows": size, "bm25": _run("bm25", str(size))}))
    print(f"load average at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
