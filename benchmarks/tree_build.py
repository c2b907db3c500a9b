"""The context tree's build alone (``build_tree``) on the growth benchmark's synthetic data.

CPU seconds of the process (not only wall time: the machine is shared), wall seconds, the peak
anonymous memory above the start (:class:`memory.PeakMemory`) and a digest of the tree (its
nodes and directory vectors), so two builders or two versions of one can be compared::

    python benchmarks/tree_build.py --n 100000 --kmeans faiss
    python benchmarks/tree_build.py --n 100000 --kmeans faiss --profile 25   # cProfile, top 25
    python benchmarks/tree_build.py --n 1000000 --kmeans faiss --phases      # seconds per step

Data as in :mod:`growth` (token documents, clustered 384-d vectors, ``n / 1000`` centres) and
the growth table's tree (branching 8, leaves of 32, centroid directory vectors, no overviews).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from growth import TREE, SyntheticEmbedder, _clusters
from memory import PeakMemory
from synthetic import clustered_vectors, token_documents


def tree_digest(tree: Any) -> str:
    h = hashlib.sha256()
    for column in ("abstract", "content"):
        for text in tree.text_column(column):
            h.update(text.encode() + b"\0")
    h.update("\0".join(tree.uris).encode())
    h.update(np.ascontiguousarray(tree.record_vectors).tobytes())
    return h.hexdigest()[:16]


def timed_phases() -> dict[str, float]:
    """Wrap the faiss builder's steps so their wall seconds add up in the returned dict."""
    from retrievers.builders import hierarchy, kmeans_tree
    from retrievers.builders.label_terms import LabelTerms
    from retrievers.store import tree as tree_module

    seconds: dict[str, float] = {}

    def timed(name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start

        return wrapper

    kmeans_tree._partition = timed("split", kmeans_tree._partition)
    kmeans_tree.reassign_leaves = timed("reassign", kmeans_tree.reassign_leaves)
    LabelTerms.count = classmethod(timed("key-term count", LabelTerms.count.__func__))  # type: ignore[assignment]
    kmeans_tree._directory_nodes = timed("directory texts", kmeans_tree._directory_nodes)
    hierarchy.faiss_kmeans_nodes = timed("faiss_kmeans_nodes", hierarchy.faiss_kmeans_nodes)
    hierarchy.ContextTree = timed("tree object", tree_module.ContextTree)
    hierarchy.embed_directories = timed("embed_directories", hierarchy.embed_directories)
    return seconds


def _phase_table(seconds: dict[str, float], wall: float) -> dict[str, float]:
    names = ("split", "reassign", "key-term count", "directory texts", "tree object")
    table = {name: seconds.get(name, 0.0) for name in names}
    nodes = seconds.get("faiss_kmeans_nodes", 0.0)
    embed = seconds.get("embed_directories", 0.0)
    table["rest of the nodes"] = nodes - sum(table[name] for name in names[:4])
    table["embed_directories"] = embed - table["tree object"]
    table["rest"] = wall - nodes - embed
    return {name: round(value, 2) for name, value in table.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--kmeans", choices=("numpy", "faiss"), default="faiss")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N functions")
    parser.add_argument(
        "--kmeans-iterations", type=int, default=0, help="store.hierarchy.kmeans_iterations (0: the default)"
    )
    parser.add_argument(
        "--phases", action="store_true", help="wall seconds of each step of the faiss builder"
    )
    parser.add_argument(
        "--leaf-reassign", type=float, default=0.0, help="store.hierarchy.leaf_reassign (kmeans faiss)"
    )
    args = parser.parse_args()
    from retrievers.builders.hierarchy import build_tree
    from retrievers.store.hierarchy_config import HierarchyConfig

    documents = list(token_documents(0, args.n))
    vectors = clustered_vectors(0, args.n, n_clusters=_clusters(args.n))
    config = HierarchyConfig.from_dict(
        {
            **TREE,
            **({"kmeans": args.kmeans} if args.kmeans != "numpy" else {}),
            **({"leaf_reassign": args.leaf_reassign} if args.leaf_reassign else {}),
            **({"kmeans_iterations": args.kmeans_iterations} if args.kmeans_iterations else {}),
        }
    )
    profiler = cProfile.Profile() if args.profile else None
    phases = timed_phases() if args.phases else {}
    with PeakMemory() as peak:
        cpu, wall = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        tree = build_tree(documents, vectors, SyntheticEmbedder(args.n), config)
        if profiler is not None:
            profiler.disable()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    result = {
        "n": args.n,
        "kmeans": args.kmeans,
        "leaf_reassign": args.leaf_reassign,
        "kmeans_iterations": config.kmeans_iterations,
        "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2),
        "peak_anon_mb": round(peak.anon, 1),
        "directories": int(tree.n_directories),
        "digest": tree_digest(tree),
        "load": os.getloadavg()[0],
        **({"phases_s": _phase_table(phases, wall)} if args.phases else {}),
    }
    print(json.dumps(result))
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.profile)
        print(out.getvalue())


if __name__ == "__main__":
    main()
