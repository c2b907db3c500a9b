"""MultiStrategyRetriever: hand-computed fusion, every strategy alone on a small corpus with
timestamps and code metadata, scoping and filters, chunked stores, a reranker, failure and
time-out handling, batch == single, bad input."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrievers import BM25Retriever, ChunkingConfig, ContextStore, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.fusion import consensus_fuse
from retrievers.multi_strategy import (
    DEFAULT_WEIGHTS,
    MultiStrategyParams,
    MultiStrategyRetriever,
    QueryAnalysis,
    QueryContext,
)
from retrievers.params import ParamError
from viking_eval.data import load_dataset

DAY = 86400.0


def ts(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


class AxisEmbedder:
    """One dimension per word of a small vocabulary (counts, L2-normalised): cosines are easy to
    compute by hand. Texts without any of the words get an all-zero row."""

    WORDS = ("hiking", "coffee", "config", "file", "pottery", "paint")

    def __init__(self) -> None:
        self.name = "axis:" + ",".join(self.WORDS)
        self.dim = len(self.WORDS)

    def encode(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        rows = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            tokens = text.lower().replace(",", " ").replace("?", " ").split()
            for j, word in enumerate(self.WORDS):
                rows[i, j] = tokens.count(word)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return np.where(norms > 0, rows / np.where(norms > 0, norms, 1), 0).astype(np.float32)


DOCS = [
    Document(
        "c1",
        "def parse_config(path): load the config file",
        metadata={"func_name": "parse_config", "path": "src/config/loader.py"},
    ),
    Document("c2", "def is_read_only(path): check the file mode", metadata={"func_name": "is_read_only"}),
    Document("c3", "class HttpClient: request config", metadata={"symbol": "HttpClient"}),
    Document("h1", "Went hiking in the Alps", metadata={"timestamp": "2023-01-10T00:00:00Z"}),
    Document("h2", "hiking again, then coffee", metadata={"session_date_time": "1:56 pm on 8 May, 2023"}),
    Document("h3", "hiking trip report", metadata={"timestamp": "2023-06-01"}),
    Document("n1", "Bought new paint brushes", metadata={"timestamp": "2023-06-30"}),
    Document(
        "p1", "User prefers coffee black", metadata={"timestamp": 1675209600, "importance": 9}
    ),  # 2023-02-01
]
REFERENCE = ts(2023, 6, 30)  # the latest time in the store (n1)


@pytest.fixture(scope="module")
def store() -> ContextStore:
    return build_store(DOCS, AxisEmbedder())


def only(strategy: str, **params: object) -> dict[str, object]:
    """Parameters for a retriever that runs just ``strategy`` for every intent."""
    return {
        "weights": {intent: {strategy: 1.0} for intent in DEFAULT_WEIGHTS},
        "strategies": [strategy],
        **params,
    }


def ids(results: Sequence[object]) -> list[str]:
    return [result.doc_id for result in results]  # type: ignore[attr-defined]


# -- fusion, by hand -----------------------------------------------------------------------------


def test_seed_consensus_example() -> None:
    # retrievers.fusion.consensus_fuse, the seed design's formula this family fuses with:
    # mean(0.85, 0.72, 0.68) = 0.75, plus 0.1 * (3 - 1) = 0.95
    assert consensus_fuse([0.85, 0.72, 0.68], 0.1) == pytest.approx(0.95, abs=1e-12)
    assert consensus_fuse([0.9, 0.8], 0.3) == 1.0  # 0.85 + 0.3 is capped at 1
    assert consensus_fuse([0.4], 0.5) == 0.4  # one strategy: no boost
    with pytest.raises(ValueError, match="at least one"):
        consensus_fuse([], 0.1)


class FixedStrategy:
    """A strategy returning fixed (scores, rows) for every query."""

    def __init__(self, name: str, rows: list[int], scores: list[float]) -> None:
        self.name = name
        self.rows = np.asarray(rows, dtype=np.int64)
        self.scores = np.asarray(scores, dtype=np.float64)

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        return None

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(self.scores[:depth], self.rows[:depth]) for _ in contexts]


def test_seed_example_through_the_retriever(store: ContextStore) -> None:
    # rows: 0 c1, 1 c2, ...; each strategy finds c2 (row 1) at 0.85 / 0.72 / 0.68 of its best (c1)
    weights = {intent: {"semantic": 1.0, "structural": 1.0, "fulltext": 1.0} for intent in DEFAULT_WEIGHTS}
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), weights=weights, normalization="max")
    retriever.strategies["semantic"] = FixedStrategy("semantic", [0, 1], [1.0, 0.85])
    retriever.strategies["structural"] = FixedStrategy("structural", [0, 1], [10.0, 7.2])
    retriever.strategies["fulltext"] = FixedStrategy("fulltext", [0, 1], [2.0, 1.36])
    results = retriever.retrieve("Who is Caroline?", 5)
    assert ids(results) == ["c1", "c2"]
    assert results[0].score == 1.0  # min(1 + 0.2, 1)
    assert results[1].score == pytest.approx(0.95, abs=1e-12)
    provenance = results[1].provenance
    assert provenance["n_strategies"] == 3 and provenance["intent"] == "FACTUAL"
    assert provenance["strategies"]["structural"] == {
        "rank": 2,
        "score": 7.2,
        "normalized": pytest.approx(0.72),
        "weight": 1.0,
    }


def test_weights_and_minmax_by_hand(store: ContextStore) -> None:
    # FACTUAL: semantic 1.0, fulltext 0.9 (max weight 1.0)
    retriever = MultiStrategyRetriever(store, AxisEmbedder())
    retriever.strategies["semantic"] = FixedStrategy("semantic", [0, 1, 2], [0.9, 0.6, 0.3])  # -> 1, .5, 0
    retriever.strategies["fulltext"] = FixedStrategy("fulltext", [1, 3], [8.0, 4.0])  # -> 1, 0
    results = retriever.retrieve("Who is Caroline?", 10)
    # c1: 1.0; c2: mean(0.5, 0.9 * 1) + 0.1 = 0.8; c3: 0; h1: 0.9 * 0 = 0 (ties: doc id)
    assert [(r.doc_id, round(r.score, 12)) for r in results] == [
        ("c1", 1.0),
        ("c2", 0.8),
        ("c3", 0.0),
        ("h1", 0.0),
    ]
    # weights above 1 cannot inflate: TEMPORAL has temporal 1.2 -> temporal counts 1, semantic 1/1.2
    retriever.strategies["temporal"] = FixedStrategy("temporal", [4], [0.5])
    results = retriever.retrieve("When did I go out?", 10)
    assert results[0].doc_id == "h2" and results[0].score == 1.0  # one strategy, normalised 1, weight 1.2/1.2
    assert results[1].score == pytest.approx(1 / 1.2)  # c1: semantic 1.0 * 1.0/1.2


def test_rrf_fusion_by_hand(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), fusion="rrf", rrf_k=10)
    retriever.strategies["semantic"] = FixedStrategy("semantic", [0, 1], [0.9, 0.6])
    retriever.strategies["fulltext"] = FixedStrategy("fulltext", [1], [3.0])
    results = retriever.retrieve("Who is Caroline?", 10)
    assert [(r.doc_id, r.score) for r in results] == [
        ("c2", pytest.approx(1 / 12 + 0.9 / 11)),
        ("c1", pytest.approx(1 / 11)),
    ]


def test_max_fusion_by_hand(store: ContextStore) -> None:
    # FACTUAL: semantic 1.0, fulltext 0.9; normalised (minmax) and weighted as in the test above
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), fusion="max", consensus_boost=0.05)
    retriever.strategies["semantic"] = FixedStrategy("semantic", [0, 1, 2], [0.9, 0.6, 0.3])  # -> 1, .5, 0
    retriever.strategies["fulltext"] = FixedStrategy("fulltext", [2, 1], [8.0, 4.0])  # -> 1, 0
    results = retriever.retrieve("Who is Caroline?", 10)
    # c1: 1.0; c2: max(0.5, 0.9 * 0) + 0.05 = 0.55 (the mean would give 0.25 + 0.05: fulltext's low
    # score no longer drags it down); c3: max(0, 0.9 * 1) + 0.05 = 0.95
    assert [(r.doc_id, round(r.score, 12)) for r in results] == [("c1", 1.0), ("c3", 0.95), ("c2", 0.55)]


def test_weighted_average_fusion_is_the_seeds_raw_fusion(store: ContextStore) -> None:
    # TEMPORAL: semantic 1.0, temporal 1.2; raw scores times raw weights, no normalisation
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), fusion="weighted_average")
    retriever.strategies["semantic"] = FixedStrategy("semantic", [0, 1], [0.9, 0.6])
    retriever.strategies["temporal"] = FixedStrategy("temporal", [1, 4], [0.5, 0.95])
    results = retriever.retrieve("When did I go out?", 10)
    assert [(r.doc_id, r.score) for r in results] == [
        ("h2", pytest.approx(0.95 * 1.2)),  # temporal alone: 1.14, above 1 (not capped)
        ("c1", pytest.approx(0.9)),  # semantic alone
        ("c2", pytest.approx((0.6 + 0.5 * 1.2) / 2 + 0.1)),  # both: mean + boost
    ]


def chained(store: ContextStore) -> ContextStore:
    """The module's documents with sequence edges c1 -> c2 -> c3 (a new store)."""
    from retrievers.store.edges import EdgeSet
    from retrievers.types import Edge

    built = build_store(DOCS, AxisEmbedder())
    built = built.with_parts(
        edges=EdgeSet.from_edges(
            [Edge("c1", "c2", "sequence", 1.0, ""), Edge("c2", "c3", "sequence", 1.0, "")], built.row_of
        )
    )
    return built


