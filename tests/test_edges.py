"""Edges: the CSR edge set (sorting, deduplication, validation, save/load), each builder on a tiny
corpus with the expected edges written out, bad input, the store round trip and CISI's citations."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import memory_mapped
from http_servers import ChatServer, unreachable_url

from retrievers import ContextStore, Document, Edge, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.builders.edges import build_edges
from retrievers.store.edge_config import (
    EdgeConfig,
    LLMEdgeConfig,
    MentionEdgeConfig,
    ReferenceEdgeConfig,
    SequenceEdgeConfig,
    SimilarityEdgeConfig,
)
from retrievers.store.edges import EdgeSet


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
    assert memory_mapped(loaded.dst) and type(loaded.dst) is np.ndarray
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
            r"unknown store.edges key\(s\) \['citations'\]; allowed: \['similar_to', 'sequence', 'references', 'mentions', 'llm'\]",
        ),
        ({"similar_to": {"k": 0}}, r"edges.similar_to.k must be an integer in \[1, 1000\], got 0"),
        ({"similar_to": {"min_sim": 1.5}}, r"edges.similar_to.min_sim must be a number in \[0, 1\]"),
        ({"similar_to": {"neighbours": 3}}, r"unknown store.edges.similar_to key\(s\) \['neighbours'\]"),
        (
            {"similar_to": {"same_keys": "conversation"}},
            "store.edges.similar_to.same_keys must be a list, got 'conversation'",
        ),
        ({"sequence": {"weight": -1}}, r"edges.sequence.weight must be a number in \[0, 1\]"),
        ({"references": {"fields": []}}, "store.edges.references.fields must not be empty"),
        ({"references": {"id_index": -1}}, r"id_index must be an integer in \[0, 100\]"),
        ({"mentions": {"max_fanout": 1}}, r"max_fanout must be an integer in \[2, 100000\]"),
        (
            {"mentions": {"terms_per_doc": 2, "min_shared": 3}},
            r"min_shared must be an integer in \[1, terms_per_doc\] = \[1, 2\], got 3",
        ),
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
    store = build_store(documents, embedder, config)
    assert store.edges is not None and store.edges.report["dropped"] == {"references.unknown_id": 1}
    assert store.build_seconds["edges"] >= 0
    store.save(tmp_path / "store")
    loaded = ContextStore.load(tmp_path / "store")
    assert loaded.edges is not None
    assert triples(loaded.edges, loaded.doc_ids) == triples(store.edges, store.doc_ids)
    assert loaded.config == store.config
    view = loaded.restricted(loaded.metadata_mask("conv", "1"))
    assert view.edges is loaded.edges  # views share every component
    assert build_store(documents, embedder, StoreConfig()).edges is None


@pytest.mark.needs_data
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


# ----------------------------------------------------------------------------------------------
# LLM-extracted edges, against a local OpenAI-compatible server
# ----------------------------------------------------------------------------------------------

LLM_DOCS = [
    Document(doc_id, f"{word} passage")
    for doc_id, word in zip("abcde", ("alpha", "beta", "gamma", "delta", "epsilon"), strict=True)
]


def batch_ids(body: dict[str, Any]) -> list[str]:
    """The document ids a request lists, in order (``[id]: text`` lines)."""
    return re.findall(r"^\[([^\]]+)\]: ", body["messages"][1]["content"], flags=re.MULTILINE)


def edges_reply(body: dict[str, Any], mode: str) -> str:
    """For a batch [x, y, ...]: x elaborates y (0.8), y references x (0.3), and one edge of each
    kind the builder must drop; a batch holding ``fail_on`` gets prose instead of JSON."""
    ids = batch_ids(body)
    if mode.startswith("fail_on:") and mode.split(":", 1)[1] in ids:
        return "I could not find any relationships, sorry."
    x, y = ids[0], ids[1]
    edges = [
        {"source": x, "target": y, "relation": "elaborates", "weight": 0.8},
        {"source": y, "target": x, "relation": "references", "weight": 0.3},
        {"source": x, "target": "zzz", "relation": "references", "weight": 0.9},  # not in the batch
        {"source": x, "target": x, "relation": "similar_to", "weight": 0.9},  # itself
        {"source": y, "target": x, "relation": "likes", "weight": 0.9},  # not a relation
        {"source": y, "target": x, "relation": "similar_to", "weight": 1.5},  # weight outside (0, 1]
        {"source": y, "target": x, "relation": "caused_by", "weight": 0.05},  # under min_weight
        "not an edge",
    ]
    return "```json\n" + json.dumps({"edges": edges}) + "\n```"


@pytest.fixture
def llm_server(chat_server_factory: Callable[..., ChatServer]) -> ChatServer:
    return chat_server_factory(edges_reply)


def llm_config(server_url: str, **overrides: Any) -> EdgeConfig:
    return EdgeConfig.from_dict(
        {
            "llm": {
                "base_url": server_url,
                "model": "edge-model",
                "batch_size": 2,
                "min_weight": 0.1,
                **overrides,
            }
        }
    )


def test_llm_edges_in_sequential_batches_with_every_bad_edge_dropped_and_counted(
    llm_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_EDGE_KEY", "k-123")
    edge_set = build_edges(LLM_DOCS, None, llm_config(llm_server.url, api_key_env="TEST_EDGE_KEY", workers=2))
    # batches of 2 in store order; the lone last document joins the one before it: [d, e]
    assert sorted(batch_ids(r["body"]) for r in llm_server.requests) == [["a", "b"], ["c", "d"], ["d", "e"]]
    assert triples(edge_set, [d.id for d in LLM_DOCS]) == [
        ("a", "b", "elaborates", pytest.approx(0.8)),
        ("b", "a", "references", pytest.approx(0.3)),
        ("c", "d", "elaborates", pytest.approx(0.8)),
        ("d", "c", "references", pytest.approx(0.3)),
        ("d", "e", "elaborates", pytest.approx(0.8)),
        ("e", "d", "references", pytest.approx(0.3)),
    ]
    assert edge_set.report["dropped"] == {
        "llm.bad_edge": 3,
        "llm.bad_relation": 3,
        "llm.bad_weight": 3,
        "llm.below_min_weight": 3,
        "llm.self_link": 3,
        "llm.unknown_id": 3,
    }
    request = llm_server.requests[0]
    assert request["headers"]["Authorization"] == "Bearer k-123"
    assert request["body"]["model"] == "edge-model" and request["body"]["temperature"] == 0.0
    system = request["body"]["messages"][0]["content"]
    assert "- caused_by: A is a consequence of B" in system and '{"edges": [' in system
    first = next(r for r in llm_server.requests if batch_ids(r["body"]) == ["a", "b"])
    assert first["body"]["messages"][1]["content"] == "[a]: alpha passage\n[b]: beta passage"


def test_llm_relations_subset_the_prompt_and_the_edges(llm_server: ChatServer) -> None:
    edge_set = build_edges(LLM_DOCS[:2], None, llm_config(llm_server.url, relations=["references"]))
    assert triples(edge_set, ["a", "b"]) == [("b", "a", "references", pytest.approx(0.3))]
    system = llm_server.requests[0]["body"]["messages"][0]["content"]
    assert "- references:" in system and "elaborates" not in system
    # elaborates, likes, caused_by, and similar_to (relations are checked before weights)
    assert edge_set.report["dropped"]["llm.bad_relation"] == 4


def test_llm_neighbour_batches_follow_the_embeddings(llm_server: ChatServer) -> None:
    # a and d point the same way, b and e, c alone between: each batch is a row and its nearest
    angles = {"a": 0.0, "b": 1.2, "c": 0.7, "d": 0.1, "e": 1.3}
    vectors = np.asarray([[np.cos(angles[d.id]), np.sin(angles[d.id])] for d in LLM_DOCS], dtype=np.float32)
    edge_set = build_edges(LLM_DOCS, vectors, llm_config(llm_server.url, batching="neighbours"))
    assert sorted(batch_ids(r["body"]) for r in llm_server.requests) == [
        ["a", "d"],
        ["b", "e"],
        ["c", "b"],  # 0.7: 0.5 to b, 0.6 to d
        ["d", "a"],
        ["e", "b"],
    ]
    assert ("c", "b", "elaborates", pytest.approx(0.8)) in triples(edge_set, [d.id for d in LLM_DOCS])
    with pytest.raises(ValueError, match="batching=neighbours needs the store embeddings"):
        build_edges(LLM_DOCS, None, llm_config(llm_server.url, batching="neighbours"))


def test_llm_max_edges_per_doc_keeps_the_strongest(chat_server_factory: Callable[..., ChatServer]) -> None:
    def fan_out(body: dict[str, Any], mode: str) -> str:
        x, *others = batch_ids(body)
        return json.dumps(
            {
                "edges": [
                    {"source": x, "target": o, "relation": "similar_to", "weight": w}
                    for o, w in zip(others, (0.2, 0.9, 0.5), strict=False)
                ]
            }
        )

    server = chat_server_factory(fan_out)
    edge_set = build_edges(LLM_DOCS[:4], None, llm_config(server.url, batch_size=4, max_edges_per_doc=2))
    assert triples(edge_set, ["a", "b", "c", "d"]) == [
        ("a", "c", "similar_to", pytest.approx(0.9)),
        ("a", "d", "similar_to", pytest.approx(0.5)),
    ]
    assert edge_set.report["dropped"] == {"llm.over_max_edges_per_doc": 1}


def test_llm_failed_batches_are_skipped_and_counted_up_to_the_limit(llm_server: ChatServer) -> None:
    llm_server.mode = "fail_on:c"  # the batch [c, d] answers in prose
    edge_set = build_edges(LLM_DOCS, None, llm_config(llm_server.url, max_failed_fraction=0.5))
    assert [t[:2] for t in triples(edge_set, [d.id for d in LLM_DOCS])] == [
        ("a", "b"),
        ("b", "a"),
        ("d", "e"),
        ("e", "d"),
    ]
    assert edge_set.report["dropped"]["llm.failed_batch"] == 1
    assert edge_set.report["examples"]["llm.failed_batch"] == [
        "batch 1: answer is not JSON: 'I could not find any relationships, sorry.'"
    ]
    # one failure of three batches is more than the default limit (10%): nothing is built
    with pytest.raises(
        RuntimeError, match=r"failed for 1 of 3 batches, more than edges.llm.max_failed_fraction=0.1"
    ):
        build_edges(LLM_DOCS, None, llm_config(llm_server.url))


@pytest.mark.parametrize("mode", ["error", "not_json", "not_chat", "slow"])
def test_llm_server_failures_stop_the_build(llm_server: ChatServer, mode: str) -> None:
    llm_server.mode = mode
    with pytest.raises(RuntimeError, match=r"failed for 3 of 3 batches, .*\(first: batch 0: "):
        build_edges(LLM_DOCS, None, llm_config(llm_server.url, timeout_s=0.2))


def test_llm_unreachable_server_stops_the_build_and_caches_nothing(tmp_path: Path) -> None:
    config = StoreConfig.from_dict(
        {"edges": {"llm": {"base_url": unreachable_url(), "model": "m", "timeout_s": 2}}}
    )
    embedder = TfidfEmbedder(dim=2).fit([doc.full_text for doc in LLM_DOCS])
    with pytest.raises(RuntimeError, match="cannot reach"):
        build_store(LLM_DOCS, embedder, config)


def test_llm_edges_in_the_store_round_trip(llm_server: ChatServer, tmp_path: Path) -> None:
    config = StoreConfig.from_dict(
        {"edges": {"llm": {"base_url": llm_server.url, "model": "m", "batch_size": 2, "min_weight": 0.1}}}
    )
    assert config.to_dict()["edges"]["llm"]["model"] == "m"  # LLM settings are part of the store key
    assert StoreConfig.from_dict({"edges": {"sequence": {}}}).to_dict()["edges"]["llm"] is None
    assert StoreConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    embedder = TfidfEmbedder(dim=2).fit([doc.full_text for doc in LLM_DOCS])
    store = build_store(LLM_DOCS, embedder, config)
    store.save(tmp_path / "store")
    loaded = ContextStore.load(tmp_path / "store")
    assert loaded.edges is not None and loaded.edges.relation_counts() == {"elaborates": 3, "references": 3}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"model": "m"}, "missing 1 required positional argument: 'base_url'"),
        ({"base_url": "ftp://x", "model": "m"}, "base_url must be an http"),
        ({"base_url": "http://x", "model": ""}, "model must be a non-empty string"),
        (
            {"base_url": "http://x", "model": "m", "timeout_s": 0},
            r"timeout_s must be a number in \(0, 600\], got 0",
        ),
        (
            {"base_url": "http://x", "model": "m", "batch_size": 1},
            r"batch_size must be an integer in \[2, 50\]",
        ),
        (
            {"base_url": "http://x", "model": "m", "batching": "random"},
            r"batching must be one of \['sequential', 'neighbours'\], got 'random'",
        ),
        (
            {"base_url": "http://x", "model": "m", "relations": ["likes"]},
            r"relations\[0\] must be one of \['references', .*got 'likes'",
        ),
        (
            {"base_url": "http://x", "model": "m", "relations": "references"},
            "relations must be a list, got 'references'",
        ),
        ({"base_url": "http://x", "model": "m", "min_weight": 2}, r"min_weight must be a number in \[0, 1\]"),
        ({"base_url": "http://x", "model": "m", "workers": 0}, r"workers must be an integer in \[1, 64\]"),
        (
            {"base_url": "http://x", "model": "m", "prompt": "x"},
            r"unknown store.edges.llm key\(s\) \['prompt'\]",
        ),
    ],
)
def test_bad_llm_edge_config(values: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        EdgeConfig.from_dict({"llm": values})


def test_llm_edge_defaults_are_oasis_batches_and_relations() -> None:
    config = LLMEdgeConfig("http://x", "m")
    assert (config.batch_size, config.batching, config.min_weight, config.max_edges_per_doc) == (
        5,
        "sequential",
        0.0,
        0,
    )
    assert config.relations == (
        "references",
        "elaborates",
        "depends_on",
        "contradicts",
        "part_of",
        "similar_to",
        "sequence",
        "caused_by",
    )
