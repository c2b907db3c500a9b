"""Edges: the CSR edge set (sorting, deduplication, validation, save/load), each builder on a tiny
corpus with the expected edges written out, bad input, the store round trip and CISI's citations."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from retrievers import ContextStore, Document, Edge, StoreConfig, TfidfEmbedder
from retrievers.edges import (
    EdgeConfig,
    EdgeSet,
    MentionEdgeConfig,
    ReferenceEdgeConfig,
    SequenceEdgeConfig,
    SimilarityEdgeConfig,
    build_edges,
)


def triples(edge_set: EdgeSet, doc_ids: list[str]) -> list[tuple[str, str, str, float]]:
    return [(e.src, e.dst, e.relation, e.weight) for e in edge_set.to_edges(doc_ids)]


# ----------------------------------------------------------------------------------------------
# EdgeSet
# ----------------------------------------------------------------------------------------------


def test_from_arrays_sorts_into_csr_merges_repeats_and_drops_self_loops() -> None:
    edge_set = EdgeSet.from_arrays(
        4,
        src=[2, 0, 0, 2, 1, 0, 3],
        dst=[0, 3, 1, 0, 1, 1, 0],
        weight=[0.5, 1.0, 0.25, 0.75, 1.0, 0.5, 0.125],
        relation=[0, 0, 1, 0, 0, 1, 0],
        relation_names=["a", "b"],
    )
    # 2->0 (a) twice: the larger weight 0.75 stays; 0->1 (b) twice: 0.5 stays; 1->1 is a loop
    assert edge_set.indptr.tolist() == [0, 2, 2, 3, 4]
    assert edge_set.dst.tolist() == [1, 3, 0, 0]
    assert edge_set.weight.tolist() == [0.5, 1.0, 0.75, 0.125]
    assert edge_set.relation.tolist() == [1, 0, 0, 0]
    assert edge_set.src.tolist() == [0, 0, 2, 3]
    assert edge_set.report["dropped"] == {"a.duplicate": 1, "a.self_loop": 1, "b.duplicate": 1}
    assert edge_set.report["by_relation"] == {"a": 3, "b": 1}
    in_indptr, in_edges = edge_set.incoming()
    assert in_indptr.tolist() == [0, 2, 3, 3, 4]  # row 0 is entered by edges 2 and 3, row 1 by 0
    assert in_edges.tolist() == [2, 3, 0, 1]


def test_two_relations_between_the_same_documents_are_two_edges() -> None:
    edge_set = EdgeSet.from_edges(
        [Edge("x", "y", "references", 1.0), Edge("x", "y", "similar_to", 0.5)], {"x": 0, "y": 1}
    )
    assert triples(edge_set, ["x", "y"]) == [("x", "y", "references", 1.0), ("x", "y", "similar_to", 0.5)]


def test_edges_to_unknown_ids_are_dropped_counted_and_reported() -> None:
    edge_set = EdgeSet.from_edges(
        [
            Edge("a", "b", "references"),
            Edge("a", "ghost", "references"),
            Edge("nobody", "a", "references"),
            Edge("b", "ghost", "mentions", 0.5),
        ],
        {"a": 0, "b": 1},
    )
    assert triples(edge_set, ["a", "b"]) == [("a", "b", "references", 1.0)]
    assert edge_set.report["dropped"] == {"mentions.unknown_id": 1, "references.unknown_id": 2}
    assert edge_set.report["examples"]["references.unknown_id"] == [
        "a -> ghost ('ghost' is not a document)",
        "nobody -> a ('nobody' is not a document)",
    ]


@pytest.mark.parametrize("weight", [-0.5, 1.5, float("nan"), float("inf")])
def test_weights_outside_zero_one_are_errors(weight: float) -> None:
    with pytest.raises(ValueError, match=r"edge weights must be finite numbers in \[0, 1\]; 1 are not"):
        EdgeSet.from_arrays(2, [0], [1], [weight], [0], ["r"])


def test_negative_weight_in_an_edge_value_is_refused() -> None:
    with pytest.raises(ValueError, match=r"Edge weight must be finite and >= 0, got -1\.0"):
        Edge("a", "b", "references", -1.0)
    with pytest.raises(ValueError, match=r"edge weights must be finite numbers in \[0, 1\]"):
        EdgeSet.from_edges([Edge("a", "b", "references", 2.0)], {"a": 0, "b": 1})


def test_bad_arrays_are_errors() -> None:
    with pytest.raises(ValueError, match=r"dst holds rows outside \[0, 2\)"):
        EdgeSet.from_arrays(2, [0], [2], [1.0], [0], ["r"])
    with pytest.raises(ValueError, match="relation ids must index relation_names"):
        EdgeSet.from_arrays(2, [0], [1], [1.0], [1], ["r"])
    with pytest.raises(ValueError, match="one length"):
        EdgeSet.from_arrays(2, [0, 1], [1], [1.0], [0], ["r"])
    with pytest.raises(ValueError, match="indptr must rise from 0"):
        EdgeSet(np.array([0, 2, 1]), np.array([1]), np.array([1.0]), np.array([0]), ["r"])
    with pytest.raises(ValueError, match="relation names repeat"):
        EdgeSet(np.array([0, 0]), np.array([], int), np.array([]), np.array([], int), ["r", "r"])


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    edge_set = EdgeSet.from_edges(
        [Edge("a", "b", "references"), Edge("b", "c", "sequence", 0.5), Edge("a", "zz", "references")],
        {"a": 0, "b": 1, "c": 2},
    )
    edge_set.save(tmp_path / "edges")
    loaded = EdgeSet.load(tmp_path / "edges", n_nodes=3)
    assert triples(loaded, ["a", "b", "c"]) == triples(edge_set, ["a", "b", "c"])
    assert loaded.report == edge_set.report
    assert isinstance(loaded.dst, np.memmap)
    assert sorted(path.name for path in (tmp_path / "edges").iterdir()) == [
        "dst.npy",
        "edges.json",
        "indptr.npy",
        "relation.npy",
        "weight.npy",
    ]
    with pytest.raises(ValueError, match="edges cover 3 rows, the store has 4"):
        EdgeSet.load(tmp_path / "edges", n_nodes=4)
    with pytest.raises(ValueError, match=r"missing edges\.json"):
        EdgeSet.load(tmp_path)


# ----------------------------------------------------------------------------------------------
# builders
# ----------------------------------------------------------------------------------------------


def test_references_from_scalars_lists_and_lists_of_lists() -> None:
    documents = [
        Document("1", "one", metadata={"xrefs": [[2, 5, 1], [3, 1, 1], [1, 5, 1], [2, 1, 1], [99, 1, 1]]}),
        Document("2", "two", metadata={"cites": "3", "xrefs": []}),
        Document("3", "three", metadata={"cites": ["1", 2.0, 2.5, None]}),
    ]
    config = EdgeConfig(references=ReferenceEdgeConfig(fields=("xrefs", "cites"), id_index=0))
    edge_set = build_edges(documents, None, config)
    assert triples(edge_set, ["1", "2", "3"]) == [
        ("1", "2", "references", 1.0),
        ("1", "3", "references", 1.0),
        ("2", "3", "references", 1.0),
        ("3", "1", "references", 1.0),
        ("3", "2", "references", 1.0),
    ]
    assert edge_set.report["dropped"] == {
        "references.bad_value": 2,  # 2.5 and None name no document id
        "references.duplicate": 1,  # 1 -> 2 twice
        "references.self_loop": 1,  # 1 -> 1
        "references.unknown_id": 1,  # 1 -> 99
    }
    assert edge_set.report["examples"]["references.unknown_id"] == ["1 -> '99'"]
    assert edge_set.report["candidates"] == {"references": 7}


def test_parent_links_with_another_relation_name() -> None:
    documents = [Document("c1", "child", metadata={"parent_id": "p"}), Document("p", "parent")]
    config = EdgeConfig(references=ReferenceEdgeConfig(fields=("parent_id",), relation="part_of", weight=0.5))
    assert triples(build_edges(documents, None, config), ["c1", "p"]) == [("c1", "p", "part_of", 0.5)]


def test_sequence_within_groups_in_order() -> None:
    documents = sorted(
        [
            Document("x-3", "t", metadata={"conversation": "x", "session": 1, "turn_index": 10}),
            Document("x-1", "t", metadata={"conversation": "x", "session": 1, "turn_index": 2}),
            Document("x-2", "t", metadata={"conversation": "x", "session": 1, "turn_index": "9"}),
            Document("x-9", "t", metadata={"conversation": "x", "session": 2, "turn_index": 0}),
            Document("y-1", "t", metadata={"conversation": "y", "session": 1, "turn_index": 0}),
            Document("y-2", "t", metadata={"conversation": "y", "session": 1, "turn_index": 0}),
            Document("y-3", "t", metadata={"conversation": "y", "session": 1}),
            Document("z-1", "t", metadata={"session": 1, "turn_index": 0}),
        ],
        key=lambda doc: doc.id,
    )
    doc_ids = [doc.id for doc in documents]
    config = EdgeConfig(
        sequence=SequenceEdgeConfig(group_keys=("conversation", "session"), order_key="turn_index")
    )
    edge_set = build_edges(documents, None, config)
    # numbers (and numeric strings) in numeric order: 2 < "9" < 10; ties by doc id; one-turn
    # sessions link nothing; sessions are not chained to each other
    assert triples(edge_set, doc_ids) == [
        ("x-1", "x-2", "sequence", 1.0),
        ("x-2", "x-3", "sequence", 1.0),
        ("y-1", "y-2", "sequence", 1.0),
    ]
    assert edge_set.report["dropped"] == {"sequence.missing_key": 1, "sequence.missing_order_key": 1}
    assert edge_set.report["examples"] == {
        "sequence.missing_key": ["z-1"],
        "sequence.missing_order_key": ["y-3"],
    }
    whole = build_edges(documents, None, EdgeConfig(sequence=SequenceEdgeConfig(weight=0.5)))
    assert [(src, dst) for src, dst, _, _ in triples(whole, doc_ids)] == list(itertools.pairwise(doc_ids))


def test_similarity_knn_with_threshold_and_groups() -> None:
    documents = [
        Document("a", "t", metadata={"g": 1}),
        Document("b", "t", metadata={"g": 1}),
        Document("c", "t", metadata={"g": 2}),
        Document("d", "t", metadata={"g": 1}),
    ]
    # unit vectors: cos(a, b) = 0.8, cos(a, c) = 0.6, cos(a, d) = 0, cos(b, c) = 0.96, cos(b, d) = 0.6, cos(c, d) = 0.8
    vectors = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    edge_set = build_edges(documents, vectors, EdgeConfig(similar_to=SimilarityEdgeConfig(k=1, min_sim=0.7)))
    got = {(src, dst): weight for src, dst, _, weight in triples(edge_set, ["a", "b", "c", "d"])}
    assert got.keys() == {("a", "b"), ("b", "c"), ("c", "b"), ("d", "c")}
    assert got[("b", "c")] == pytest.approx(0.96)
    grouped = build_edges(
        documents, vectors, EdgeConfig(similar_to=SimilarityEdgeConfig(k=2, min_sim=0.5, same_keys=("g",)))
    )
    # group 1 is {a, b, d}: a -> b (0.8); b -> a (0.8), b -> d (0.6); d -> b (0.6); c is alone
    assert [(s, d) for s, d, _, _ in triples(grouped, ["a", "b", "c", "d"])] == [
        ("a", "b"),
        ("b", "a"),
        ("b", "d"),
        ("d", "b"),
    ]


def test_similarity_ties_go_to_the_lower_doc_id() -> None:
    documents = [Document(doc_id, "t") for doc_id in "abc"]
    vectors = np.array([[1.0, 0.0], [0.6, 0.8], [0.6, -0.8]], dtype=np.float32)
    edge_set = build_edges(documents, vectors, EdgeConfig(similar_to=SimilarityEdgeConfig(k=1, min_sim=0.0)))
    assert ("a", "b") in [(s, d) for s, d, _, _ in triples(edge_set, ["a", "b", "c"])]


def test_mentions_link_documents_sharing_rare_terms_with_a_fanout_cap() -> None:
    documents = [
        Document("1", "zanzibar cloves harvest festival"),
        Document("2", "zanzibar cloves export prices"),
        Document("3", "quantum harvest festival"),
        Document("4", "common words only here"),
        Document("5", "common words again here"),
        Document("6", "common words third here"),
    ]
    config = EdgeConfig(mentions=MentionEdgeConfig(terms_per_doc=4, max_fanout=2))
    edge_set = build_edges(documents, None, config)
    got = {(s, d): w for s, d, _, w in triples(edge_set, [doc.id for doc in documents])}
    # 1-2 share "zanzibar" and "clove" (stemmed), 1-3 share "harvest" and "festiv"; "common",
    # "word" and "here" are in the top terms of 3 documents, over the fan-out cap of 2
    assert got == {
        ("1", "2"): pytest.approx(2 / 4),
        ("2", "1"): pytest.approx(2 / 4),
        ("1", "3"): pytest.approx(2 / 4),
        ("3", "1"): pytest.approx(2 / 4),
    }
    assert edge_set.report["dropped"] == {"mentions.terms_over_fanout": 3}
    strict = build_edges(
        documents, None, EdgeConfig(mentions=MentionEdgeConfig(terms_per_doc=4, max_fanout=2, min_shared=3))
    )
    assert strict.n_edges == 0


def test_builders_combine_and_extra_edges_are_merged() -> None:
    documents = [Document("a", "t", metadata={"refs": ["b"]}), Document("b", "t"), Document("c", "t")]
    config = EdgeConfig(references=ReferenceEdgeConfig(fields=("refs",)), sequence=SequenceEdgeConfig())
    edge_set = build_edges(
        documents, None, config, extra_edges=[Edge("c", "a", "contradicts", 0.25), Edge("c", "q", "x")]
    )
    assert triples(edge_set, ["a", "b", "c"]) == [
        ("a", "b", "sequence", 1.0),
        ("a", "b", "references", 1.0),
        ("b", "c", "sequence", 1.0),
        ("c", "a", "contradicts", 0.25),
    ]
    assert edge_set.report["dropped"] == {"x.unknown_id": 1}
    assert build_edges(documents, None, EdgeConfig()).n_edges == 0
    with pytest.raises(ValueError, match="similar_to edges need the store embeddings"):
        build_edges(documents, None, EdgeConfig(similar_to=SimilarityEdgeConfig()))


# ----------------------------------------------------------------------------------------------
# configuration and the store
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"citations": {}},
            r"unknown store.edges builder\(s\) \['citations'\]; allowed: \['similar_to', 'sequence', 'references', 'mentions'\]",
        ),
        ({"similar_to": {"k": 0}}, r"edges.similar_to.k must be an integer in \[1, 1000\], got 0"),
        ({"similar_to": {"min_sim": 1.5}}, r"edges.similar_to.min_sim must be a number in \[0, 1\]"),
        ({"similar_to": {"neighbours": 3}}, r"unknown store.edges.similar_to key\(s\) \['neighbours'\]"),
        ({"similar_to": {"same_keys": "conversation"}}, "must be a list of metadata keys"),
        ({"sequence": {"weight": -1}}, r"edges.sequence.weight must be a number in \[0, 1\]"),
        ({"references": {"fields": []}}, "must name at least one metadata key"),
        ({"references": {"id_index": -1}}, r"id_index must be an integer in \[0, 100\]"),
        ({"mentions": {"max_fanout": 1}}, r"max_fanout must be an integer in \[2, 100000\]"),
        ({"mentions": {"terms_per_doc": 2, "min_shared": 3}}, r"min_shared must be an integer in \[1, 2\]"),
        ([1, 2], "store.edges must be a mapping"),
    ],
)
def test_bad_edge_config(values: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EdgeConfig.from_dict(values)


def test_store_builds_saves_loads_and_scopes_edges(tmp_path: Path) -> None:
    documents = [
        Document("a", "alpha beta", metadata={"refs": ["b", "gone"], "conv": "1"}),
        Document("b", "beta gamma", metadata={"conv": "1"}),
        Document("c", "gamma delta alpha", metadata={"conv": "2"}),
    ]
    config = StoreConfig.from_dict(
        {"edges": {"references": {"fields": ["refs"]}, "similar_to": {"k": 2, "min_sim": 0.0}}}
    )
    assert StoreConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    embedder = TfidfEmbedder(dim=2).fit([doc.full_text for doc in documents])
    store = ContextStore.build(documents, embedder, config)
    assert store.edges is not None and store.edges.report["dropped"] == {"references.unknown_id": 1}
    assert store.build_seconds["edges"] >= 0
    store.save(tmp_path / "store")
    loaded = ContextStore.load(tmp_path / "store")
    assert loaded.edges is not None
    assert triples(loaded.edges, loaded.doc_ids) == triples(store.edges, store.doc_ids)
    assert loaded.config == store.config
    view = loaded.restricted(loaded.metadata_mask("conv", "1"))
    assert view.edges is loaded.edges  # views share every component
    assert ContextStore.build(documents, embedder, StoreConfig()).edges is None


def test_cisi_citations(shared_datasets: Path) -> None:
    from viking_eval.data import load_dataset

    dataset = load_dataset(str(shared_datasets / "cisi"), "test")
    documents = sorted(dataset.corpus.values(), key=lambda doc: doc.id)
    edge_set = build_edges(
        documents, None, EdgeConfig(references=ReferenceEdgeConfig(fields=("xrefs",), id_index=0))
    )
    # 80,321 xref entries: 1,550 name their own document, 1,427 repeat a link; all ids are known
    assert edge_set.report["candidates"] == {"references": 80321}
    assert edge_set.report["dropped"] == {"references.duplicate": 1427, "references.self_loop": 1550}
    assert edge_set.n_edges == 77344
    # CISI's links are symmetric: every edge has its reverse
    pairs = set(zip(edge_set.src.tolist(), edge_set.dst.tolist(), strict=True))
    assert all((dst, src) in pairs for src, dst in pairs)