def test_context_weight_adds_the_best_neighbours_fused_score(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(chained(store), AxisEmbedder(), context_weight=0.5)
    retriever.strategies["semantic"] = FixedStrategy("semantic", [0, 1], [0.9, 0.6])  # -> 1, 0
    retriever.strategies["fulltext"] = FixedStrategy("fulltext", [0], [3.0])  # -> 1 x 0.9
    results = retriever.retrieve("Who is Caroline?", 10)
    # fused: c1 = min(mean(1, 0.9) + 0.1, 1) = 1.0, c2 = 0; context: c2 + 0.5 x c1, c3 (after c2,
    # found by no strategy) joins with 0.5 x c2's own 0
    assert [(r.doc_id, r.score) for r in results] == [
        ("c1", pytest.approx(1.0)),
        ("c2", pytest.approx(0.5)),
        ("c3", pytest.approx(0.0)),
    ]
    assert results[1].provenance["own_score"] == 0.0 and results[1].provenance["context_boost"] == 1.0
    assert (
        results[2].provenance["strategies"] == {}
        and results[0].provenance["stats"]["context_candidates"] == 1
    )
    with pytest.raises(ValueError, match="needs a store with edges"):
        MultiStrategyRetriever(store, AxisEmbedder(), context_weight=0.5)


# -- each strategy alone -------------------------------------------------------------------------


def test_semantic_alone_is_dense_search(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), **only("semantic"))  # type: ignore[arg-type]
    results = retriever.retrieve("coffee", 3)
    # cos: p1 = 1, h2 = 1/sqrt(2) (hiking + coffee); the rest 0 -> minmax over the 8 candidates
    assert ids(results) == ["p1", "h2", "c1"]
    assert [r.score for r in results] == pytest.approx([1.0, 1 / math.sqrt(2), 0.0])


