"""GraphRetriever on hand-made graphs: every score is worked out in the test, for both scoring
modes (hops past the decay list, bidirectional edges, relation filter, cycles, seeds reached
again, first edge vs best path); brute-force oracles on random graphs; scoping; batch == single
on a real corpus; bad input."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrievers import (
    ContextStore,
    DenseRetriever,
    Document,
    Edge,
    EdgeContext,
    RetrievalResult,
    StoreConfig,
    TfidfEmbedder,
)
from retrievers.builders import build_store
from retrievers.graph import GraphParams, GraphRetriever
from retrievers.store.edges import EdgeSet
from viking_eval.data import load_dataset

QUERY = "the query"


class HandEmbedder:
    """Maps each known text to a fixed 2-d vector. The query is (1, 0), so a document's cosine
    with it is the first coordinate, chosen exactly representable in float32."""

    name = "hand"
    dim = 2

    def __init__(self, cosines: dict[str, float]) -> None:
        self.table = {QUERY: [1.0, 0.0]}
        self.table.update({_text(doc_id): [c, math.sqrt(1.0 - c * c)] for doc_id, c in cosines.items()})

    def encode(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        return np.asarray([self.table[text] for text in texts], dtype=np.float32)


def _text(doc_id: str) -> str:
    return f"document {doc_id}{doc_id}"  # words of 2+ letters, so BM25 can index it


def hand_store(
    cosines: dict[str, float], edges: list[Edge], metadata: dict[str, dict[str, str]] | None = None
) -> tuple[ContextStore, HandEmbedder]:
    embedder = HandEmbedder(cosines)
    store = build_store(
        [Document(doc_id, _text(doc_id), metadata=(metadata or {}).get(doc_id, {})) for doc_id in cosines],
        embedder,
        StoreConfig(timestamps=None),
    )
    store = store.with_parts(edges=EdgeSet.from_edges(edges, store.row_of))
    return store, embedder


def walks_only(store: Any, embedder: Any = None, **params: Any) -> GraphRetriever:
    """A graph retriever whose list is the seeds and what the walks found, scored by the seed
    score and the graph bonus alone (``rescore_reached`` and ``vector_fill`` off unless given):
    the scores the hand-worked tests below are written for. The defaults' extra candidates and
    cosines have their own tests (``test_vector_fill_*``)."""
    params.setdefault("rescore_reached", False)
    params.setdefault("vector_fill", False)
    return GraphRetriever(store, embedder, **params)


def scores_of(retriever: GraphRetriever, top_k: int = 100) -> dict[str, float]:
    return {result.doc_id: result.score for result in retriever.retrieve(QUERY, top_k)}


def ranking(retriever: GraphRetriever, top_k: int = 100) -> list[str]:
    return [result.doc_id for result in retriever.retrieve(QUERY, top_k)]


# ----------------------------------------------------------------------------------------------
# a chain longer than the decay list
# ----------------------------------------------------------------------------------------------

CHAIN = {"a": 0.75, "b": 0.125, "c": 0.125, "d": 0.125, "e": 0.125}
CHAIN_EDGES = [
    Edge("a", "b", "r", 1.0),
    Edge("b", "c", "r", 0.5),
    Edge("c", "d", "r", 1.0),
    Edge("d", "e", "r", 1.0),
]


def test_chain_propagated_uses_last_decay_value_past_the_list() -> None:
    store, embedder = hand_store(CHAIN, CHAIN_EDGES)
    retriever = walks_only(store, embedder, seed_top_k=1, max_hops=4, hop_decay=[1.0, 0.8, 0.6])
    # seed a: 0.7 * 0.75; the walk carries 0.75, times each edge weight; hop factor by depth
    assert scores_of(retriever) == pytest.approx(
        {
            "a": 0.7 * 0.75,
            "b": 0.3 * 0.8 * (1.0 * 0.75),  # 0.18
            "c": 0.3 * 0.6 * (0.5 * 1.0 * 0.75),  # 0.0675
            "d": 0.3 * 0.6 * (1.0 * 0.5 * 1.0 * 0.75),  # hop 3: past the list, the last value 0.6
            "e": 0.3 * 0.6 * (1.0 * 1.0 * 0.5 * 1.0 * 0.75),  # hop 4
        }
    )
    assert ranking(retriever) == ["a", "b", "c", "d", "e"]  # c, d, e tie: doc id order
    e = retriever.retrieve(QUERY, 10)[-1]
    assert e.provenance["path"] == (
        EdgeContext("a", "b", "r", 1.0, 1),
        EdgeContext("b", "c", "r", 0.5, 2),
        EdgeContext("c", "d", "r", 1.0, 3),
        EdgeContext("d", "e", "r", 1.0, 4),
    )
    assert e.provenance["found_by"] == "graph" and e.provenance["hop"] == 4 and e.provenance["origin"] == "a"


def test_chain_oasis_uses_constant_half_past_the_list_and_ignores_the_source() -> None:
    store, embedder = hand_store(CHAIN, CHAIN_EDGES)
    retriever = walks_only(
        store, embedder, seed_top_k=1, max_hops=4, hop_decay=[1.0, 0.8, 0.6], scoring="oasis"
    )
    # oasis: graph_weight * edge weight * hop_decay[hop]; 0.5 past the list
    assert scores_of(retriever) == pytest.approx(
        {
            "a": 0.7 * 0.75,
            "b": 0.3 * 1.0 * 0.8,  # 0.24
            "c": 0.3 * 0.5 * 0.6,  # 0.09
            "d": 0.3 * 1.0 * 0.5,  # hop 3: constant 0.5
            "e": 0.3 * 1.0 * 0.5,
        }
    )
    assert ranking(retriever) == ["a", "b", "d", "e", "c"]
    assert retriever.retrieve(QUERY, 10)[2].provenance["path"][-1] == EdgeContext("c", "d", "r", 1.0, 3)


def test_single_decay_factor_means_power_of_the_hop() -> None:
    store, embedder = hand_store(CHAIN, CHAIN_EDGES)
    propagated = walks_only(store, embedder, seed_top_k=1, max_hops=4, hop_decay=0.5)
    assert scores_of(propagated) == pytest.approx(
        {
            "a": 0.525,
            "b": 0.3 * 0.5 * 0.75,
            "c": 0.3 * 0.25 * (0.5 * 0.75),
            "d": 0.3 * 0.125 * (0.5 * 0.75),
            "e": 0.3 * 0.0625 * (0.5 * 0.75),
        }
    )
    oasis = walks_only(store, embedder, seed_top_k=1, max_hops=4, hop_decay=0.5, scoring="oasis")
    assert scores_of(oasis) == pytest.approx(
        {"a": 0.525, "b": 0.3 * 0.5, "c": 0.3 * 0.5 * 0.25, "d": 0.3 * 0.125, "e": 0.3 * 0.0625}
    )
    none = walks_only(store, embedder, seed_top_k=1, max_hops=4, hop_decay=0.0)
    assert scores_of(none) == pytest.approx({"a": 0.525, "b": 0.0, "c": 0.0, "d": 0.0, "e": 0.0})


def test_max_hops_limits_depth_and_zero_is_seed_search() -> None:
    store, embedder = hand_store(CHAIN, CHAIN_EDGES)
    assert ranking(walks_only(store, embedder, seed_top_k=1, max_hops=2)) == ["a", "b", "c"]
    only_seeds = walks_only(store, embedder, seed_top_k=2, max_hops=0)
    results = only_seeds.retrieve(QUERY, 10)
    # seeds a (0.75) and b (0.125; b..e tie, b has the lowest id)
    assert [(r.doc_id, r.score) for r in results] == [
        ("a", pytest.approx(0.525)),
        ("b", pytest.approx(0.0875)),
    ]
    assert results[0].provenance["found_by"] == "seed"
    assert results[0].provenance["stats"]["edges_followed"] == 0


# ----------------------------------------------------------------------------------------------
# best path vs first edge; seeds reached again
# ----------------------------------------------------------------------------------------------

TWO_SEEDS = {"a": 0.875, "b": 0.5, "x": 0.125}
TWO_SEEDS_EDGES = [
    Edge("a", "x", "r", 0.25),  # storage order (src, dst): a->b, a->x, b->a, b->x
    Edge("b", "x", "r", 1.0),
    Edge("b", "a", "r", 1.0),
    Edge("a", "b", "r", 0.5),
]


def test_propagated_takes_the_best_path_and_lets_seeds_gain_a_bonus() -> None:
    store, embedder = hand_store(TWO_SEEDS, TWO_SEEDS_EDGES)
    retriever = walks_only(store, embedder, seed_top_k=2)
    # x, hop 1: from a 0.25 * 0.875 = 0.21875, from b 1.0 * 0.5 = 0.5 -> 0.7 * 0.5 = 0.35;
    #    hop 2: a->b->x 0.5 * 1.0 * 0.875 = 0.4375 -> 0.5 * 0.4375 = 0.21875 (less); bonus 0.35
    # a: from b at hop 1: 0.7 * (1.0 * 0.5) = 0.35; a->b->a started at a itself: no bonus
    # b: from a at hop 1: 0.7 * (0.5 * 0.875) = 0.30625
    assert scores_of(retriever) == pytest.approx(
        {"a": 0.7 * 0.875 + 0.3 * 0.35, "b": 0.7 * 0.5 + 0.3 * 0.30625, "x": 0.3 * 0.35}
    )
    by_id = {r.doc_id: r for r in retriever.retrieve(QUERY, 10)}
    assert by_id["x"].provenance["path"] == (EdgeContext("b", "x", "r", 1.0, 1),)
    assert by_id["a"].provenance["found_by"] == "seed+graph"
    assert by_id["a"].provenance["origin"] == "b"
    assert by_id["a"].provenance["seed_score"] == pytest.approx(0.875)


def test_oasis_keeps_the_first_edge_in_storage_order_and_never_boosts_seeds() -> None:
    store, embedder = hand_store(TWO_SEEDS, TWO_SEEDS_EDGES)
    retriever = walks_only(store, embedder, seed_top_k=2, scoring="oasis")
    # x is first reached by a->x (weight 0.25), although b->x has weight 1.0
    assert scores_of(retriever) == pytest.approx({"a": 0.7 * 0.875, "b": 0.7 * 0.5, "x": 0.3 * 0.25 * 0.7})
    by_id = {r.doc_id: r for r in retriever.retrieve(QUERY, 10)}
    assert by_id["x"].provenance["path"] == (EdgeContext("a", "x", "r", 0.25, 1),)
    assert by_id["a"].provenance["found_by"] == "seed"


# ----------------------------------------------------------------------------------------------
# bidirectional edges and the relation filter
# ----------------------------------------------------------------------------------------------

DIRECTED = {"p": 0.125, "q": 0.125, "r": 0.125, "s": 0.75}
DIRECTED_EDGES = [
    Edge("p", "s", "references", 1.0),
    Edge("s", "q", "similar_to", 0.5),
    Edge("r", "q", "sequence", 1.0),
]


def test_outgoing_only_by_default() -> None:
    store, embedder = hand_store(DIRECTED, DIRECTED_EDGES)
    assert scores_of(walks_only(store, embedder, seed_top_k=1)) == pytest.approx(
        {"s": 0.525, "q": 0.3 * 0.7 * (0.5 * 0.75)}
    )


def test_bidirectional_walks_edges_backwards() -> None:
    store, embedder = hand_store(DIRECTED, DIRECTED_EDGES)
    propagated = walks_only(store, embedder, seed_top_k=1, bidirectional=True)
    assert scores_of(propagated) == pytest.approx(
        {
            "s": 0.525,
            "p": 0.3 * 0.7 * (1.0 * 0.75),  # p->s walked backwards
            "q": 0.3 * 0.7 * (0.5 * 0.75),
            "r": 0.3 * 0.5 * (1.0 * 0.5 * 0.75),  # s->q, then r->q backwards
        }
    )
    by_id = {r.doc_id: r for r in propagated.retrieve(QUERY, 10)}
    assert by_id["p"].provenance["path"] == (EdgeContext("s", "p", "references", 1.0, 1),)
    assert by_id["r"].provenance["path"] == (
        EdgeContext("s", "q", "similar_to", 0.5, 1),
        EdgeContext("q", "r", "sequence", 1.0, 2),
    )
    oasis = walks_only(store, embedder, seed_top_k=1, bidirectional=True, scoring="oasis")
    assert scores_of(oasis) == pytest.approx(
        {"s": 0.525, "q": 0.3 * 0.5 * 0.7, "p": 0.3 * 1.0 * 0.7, "r": 0.3 * 1.0 * 0.5}
    )


def test_relation_filter() -> None:
    store, embedder = hand_store(DIRECTED, DIRECTED_EDGES)
    for scoring in ("propagated", "oasis"):
        both = walks_only(
            store, embedder, seed_top_k=1, bidirectional=True, relation_filter=["references"], scoring=scoring
        )
        assert scores_of(both) == pytest.approx(
            {"s": 0.525, "p": 0.3 * 0.7 * 0.75 ** (scoring == "propagated")}
        )
        forward = walks_only(store, embedder, seed_top_k=1, relation_filter=["references"], scoring=scoring)
        assert ranking(forward) == ["s"]
        two = walks_only(
            store,
            embedder,
            seed_top_k=1,
            bidirectional=True,
            relation_filter=["similar_to", "sequence"],
            scoring=scoring,
        )
        # propagated: q 0.07875 > r 0.05625; oasis: r 0.3 * 1.0 * 0.5 > q 0.3 * 0.5 * 0.7
        assert ranking(two) == (["s", "q", "r"] if scoring == "propagated" else ["s", "r", "q"])


def test_min_traversal_score_skips_weak_edges() -> None:
    store, embedder = hand_store(DIRECTED, DIRECTED_EDGES)
    retriever = walks_only(store, embedder, seed_top_k=1, bidirectional=True, min_traversal_score=0.75)
    assert ranking(retriever) == ["s", "p"]  # s->q (0.5) is not followed, so neither is r


# ----------------------------------------------------------------------------------------------
# cycles
# ----------------------------------------------------------------------------------------------


def test_cycles_terminate_and_give_no_self_bonus() -> None:
    store, embedder = hand_store(
        {"a": 0.75, "b": 0.125, "c": 0.125},
        [Edge("a", "b", "r", 1.0), Edge("b", "c", "r", 1.0), Edge("c", "a", "r", 1.0)],
    )
    propagated = walks_only(store, embedder, seed_top_k=1, max_hops=6, hop_decay=0.5)
    # b: hop 1 (0.5 * 0.75) beats hop 4 (0.0625 * 0.75); c: hop 2; a only returns to itself
    assert scores_of(propagated) == pytest.approx({"a": 0.525, "b": 0.3 * 0.5 * 0.75, "c": 0.3 * 0.25 * 0.75})
    results = propagated.retrieve(QUERY, 10)
    assert results[0].provenance["found_by"] == "seed"
    assert results[0].provenance["stats"]["hops"] == 6  # the walk goes round; max_hops stops it
    oasis = walks_only(store, embedder, seed_top_k=1, max_hops=6, hop_decay=0.5, scoring="oasis")
    assert scores_of(oasis) == pytest.approx({"a": 0.525, "b": 0.3 * 0.5, "c": 0.3 * 0.25})
    assert oasis.retrieve(QUERY, 10)[0].provenance["stats"]["hops"] == 2  # nothing new after hop 2


def test_two_seeds_on_a_two_cycle_boost_each_other_not_themselves() -> None:
    store, embedder = hand_store(
        {"a": 0.75, "b": 0.5, "z": 0.125}, [Edge("a", "b", "r", 1.0), Edge("b", "a", "r", 1.0)]
    )
    retriever = walks_only(store, embedder, seed_top_k=2, max_hops=3, hop_decay=[1.0, 0.5, 0.5])
    # a: from b at hop 1, 0.5 * 0.5 (hop 3, b->a->b->a: 0.5 * 0.5 again, a tie: the shorter walk)
    assert scores_of(retriever) == pytest.approx({"a": 0.525 + 0.3 * 0.25, "b": 0.35 + 0.3 * 0.5 * 0.75})
    assert {r.doc_id: r.provenance["hop"] for r in retriever.retrieve(QUERY, 10)} == {"a": 1, "b": 1}


# ----------------------------------------------------------------------------------------------
# final list: graph_top_k, rescore_reached, max_frontier, no edges, keyword seeds
# ----------------------------------------------------------------------------------------------


CROWDED = {"a": 0.875, "b": 0.75, "c": 0.625, "g": 0.125, "h": 0.125}
CROWDED_EDGES = [Edge("a", "g", "r", 1.0), Edge("a", "h", "r", 0.5)]


def test_graph_top_k_reserves_slots_for_graph_found_documents() -> None:
    store, embedder = hand_store(CROWDED, CROWDED_EDGES)
    plain = walks_only(store, embedder, seed_top_k=3)
    assert ranking(plain, 3) == ["a", "b", "c"]  # seeds crowd the graph-found documents out
    reserved = walks_only(store, embedder, seed_top_k=3, graph_top_k=1)
    results = reserved.retrieve(QUERY, 3)
    assert [r.doc_id for r in results] == ["a", "b", "g"]  # 2 seed slots + the best graph slot
    assert results[2].score == pytest.approx(0.3 * 0.7 * 0.875)
    assert ranking(walks_only(store, embedder, seed_top_k=3, graph_top_k=5), 3) == ["g", "h"]
    # more reserved slots than top_k: still top_k results (the graph-found ones)
    assert ranking(walks_only(store, embedder, seed_top_k=3, graph_top_k=5), 1) == ["g"]


def test_rescore_reached_adds_the_documents_own_similarity() -> None:
    store, embedder = hand_store(CHAIN, CHAIN_EDGES)
    retriever = walks_only(store, embedder, seed_top_k=1, max_hops=1, rescore_reached=True)
    results = retriever.retrieve(QUERY, 10)
    assert [(r.doc_id, r.score) for r in results] == [
        ("a", pytest.approx(0.525)),
        ("b", pytest.approx(0.7 * 0.125 + 0.3 * 0.7 * 0.75)),
    ]
    assert results[1].provenance["similarity"] == pytest.approx(0.125)


# A chain a -> b -> c plus two documents no edge reaches: x (cosine 0.5) and y (0.25).
FILL = {"a": 0.75, "b": 0.125, "c": 0.0, "x": 0.5, "y": 0.25}
FILL_EDGES = [Edge("a", "b", "r", 1.0), Edge("b", "c", "r", 1.0)]


def test_defaults_rescore_reached_and_fill_from_vector_search() -> None:
    store, embedder = hand_store(FILL, FILL_EDGES)
    retriever = GraphRetriever(store, embedder, seed_top_k=1)  # defaults: rescore_reached, vector_fill
    results = retriever.retrieve(QUERY, 3)
    # depth 3: the seed a (0.7 * 0.75) and the vector search's ranks 2-3, x and y (their own
    # cosine); b: its cosine 0.125 plus the hop-1 bonus 0.7 * 0.75 (0.245) passes y (0.175)
    assert [(r.doc_id, r.score) for r in results] == [
        ("a", pytest.approx(0.7 * 0.75)),
        ("x", pytest.approx(0.7 * 0.5)),
        ("b", pytest.approx(0.7 * 0.125 + 0.3 * 0.7 * 0.75)),
    ]
    assert [r.provenance["found_by"] for r in results] == ["seed", "vector", "graph"]
    assert results[1].provenance["similarity"] == pytest.approx(0.5)
    # depth 5 fetches every document from vector search: b and c are also fill rows
    deeper = retriever.retrieve(QUERY, 5)
    assert [(r.doc_id, r.provenance["found_by"]) for r in deeper] == [
        ("a", "seed"),
        ("x", "vector"),
        ("b", "vector+graph"),
        ("y", "vector"),
        ("c", "vector+graph"),
    ]
    assert deeper[4].score == pytest.approx(0.7 * 0.0 + 0.3 * 0.5 * 0.75)


def test_vector_fill_never_drops_a_document_vector_search_ranks_within_the_list() -> None:
    store, embedder = hand_store(FILL, FILL_EDGES)
    dense = [r.doc_id for r in DenseRetriever(store, embedder).retrieve(QUERY, 3)]
    assert dense == ["a", "x", "y"]
    without = walks_only(store, embedder, seed_top_k=1)  # the seed and what the walk found
    assert ranking(without, 3) == ["a", "b", "c"]
    filled = GraphRetriever(store, embedder, seed_top_k=1, rescore_reached=False)
    # graph-found documents (bonus only) fall below the fill's cosines: the dense top 3 stays
    assert ranking(filled, 3) == ["a", "x", "y"]
    assert ranking(filled, 5) == ["a", "x", "b", "y", "c"]


def test_vector_fill_keeps_graph_top_k_for_documents_only_the_walk_found() -> None:
    store, embedder = hand_store(FILL, FILL_EDGES)
    plain = GraphRetriever(store, embedder, seed_top_k=1, rescore_reached=False)
    assert ranking(plain, 3) == ["a", "x", "y"]  # b's bonus 0.1575 < y's 0.175
    reserved = GraphRetriever(store, embedder, seed_top_k=1, graph_top_k=1, rescore_reached=False)
    # one slot kept for the best document only the walk found (b, not a fill row at depth 3)
    assert ranking(reserved, 3) == ["a", "x", "b"]


def test_max_frontier_expands_only_the_best_documents_of_a_hop() -> None:
    store, embedder = hand_store(
        {"s": 0.75, "b": 0.125, "c": 0.125, "d": 0.125, "e": 0.125},
        [
            Edge("s", "b", "r", 1.0),
            Edge("s", "c", "r", 0.5),
            Edge("b", "d", "r", 1.0),
            Edge("c", "e", "r", 1.0),
        ],
    )
    # b 0.3 * 0.7 * 0.75, d 0.3 * 0.5 * 0.75, c 0.3 * 0.7 * 0.375, e 0.3 * 0.5 * 0.375
    assert ranking(walks_only(store, embedder, seed_top_k=1)) == ["s", "b", "d", "c", "e"]
    # one document per hop is expanded: b (carrying 0.75) but not c (0.375), so e is not reached
    assert ranking(walks_only(store, embedder, seed_top_k=1, max_frontier=1)) == ["s", "b", "d", "c"]
    oasis = walks_only(store, embedder, seed_top_k=1, max_frontier=1, scoring="oasis")
    assert ranking(oasis) == ["s", "b", "d", "c"]  # d: 0.3 * 1.0 * 0.5 > c: 0.3 * 0.5 * 0.7


def test_keyword_seeds_are_fused_by_weighted_rrf() -> None:
    embedder = HandEmbedder({"a": 0.875, "b": 0.5, "z": 0.125})
    embedder.table["zebra"] = [1.0, 0.0]
    documents = [Document("a", _text("a")), Document("b", _text("b")), Document("z", "zebra " + _text("z"))]
    embedder.table["zebra " + _text("z")] = embedder.table.pop(_text("z"))
    store = build_store(documents, embedder, StoreConfig(timestamps=None))
    retriever = walks_only(store, embedder, seed_top_k=2, seed_keyword_weight=0.5)
    results = retriever.retrieve("zebra", 10)
    # vector ranks a 1, b 2; BM25 finds only z (rank 1); fused, times 61:
    # a = 0.5/61 * 61 = 0.5, z = 0.5, b = 0.5/62 * 61
    assert [(r.doc_id, r.score) for r in results] == [
        ("a", pytest.approx(0.7 * 0.5)),
        ("z", pytest.approx(0.7 * 0.5)),
        ("b", pytest.approx(0.7 * 0.5 * 61 / 62)),
    ]
    assert [r.provenance["seed_rank"] for r in results] == [1, 2, 3]


# ----------------------------------------------------------------------------------------------
# the kernel's abilities: scope and filters, chunked stores, a reranker
# ----------------------------------------------------------------------------------------------

SCOPE = {"a": 0.75, "o": 0.875, "x": 0.125, "y": 0.125, "z": 0.125}
SCOPE_EDGES = [
    Edge("a", "x", "r", 1.0),
    Edge("x", "y", "r", 1.0),
    Edge("a", "z", "r", 1.0),
    Edge("o", "a", "r", 1.0),
]


@pytest.mark.parametrize("restriction", ["scoped view", "doc_ids filter", "metadata filter"])
def test_seeds_and_traversal_stay_inside_the_scope_and_filters(restriction: str) -> None:
    inside = {"a", "y", "z"}
    shelves = {doc_id: {"shelf": "in" if doc_id in inside else "out"} for doc_id in SCOPE}
    store, embedder = hand_store(SCOPE, SCOPE_EDGES, shelves)  # a store is immutable: metadata at build
    extra: dict[str, object] = {}
    if restriction == "scoped view":
        store = store.restricted(np.asarray([doc_id in inside for doc_id in store.doc_ids]))
    elif restriction == "doc_ids filter":
        extra["filters"] = {"doc_ids": sorted(inside)}
    else:
        extra["filters"] = {"metadata": {"shelf": "in"}}
    for scoring, bidirectional in itertools.product(("propagated", "oasis"), (False, True)):
        retriever = walks_only(
            store, embedder, seed_top_k=1, max_hops=3, scoring=scoring, bidirectional=bidirectional, **extra
        )
        # o (the best match) and x are outside: the seed is a, and y is only reachable through x
        assert ranking(retriever) == ["a", "z"], (scoring, bidirectional)
        assert retriever.retrieve(QUERY, 5)[0].provenance["stats"]["graph_found"] == 1


class ChunkEmbedder(HandEmbedder):
    """A hand embedder keyed by chunk text."""

    def __init__(self, cosines: dict[str, float]) -> None:
        self.table = {QUERY: [1.0, 0.0]}
        self.table.update({text: [c, math.sqrt(1.0 - c * c)] for text, c in cosines.items()})


def chunked_store(edges: list[Edge]) -> tuple[ContextStore, ChunkEmbedder]:
    """Documents A (chunks A#0 "aa aa", A#1 "bb bb"), B ("cc cc") and C ("dd dd"), chunks of two
    words; edges join chunks."""
    embedder = ChunkEmbedder({"aa aa": 0.75, "bb bb": 0.125, "cc cc": 0.125, "dd dd": 0.5})
    documents = [Document("A", "aa aa bb bb"), Document("B", "cc cc"), Document("C", "dd dd")]
    config = StoreConfig.from_dict({"timestamps": None, "chunking": {"size": 2, "overlap": 0}})
    store = build_store(documents, embedder, config)
    assert store.doc_ids == ["A#0", "A#1", "B#0", "C#0"]
    store = store.with_parts(edges=EdgeSet.from_edges(edges, store.row_of))
    return store, embedder


def test_chunked_store_walks_chunks_and_answers_with_documents() -> None:
    store, embedder = chunked_store([Edge("A#0", "B#0", "r", 1.0), Edge("C#0", "A#1", "r", 1.0)])
    retriever = walks_only(store, embedder, seed_top_k=2)
    results = retriever.retrieve(QUERY, 10)
    # seeds A#0 (0.75) and C#0 (0.5); A#0 -> B#0: 0.3 * 0.7 * 0.75; C#0 -> A#1: 0.3 * 0.7 * 0.5,
    # below A's seed chunk, so A scores its best chunk A#0
    assert [(r.doc_id, r.score) for r in results] == [
        ("A", pytest.approx(0.7 * 0.75)),
        ("C", pytest.approx(0.7 * 0.5)),
        ("B", pytest.approx(0.3 * 0.7 * 0.75)),
    ]
    by_id = {r.doc_id: r for r in results}
    assert by_id["A"].provenance["chunk_id"] == "A#0" and by_id["A"].provenance["found_by"] == "seed"
    assert by_id["B"].provenance["chunk_id"] == "B#0" and by_id["B"].provenance["found_by"] == "graph"
    assert by_id["B"].provenance["path"] == (EdgeContext("A#0", "B#0", "r", 1.0, 1),)
    assert by_id["B"].provenance["origin"] == "A#0"
    # graph_top_k counts documents: one slot of two goes to B, the other to the best seed document
    reserved = walks_only(store, embedder, seed_top_k=2, graph_top_k=1)
    assert ranking(reserved, 2) == ["A", "B"]


def test_chunked_store_a_document_is_graph_found_when_its_best_chunk_is() -> None:
    store, embedder = chunked_store([Edge("A#1", "C#0", "r", 1.0), Edge("C#0", "A#0", "r", 1.0)])
    weights = {"seed_top_k": 1, "vector_weight": 0.25, "graph_weight": 1.0}
    assert ranking(walks_only(store, embedder, **weights)) == ["A"]  # no edge leaves the seed A#0
    both = walks_only(store, embedder, bidirectional=True, **weights)
    # backwards from the seed A#0 (0.75): C#0 at hop 1 (0.7 * 0.75), A#1 at hop 2 (0.5 * 0.75),
    # which beats A's seed chunk (0.25 * 0.75): A is found through A#1
    results = both.retrieve(QUERY, 10)
    assert [(r.doc_id, r.score) for r in results] == [
        ("C", pytest.approx(0.7 * 0.75)),
        ("A", pytest.approx(0.5 * 0.75)),
    ]
    assert results[1].provenance["chunk_id"] == "A#1" and results[1].provenance["found_by"] == "graph"
    assert results[1].provenance["path"] == (
        EdgeContext("A#0", "C#0", "r", 1.0, 1),
        EdgeContext("C#0", "A#1", "r", 1.0, 2),
    )
    # so with one of two slots reserved for graph-found documents, the seed slot has no document
    reserved = walks_only(store, embedder, bidirectional=True, graph_top_k=1, **weights)
    assert ranking(reserved, 2) == ["C"]


class PrefersLast:
    """Scores candidates by their doc id, last letter best; records what it saw."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        self.seen.append([c.doc_id for c in candidates])
        return [float(ord(c.doc_id)) for c in candidates]


class Broken:
    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        raise RuntimeError("reranker down")


def test_reranker_sees_the_graph_selection_and_records_the_graph_score() -> None:
    store, embedder = hand_store(CROWDED, CROWDED_EDGES)
    reranker = PrefersLast()
    retriever = walks_only(store, embedder, seed_top_k=3, graph_top_k=1, reranker=reranker, rerank_depth=3)
    results = retriever.retrieve(QUERY, 2)
    # the pool of 3: two seed slots (a, b) and the reserved graph slot (g), in score order
    assert reranker.seen == [["a", "b", "g"]]
    assert [(r.doc_id, r.score) for r in results] == [("g", float(ord("g"))), ("b", float(ord("b")))]
    assert results[0].provenance["pre_rerank_score"] == pytest.approx(0.3 * 0.7 * 0.875)
    assert results[0].provenance["found_by"] == "graph" and results[0].provenance["rerank_fallback"] is None
    assert results[0].provenance["path"] == (EdgeContext("a", "g", "r", 1.0, 1),)
    failing = walks_only(store, embedder, seed_top_k=3, graph_top_k=1, reranker=Broken())
    kept = failing.retrieve(QUERY, 2)
    assert [(r.doc_id, r.score) for r in kept] == [
        ("a", pytest.approx(0.7 * 0.875)),
        ("g", pytest.approx(0.3 * 0.7 * 0.875)),
    ]
    assert all("reranker down" in r.provenance["rerank_fallback"] for r in kept)


# ----------------------------------------------------------------------------------------------
# oracles on random graphs
# ----------------------------------------------------------------------------------------------


def _random_case(seed: int) -> tuple[dict[str, float], list[Edge]]:
    rng = random.Random(seed)
    ids = [f"n{i}" for i in range(8)]
    cosines = {doc_id: rng.choice([0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875]) for doc_id in ids}
    edges = []
    for _ in range(rng.randint(6, 18)):
        src, dst = rng.sample(ids, 2)
        edges.append(Edge(src, dst, rng.choice(["r1", "r2"]), rng.choice([0.25, 0.5, 0.75, 1.0])))
    return cosines, edges


def _adjacency(
    store: ContextStore, bidirectional: bool, relations: set[str] | None, min_weight: float
) -> dict[str, list[tuple[str, float]]]:
    assert store.edges is not None
    adjacency: dict[str, list[tuple[str, float]]] = {doc_id: [] for doc_id in store.doc_ids}
    for edge in store.edges.to_edges(store.doc_ids):
        if (relations is not None and edge.relation not in relations) or edge.weight < min_weight:
            continue
        adjacency[edge.src].append((edge.dst, edge.weight))
        if bidirectional:
            adjacency[edge.dst].append((edge.src, edge.weight))
    return adjacency


def brute_force_propagated(
    store: ContextStore, seeds: dict[str, float], params: GraphParams
) -> dict[str, float]:
    """Enumerate every walk of 1..max_hops edges from every seed: bonus(v) is the best
    hop_factor(h) * (product of weights) * max(seed score, 0) over walks from a seed other than v."""
    adjacency = _adjacency(
        store,
        params.bidirectional,
        None if params.relation_filter is None else set(params.relation_filter),
        params.min_traversal_score,
    )
    bonus: dict[str, float] = {}

    def walk(origin: str, node: str, value: float, hop: int) -> None:
        if hop == params.max_hops:
            return
        for neighbour, weight in adjacency[node]:
            carried = value * weight
            if neighbour != origin:
                candidate = params.hop_factor(hop + 1) * carried
                bonus[neighbour] = max(bonus.get(neighbour, -1.0), candidate)
            walk(origin, neighbour, carried, hop + 1)

    for seed, score in seeds.items():
        walk(seed, seed, max(score, 0.0), 0)
    candidates = set(seeds) | set(bonus)
    return {
        doc_id: params.vector_weight * seeds.get(doc_id, 0.0) + params.graph_weight * bonus.get(doc_id, 0.0)
        for doc_id in candidates
    }


def reference_oasis(store: ContextStore, seeds: dict[str, float], params: GraphParams) -> dict[str, float]:
    """A line-by-line transcription of oasis's loop (rag/retriever.go): storage-ordered edges of
    the frontier (outgoing, then incoming when bidirectional), a visited set seeded with the
    seeds, the first edge wins, 0.5 past the decay list."""
    assert store.edges is not None
    stored = store.edges.to_edges(store.doc_ids)  # storage order
    relations = None if params.relation_filter is None else set(params.relation_filter)
    best = {doc_id: params.vector_weight * score for doc_id, score in seeds.items()}
    visited = set(seeds)
    current = list(seeds)
    for hop in range(1, params.max_hops + 1):
        decay = params.hop_factor(hop)
        frontier = set(current)
        hop_edges = [edge for edge in stored if edge.src in frontier]
        if params.bidirectional:
            hop_edges += [edge for edge in stored if edge.dst in frontier]
        next_ids = []
        for edge in hop_edges:
            if relations is not None and edge.relation not in relations:
                continue
            if edge.weight < params.min_traversal_score:
                continue
            neighbour = edge.dst
            if neighbour in visited:
                neighbour = edge.src
                if neighbour in visited:
                    continue
            visited.add(neighbour)
            best[neighbour] = params.graph_weight * edge.weight * decay
            next_ids.append(neighbour)
        current = next_ids
        if not current:
            break
    return best


def vector_seeds(store: ContextStore, embedder: HandEmbedder, k: int) -> dict[str, float]:
    scores, rows = store.vectors.search(embedder.encode([QUERY], kind="query"), k)[0]
    return {store.doc_ids[row]: float(score) for score, row in zip(scores, rows, strict=True)}


@pytest.mark.parametrize("case", range(40))
def test_propagated_equals_brute_force_over_walks(case: int) -> None:
    cosines, edges = _random_case(case)
    store, embedder = hand_store(cosines, edges)
    rng = random.Random(1000 + case)
    params = dict(
        seed_top_k=rng.randint(1, 4),
        max_hops=rng.randint(1, 3),
        bidirectional=rng.random() < 0.5,
        relation_filter=rng.choice([None, ["r1"], ["r1", "r2"]]),
        min_traversal_score=rng.choice([0.0, 0.5]),
        hop_decay=rng.choice([(1.0, 0.7, 0.5), 0.6, (1.0, 0.25, 0.9)]),
    )
    retriever = walks_only(store, embedder, **params)  # type: ignore[arg-type]
    seeds = vector_seeds(store, embedder, params["seed_top_k"])  # type: ignore[arg-type]
    assert scores_of(retriever) == pytest.approx(
        brute_force_propagated(store, seeds, retriever.params), abs=1e-12
    )


@pytest.mark.parametrize("case", range(40))
def test_oasis_equals_a_transcription_of_its_loop(case: int) -> None:
    cosines, edges = _random_case(case)
    store, embedder = hand_store(cosines, edges)
    rng = random.Random(2000 + case)
    params = dict(
        seed_top_k=rng.randint(1, 4),
        max_hops=rng.randint(1, 4),
        bidirectional=rng.random() < 0.5,
        relation_filter=rng.choice([None, ["r2"]]),
        min_traversal_score=rng.choice([0.0, 0.5]),
        hop_decay=rng.choice([(1.0, 0.7, 0.5), (1.0, 0.9)]),
        scoring="oasis",
    )
    retriever = walks_only(store, embedder, **params)  # type: ignore[arg-type]
    seeds = vector_seeds(store, embedder, params["seed_top_k"])  # type: ignore[arg-type]
    assert scores_of(retriever) == pytest.approx(reference_oasis(store, seeds, retriever.params), abs=1e-12)


# ----------------------------------------------------------------------------------------------
# real corpus: batch == single, no edges == vector search, provenance
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cisi(shared_datasets: Path):  # type: ignore[no-untyped-def]
    dataset = load_dataset(str(shared_datasets / "cisi"), "test")
    documents = sorted(dataset.corpus.values(), key=lambda doc: doc.id)
    embedder = TfidfEmbedder(dim=64, seed=0).fit([doc.full_text for doc in documents])
    config = StoreConfig.from_dict({"edges": {"references": {"fields": ["xrefs"]}}})
    store = build_store(documents, embedder, config)
    return store, embedder, [query.text for query in dataset.queries.values()][:40]


@pytest.mark.needs_data
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"scoring": "oasis"},
        {"bidirectional": True, "max_hops": 3, "hop_decay": 0.7},
        {"scoring": "oasis", "bidirectional": True, "max_hops": 3},
        {"seed_keyword_weight": 0.3, "graph_top_k": 20, "max_frontier": 50},
        {"seed_keyword_weight": 0.3, "scoring": "oasis", "rescore_reached": True},
        {"query_batch_size": 7, "rescore_reached": True},
    ],
)
def test_batch_equals_single(cisi, params: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = cisi
    retriever = walks_only(store, embedder, **params)  # type: ignore[arg-type]
    batch = retriever.retrieve_batch(queries, 50)
    assert batch == [retriever.retrieve(query, 50) for query in queries]
    for results in batch:
        keys = [(-r.score, r.doc_id) for r in results]
        assert keys == sorted(keys) and all(math.isfinite(r.score) for r in results)
        assert len({r.doc_id for r in results}) == len(results)


@pytest.mark.needs_data
def test_provenance_and_stats_on_a_real_corpus(cisi) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = cisi
    results = walks_only(store, embedder).retrieve(queries[0], 100)
    stats = results[0].provenance["stats"]
    assert set(stats) == {"seeds", "edges_scanned", "edges_followed", "nodes_reached", "graph_found", "hops"}
    assert stats["seeds"] == 10 and stats["edges_followed"] > 0 and stats["hops"] == 2
    assert all(r.provenance["stats"] is stats for r in results)
    graph_found = [r for r in results if r.provenance["found_by"] == "graph"]
    assert len(graph_found) == 90
    for result in graph_found:
        path = result.provenance["path"]
        assert 1 <= len(path) <= 2 and path[-1].dst == result.doc_id
        assert all(step.relation == "references" and step.hop == i for i, step in enumerate(path, 1))
        assert path[0].src == result.provenance["origin"]


@pytest.mark.needs_data
def test_without_edges_it_is_vector_search_over_the_seeds(cisi) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = cisi
    bare = ContextStore(
        store.documents,
        store.embeddings,
        store.bm25,
        embedder_name=store.embedder_name,
        config=StoreConfig(timestamps=None),
    )
    dense = DenseRetriever(bare, embedder)
    for edges in (None, EdgeSet.from_edges([], bare.row_of)):
        bare = bare.with_parts(edges=edges)
        retriever = walks_only(bare, embedder, seed_top_k=15, relation_filter=["references"])
        for query in queries[:5]:
            got = retriever.retrieve(query, 100)
            expected = dense.retrieve(query, 15)
            assert [r.doc_id for r in got] == [r.doc_id for r in expected]
            assert [r.score for r in got] == pytest.approx([0.7 * r.score for r in expected])


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_hops": -1}, r"^max_hops must be an integer in \[0, 10\], got -1$"),
        ({"max_hops": 11}, r"^max_hops must be an integer in \[0, 10\], got 11$"),
        ({"hop_decay": [1.0, 1.5]}, r"^hop_decay\[1\] must be a number in \[0, 1\], got 1.5$"),
        ({"hop_decay": [1.0, -0.1]}, r"^hop_decay\[1\] must be a number in \[0, 1\], got -0.1$"),
        ({"hop_decay": [1.0, float("nan")]}, r"^hop_decay\[1\] must be a number in \[0, 1\], got nan$"),
        ({"hop_decay": 1.2}, r"^hop_decay must be a number in \[0, 1\], got 1.2$"),
        ({"hop_decay": []}, r"^hop_decay must not be empty$"),
        ({"hop_decay": "0.5"}, r"^hop_decay must be a number or a list, got '0.5'$"),
        ({"scoring": "best"}, r"^scoring must be one of \['propagated', 'oasis'\], got 'best'$"),
        ({"seed_top_k": 0}, r"^seed_top_k must be an integer in \[1, 10000000\], got 0$"),
        ({"seed_keyword_weight": 1.5}, r"^seed_keyword_weight must be a number in \[0, 1\], got 1.5$"),
        ({"vector_weight": -1}, r"^vector_weight must be a number in \[0, 1\], got -1$"),
        (
            {"min_traversal_score": float("nan")},
            r"^min_traversal_score must be a number in \[0, 1\], got nan$",
        ),
        ({"graph_top_k": -2}, r"^graph_top_k must be an integer in \[0, 10000000\], got -2$"),
        ({"max_frontier": 2.5}, r"^max_frontier must be an integer in \[0, 10000000\], got 2.5$"),
        ({"relation_filter": "references"}, r"^relation_filter must be a list or null, got 'references'$"),
        ({"relation_filter": []}, r"^relation_filter must not be empty$"),
        (
            {"relation_filter": ["references", ""]},
            r"^relation_filter\[1\] must be a non-empty string, got ''$",
        ),
        ({"bidirectional": "yes"}, r"^bidirectional must be true or false, got 'yes'$"),
        ({"max_hops": True}, r"^max_hops must be an integer in \[0, 10\], got True$"),
        ({"query_batch_size": 0}, r"^query_batch_size must be an integer in \[1, 65536\], got 0$"),
    ],
)
def test_bad_parameters(params: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GraphParams(**params)  # type: ignore[arg-type]
    store, embedder = hand_store(CHAIN, CHAIN_EDGES)
    with pytest.raises(ValueError, match=message):
        walks_only(store, embedder, **params)


def test_bad_input_at_construction() -> None:
    store, embedder = hand_store(CHAIN, CHAIN_EDGES)
    with pytest.raises(
        ValueError,
        match=r"^relation_filter names relation\(s\) \['cites'\] that the store's edges do not have; they have \['r'\]$",
    ):
        walks_only(store, embedder, relation_filter=["cites"])
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['hops'\]; allowed: \[.*'max_hops'"):
        walks_only(store, embedder, hops=3)
    with pytest.raises(ValueError, match="reranker must be null or an object with a rerank"):
        walks_only(store, embedder, reranker="cross-encoder")
    other = TfidfEmbedder(dim=2).fit(["alpha beta", "beta gamma", "gamma delta"])
    with pytest.raises(ValueError, match="not the one the store was built with"):
        walks_only(store, other)
    with pytest.raises(ValueError, match="GraphRetriever needs an embedder"):
        walks_only(store, None)


def test_params_accept_config_lists_and_normalise_them() -> None:
    params = GraphParams(hop_decay=[1, 0.5], relation_filter=["b", "a", "b"])
    assert params.hop_decay == (1.0, 0.5) and params.relation_filter == ("a", "b")
    assert GraphParams(hop_decay=1).hop_decay == 1.0
    assert [GraphParams().hop_factor(hop) for hop in (1, 2, 3, 4)] == [0.7, 0.5, 0.5, 0.5]
    assert [GraphParams(hop_decay=[1.0, 0.8, 0.6]).hop_factor(h) for h in (3, 5)] == [0.6, 0.6]
    assert GraphParams(hop_decay=[1.0, 0.8, 0.6], scoring="oasis").hop_factor(3) == 0.5
