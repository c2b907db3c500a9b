"""The faster paths of a store change (issue 29, ingest cost): each against an independent
reference.

- ``decode_metadata_column`` (one ``json.loads`` for a whole column) against a parse per row;
- the edge merge (kept edges in CSR order + new edges, no global sort) against
  ``EdgeSet.from_arrays`` over all of them, report included;
- edges after adds into groups larger than k (rows a new document beats take the top k of their
  old list and the new documents, all at once) against a fresh build, and the rows scored
  against their whole group are the new ones only;
- directory counts and centroids after changes against sums over each directory's leaves.
"""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
from incremental_cases import HashEmbedder

from retrievers import Document, StoreConfig
from retrievers.builders import build_store, edge_changes
from retrievers.builders.edges import _Links
from retrievers.store import ChangeSettings, ContextStore
from retrievers.store.columns import decode_metadata, decode_metadata_column
from retrievers.store.edges import EdgeSet
from retrievers.store.text_column import TextColumn

EMBEDDER = HashEmbedder()


class RandomEmbedder:
    """A Gaussian vector per text (seeded by the text): no two documents tie in cosine, so edges
    compare exactly (hashed words make identical vectors, whose ties float32 rounding decides)."""

    name = "random-text-16"
    dim = 16

    def encode(self, texts: list[str], *, kind: str) -> np.ndarray:
        out = np.stack(
            [np.random.default_rng(zlib.crc32(text.encode())).standard_normal(self.dim) for text in texts]
        ).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


RANDOM = RandomEmbedder()
WORDS = [
    "amber",
    "birch",
    "cedar",
    "dune",
    "ember",
    "fjord",
    "grove",
    "heath",
    "inlet",
    "juniper",
    "knoll",
    "larch",
    "marsh",
]


def _doc(rng: np.random.Generator, number: int, groups: int = 2) -> Document:
    text = " ".join([*rng.choice(WORDS, int(rng.integers(3, 9))).tolist(), str(number)])
    return Document(f"d{number:05d}", text, metadata={"conv": f"c{number % groups}", "turn": number % 7})


def test_a_metadata_column_parses_as_each_row_does() -> None:
    rows = ['{"a": 1, "b": [1, 2]}', "", '{"é": "ü", "n": NaN}', '{"x": {"y": null}}', ""]
    column = TextColumn.from_strings(rows)
    got = decode_metadata_column(column)
    want = [decode_metadata(row) for row in rows]
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN != NaN as values
    assert decode_metadata_column(TextColumn.from_strings([])) == []
    with pytest.raises(ValueError, match="not one JSON object"):
        decode_metadata_column(TextColumn.from_strings(['{"a": 1}', "[1, 2]"]))
    with pytest.raises(ValueError, match="not one JSON object"):
        decode_metadata_column(TextColumn.from_strings(['{"a": 1}, {"b": 2}']))