def test_temporal_reorders_relevant_documents_by_recency(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), **only("temporal"))  # type: ignore[arg-type]
    results = retriever.retrieve("When did I go hiking?", 10)
    # in_range 0 + cos * exp(-age_days / 30), age from the latest time in scope (30 June 2023)
    expected = {
        "h3": 1.0 * math.exp(-29 / 30),
        "h2": (1 / math.sqrt(2)) * math.exp(-(REFERENCE - ts(2023, 5, 8, 13, 56)) / DAY / 30),
        "h1": 1.0 * math.exp(-171 / 30),
        "n1": 0.0,  # the newest document, but irrelevant: last, not first
        "p1": 0.0,
    }
    assert ids(results) == ["h3", "h2", "h1", "n1", "p1"]  # documents without a time never appear
    raw = {r.doc_id: r.provenance["strategies"]["temporal"]["score"] for r in results}
    assert raw == pytest.approx(expected)


def test_temporal_puts_the_time_range_first(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), **only("temporal"))  # type: ignore[arg-type]
    results = retriever.retrieve("Where did I go hiking in May 2023?", 10)
    assert ids(results)[:3] == ["h2", "h3", "h1"]  # h2 (8 May) is inside the range
    assert results[0].provenance["strategies"]["temporal"]["score"] == pytest.approx(
        1 + (1 / math.sqrt(2)) * math.exp(-(REFERENCE - ts(2023, 5, 8, 13, 56)) / DAY / 30)
    )
    # a relative expression resolves against the reference time: "last month" = May 2023 here
    assert ids(retriever.retrieve("hiking last month", 1)) == ["h2"]
    # a fixed reference time moves "last month" to April 2023: nothing inside, so relevance x
    # recency decides; h3 (1 June) is after the reference: age 0, score cos 1 x 1
    fixed = MultiStrategyRetriever(
        store, AxisEmbedder(), **only("temporal", reference_time="2023-05-20T00:00:00Z")
    )  # type: ignore[arg-type]
    top = fixed.retrieve("hiking last month", 1)[0]
    assert top.doc_id == "h3" and top.provenance["strategies"]["temporal"]["score"] == 1.0


def test_temporal_decay_days_changes_the_order(store: ContextStore) -> None:
    flat = MultiStrategyRetriever(store, AxisEmbedder(), **only("temporal", decay_days=1e6))  # type: ignore[arg-type]
    # 30 days: h3, h2, h1. With almost no decay relevance decides: h1 (cos 1, 171 days old)
    # overtakes h2 (cos 0.71); recency only orders h3 before h1
    assert ids(flat.retrieve("When did I go hiking?", 3)) == ["h3", "h1", "h2"]


def test_temporal_recency_is_the_seeds_pure_recency(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), **only("temporal", temporal_scoring="recency"))  # type: ignore[arg-type]
    results = retriever.retrieve("When did I go hiking?", 10)
    # every timed document by exp(-age_days / 30) alone, relevance ignored: the newest first
    age = {"n1": 0.0, "h3": 29.0, "h2": (REFERENCE - ts(2023, 5, 8, 13, 56)) / DAY, "p1": 149.0, "h1": 171.0}
    assert ids(results) == ["n1", "h3", "h2", "p1", "h1"]
    raw = {r.doc_id: r.provenance["strategies"]["temporal"]["score"] for r in results}
    assert raw == pytest.approx({doc: math.exp(-days / 30) for doc, days in age.items()})
    # the seed's window: without a time range in the query, the last 30 days only
    window = MultiStrategyRetriever(
        store, AxisEmbedder(), **only("temporal", temporal_scoring="recency", temporal_window_days=30)
    )  # type: ignore[arg-type]
    assert ids(window.retrieve("When did I go hiking?", 10)) == ["n1", "h3"]
    # a time range named in the query replaces the window: May 2023 holds h2 only
    assert ids(window.retrieve("What did I do in May 2023?", 10)) == ["h2"]


