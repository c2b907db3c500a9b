"""Ingest cost: adding 1% of documents to a store against building it again (issue 29).

Builds a store of ``--docs`` synthetic documents (:mod:`synthetic`: Zipf token texts, 384-d
clustered vectors, metadata groups ``g00``..``g99``) with BM25, a k-means tree (branching 8,
leaves of 32, centroid directory vectors, no overviews: the settings of ``growth.py``),
document edges (``similar_to`` k=5 within a group, ``sequence`` within a group) and, beside it,
an HNSW and an IVF-Flat index; then adds ``--fraction`` of that many new documents with
``ContextStore.add`` (their vectors given: rows of the same mixture, after the queries' rows)
and reports, per part, the seconds of the change against the seconds of the full build (CPU
seconds of the process by default, ``--clock user`` for its user seconds alone, ``--clock wall``
for elapsed ones)::

    python benchmarks/ingest.py --docs 100000 --fraction 0.01
    python benchmarks/ingest.py --docs 100000 --fraction 0.01 --middle   # new ids among the old

``--middle`` gives the new documents ids that sort among the stored ones (every row after the
first insertion shifts), instead of after them (a memory growing in time order). Then the tree
after insertion is compared with a tree built again over the same documents: the hierarchical
retriever's recall@10 against exact search (512 queries, ``max_convergence_rounds`` 3 and 20)
and node counts. Also timed: writing the new version (``StoreVersions.commit``: a new folder and
the pointer swap). Prints a Markdown table and writes ``--json``.

``--backends libsql,postgres,qdrant`` measures the search backends instead
(:mod:`ingest_backends`): writing ``--docs`` rows into each against following a change of
``--fraction`` of them (Qdrant at ``--qdrant-docs`` rows: its local mode writes a few hundred
points a second)::

    python benchmarks/ingest.py --backends libsql,postgres,qdrant --docs 100000 --qdrant-docs 5000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from growth import N_QUERIES, SyntheticEmbedder, _clusters, query_texts
from synthetic import clustered_vectors, token_documents

CONFIG = {
    "hierarchy": {
        "branching_factor": 8,
        "max_leaf_size": 32,
        "directory_vector": "centroid",
        "overview": False,
    },
    "edges": {
        "similar_to": {"k": 5, "min_sim": 0.5, "same_keys": ["group"]},
        "sequence": {"group_keys": ["group"]},
    },
}


def _recall(found: list[list[int]], truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t.tolist())) / len(t) for f, t in zip(found, truth, strict=True)]))


def _tree_quality(store: Any, embedder: SyntheticEmbedder, rounds: int) -> float:
    from retrievers.hierarchical import HierarchicalRetriever

    texts = query_texts()
    truth = np.stack([rows for _, rows in store.exact_vectors.search(embedder.queries(), 10)])
    retriever = HierarchicalRetriever(store, embedder, alpha=1.0, max_convergence_rounds=rounds)
    found = [[store.row_of[r.doc_id] for r in results] for results in retriever.retrieve_batch(texts, 10)]
    return _recall(found, truth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--middle", action="store_true", help="new ids sort among the stored ones")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu", "user"),
        default="cpu",
        help="cpu (default): every part timed in the process's CPU seconds (user + system, all its "
        "threads), which other jobs on a shared machine do not inflate; user: user seconds alone "
        "(without the kernel's time, e.g. page faults of fresh memory, which swings with the "
        "machine's free memory); wall: elapsed seconds",
    )
    parser.add_argument(
        "--backends",
        default="",
        help="libsql,postgres,qdrant: time the backends following the change instead",
    )
    parser.add_argument("--qdrant-docs", type=int, default=5000, help="rows of the qdrant store (--backends)")
    args = parser.parse_args()
    if args.backends:
        from ingest_backends import measure_backends

        kinds = [kind.strip() for kind in args.backends.split(",") if kind.strip()]
        unknown = sorted(set(kinds) - {"libsql", "postgres", "qdrant"})
        if unknown:
            parser.error(f"--backends: {unknown[0]!r} is not one of libsql, postgres, qdrant")
        print(
            f"\n# {args.docs:,} rows (qdrant {min(args.docs, args.qdrant_docs):,}), {args.fraction:.1%} added"
        )
        print(f"({'ids among the stored' if args.middle else 'ids after the stored'})\n")
        rows = measure_backends(
            kinds, args.docs, args.fraction, middle=args.middle, qdrant_docs=args.qdrant_docs
        )
        if args.json is not None:
            args.json.write_text(json.dumps(rows, indent=2) + "\n")
        return
    clock = _use_clock(args.clock)
    from retrievers import Document, StoreConfig
    from retrievers.builders import build_store
    from retrievers.index import ExactVectorIndex, FaissVectorIndex
    from retrievers.index.ann_changes import changed_index
    from retrievers.store import StoreVersions
    from retrievers.store.vector_index_config import VectorIndexConfig

    n, m = args.docs, max(1, round(args.docs * args.fraction))
    embedder = SyntheticEmbedder(n)
    config = StoreConfig.from_dict(CONFIG)
    documents = list(token_documents(0, n))
    start = clock()
    store = build_store(documents, embedder, config)
    build_total = clock() - start
    full: dict[str, float] = dict(store.build_seconds)
    # the new documents: rows after the queries' rows of the same mixture
    first = n + N_QUERIES
    vectors = clustered_vectors(first, first + m, n_clusters=_clusters(n))
    new_docs = list(token_documents(first, first + m))
    if args.middle:  # ids among the stored ones: d0000123 -> d0000123m
        rng = np.random.default_rng(0)
        picked = np.sort(rng.choice(n, size=m, replace=False))
        new_docs = [
            Document(f"{documents[int(p)].id}m", doc.text, doc.title, doc.metadata)
            for p, doc in zip(picked, new_docs, strict=True)
        ]
    order = np.argsort([doc.id for doc in new_docs], kind="stable")
    vectors = vectors[order]
    start = clock()
    changed = store.add(new_docs, embeddings=vectors)
    add_total = clock() - start
    parts = dict(changed.change_seconds)
    # faiss indexes: built over the store, then changed
    ann: dict[str, dict[str, Any]] = {}
    for kind in ("hnsw", "ivf_flat"):
        index_config = VectorIndexConfig(kind=kind)
        start = clock()
        index = FaissVectorIndex.build(ExactVectorIndex(store.embeddings), index_config)
        built = clock() - start
        start = clock()
        _, how = changed_index(
            index,
            changed.exact_vectors,
            index_config,
            old_to_new=np.flatnonzero(np.ones(n, dtype=bool))
            if not args.middle
            else _old_to_new(store, changed),
            new_rows=np.asarray([changed.row_of[doc.id] for doc in sorted(new_docs, key=lambda d: d.id)]),
        )
        ann[kind] = {"build_s": built, "change_s": clock() - start, "how": how}
    with tempfile.TemporaryDirectory() as scratch:
        versions = StoreVersions.create(Path(scratch) / "v", store)
        start = clock()
        versions.commit(changed)
        commit_s = clock() - start
    # quality: the inserted tree against a tree built again over the same documents
    start = clock()
    rebuilt = build_store([*documents, *new_docs], _Rows(embedder, changed), config)
    rebuild_total = clock() - start
    quality = {}
    for name, candidate in (("inserted", changed), ("rebuilt", rebuilt)):
        tree = candidate.tree
        quality[name] = {
            "directories": tree.n_directories,
            "nodes": len(tree),
            "max_leaves_per_directory": int(np.bincount(tree.parents[tree.is_leaf]).max()),
            **{f"R@10 rounds={r}": _tree_quality(candidate, embedder, r) for r in (3, 20)},
        }
    rows = [
        ("documents (columns)", parts.get("documents", 0.0) + parts.get("plan", 0.0), None),
        ("vectors (exact: embeddings merged)", parts.get("vectors", 0.0), full.get("embed")),
        ("HNSW index", ann["hnsw"]["change_s"], ann["hnsw"]["build_s"]),
        ("IVF-Flat index", ann["ivf_flat"]["change_s"], ann["ivf_flat"]["build_s"]),
        ("BM25", parts.get("bm25", 0.0), full.get("bm25")),
        ("tree", parts.get("tree", 0.0), full.get("hierarchy")),
        ("edges", parts.get("edges", 0.0), full.get("edges")),
        ("timestamps", parts.get("timestamps", 0.0), full.get("timestamps")),
        ("content key (sha256)", parts.get("content_key", 0.0), None),
        ("whole add() (no faiss)", add_total, build_total),
        ("commit (write the version, swap the pointer)", commit_s, None),
    ]
    print(
        f"\n# {n:,} documents, {m:,} added ({'ids among the stored' if args.middle else 'ids after the stored'}); "
        f"{args.clock} seconds; load average {os.getloadavg()[0]:.1f} at the end\n"
    )
    print("| part | add (s) | full build (s) | add / build |")
    print("|---|---|---|---|")
    for name, added, built in rows:
        ratio = f"{added / built:.2%}" if built else "-"
        print(f"| {name} | {added:.3f} | {'-' if built is None else f'{built:.2f}'} | {ratio} |")
    print(
        f"\nHNSW: {ann['hnsw']['how']}; IVF-Flat: {ann['ivf_flat']['how']}; tree: "
        f"{[k for k in parts if k.startswith('tree_')]}; rebuild of the whole store: {rebuild_total:.1f} s\n"
    )
    print("| tree | directories | nodes | max leaves per directory | R@10 (3 rounds) | R@10 (20 rounds) |")
    print("|---|---|---|---|---|---|")
    for name, q in quality.items():
        print(
            f"| {name} | {q['directories']} | {q['nodes']} | {q['max_leaves_per_directory']} | "
            f"{q['R@10 rounds=3']:.4f} | {q['R@10 rounds=20']:.4f} |"
        )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "docs": n,
                    "added": m,
                    "middle": args.middle,
                    "clock": args.clock,
                    "parts": parts,
                    "full": full,
                    "ann": ann,
                    "commit_s": commit_s,
                    "add_total": add_total,
                    "build_total": build_total,
                    "quality": quality,
                },
                indent=2,
            )
            + "\n"
        )


class _Clock:
    """The ``time`` module with ``perf_counter`` read from another clock (the library's parts
    time themselves with ``time.perf_counter``)."""

    def __init__(self, read: Any) -> None:
        self.perf_counter = read

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _user_seconds() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def _use_clock(kind: str) -> Any:
    """The clock every part is timed with: ``cpu`` swaps ``time.perf_counter`` for
    ``time.process_time`` (``user``: the process's user seconds) in the modules that time a
    build and a change (this script's only)."""
    if kind == "wall":
        return time.perf_counter
    import retrievers.builders as builders
    import retrievers.store.changes as changes

    read = time.process_time if kind == "cpu" else _user_seconds
    shim = _Clock(read)
    builders.time = shim  # type: ignore[attr-defined]
    changes.time = shim  # type: ignore[attr-defined]
    return read


def _old_to_new(store: Any, changed: Any) -> np.ndarray:
    return np.asarray(changed.row_of.rows(store.doc_ids.array), dtype=np.int64)


class _Rows:
    """The changed store's vectors as an embedder for the rebuild (by row of the sorted corpus)."""

    def __init__(self, embedder: SyntheticEmbedder, changed: Any) -> None:
        self.name, self.dim = embedder.name, embedder.dim
        self._matrix = np.asarray(changed.embeddings)

    def encode_into(self, texts: Any, *, kind: str, out: np.ndarray) -> None:
        out[:] = self._matrix

    def encode(self, texts: Any, *, kind: str) -> np.ndarray:
        raise ValueError("only the corpus's rows (encode_into)")


if __name__ == "__main__":
    main()