@pytest.mark.parametrize("seed", range(4))
def test_merging_new_edges_into_kept_ones_equals_sorting_them_all(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_rows, names = 40, ["similar_to", "sequence"]
    kept = EdgeSet.from_arrays(
        n_rows,
        rng.integers(0, n_rows, 150),
        rng.integers(0, n_rows, 150),
        rng.random(150),
        rng.integers(0, 2, 150),
        names,
    )
    links = _Links()
    links.report.drop("sequence.missing_order_key", 2)
    for relation in ("similar_to", "sequence", "mentions"):  # a new relation too
        size = int(rng.integers(0, 40))
        links.add(relation, rng.integers(0, n_rows, size), rng.integers(0, n_rows, size), rng.random(size))
    # some new edges repeat kept ones (the larger weight stays, counted as duplicates)
    similar = np.flatnonzero(np.asarray(kept.relation) == 0)[:5]
    links.add("similar_to", kept.src[similar], np.asarray(kept.dst)[similar], np.full(5, 0.99))
    got = edge_changes._merged(
        n_rows,
        np.asarray(kept.src),
        np.asarray(kept.dst, dtype=np.int64),
        np.asarray(kept.weight, dtype=np.float64),
        np.asarray(kept.relation, dtype=np.int64),
        list(names),
        links,
    )
    all_names = [*names, "mentions"]
    want = EdgeSet.from_arrays(
        n_rows,
        np.concatenate([kept.src, *links.sources]),
        np.concatenate([kept.dst, *links.targets]),
        np.concatenate([np.asarray(kept.weight, dtype=np.float64), *links.weights]),
        np.concatenate(
            [
                kept.relation,
                *(
                    np.full(s.shape, all_names.index(r))
                    for s, r in zip(links.sources, links.relations, strict=True)
                ),
            ]
        ),
        all_names,
        report={"dropped": dict(links.report.dropped)},
    )
    assert got.relation_names == want.relation_names
    for name in ("indptr", "dst", "weight", "relation"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert got.report == want.report
    assert got.report["dropped"]["similar_to.duplicate"] >= 5


def _triples(store: ContextStore) -> dict[tuple[str, str, str], float]:
    edges = store.edges
    assert edges is not None
    ids = list(store.doc_ids)
    return {
        (ids[int(s)], ids[int(d)], edges.relation_names[int(r)]): float(w)
        for s, d, r, w in zip(edges.src, edges.dst, edges.relation, edges.weight, strict=True)
    }


@pytest.mark.parametrize(
    "edges",
    [
        {"similar_to": {"k": 3, "min_sim": 0.0, "same_keys": ["conv"]}, "sequence": {"group_keys": ["conv"]}},
        {"similar_to": {"k": 4, "min_sim": 0.1}, "sequence": {"group_keys": ["conv"], "order_key": "turn"}},
    ],
)
def test_edges_after_adds_into_large_groups_are_a_fresh_builds(
    edges: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StoreConfig.from_dict({"edges": edges})
    rng = np.random.default_rng(3)
    documents = [_doc(rng, n) for n in range(120)]
    store = build_store(documents, RANDOM, config)
    scored: list[int] = []  # rows scored against their whole group, per call
    real = edge_changes.top_k_rows

    def counting(block: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scored.append(block.shape[0])
        return real(block, k)

    monkeypatch.setattr(edge_changes, "top_k_rows", counting)
    number = 120
    for step in range(4):
        count = int(rng.integers(1, 6))
        new = [_doc(rng, number + i) for i in range(count)]
        number += count
        if step == 2:  # ids among the stored ones: rows shift
            new = [Document(f"c{doc.id}", doc.text, metadata=doc.metadata) for doc in new]
        scored.clear()
        store = store.add(new, RANDOM)
        documents += new
        assert sum(scored) == len(new)  # only the new rows: beaten rows merge their old lists
        fresh = build_store(documents, RANDOM, config)
        got, want = _triples(store), _triples(fresh)
        assert got.keys() == want.keys()
        assert max(abs(got[key] - want[key]) for key in want) <= 1e-6
    assert store.edges is not None and fresh.edges is not None
    build_only = ("candidates",)  # candidate links counted by a build's builders only
    assert {k: v for k, v in store.edges.report.items() if k not in build_only} == {
        k: v for k, v in fresh.edges.report.items() if k not in build_only
    }
    removed = [documents[5].id, documents[60].id]
    after = store.delete(removed)
    kept = [doc for doc in documents if doc.id not in removed]
    assert _triples(after).keys() == _triples(build_store(kept, RANDOM, config)).keys()


def test_directory_counts_and_centroids_follow_the_leaves_below() -> None:
    config = StoreConfig.from_dict(
        {"hierarchy": {"max_leaf_size": 4, "branching_factor": 3, "directory_vector": "centroid"}}
    )
    rng = np.random.default_rng(5)
    store = build_store([_doc(rng, n, groups=3) for n in range(60)], EMBEDDER, config)
    settings = ChangeSettings(tree_rebuild_fraction=10)
    store = store.add([_doc(rng, n, groups=3) for n in range(60, 75)], EMBEDDER, settings=settings)
    store = store.delete(["d00003", "d00004", "d00040"], settings=settings)
    store = store.add([_doc(rng, n, groups=3) for n in range(75, 80)], EMBEDDER, settings=settings)
    tree = store.tree
    assert tree is not None and tree.info["changes_since_build"] == 23
    vectors = np.asarray(store.embeddings, dtype=np.float64)
    leaves = tree.subtree_leaves()
    rows = tree.leaf_rows(store.row_of)
    centroid = {
        int(node): vector
        for node, level, vector in zip(
            tree.record_nodes, tree.record_levels, tree.record_vectors, strict=True
        )
        if level == 0
    }
    checked = 0
    for node in np.flatnonzero(~tree.is_leaf).tolist():
        below = rows[np.asarray(leaves[node], dtype=np.int64)]
        assert tree.nodes[node].metadata["n_documents"] == below.size
        total = vectors[below].sum(axis=0)
        assert np.allclose(centroid[node], total / np.linalg.norm(total), atol=1e-6)
        checked += 1
    assert checked == tree.n_directories