def test_temporal_flat_scores_every_candidate_0_8(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(
        store, AxisEmbedder(), **only("temporal", temporal_scoring="flat", temporal_window_days=60)
    )  # type: ignore[arg-type]
    results = retriever.retrieve("When did I go hiking?", 10)
    assert [(r.doc_id, r.score) for r in results] == [("h2", 1.0), ("h3", 1.0), ("n1", 1.0)]  # minmax of ties
    assert {r.provenance["strategies"]["temporal"]["score"] for r in results} == {0.8}


def test_structural_matches_identifier_parts(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), **only("structural"))  # type: ignore[arg-type]
    exact = retriever.retrieve("Where is parse_config defined?", 5)
    assert ids(exact)[0] == "c1" and exact[0].score == 1.0
    assert exact[0].provenance["strategies"]["structural"]["score"] > 1  # exact name: Dice + 1
    # "readonly" meets is_read_only through the joined parts (read + only)
    assert ids(retriever.retrieve("python check file is readonly", 5)) == ["c2"]
    # camelCase and PascalCase are split: getConfig -> get, config; HttpClient is an exact symbol
    results = retriever.retrieve("getConfig of HttpClient", 5)
    assert ids(results) == ["c3", "c1"]
    # a file name meets the basename of metadata.path
    assert ids(retriever.retrieve("what does loader.py do", 5)) == ["c1"]
    # nothing to match: skipped, and said so
    none = retriever.retrieve("hiking boots", 5)
    assert none == []


def test_structural_is_skipped_without_names_in_scope(store: ContextStore) -> None:
    scope = store.restricted(store.metadata_mask("timestamp", "2023-06-01"))  # only h3
    result = MultiStrategyRetriever(scope, AxisEmbedder()).retrieve("Where is parse_config defined?", 5)
    assert ids(result) == ["h3"]
    assert result[0].provenance["skipped"] == {
        "structural": "no document in scope has a name in metadata ['func_name', 'symbol', 'path']"
    }


def test_fulltext_bm25_ranks_like_the_bm25_baseline(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, None, **only("fulltext"))  # type: ignore[arg-type]
    for query in ["hiking coffee", "config file", "paint brushes hiking"]:
        ours = retriever.retrieve(query, 10)
        baseline = BM25Retriever(store).retrieve(query, 10)
        assert ids(ours) == ids(baseline)
        assert [r.provenance["strategies"]["fulltext"]["score"] for r in ours] == pytest.approx(
            [r.score for r in baseline]
        )


def test_fulltext_seed_scoring_by_hand(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, None, **only("fulltext", fulltext_scoring="seed"))  # type: ignore[arg-type]
    results = retriever.retrieve("coffee hiking", 10)
    raw = [(r.doc_id, r.provenance["strategies"]["fulltext"]["score"]) for r in results]
    # matches / 2 keywords * 0.6 + importance / 10 * 0.4
    assert raw == [
        ("p1", pytest.approx(0.5 * 0.6 + 0.9 * 0.4)),
        ("h2", pytest.approx(1.0 * 0.6)),
        ("h1", pytest.approx(0.5 * 0.6)),
        ("h3", pytest.approx(0.5 * 0.6)),
    ]
    # whole words only: the seed design's substring test found "coff" inside "coffee"
    assert retriever.retrieve("coff", 5) == []
    assert retriever.retrieve("what did she do", 5) == []  # no keyword: skipped


def test_every_strategy_respects_the_scope(store: ContextStore) -> None:
    allowed = np.array([doc.id in {"c2", "h2", "n1"} for doc in store.documents])
    scope = store.restricted(allowed)
    queries = [
        "When did I go hiking?",
        "python check file is readonly",
        "coffee hiking paint",
        "parse_config",
    ]
    for strategy, extra in [
        ("semantic", {}),
        ("temporal", {}),
        ("structural", {}),
        ("fulltext", {}),
        ("fulltext", {"fulltext_scoring": "seed"}),
    ]:
        retriever = MultiStrategyRetriever(scope, AxisEmbedder(), **only(strategy, **extra))  # type: ignore[arg-type]
        for results in retriever.retrieve_batch(queries, 10):
            assert set(ids(results)) <= {"c2", "h2", "n1"}, (strategy, ids(results))
    # the temporal reference is the scope's latest time, not the store's
    temporal = MultiStrategyRetriever(
        store.restricted(np.array([d.id in {"h1", "h2"} for d in store.documents])), AxisEmbedder()
    )
    assert temporal.strategies["temporal"].reference_epoch == ts(2023, 5, 8, 13, 56)  # type: ignore[attr-defined]


STRATEGY_SETTINGS = [
    ("semantic", {}),
    ("temporal", {}),
    ("structural", {}),
    ("fulltext", {}),
    ("fulltext", {"fulltext_scoring": "seed"}),
]
QUERIES = [
    "When did I go hiking?",
    "python check file is readonly",
    "coffee hiking paint",
    "parse_config",
    "Where did I go hiking in May 2023?",
]


