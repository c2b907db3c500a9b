"""HierarchicalRetriever: scores worked out by hand on a small tree, the oracle (alpha = 1, no
threshold, every leaf in the global search, unlimited rounds == flat dense), batch == single,
scoped views, metadata filters, chunked stores, convergence exits, provenance, directories in
find() and parameter validation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from retrievers import ContextNode, ContextStore, DenseRetriever, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.builders.hierarchy import embed_directories
from retrievers.hierarchical import HierarchicalParams, HierarchicalRetriever
from retrievers.types import EncodeKind
from viking_eval.data import load_dataset

R = "viking://resources"


def unit(x: float) -> list[float]:
    """A unit vector whose dot product with the query (1, 0, 0) is exactly ``x``."""
    return [x, math.sqrt(1.0 - x * x), 0.0]


class TableEmbedder:
    """Vectors from a table, so every score below can be worked out by hand."""

    name = "table"
    dim = 3

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        return np.asarray([self.table[text] for text in texts], dtype=np.float32).reshape(len(texts), 3)


# Query q = (1, 0, 0). Tree and each node's vector score (its first vector component):
#   root            0.0  (vector (0, 0, 1))
#   ├── a           0.75
#   │   ├── a1      0.5
#   │   └── a2      0.25
#   └── b           0.5
#       ├── b1      1.0
#       └── b2      0.75
TABLE = {
    "q": [1.0, 0.0, 0.0],
    "root abstract": [0.0, 0.0, 1.0],
    "about a": unit(0.75),
    "about b": unit(0.5),
    "doc a1": unit(0.5),
    "doc a2": unit(0.25),
    "doc b1": unit(1.0),
    "doc b2": unit(0.75),
}


def small_store() -> tuple[ContextStore, TableEmbedder]:
    """The tree drawn above, over four documents (also used by test_hierarchical_rerank)."""
    embedder = TableEmbedder(TABLE)
    docs = [Document(id=name, text=f"doc {name}") for name in ("a1", "a2", "b1", "b2")]
    store = build_store(docs, embedder, StoreConfig())
    nodes = [
        ContextNode(R, 0, None, abstract="root abstract"),
        ContextNode(f"{R}/a", 0, R, abstract="about a"),
        ContextNode(f"{R}/b", 0, R, abstract="about b"),
        *(ContextNode(f"{R}/{d[0]}/{d}", 2, f"{R}/{d[0]}", doc_id=d) for d in ("a1", "a2", "b1", "b2")),
    ]
    store = store.with_parts(tree=embed_directories(nodes, embedder, store.embeddings, store.row_of))
    return store, embedder


@pytest.fixture
def small() -> tuple[ContextStore, TableEmbedder]:
    return small_store()


def scored(results: Sequence[object]) -> list[tuple[str, float]]:
    return [(r.doc_id, r.score) for r in results]  # type: ignore[attr-defined]


def test_propagation_worked_out_by_hand(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    # limit = max(top_k=4, 1) = 4: every directory record is a start point: a 0.75, b 0.5, root 0.0
    # (root found by the search has a real score 0.0). No early stop.
    retriever = HierarchicalRetriever(store, embedder, global_search_topk=1, max_convergence_rounds=None)
    results = retriever.retrieve("q", 4)
    # pop a (0.75): a1 = .5*.5 + .5*.75 = .625, a2 = .5*.25 + .5*.75 = .5
    # pop b (0.5):  b1 = .5*1 + .5*.5 = .75,   b2 = .5*.75 + .5*.5 = .625 (ties a1: doc id order)
    assert scored(results) == [("b1", 0.75), ("a1", 0.625), ("b2", 0.625), ("a2", 0.5)]
    top = results[0]
    assert top.uri == f"{R}/b/b1"
    assert top.provenance["directory_path"] == (f"{R}/b",)
    assert top.provenance["pre_propagation_score"] == 1.0
    assert top.provenance["found_by"] == "traversal"
    assert "rerank_fallback" not in top.provenance  # no reranker: no rerank keys
    stats = top.provenance["stats"]
    assert stats["directories_popped"] == 3 and stats["stop_reason"] == "exhausted"
    assert stats["nodes_scored"] == 7 and stats["nodes_scored_fraction"] == 1.0


def test_a_root_without_score_is_not_a_parent_with_score_zero(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    # limit = max(1, 1) = 1: only a is hit; the root joins with no score.
    retriever = HierarchicalRetriever(store, embedder, global_search_topk=1, max_convergence_rounds=None)
    results = retriever.retrieve("q", 1)
    # pop a (0.75): a1 .625, a2 .5. Pop root (no score): its children keep their own scores,
    # b = 0.5 (not .5*.5 + .5*0 = .25, as OpenViking's `if parent_score` test would treat a real
    # 0.0; here it is "no parent"). Pop b (0.5): b1 = .5*1 + .5*.5 = .75.
    assert scored(results) == [("b1", 0.75)]
    assert results[0].provenance["directory_path"] == (R, f"{R}/b")
    # whereas a root *hit* with score 0.0 propagates it: a = .5*.75 + .5*0 = .375 as a child of
    # root (directories are matches of find(), never results of retrieve())
    found = HierarchicalRetriever(store, embedder, global_search_topk=3, max_convergence_rounds=None)
    directories = found.find("q", 10, directories=True)
    assert (f"{R}/a", 0.375, 0, None) in [(m.uri, m.score, m.level, m.doc_id) for m in directories]
    assert found.retrieve("q", 1)[0].score == 0.75
    assert all(m.level == 2 for m in found.find("q", 10))  # leaves only by default
    assert found.search("q", top_k=10, directories=True) == directories
    assert {r.doc_id for r in found.retrieve("q", 10)} == {"a1", "a2", "b1", "b2"}


def test_threshold_strict_and_inclusive(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    common = {"global_search_topk": 3, "max_convergence_rounds": None}
    strict = HierarchicalRetriever(store, embedder, threshold=0.5, **common).retrieve("q", 4)
    inclusive = HierarchicalRetriever(
        store, embedder, threshold=0.5, threshold_inclusive=True, **common
    ).retrieve("q", 4)
    assert [r.doc_id for r in strict] == ["b1", "a1", "b2"]  # a2 = 0.5 is not > 0.5
    assert [r.doc_id for r in inclusive] == ["b1", "a1", "b2", "a2"]


def test_alpha_extremes_and_leaf_hits_are_kept(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    only_children = HierarchicalRetriever(
        store, embedder, alpha=1.0, global_search_topk=3, max_convergence_rounds=None
    )
    assert scored(only_children.retrieve("q", 4)) == [("b1", 1.0), ("b2", 0.75), ("a1", 0.5), ("a2", 0.25)]
    only_parents = HierarchicalRetriever(
        store, embedder, alpha=0.0, global_search_topk=3, max_convergence_rounds=None
    )
    assert scored(only_parents.retrieve("q", 4)) == [("a1", 0.75), ("a2", 0.75), ("b1", 0.5), ("b2", 0.5)]
    # leaves in the global search enter the pool with their own score and keep the max
    leaves = HierarchicalRetriever(
        store, embedder, global_search_levels=[0, 1, 2], global_search_topk=3, max_convergence_rounds=None
    )
    results = leaves.retrieve("q", 4)
    assert scored(results) == [("b1", 1.0), ("b2", 0.75), ("a1", 0.625), ("a2", 0.5)]
    assert (
        results[0].provenance["found_by"] == "global_search" and results[0].provenance["directory_path"] == ()
    )


def test_convergence_and_stagnation_exits(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    # rounds = 1, top_k = 2: pop a -> pool {a1, a2} (first round: nothing to compare with);
    # pop b -> top-2 becomes {b1, a1}: changed; pop root -> the pool gains a and b (directories),
    # top-2 unchanged -> converged after one stable round.
    retriever = HierarchicalRetriever(store, embedder, global_search_topk=3, max_convergence_rounds=1)
    stats = retriever.retrieve("q", 2)[0].provenance["stats"]
    assert (stats["directories_popped"], stats["stop_reason"]) == (3, "converged")
    # top_k = 3: pop a leaves only 2 leaves in the pool (< 3), pop b makes the top-3
    # {b1, a1, b2}, pop root changes nothing -> converged
    assert retriever.retrieve("q", 3)[0].provenance["stats"]["stop_reason"] == "converged"
    # a pool that does not grow: with threshold 0.7 nothing under a passes (a1 .625, a2 .5), so
    # the first round leaves the pool empty -> stagnated after 1 round, before b is popped
    stagnating = HierarchicalRetriever(
        store, embedder, global_search_topk=3, threshold=0.7, max_convergence_rounds=1
    )
    assert stagnating.retrieve("q", 2) == []
    no_exit = HierarchicalRetriever(
        store, embedder, global_search_topk=3, threshold=0.7, max_convergence_rounds=1, stagnation_exit=False
    ).retrieve("q", 2)
    assert scored(no_exit) == [("b1", 0.75)]


def test_child_limit_keeps_the_best_children(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    retriever = HierarchicalRetriever(
        store, embedder, global_search_topk=3, child_limit=1, max_convergence_rounds=None
    )
    # each directory passes on only its best child: a1 under a, b1 under b
    assert [r.doc_id for r in retriever.retrieve("q", 4)] == ["b1", "a1"]


def test_scoped_view_never_leaves_its_scope(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    view = store.restricted(np.asarray([doc_id.startswith("a") for doc_id in store.doc_ids]))
    retriever = HierarchicalRetriever(
        view, embedder, global_search_levels=[0, 1, 2], global_search_topk=3, max_convergence_rounds=None
    )
    results = retriever.retrieve("q", 4)
    assert [r.doc_id for r in results] == ["a1", "a2"]
    stats = results[0].provenance["stats"]
    assert stats["nodes_in_scope"] == 4  # root, a, a1, a2: b has no allowed leaf
    assert stats["nodes_scored"] == 4
    assert all(f"{R}/b" not in r.provenance["directory_path"] for r in results)


def test_metadata_filters_narrow_the_leaf_scope(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    common = {"global_search_topk": 3, "max_convergence_rounds": None}
    filtered = HierarchicalRetriever(store, embedder, filters={"doc_ids": ["a1", "b2"]}, **common)
    results = filtered.retrieve("q", 4)
    # pop a: only a1 is in scope, .5*.5 + .5*.75 = .625; pop b: only b2, .5*.75 + .5*.5 = .625
    assert scored(results) == [("a1", 0.625), ("b2", 0.625)]
    assert results[0].provenance["stats"]["nodes_in_scope"] == 5  # root, a, b, a1, b2
    # leaves in the global search are searched inside the filter too
    leaves = HierarchicalRetriever(
        store, embedder, filters={"doc_ids": ["a2"]}, global_search_levels=[0, 1, 2], **common
    )
    # (a2's global hit .25 is then beaten under a: .5*.25 + .5*.75 = .5); b is out of scope
    results = leaves.retrieve("q", 4)
    assert [(r.doc_id, r.score, r.provenance["found_by"]) for r in results] == [("a2", 0.5, "traversal")]
    assert results[0].provenance["stats"]["global_hits"] == 3  # directories a and root, leaf a2
    # a filter inside a scoped view: both hold (only a1 is in the view and the filter)
    view = store.restricted(np.asarray([doc_id.startswith("a") for doc_id in store.doc_ids]))
    both = HierarchicalRetriever(view, embedder, filters={"doc_ids": ["a1", "b2"]}, **common)
    results = both.retrieve("q", 4)
    assert [r.doc_id for r in results] == ["a1"]
    assert results[0].provenance["stats"]["nodes_in_scope"] == 3  # root, a, a1
    assert [m.doc_id for m in both.find("q", 4)] == ["a1"]


# Chunked store: documents A and B in three chunks; the tree's leaves are the chunks.
#   root            0.0
#   ├── x           0.5
#   │   ├── A#0     0.25
#   │   └── B#0     1.0
#   └── y           0.75
#       └── A#1     0.5
CHUNK_TABLE = {
    "q": [1.0, 0.0, 0.0],
    "root abstract": [0.0, 0.0, 1.0],
    "about x": unit(0.5),
    "about y": unit(0.75),
    "chunk A#0": unit(0.25),
    "chunk B#0": unit(1.0),
    "chunk A#1": unit(0.5),
}


def test_chunked_store_answers_with_documents() -> None:
    embedder = TableEmbedder(CHUNK_TABLE)
    chunks = [
        Document(id=chunk, text=f"chunk {chunk}", metadata={"parent_id": chunk[0]})
        for chunk in ("A#0", "A#1", "B#0")
    ]
    rows = build_store(chunks, embedder, StoreConfig())
    store = ContextStore(
        rows.documents,
        rows.embeddings,
        rows.bm25,
        embedder_name=rows.embedder_name,
        config=rows.config,
        parents=(
            [Document(id="A", text="all of A"), Document(id="B", text="all of B")],
            np.asarray([0, 0, 1]),
        ),
    )
    nodes = [
        ContextNode(R, 0, None, abstract="root abstract"),
        ContextNode(f"{R}/x", 0, R, abstract="about x"),
        ContextNode(f"{R}/y", 0, R, abstract="about y"),
        ContextNode(f"{R}/x/A#0", 2, f"{R}/x", doc_id="A#0"),
        ContextNode(f"{R}/x/B#0", 2, f"{R}/x", doc_id="B#0"),
        ContextNode(f"{R}/y/A#1", 2, f"{R}/y", doc_id="A#1"),
    ]
    store = store.with_parts(tree=embed_directories(nodes, embedder, store.embeddings, store.row_of))
    retriever = HierarchicalRetriever(store, embedder, global_search_topk=3, max_convergence_rounds=None)
    results = retriever.retrieve("q", 5)
    # pop y (.75): A#1 = .5*.5 + .5*.75 = .625; pop x (.5): A#0 = .375, B#0 = .5*1 + .5*.5 = .75.
    # A scores its best chunk (A#1).
    assert scored(results) == [("B", 0.75), ("A", 0.625)]
    assert [(r.provenance["chunk_id"], r.uri) for r in results] == [
        ("B#0", f"{R}/x/B#0"),
        ("A#1", f"{R}/y/A#1"),
    ]
    assert results[1].provenance["directory_path"] == (f"{R}/y",)
    assert retriever.retrieve_batch(["q"], 1) == [[results[0]]]
    # find() keeps every matching leaf (contexts), naming its document and chunk
    found = retriever.find("q", 5)
    assert [(m.uri, m.doc_id, m.provenance["chunk_id"]) for m in found] == [
        (f"{R}/x/B#0", "B", "B#0"),
        (f"{R}/y/A#1", "A", "A#1"),
        (f"{R}/x/A#0", "A", "A#0"),
    ]


def test_bad_parameters_and_inputs(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    cases = [
        ({"alpha": 1.5}, r"^alpha must be a number in \[0, 1\], got 1.5$"),
        ({"alpha": -0.1}, r"^alpha must be a number in \[0, 1\], got -0.1$"),
        ({"global_search_levels": []}, r"^global_search_levels must not be empty$"),
        ({"global_search_levels": [3]}, r"^global_search_levels\[0\] must be one of \[0, 1, 2\], got 3$"),
        (
            {"global_search_levels": [0, True]},
            r"^global_search_levels\[1\] must be one of \[0, 1, 2\], got True$",
        ),
        ({"global_search_levels": [0, 0]}, r"^global_search_levels has repeats: \[0, 0\]$"),
        ({"global_search_levels": "01"}, r"^global_search_levels must be a list, got '01'$"),
        ({"global_search_topk": 0}, r"^global_search_topk must be an integer in \[1, 10000000\], got 0$"),
        ({"child_limit": 0}, r"^child_limit must be an integer in \[1, 10000000\] or null, got 0$"),
        ({"threshold": float("nan")}, r"^threshold must be a finite number or null, got nan$"),
        (
            {"max_convergence_rounds": 0},
            r"^max_convergence_rounds must be an integer in \[1, 1000\] or null, got 0$",
        ),
        ({"mode": "deep"}, r"^mode must be one of \['quick', 'thinking'\], got 'deep'$"),
        ({"reranker": "yes"}, r"^reranker must be null or an object with a rerank\(\) method, got 'yes'$"),
        ({"stagnation_exit": 1}, r"^stagnation_exit must be true or false, got 1$"),
        ({"rerank_depth": 20}, r"^rerank_depth does not apply to the hierarchical retriever"),
    ]
    for params, message in cases:
        with pytest.raises(ValueError, match=message):
            HierarchicalParams(**params)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=message):
            HierarchicalRetriever(store, embedder, **params)
    # directories are a find()/search() matter now, not a retrieve() parameter
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['return_directories'\]"):
        HierarchicalRetriever(store, embedder, return_directories=True)
    assert HierarchicalParams(global_search_levels=[2, 0]).global_search_levels == (0, 2)
    retriever = HierarchicalRetriever(store, embedder)
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        retriever.retrieve("q", 0)
    with pytest.raises(ValueError, match="non-empty string"):
        retriever.retrieve(" ", 3)
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        retriever.find("q", 0)
    with pytest.raises(ValueError, match="query must be a non-empty string"):
        retriever.search(" ")
    with pytest.raises(ValueError, match="query must be a non-empty string"):
        retriever.search(["q"])  # type: ignore[arg-type]
    (candidates,) = retriever.candidates(["q"], embedder.encode(["q"], kind="query"), 2)
    assert sorted(store.doc_ids[row] for row in candidates.rows) == ["a1", "a2", "b1", "b2"]
    plain = build_store([Document(id="a1", text="doc a1")], embedder, StoreConfig())
    with pytest.raises(ValueError, match="the store has no context tree"):
        HierarchicalRetriever(plain, embedder)
    with pytest.raises(ValueError, match="needs an embedder"):
        HierarchicalRetriever(store, None)


# -- the oracle and batch == single, on a real (small) corpus ---------------------------------------


@pytest.fixture(scope="module")
def adi(shared_datasets: Path):  # type: ignore[no-untyped-def]
    dataset = load_dataset(str(shared_datasets / "adi"), "test")
    documents = sorted(dataset.corpus.values(), key=lambda doc: doc.id)
    embedder = TfidfEmbedder(dim=64, seed=0).fit([doc.full_text for doc in documents])
    config = StoreConfig.from_dict(
        {"hierarchy": {"builder": "kmeans", "branching_factor": 4, "max_leaf_size": 8}}
    )
    store = build_store(documents, embedder, config)
    return store, embedder, [query.text for query in dataset.queries.values()]


@pytest.mark.needs_data
@pytest.mark.parametrize("top_k", [1, 10, 82])
def test_oracle_equals_flat_dense_exactly(adi, top_k: int) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = adi
    oracle = HierarchicalRetriever(
        store,
        embedder,
        alpha=1.0,
        threshold=None,
        global_search_levels=[0, 1, 2],
        global_search_topk=len(store),
        max_convergence_rounds=None,
    )
    dense = DenseRetriever(store, embedder)
    assert [scored(r) for r in oracle.retrieve_batch(queries, top_k)] == [
        scored(r) for r in dense.retrieve_batch(queries, top_k)
    ]
    # and in a scoped view (half of the corpus)
    view = store.restricted(np.arange(len(store)) % 2 == 0)
    scoped = HierarchicalRetriever(
        view,
        embedder,
        alpha=1.0,
        global_search_levels=[0, 1, 2],
        global_search_topk=len(store),
        max_convergence_rounds=None,
    )
    assert [scored(r) for r in scoped.retrieve_batch(queries, top_k)] == [
        scored(r) for r in DenseRetriever(view, embedder).retrieve_batch(queries, top_k)
    ]


@pytest.mark.needs_data
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"alpha": 1.0, "max_convergence_rounds": 5},
        {"global_search_levels": [0, 1, 2], "threshold": 0.1},
        {"global_search_levels": [2], "alpha": 0.3},
        {"max_convergence_rounds": None, "query_batch_size": 3},
    ],
)
def test_batch_equals_single(adi, params) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = adi
    retriever = HierarchicalRetriever(store, embedder, **params)
    single = [retriever.retrieve(query, 10) for query in queries]
    assert retriever.retrieve_batch(queries, 10) == single
    for results in single:
        keys = [(-r.score, r.doc_id) for r in results]
        assert keys == sorted(keys) and all(math.isfinite(r.score) for r in results)


@pytest.mark.needs_data
def test_directory_only_search_scores_few_nodes(adi) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = adi
    tree = store.tree
    retriever = HierarchicalRetriever(store, embedder, max_convergence_rounds=1)
    for results in retriever.retrieve_batch(queries, 5):
        stats = results[0].provenance["stats"]
        # every directory is scored by the global search; leaves only under popped directories
        assert tree.n_directories <= stats["nodes_scored"] < len(tree)
        assert stats["nodes_scored_fraction"] == stats["nodes_scored"] / len(tree)
