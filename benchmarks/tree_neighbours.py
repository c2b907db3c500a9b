"""Where a query's exact neighbours lie in the context tree: why the descent needs many rounds.

On a store built by :mod:`growth` (its synthetic data and k-means tree), for the first
``--queries`` queries: how many distinct leaf directories hold the exact top 10, how many leaf
directories must be opened in order of their centroid's similarity to hold all 10, the recall@10
of scoring every member of the best ``P`` leaf directories exactly (a flat probe of the leaf
level, for comparison), and the descent's recall and directories popped at 20 / 40 / 80 rounds::

    python benchmarks/growth.py --child store 100000 /tmp/vk_tree100k faiss [LEAF_REASSIGN]   # the store
    python benchmarks/tree_neighbours.py --n 100000 --folder /tmp/vk_tree100k
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from growth import TOP_K, SyntheticEmbedder

PROBES = (4, 8, 16, 32, 64, 128)
ROUNDS = (20, 40, 80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, required=True, help="the store's number of documents")
    parser.add_argument("--folder", type=Path, required=True, help="the store built by growth.py")
    parser.add_argument("--queries", type=int, default=128)
    args = parser.parse_args()
    from retrievers import ContextStore, HierarchicalRetriever

    store = ContextStore.load(args.folder)
    tree = store.tree
    if tree is None or tree.record_vectors is None:
        raise SystemExit(f"{args.folder}: the store has no tree with directory vectors")
    embedder = SyntheticEmbedder(args.n)
    queries = embedder.queries()[: args.queries]
    truth = [set(rows.tolist()) for _, rows in store.exact_vectors.search(queries, TOP_K)]
    parents = np.asarray(tree.parents)
    leaves = np.flatnonzero(tree.is_leaf)
    directory_of_row = np.empty(len(store.doc_ids), dtype=np.int64)
    directory_of_row[tree.leaf_rows(store.row_of)[leaves]] = parents[leaves]
    leaf_directories = np.unique(parents[leaves])
    abstract_record = np.full(parents.size, -1, dtype=np.int64)
    level0 = np.flatnonzero(np.asarray(tree.record_levels) == 0)
    abstract_record[np.asarray(tree.record_nodes)[level0]] = level0
    centroids = np.asarray(tree.record_vectors)[abstract_record[leaf_directories]]
    order_of_rows = np.argsort(directory_of_row, kind="stable")
    bounds = np.searchsorted(directory_of_row[order_of_rows], leaf_directories)
    bounds = np.append(bounds, order_of_rows.size)
    members = {
        int(d): order_of_rows[bounds[i] : bounds[i + 1]] for i, d in enumerate(leaf_directories.tolist())
    }
    embeddings = np.asarray(store.embeddings)
    distinct: list[int] = []
    opened: list[int] = []
    recall: dict[int, list[float]] = {p: [] for p in PROBES}
    for j, true in enumerate(truth):
        holding = set(directory_of_row[list(true)].tolist())
        distinct.append(len(holding))
        similarity = centroids @ queries[j]
        ranked = leaf_directories[np.lexsort((leaf_directories, -similarity))]
        rank = {int(d): r for r, d in enumerate(ranked.tolist())}
        opened.append(max(rank[d] for d in holding) + 1)
        for p in PROBES:
            rows = np.concatenate([members[int(d)] for d in ranked[:p]])
            scores = embeddings[rows] @ queries[j]
            best = rows[np.lexsort((rows, -scores))[:TOP_K]]
            recall[p].append(len(set(best.tolist()) & true) / TOP_K)
    print(f"N {args.n:,}: {leaf_directories.size:,} leaf directories, {len(truth)} queries")
    print(
        f"distinct leaf directories holding the exact top {TOP_K}: mean {np.mean(distinct):.1f}, "
        f"max {max(distinct)}"
    )
    print(
        "leaf directories opened in centroid order to hold all of them: "
        f"median {np.median(opened):.0f}, p90 {np.percentile(opened, 90):.0f}, max {max(opened)}"
    )
    for p in PROBES:
        print(f"  best {p} leaf directories, members scored exactly: R@10 {np.mean(recall[p]):.3f}")
    texts = [f"q{j}" for j in range(len(truth))]
    for rounds in ROUNDS:
        retriever = HierarchicalRetriever(store, embedder, alpha=1.0, max_convergence_rounds=rounds)
        found = retriever.retrieve_batch(texts, TOP_K)
        hits = [
            len({store.row_of[r.doc_id] for r in results} & true) / TOP_K
            for results, true in zip(found, truth, strict=True)
        ]
        popped = [results[0].provenance["stats"]["directories_popped"] for results in found if results]
        print(
            f"  descent, {rounds} rounds: R@10 {np.mean(hits):.3f}, directories popped {np.mean(popped):.0f}"
        )


if __name__ == "__main__":
    main()