def ranking(results: Sequence[Any]) -> list[tuple[str, float]]:
    return [(r.doc_id, r.score) for r in results]


@pytest.mark.parametrize(("strategy", "extra"), STRATEGY_SETTINGS)
def test_filters_restrict_every_strategy_like_a_scope(
    store: ContextStore, strategy: str, extra: dict
) -> None:
    """A metadata filter and a scoped store view allow the same rows, so every strategy must
    rank exactly alike under both (the temporal span and pool included)."""
    keep = {"c1", "c2", "h1", "h2", "p1"}
    scoped = store.restricted(np.array([doc.id in keep for doc in store.documents]))
    by_scope = MultiStrategyRetriever(scoped, AxisEmbedder(), **only(strategy, **extra))
    by_filter = MultiStrategyRetriever(
        store, AxisEmbedder(), filters={"doc_ids": sorted(keep)}, **only(strategy, **extra)
    )
    for query in QUERIES:
        expected = ranking(by_scope.retrieve(query, 10))
        assert ranking(by_filter.retrieve(query, 10)) == expected, (strategy, query)
        assert {doc_id for doc_id, _ in expected} <= keep


def test_a_time_range_filter_moves_the_temporal_reference(store: ContextStore) -> None:
    # only h1 (10 Jan) and p1 (1 Feb) have a "timestamp" in January-February 2023
    window = {"time_range": {"start": "2023-01-01T00:00:00Z", "end": "2023-03-01T00:00:00Z"}}
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), filters=window, **only("temporal"))
    assert retriever.strategies["temporal"].reference_epoch == ts(2023, 2, 1)  # type: ignore[attr-defined]
    results = retriever.retrieve("When did I go hiking?", 10)
    assert ids(results) == ["h1", "p1"]
    # h1: cos 1, 22 days before the reference
    assert results[0].score == 1.0 and results[0].provenance["strategies"]["temporal"][
        "score"
    ] == pytest.approx(math.exp(-22 / 30))


@pytest.mark.parametrize(("strategy", "extra"), [*STRATEGY_SETTINGS, ("all", {})])
def test_a_store_of_one_chunk_per_document_ranks_like_the_documents(
    store: ContextStore, strategy: str, extra: dict
) -> None:
    """Chunks become their documents: with one chunk per document (chunks longer than any text)
    every strategy ranks the documents exactly as over the unchunked store."""
    chunked = build_store(DOCS, AxisEmbedder(), StoreConfig(chunking=ChunkingConfig(size=1000)))
    assert chunked.chunked
    params: dict[str, Any] = {} if strategy == "all" else only(strategy, **extra)
    plain = MultiStrategyRetriever(store, AxisEmbedder(), **params)
    by_chunks = MultiStrategyRetriever(chunked, AxisEmbedder(), **params)
    for query in QUERIES:
        results = by_chunks.retrieve(query, 10)
        assert ranking(results) == ranking(plain.retrieve(query, 10)), (strategy, query)
        assert all(r.provenance["chunk_id"] == r.doc_id + "#0" for r in results)


def test_small_chunks_give_each_document_once_with_its_best_chunk(store: ContextStore) -> None:
    chunked = build_store(DOCS, AxisEmbedder(), StoreConfig(chunking=ChunkingConfig(size=2, overlap=1)))
    retriever = MultiStrategyRetriever(chunked, AxisEmbedder(), **only("semantic"))
    results = retriever.retrieve("coffee", 10)
    # "hiking again, then coffee": its chunk "then coffee" is all coffee (cos 1), like p1's "prefers coffee"
    assert ids(results)[:2] == ["h2", "p1"] and [r.score for r in results[:2]] == [1.0, 1.0]
    assert results[0].provenance["chunk_id"] == "h2#2"
    assert len(ids(results)) == len(set(ids(results))) and all("#" not in doc_id for doc_id in ids(results))
    queries = ["coffee", "When did I go hiking?", "parse_config", "paint brushes"]
    full = MultiStrategyRetriever(chunked, AxisEmbedder())
    assert full.retrieve_batch(queries, 5) == [full.retrieve(query, 5) for query in queries]


