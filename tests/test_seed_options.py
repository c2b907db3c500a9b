"""The seed behaviours added as options (issue 23), each on a small store with scores worked out by
hand: Memory-Arc's semantic similarity threshold, CONVERSATIONAL intent, importance default and
keyword rules (retrievers/multi_strategy/), and oasis's documented score blend (retrievers/graph/,
``rescore_reached`` with ``scoring: oasis``), also through the two seed presets' files."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from retrievers import ContextStore, Document, StoreConfig
from retrievers.builders import build_store
from retrievers.graph import GraphRetriever
from retrievers.multi_strategy import MultiStrategyRetriever, QueryAnalyzer
from retrievers.params import ParamError
from retrievers.store.edges import EdgeSet
from retrievers.types import Edge

REPO = Path(__file__).resolve().parents[1]
QUERY = "zzz qqq"


class TableEmbedder:
    """Each known text -> a fixed 2-d unit vector; the query is (1, 0), so a document's cosine
    with it is its first coordinate (0.75, 0.5, 0.25: exact in float32)."""

    name = "table"
    dim = 2

    def __init__(self, cosines: dict[str, float]) -> None:
        self.table = {QUERY: [1.0, 0.0]}
        self.table.update({text: [c, math.sqrt(1.0 - c * c)] for text, c in cosines.items()})

    def encode(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        return np.asarray([self.table[text] for text in texts], dtype=np.float32)


TEXTS = {"a": "alpha qqq", "b": "beta", "c": "gamma qqq zzz"}
COSINES = {"a": 0.75, "b": 0.5, "c": 0.25}


EMBEDDER = TableEmbedder({TEXTS[doc_id]: c for doc_id, c in COSINES.items()})


def small_store(metadata: dict[str, dict[str, Any]] | None = None) -> ContextStore:
    documents = [
        Document(doc_id, TEXTS[doc_id], metadata=(metadata or {}).get(doc_id, {})) for doc_id in TEXTS
    ]
    return build_store(documents, EMBEDDER, StoreConfig(timestamps=None))


def semantic_only(**params: Any) -> dict[str, Any]:
    rows = {"FACTUAL", "TEMPORAL", "CODE", "PREFERENCE", "MIXED"}
    return {
        "weights": {intent: {"semantic": 1.0} for intent in rows},
        "strategies": ["semantic"],
        "fusion": "weighted_average",  # one strategy, weight 1: the raw cosine
        **params,
    }


def scores(results: Sequence[Any]) -> list[tuple[str, float]]:
    return [(r.doc_id, r.score) for r in results]


# -- Memory-Arc: the semantic strategy's similarity threshold --------------------------------------


def test_semantic_min_score_drops_hits_below_it_and_keeps_equal_ones() -> None:
    store = small_store()
    everything = MultiStrategyRetriever(store, EMBEDDER, **semantic_only())
    assert scores(everything.retrieve(QUERY, 10)) == [("a", 0.75), ("b", 0.5), ("c", 0.25)]
    threshold = MultiStrategyRetriever(store, EMBEDDER, **semantic_only(semantic_min_score=0.5))
    assert scores(threshold.retrieve(QUERY, 10)) == [("a", 0.75), ("b", 0.5)]  # >= 0.5 kept
    stricter = MultiStrategyRetriever(store, EMBEDDER, **semantic_only(semantic_min_score=0.6))
    assert scores(stricter.retrieve(QUERY, 10)) == [("a", 0.75)]


# -- Memory-Arc: keywords longer than 2 letters, at most 10 -----------------------------------------


def test_keyword_rules() -> None:
    query = "an ox ate big red apples quickly"
    assert QueryAnalyzer().keywords(query) == ("ox", "ate", "big", "red", "apples", "quickly")
    assert QueryAnalyzer(keyword_min_length=3).keywords(query) == ("ate", "big", "red", "apples", "quickly")
    assert QueryAnalyzer(keyword_min_length=3, max_keywords=2).keywords(query) == ("ate", "big")
    twelve = " ".join(f"word{chr(97 + i)}" for i in range(12))
    assert len(QueryAnalyzer(max_keywords=10).keywords(twelve)) == 10
    assert QueryAnalyzer(max_keywords=10).keywords(twelve)[-1] == "wordj"


# -- Memory-Arc: importance read as 5 when a memory has none ----------------------------------------


def test_default_importance_in_the_seed_fulltext_score() -> None:
    store = small_store({"a": {"importance": 9}})
    params = {
        "weights": {i: {"fulltext": 1.0} for i in ("FACTUAL", "TEMPORAL", "CODE", "PREFERENCE", "MIXED")},
        "strategies": ["fulltext"],
        "fulltext_scoring": "seed",
        "fusion": "weighted_average",
    }
    # keywords zzz, qqq: a matches 1 of 2, c both; a has importance 9, c none
    zero = MultiStrategyRetriever(store, None, **params)
    assert scores(zero.retrieve(QUERY, 10)) == [
        ("a", pytest.approx(0.5 * 0.6 + 0.9 * 0.4, abs=1e-12)),  # 0.66
        ("c", pytest.approx(1.0 * 0.6 + 0.0, abs=1e-12)),  # 0.6
    ]
    five = MultiStrategyRetriever(store, None, **params, default_importance=5.0)
    assert scores(five.retrieve(QUERY, 10)) == [
        ("c", pytest.approx(1.0 * 0.6 + 0.5 * 0.4, abs=1e-12)),  # 0.8
        ("a", pytest.approx(0.5 * 0.6 + 0.9 * 0.4, abs=1e-12)),  # 0.66: its own importance stays
    ]


# -- Memory-Arc: CONVERSATIONAL, the intent of a query no pattern matches ---------------------------


def test_conversational_default_intent_runs_its_row() -> None:
    store = small_store()
    weights = {i: {"semantic": 1.0} for i in ("FACTUAL", "TEMPORAL", "CODE", "PREFERENCE", "MIXED")}
    weights["CONVERSATIONAL"] = {"semantic": 1.0, "fulltext": 0.6}
    retriever = MultiStrategyRetriever(
        store,
        EMBEDDER,
        weights=weights,
        default_intent="CONVERSATIONAL",
        fulltext_scoring="seed",
        default_importance=5.0,
        fusion="weighted_average",
    )
    results = retriever.retrieve(QUERY, 10)  # no rule fires on "zzz qqq"
    assert {r.provenance["intent"] for r in results} == {"CONVERSATIONAL"}
    # semantic x 1.0: a 0.75, b 0.5, c 0.25; full-text x 0.6: a (1/2 * 0.6 + 0.2) 0.5 -> 0.3,
    # c (2/2 * 0.6 + 0.2) 0.8 -> 0.48; two strategies: mean + 0.1
    assert scores(results) == [
        ("a", pytest.approx((0.75 + 0.3) / 2 + 0.1, abs=1e-12)),  # 0.625
        ("b", pytest.approx(0.5, abs=1e-12)),
        ("c", pytest.approx((0.25 + 0.48) / 2 + 0.1, abs=1e-12)),  # 0.465
    ]


def test_conversational_needs_a_weights_row() -> None:
    store = small_store()
    with pytest.raises(ParamError, match=r"weights.*CONVERSATIONAL"):
        MultiStrategyRetriever(
            store,
            EMBEDDER,
            default_intent="CONVERSATIONAL",
            weights={i: {"semantic": 1.0} for i in ("FACTUAL", "TEMPORAL", "CODE", "PREFERENCE", "MIXED")},
        )


def preset(name: str) -> dict[str, Any]:
    params = yaml.safe_load((REPO / "conf" / "retriever" / f"{name}.yaml").read_text())
    params.pop("_target_")
    return dict(params)


def test_memory_arc_preset_applies_the_threshold_and_conversational() -> None:
    store = small_store()
    retriever = MultiStrategyRetriever(store, EMBEDDER, **preset("memory_arc"))
    results = retriever.retrieve(QUERY, 10)
    # CONVERSATIONAL: semantic (cosine >= 0.5: a, b) + full-text x 0.6 (importance 5 for all)
    assert {r.provenance["intent"] for r in results} == {"CONVERSATIONAL"}
    assert scores(results) == [
        ("a", pytest.approx((0.75 + 0.3) / 2 + 0.1, abs=1e-12)),
        ("b", pytest.approx(0.5, abs=1e-12)),
        ("c", pytest.approx(0.48, abs=1e-12)),  # under the threshold: full-text alone
    ]


# -- oasis: score = vector_weight * vectorScore + graph_weight * hopDecay * edgeWeight -------------

GRAPH_COSINES = {"s": 0.75, "g": 0.5, "h": 0.25}


def graph_store() -> tuple[ContextStore, TableEmbedder]:
    texts = {doc_id: f"document {doc_id}{doc_id}" for doc_id in GRAPH_COSINES}
    embedder = TableEmbedder({texts[d]: c for d, c in GRAPH_COSINES.items()})
    store = build_store(
        [Document(d, texts[d]) for d in GRAPH_COSINES], embedder, StoreConfig(timestamps=None)
    )
    edges = [Edge("s", "g", "r", 0.5), Edge("g", "h", "r", 1.0)]
    store.edges = EdgeSet.from_edges(edges, store.row_of)
    return store, embedder


def test_oasis_blend_and_bonus_only_by_hand() -> None:
    store, embedder = graph_store()
    common = {"seed_top_k": 1, "scoring": "oasis", "vector_fill": False}
    # s is the one seed; g at hop 1 (decay 0.7, edge 0.5), h at hop 2 (decay 0.5, edge 1.0)
    bonus_only = GraphRetriever(store, embedder, **common, rescore_reached=False)
    assert scores(bonus_only.retrieve(QUERY, 10)) == [
        ("s", pytest.approx(0.7 * 0.75, abs=1e-9)),  # 0.525
        ("h", pytest.approx(0.3 * 0.5 * 1.0, abs=1e-9)),  # 0.15
        ("g", pytest.approx(0.3 * 0.7 * 0.5, abs=1e-9)),  # 0.105
    ]
    blend = GraphRetriever(store, embedder, **common, rescore_reached=True)
    assert scores(blend.retrieve(QUERY, 10)) == [
        ("s", pytest.approx(0.7 * 0.75, abs=1e-9)),  # 0.525
        ("g", pytest.approx(0.7 * 0.5 + 0.3 * 0.7 * 0.5, abs=1e-9)),  # 0.455
        ("h", pytest.approx(0.7 * 0.25 + 0.3 * 0.5 * 1.0, abs=1e-9)),  # 0.325
    ]


def test_oasis_graph_preset_uses_the_documented_blend() -> None:
    store, embedder = graph_store()
    params = preset("oasis_graph")
    params["seed_top_k"] = 1
    retriever = GraphRetriever(store, embedder, **params)
    assert scores(retriever.retrieve(QUERY, 10)) == [
        ("s", pytest.approx(0.525, abs=1e-9)),
        ("g", pytest.approx(0.455, abs=1e-9)),
        ("h", pytest.approx(0.325, abs=1e-9)),
    ]