class LengthReranker:
    """Scores a candidate by the length of its text: longest first."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def rerank(self, query: str, candidates: Sequence[Any], texts: Sequence[str]) -> list[float]:
        self.seen.append([candidate.doc_id for candidate in candidates])
        return [float(len(text)) for text in texts]


class BrokenReranker:
    def rerank(self, query: str, candidates: Sequence[Any], texts: Sequence[str]) -> list[float]:
        raise RuntimeError("reranker down")


def test_a_reranker_reorders_the_fused_pool(store: ContextStore) -> None:
    fused = MultiStrategyRetriever(store, AxisEmbedder(), **only("semantic")).retrieve("coffee", 8)
    reranker = LengthReranker()
    retriever = MultiStrategyRetriever(
        store, AxisEmbedder(), reranker=reranker, rerank_depth=3, **only("semantic")
    )
    results = retriever.retrieve("coffee", 2)
    # the reranker sees the fused top 3 (rerank_depth), then the best 2 by text length are kept
    assert reranker.seen == [ids(fused)[:3]]
    texts = {doc.id: doc.full_text for doc in DOCS}
    expected = sorted(ids(fused)[:3], key=lambda doc_id: (-len(texts[doc_id]), doc_id))[:2]
    assert ids(results) == expected
    pre = {r.doc_id: r.score for r in fused}
    for result in results:
        assert result.score == float(len(texts[result.doc_id]))
        assert result.provenance["pre_rerank_score"] == pre[result.doc_id]
        assert result.provenance["rerank_fallback"] is None
        assert result.provenance["strategies"]["semantic"]["weight"] == 1.0  # the family's keys stay
    failing = MultiStrategyRetriever(store, AxisEmbedder(), reranker=BrokenReranker(), **only("semantic"))
    kept = failing.retrieve("coffee", 3)
    assert ranking(kept) == ranking(fused[:3])  # the fused order, and why
    assert kept[0].provenance["rerank_fallback"] == "raised RuntimeError: reranker down"
    assert kept[0].provenance["stats"]["rerank_fallbacks"] == 1


def test_stats_summarise_the_query(store: ContextStore) -> None:
    results = MultiStrategyRetriever(store, AxisEmbedder()).retrieve("When did I go hiking?", 3)
    assert results[0].provenance["stats"] == {
        "intent": "TEMPORAL",
        "strategies_run": 2,
        "strategies_skipped": 0,
        "strategies_dropped": 0,
        "fused_candidates": 8,  # semantic: all 8 rows; temporal: the 5 with a time, among them
    }


def test_name_index_does_not_depend_on_the_hash_seed() -> None:
    """Name parts get ids in sorted order, so idf sums add in one order in every process (set
    order, which follows PYTHONHASHSEED, changed the last bits of CoSQA scores between runs)."""
    from retrievers.multi_strategy.strategies.structural import _build_name_index

    documents = [Document("a", "", metadata={"func_name": "parse_http_response_body"})]
    index = _build_name_index(documents, ["func_name"])
    assert list(index.vocabulary) == sorted(index.vocabulary)


def test_default_plan_by_intent(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, AxisEmbedder())
    analyze = retriever.analyzer.analyze
    assert retriever.plan(analyze("What are my coding preferences?")).weights == {
        "semantic": 1.0,
        "fulltext": 0.6,
    }
    assert retriever.plan(analyze("When did I go hiking?")).weights == {"semantic": 1.0, "temporal": 1.2}
    assert retriever.plan(analyze("Where is parse_config defined?")).weights == {
        "semantic": 0.9,
        "structural": 1.2,
    }
    assert retriever.plan(analyze("Who is Caroline?")).weights == {"semantic": 1.0, "fulltext": 0.9}
    # PREFERENCE (3.5) with a time expression (TEMPORAL 2) and an identifier (CODE 2): temporal
    # and structural join with their evidence weights
    query = "Do I prefer and love parse_config from 2022?"
    assert analyze(query).intent == "PREFERENCE"
    assert retriever.plan(analyze(query)).weights == {
        "semantic": 1.0,
        "temporal": 0.8,
        "structural": 0.9,
        "fulltext": 0.6,
    }
    no_evidence = MultiStrategyRetriever(store, AxisEmbedder(), evidence_weights={})
    assert no_evidence.plan(analyze(query)).weights == {"semantic": 1.0, "fulltext": 0.6}
    mixed = retriever.plan(analyze("What changed in parse_config yesterday?"))
    assert mixed.weights == {"semantic": 1.0, "temporal": 0.8, "structural": 0.9, "fulltext": 0.6}


# -- failures and time-outs ----------------------------------------------------------------------


class BlockingStrategy(FixedStrategy):
    def __init__(self, release: threading.Event) -> None:
        super().__init__("fulltext", [0], [1.0])
        self.release = release
        self.started = threading.Event()

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
        self.started.set()
        self.release.wait(timeout=30)
        return super().search(contexts, depth)


class FailingStrategy(FixedStrategy):
    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
        raise RuntimeError("index unavailable")


def test_a_failed_or_timed_out_strategy_is_dropped_and_recorded(store: ContextStore) -> None:
    weights = {intent: {"semantic": 1.0, "structural": 1.0, "fulltext": 1.0} for intent in DEFAULT_WEIGHTS}
    retriever = MultiStrategyRetriever(store, AxisEmbedder(), weights=weights, timeout_seconds=0.001)
    release = threading.Event()
    blocking = BlockingStrategy(release)
    retriever.strategies["fulltext"] = blocking
    retriever.strategies["structural"] = FailingStrategy("structural", [], [])
    try:
        results = retriever.retrieve("coffee", 3)
    finally:
        release.set()
    assert blocking.started.wait(timeout=5)
    assert ids(results) == ["p1", "h2", "c1"]  # semantic alone still answers
    assert results[0].provenance["dropped"] == {
        "fulltext": "timed out after 0.001 s",
        "structural": "raised RuntimeError: index unavailable",
    }
    stats = results[0].provenance["stats"]
    assert (stats["strategies_run"], stats["strategies_dropped"]) == (1, 2)
    assert set(results[0].provenance["strategies"]) == {"semantic"}


class BrokenEmbedder(AxisEmbedder):
    def encode(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        if kind == "query":
            raise OSError("model server down")
        return super().encode(texts, kind=kind)


def test_embedder_failure_drops_dense_strategies_only(store: ContextStore) -> None:
    results = MultiStrategyRetriever(store, BrokenEmbedder()).retrieve("Who went hiking?", 5)
    assert ids(results)[:3] == ["h1", "h2", "h3"]  # BM25 (fulltext) still answers
    assert results[0].provenance["dropped"] == {"semantic": "embedder failed: OSError: model server down"}


def test_non_finite_strategy_scores_are_dropped(store: ContextStore) -> None:
    retriever = MultiStrategyRetriever(store, AxisEmbedder())
    retriever.strategies["fulltext"] = FixedStrategy("fulltext", [0, 1], [math.inf, 1.0])
    results = retriever.retrieve("Who is Caroline?", 5)
    assert results[0].provenance["dropped"] == {"fulltext": "returned non-finite scores"}
    assert all(math.isfinite(r.score) for r in results)


# -- batch == single on real data ----------------------------------------------------------------


@pytest.fixture(scope="module")
def locomo_small(shared_datasets: Path) -> tuple[ContextStore, TfidfEmbedder, list[str]]:
    dataset = load_dataset(str(shared_datasets / "locomo"), "test")
    keep = {"conv-26", "conv-30"}
    documents = [doc for doc in dataset.corpus.values() if doc.metadata["conversation"] in keep]
    embedder = TfidfEmbedder(dim=64).fit([doc.full_text for doc in sorted(documents, key=lambda d: d.id)])
    queries = [q.text for q in dataset.queries.values() if q.metadata["conversation"] == "conv-26"][:80]
    queries += [
        "What did Caroline do on 8 May, 2023?",
        "What happened last week?",
        "What did Melanie paint in 2022?",
    ]
    return build_store(documents, embedder), embedder, queries


@pytest.fixture(scope="module")
def cosqa_small(shared_datasets: Path) -> tuple[ContextStore, TfidfEmbedder, list[str]]:
    dataset = load_dataset(str(shared_datasets / "cosqa"), "test")
    documents = sorted(dataset.corpus.values(), key=lambda d: d.id)[:600]
    embedder = TfidfEmbedder(dim=64).fit([doc.full_text for doc in documents])
    queries = [
        *[q.text for q in dataset.queries.values()][:60],
        "where is writeBoolean",
        "parse_args in argparse",
    ]
    return build_store(documents, embedder), embedder, queries


@pytest.mark.needs_data
@pytest.mark.parametrize("fusion", ["consensus", "rrf"])
def test_batch_equals_single_on_locomo(locomo_small, fusion: str) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = locomo_small
    scope = store.restricted(store.metadata_mask("conversation", "conv-26"))
    retriever = MultiStrategyRetriever(scope, embedder, fusion=fusion, query_batch_size=7, candidate_k=30)
    batch = retriever.retrieve_batch(queries, 20)
    assert batch == [retriever.retrieve(query, 20) for query in queries]
    intents = {results[0].provenance["intent"] for results in batch if results}
    assert {"TEMPORAL", "FACTUAL"} <= intents
    assert any("temporal" in r.provenance["strategies"] for results in batch for r in results)
    assert all(r.doc_id.startswith("conv-26_") for results in batch for r in results)


@pytest.mark.needs_data
def test_batch_equals_single_on_cosqa(cosqa_small) -> None:  # type: ignore[no-untyped-def]
    store, embedder, queries = cosqa_small
    retriever = MultiStrategyRetriever(store, embedder, query_batch_size=16)
    batch = retriever.retrieve_batch(queries, 10)
    assert batch == [retriever.retrieve(query, 10) for query in queries]
    assert any("structural" in r.provenance["strategies"] for results in batch for r in results)
    for results in batch:
        keys = [(-r.score, r.doc_id) for r in results]
        assert keys == sorted(keys) and all(math.isfinite(r.score) and 0 <= r.score <= 1 for r in results)


# -- bad input -----------------------------------------------------------------------------------


def table(**changes: object) -> dict[str, object]:
    weights: dict[str, object] = {intent: dict(row) for intent, row in DEFAULT_WEIGHTS.items()}
    weights.update(changes)
    return weights


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"weights": table(URGENT={"semantic": 1.0})},
            r"^weights key must be one of \['FACTUAL', 'TEMPORAL', 'CODE', 'PREFERENCE', 'MIXED', 'CONVERSATIONAL'\], got 'URGENT'$",
        ),
        (
            {"weights": {k: v for k, v in DEFAULT_WEIGHTS.items() if k != "MIXED"}},
            r"^weights has no row for intent\(s\) \['MIXED'\]",
        ),
        (
            {"weights": table(FACTUAL={"semantic": 1.0, "graph": 0.5})},
            r"^weights.FACTUAL key must be one of \['semantic', 'temporal', 'structural', 'fulltext'\], got 'graph'$",
        ),
        (
            {"weights": table(CODE={"semantic": -0.5})},
            r"^weights.CODE.semantic must be a number in \[0, 100\], got -0.5$",
        ),
        (
            {"weights": table(CODE={"semantic": 0.0})},
            r"^weights.CODE must give at least one strategy a weight > 0, got \{'semantic': 0.0\}$",
        ),
        ({"strategies": ["semantic", "vector"]}, r"^strategies\[1\] must be one of \[.*\], got 'vector'$"),
        ({"strategies": []}, r"^strategies must not be empty$"),
        ({"strategies": ["semantic", "semantic"]}, r"^strategies has repeats"),
        (
            {"evidence_weights": {"fulltext": 1.0}},
            r"^evidence_weights key must be one of \['temporal', 'structural'\], got 'fulltext'$",
        ),
        ({"decay_days": -30}, r"^decay_days must be a number in \(0, 1000000\], got -30$"),
        ({"decay_days": 0}, r"^decay_days must be a number in \(0, 1000000\], got 0$"),
        ({"consensus_boost": 1.5}, r"^consensus_boost must be a number in \[0, 1\], got 1.5$"),
        (
            {"fusion": "sum"},
            r"^fusion must be one of \['consensus', 'rrf', 'max', 'weighted_average'\], got 'sum'$",
        ),
        (
            {"temporal_scoring": "newest"},
            r"^temporal_scoring must be one of \['relevance', 'recency', 'flat'\]",
        ),
        (
            {"temporal_window_days": 0},
            r"^temporal_window_days must be a number in \(0, 1000000\] or null, got 0$",
        ),
        ({"context_weight": -1}, r"^context_weight must be a number in \[0, 100\], got -1$"),
        ({"normalization": "z"}, r"^normalization must be one of \['minmax', 'max'\], got 'z'$"),
        ({"fulltext_scoring": "tfidf"}, r"^fulltext_scoring must be one of \['bm25', 'seed'\], got 'tfidf'$"),
        ({"reference_time": "next tuesday"}, r"^reference_time must be 'latest', an ISO 8601 time"),
        ({"candidate_k": 0}, r"^candidate_k must be an integer in \[1, 10000\], got 0$"),
        ({"rrf_k": 2.5}, r"^rrf_k must be an integer in \[1, 10000\], got 2.5$"),
        ({"timeout_seconds": 0}, r"^timeout_seconds must be a number in \(0, 3600\], got 0$"),
        ({"default_intent": "CHAT"}, r"^default_intent must be one of \[.*'CONVERSATIONAL'\], got 'CHAT'$"),
        ({"mixed_ratio": 0}, r"^mixed_ratio must be a number in \(0, 1\], got 0$"),
        ({"rules": [{"intent": "URGENT", "pattern": "now"}]}, r"^rules\[0\].intent must be one of"),
        ({"structural_fields": "func_name"}, r"^structural_fields must be a list, got 'func_name'$"),
        ({"structural_fields": ["func_name", ""]}, r"^structural_fields\[1\] must be a non-empty string"),
        ({"query_batch_size": 0}, r"^query_batch_size must be an integer in \[1, 65536\], got 0$"),
    ],
)
def test_bad_parameters_are_clear_errors(params: dict[str, object], message: str) -> None:
    with pytest.raises(ParamError, match=message):
        MultiStrategyParams(**params)  # type: ignore[arg-type]
    with pytest.raises(ParamError, match=message):  # the same check, from the retriever's keywords
        MultiStrategyRetriever.Params.from_dict(params)


def test_unknown_parameter_lists_the_allowed_ones() -> None:
    with pytest.raises(ParamError, match=r"unknown key\(s\) \['decay'\]; allowed: \[.*'decay_days'"):
        MultiStrategyParams.from_dict({"decay": 3})


def test_params_are_private_copies() -> None:
    weights = table()
    params = MultiStrategyParams(weights=weights)  # type: ignore[arg-type]
    weights["FACTUAL"]["semantic"] = 99.0  # type: ignore[index]
    assert params.weights["FACTUAL"]["semantic"] == 1.0


def test_constructor_checks(store: ContextStore) -> None:
    with pytest.raises(ValueError, match="MultiStrategyRetriever needs an embedder"):
        MultiStrategyRetriever(store, None)
    # lexical strategies only: no embedder needed, none asked for
    assert MultiStrategyRetriever(store, None, strategies=["structural", "fulltext"]).embedder is None
    other = TfidfEmbedder(dim=2).fit(["alpha beta", "gamma delta", "beta gamma"])
    with pytest.raises(ValueError, match="not the one the store was built with"):
        MultiStrategyRetriever(store, other)
    retriever = MultiStrategyRetriever(store, AxisEmbedder())
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        retriever.retrieve("coffee", 0)
    with pytest.raises(ValueError, match="non-empty string"):
        retriever.retrieve_batch(["coffee", "  "], 5)
    assert retriever.retrieve_batch([], 5) == []


def test_temporal_is_skipped_without_timestamps(store: ContextStore) -> None:
    untimed = build_store(DOCS, AxisEmbedder(), StoreConfig(timestamps=None))
    results = MultiStrategyRetriever(untimed, AxisEmbedder()).retrieve("When did I go hiking?", 3)
    assert results and results[0].provenance["skipped"] == {
        "temporal": "the store was built without timestamps (store.timestamps is off)"
    }
