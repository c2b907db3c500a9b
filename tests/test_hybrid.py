"""HybridRetriever: fused scores worked out by hand on a four-document corpus whose leg rankings
are known, overfetch, min_score, filters applied before top-k, parent-child resolution, reranker
success and every fallback, the punctuation query, bad input, and oracles on ADI (batch == single,
keyword_weight 0 == dense, keyword_weight 1 == BM25)."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrievers import BM25Retriever, ContextStore, DenseRetriever, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.filters import FilterWarning
from retrievers.hybrid import HybridRetriever
from retrievers.types import EncodeKind, RetrievalResult
from viking_eval.data import load_dataset

# BM25 for "apple" matches d1 (3 times in 4 words) above d2 (once in 2 words): keyword ranks
# d1 0, d2 1. The vectors below give cosines with the query d3 1.0, d2 0.8, d1 0.6, d4 0.0:
# vector ranks d3 0, d2 1, d1 2, d4 3.
DOCS = [
    Document("d1", "apple apple apple banana", metadata={"shelf": "x"}),
    Document("d2", "apple cherry", metadata={"shelf": "y"}),
    Document("d3", "cherry banana", metadata={"shelf": "y", "timestamp": "2024-05-01"}),
    Document("d4", "date", metadata={"shelf": "x"}),
]
VECTORS = {
    "apple": (1.0, 0.0),
    "apple apple apple banana": (0.6, 0.8),
    "apple cherry": (0.8, 0.6),
    "cherry banana": (1.0, 0.0),
    "date": (0.0, 1.0),
}


class TableEmbedder:
    name = "table"
    dim = 2

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        return np.asarray([VECTORS.get(text, (0.0, 1.0)) for text in texts], dtype=np.float32)


@pytest.fixture(scope="module")
def small() -> ContextStore:
    return build_store(DOCS, TableEmbedder())


def scored(results: list[RetrievalResult]) -> list[tuple[str, float]]:
    return [(result.doc_id, result.score) for result in results]


def check(results: list[RetrievalResult], expected: list[tuple[str, float]], rel: float = 1e-6) -> None:
    """The ranking is exactly ``expected``'s ids, the scores equal up to ``rel``."""
    assert [result.doc_id for result in results] == [doc_id for doc_id, _ in expected]
    assert [result.score for result in results] == pytest.approx([score for _, score in expected], rel=rel)


def bm25_scores(store: ContextStore) -> tuple[float, float]:
    scores = store.bm25.scores("apple")
    return float(scores[0]), float(scores[1])


def test_weighted_rrf_by_hand(small: ContextStore) -> None:
    results = HybridRetriever(small, TableEmbedder()).retrieve("apple", 4)
    check(
        results,
        [
            ("d2", 0.7 / 62 + 0.3 / 62),  # vector rank 1, keyword rank 1
            ("d1", 0.7 / 63 + 0.3 / 61),  # vector rank 2, keyword rank 0
            ("d3", 0.7 / 61),  # vector rank 0 only
            ("d4", 0.7 / 64),  # vector rank 3 only
        ],
        rel=1e-12,
    )
    provenance = results[1].provenance
    assert provenance["fusion"] == "rrf" and provenance["fused_score"] == results[1].score
    assert provenance["legs"]["vector"] == {"rank": 2, "score": pytest.approx(0.6)}
    assert provenance["legs"]["keyword"] == {"rank": 0, "score": bm25_scores(small)[0]}
    assert "keyword" not in results[2].provenance["legs"]
    assert provenance["stats"] == {"vector_candidates": 4, "keyword_candidates": 2, "fused_candidates": 4}


def test_rrf_weights_k_and_normalize_by_hand(small: ContextStore) -> None:
    results = HybridRetriever(small, TableEmbedder(), keyword_weight=0.8, rrf_k=10, normalize=True).retrieve(
        "apple", 4
    )
    check(
        results,
        [
            ("d1", (0.2 / 13 + 0.8 / 11) * 11),
            ("d2", (0.2 / 12 + 0.8 / 12) * 11),
            ("d3", 0.2 / 11 * 11),
            ("d4", 0.2 / 14 * 11),
        ],
        rel=1e-12,
    )


def test_score_fusions_by_hand(small: ContextStore) -> None:
    # min-max: vector d3 1, d2 (0.8 - 0) / 1 = 0.8, d1 0.6, d4 0; BM25 d1 1, d2 0
    convex = HybridRetriever(small, TableEmbedder(), fusion="convex").retrieve("apple", 4)
    check(convex, [("d1", 0.7 * 0.6 + 0.3 * 1), ("d3", 0.7 * 1.0), ("d2", 0.7 * 0.8 + 0.3 * 0), ("d4", 0.0)])
    mnz = HybridRetriever(small, TableEmbedder(), fusion="combmnz").retrieve("apple", 4)
    check(mnz, [("d1", (0.7 * 0.6 + 0.3) * 2), ("d2", (0.7 * 0.8) * 2), ("d3", 0.7 * 1.0), ("d4", 0.0)])
    combsum = HybridRetriever(small, TableEmbedder(), fusion="combsum", keyword_weight=0.5).retrieve(
        "apple", 4
    )
    check(combsum, [("d1", 0.5 * 0.6 + 0.5 * 1), ("d3", 0.5 * 1.0), ("d2", 0.5 * 0.8), ("d4", 0.0)])
    # z-score: vector scores (1, 0.8, 0.6, 0) have mean 0.6 and std sqrt(0.14); BM25 (s1, s2) z = +1, -1
    zscore = HybridRetriever(small, TableEmbedder(), fusion="convex", normalization="zscore").retrieve(
        "apple", 4
    )
    std = math.sqrt(((1 - 0.6) ** 2 + (0.8 - 0.6) ** 2 + 0 + 0.6**2) / 4)
    expected = {
        "d1": 0.7 * 0.0 + 0.3 * 1,
        "d2": 0.7 * 0.2 / std + 0.3 * -1,
        "d3": 0.7 * 0.4 / std + 0.3 * -1,  # not found by BM25: its lowest z-score, -1
        "d4": 0.7 * -0.6 / std + 0.3 * -1,
    }
    assert dict(scored(zscore)) == pytest.approx(expected)


def test_overfetch_decides_which_candidates_meet(small: ContextStore) -> None:
    # top_k 1 and no overfetch: the legs bring only d3 (vector) and d1 (BM25); d3 wins 0.7/61 > 0.3/61
    shallow = HybridRetriever(small, TableEmbedder(), overfetch_multiplier=1).retrieve("apple", 1)
    check(shallow, [("d3", 0.7 / 61)])
    # overfetch 3: three candidates per leg, d2 is found by both and wins
    deep = HybridRetriever(small, TableEmbedder(), overfetch_multiplier=3).retrieve("apple", 1)
    check(deep, [("d2", 1 / 62)])


def test_min_score_drops_weak_documents(small: ContextStore) -> None:
    retriever = HybridRetriever(small, TableEmbedder(), normalize=True, min_score=0.69)
    # normalised: d2 61/62, d1 0.7*61/63 + 0.3, d3 0.7, d4 0.7*61/64 = 0.667 < 0.69
    assert [r.doc_id for r in retriever.retrieve("apple", 4)] == ["d2", "d1", "d3"]
    assert HybridRetriever(small, TableEmbedder(), min_score=1.0).retrieve("apple", 4) == []


def test_filters_apply_before_top_k(small: ContextStore) -> None:
    filtered = HybridRetriever(
        small, TableEmbedder(), overfetch_multiplier=1, filters={"metadata": {"shelf": "x"}}
    )
    # both legs search only d1 and d4, so the top 2 holds both: d1 0.7/61 + 0.3/61, d4 0.7/62
    check(filtered.retrieve("apple", 2), [("d1", 1 / 61), ("d4", 0.7 / 62)])
    # filtering the unfiltered top 2 (d2, d3) afterwards would leave nothing
    unfiltered = HybridRetriever(small, TableEmbedder(), overfetch_multiplier=1).retrieve("apple", 2)
    assert [r.doc_id for r in unfiltered] == ["d2", "d3"]
    by_time = HybridRetriever(small, TableEmbedder(), filters={"time_range": {"start": "2024-01-01"}})
    assert [r.doc_id for r in by_time.retrieve("apple", 4)] == ["d3"]
    by_id = HybridRetriever(small, TableEmbedder(), filters={"doc_ids": ["d1", "d4"]})
    assert [r.doc_id for r in by_id.retrieve("apple", 4)] == ["d1", "d4"]


def test_a_filter_on_a_missing_key_gives_an_empty_result_with_a_warning(small: ContextStore) -> None:
    with pytest.warns(FilterWarning, match="no document has metadata key 'colour'"):
        retriever = HybridRetriever(small, TableEmbedder(), filters={"metadata": {"colour": "red"}})
    assert retriever.retrieve("apple", 4) == []
    assert retriever.retrieve_batch(["apple", "date"], 4) == [[], []]


# --------------------------------------------------------------------------------------------
# Reranking and its fallbacks
# --------------------------------------------------------------------------------------------


class ByLength:
    """Scores a document by the length of its text (d1 longest)."""

    def __init__(self) -> None:
        self.texts: list[list[str]] = []

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        self.texts.append(list(texts))
        return [float(len(text)) for text in texts]


class Returns:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> Any:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer(len(candidates)) if callable(self.answer) else self.answer


FUSED_ORDER = ["d2", "d1", "d3", "d4"]


def test_reranker_reorders_and_provenance_keeps_the_fused_score(small: ContextStore) -> None:
    reranker = ByLength()
    results = HybridRetriever(small, TableEmbedder(), reranker=reranker).retrieve("apple", 3)
    assert reranker.texts == [["apple cherry", "apple apple apple banana", "cherry banana"]]  # fused top 3
    assert scored(results) == [("d1", 24.0), ("d3", 13.0), ("d2", 12.0)]
    assert results[0].provenance["pre_rerank_score"] == pytest.approx(0.7 / 63 + 0.3 / 61)
    assert results[0].provenance["rerank_fallback"] is None
    assert results[0].provenance["stats"]["rerank_fallbacks"] == 0


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (RuntimeError("cross-encoder crashed"), "raised RuntimeError: cross-encoder crashed"),
        (lambda n: [1.0] * (n - 1), "returned 3 scores for 4 candidates"),
        (lambda n: [0.5, math.nan] + [0.1] * (n - 2), "returned nan for 'd1', not a finite number"),
        (None, "returned None"),
    ],
)
def test_reranker_failure_keeps_fused_order_and_records_it(
    small: ContextStore, answer: Any, reason: str
) -> None:
    expected = HybridRetriever(small, TableEmbedder()).retrieve("apple", 4)
    results = HybridRetriever(small, TableEmbedder(), reranker=Returns(answer)).retrieve("apple", 4)
    assert [r.doc_id for r in results] == FUSED_ORDER
    assert [r.score for r in results] == [r.score for r in expected]
    for result in results:
        assert result.provenance["rerank_fallback"] == reason
        assert result.provenance["stats"]["rerank_fallbacks"] == 1


def test_reranker_time_limit(small: ContextStore) -> None:
    release = threading.Event()

    class Hangs:
        def rerank(
            self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]
        ) -> list[float]:
            release.wait(10)
            return [1.0] * len(candidates)

    try:
        results = HybridRetriever(small, TableEmbedder(), reranker=Hangs(), rerank_timeout=0.05).retrieve(
            "apple", 4
        )
    finally:
        release.set()
    assert [r.doc_id for r in results] == FUSED_ORDER
    assert results[0].provenance["rerank_fallback"] == "timed out after 0.05 s"


# --------------------------------------------------------------------------------------------
# Parent-child
# --------------------------------------------------------------------------------------------


def test_chunks_resolve_to_their_parent_with_the_best_chunk_score() -> None:
    docs = [
        Document("long", "apple one two three four five six seven eight nine ten apple apple"),
        Document("short", "apple"),
    ]
    store = build_store(docs, TableEmbedder(), StoreConfig.from_dict({"chunking": {"size": 4}}))
    assert store.doc_ids == ["long#0", "long#1", "long#2", "long#3", "short#0"]
    retriever = HybridRetriever(store, None, keyword_weight=1.0)  # BM25 alone: ranks are easy to read
    results = retriever.retrieve("apple", 5)
    assert [r.doc_id for r in results] == ["long", "short"]  # each document once
    chunks = store.bm25.search(["apple"], 10)[0]
    ranked_chunks = [store.doc_ids[row] for row in chunks[1]]
    assert ranked_chunks[0] == "long#3"  # "ten apple apple": the best chunk
    assert results[0].provenance["chunk_id"] == "long#3"
    assert results[0].score == pytest.approx(1.0 / 61)  # the best chunk's fused score
    assert results[1].score == pytest.approx(1.0 / (61 + ranked_chunks.index("short#0")))


# --------------------------------------------------------------------------------------------
# Queries and bad input
# --------------------------------------------------------------------------------------------


def test_punctuation_and_operators_are_not_query_syntax() -> None:
    docs = [
        Document("p1", "The p53 tumour suppressor and what it does"),
        Document("p2", "Cell cycle arrest"),
        Document("p3", "NOT a gene"),
    ]
    embedder = TfidfEmbedder(dim=2, seed=0).fit([doc.full_text for doc in docs])
    store = build_store(docs, embedder)
    results = HybridRetriever(store, embedder).retrieve("what's NOT (p53)?", 3)
    assert results[0].doc_id == "p1"
    assert results[0].provenance["legs"]["keyword"]["rank"] == 0  # BM25 found it: what OR p53
    assert len(HybridRetriever(store, None, keyword_weight=1.0).retrieve("what's NOT (p53)?", 3)) == 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"keyword_weight": -0.1}, r"keyword_weight must be a number in \[0, 1\], got -0.1"),
        ({"keyword_weight": 1.5}, r"keyword_weight must be a number in \[0, 1\], got 1.5"),
        ({"keyword_weight": math.nan}, r"keyword_weight must be a number in \[0, 1\]"),
        ({"rrf_k": 0}, r"rrf_k must be an integer in \[1, 1000000\], got 0"),
        ({"rrf_k": -60}, r"rrf_k must be an integer in \[1, 1000000\]"),
        ({"overfetch_multiplier": 0}, r"overfetch_multiplier must be an integer in \[1, 1000\], got 0"),
        ({"fusion": "max"}, r"fusion must be one of \['rrf', 'convex', 'combsum', 'combmnz'\]"),
        ({"normalization": "l2"}, r"normalization must be one of \['minmax', 'zscore'\]"),
        ({"min_score": math.inf}, "min_score must be a finite number or null"),
        ({"filters": {"meta": {}}}, r"unknown filters key\(s\) \['meta'\]"),
        ({"filters": "lang=en"}, "filters must be a mapping of MetadataFilter settings or null"),
        ({"reranker": "cross-encoder"}, "reranker must be null or an object with a rerank"),
        ({"rerank_timeout": 0}, r"rerank_timeout must be a number in \(0, 3600\] or null, got 0"),
        ({"query_batch_size": 0}, r"query_batch_size must be an integer in \[1, 65536\], got 0"),
    ],
)
def test_bad_parameters_are_rejected_with_the_range(small: ContextStore, params: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        HybridRetriever(small, TableEmbedder(), **params)
    with pytest.raises(ValueError, match=message):
        HybridRetriever.Params(**params)


def test_bad_queries_and_embedders(small: ContextStore) -> None:
    retriever = HybridRetriever(small, TableEmbedder())
    for query in ("", "   "):
        with pytest.raises(ValueError, match="query must be a non-empty string"):
            retriever.retrieve(query)
    with pytest.raises(ValueError, match="query must be a non-empty string"):
        retriever.retrieve_batch(["apple", ""])
    with pytest.raises(ValueError, match="top_k must be an integer >= 1"):
        retriever.retrieve("apple", 0)
    with pytest.raises(ValueError, match="HybridRetriever needs an embedder"):
        HybridRetriever(small, None)
    other = TfidfEmbedder(dim=2).fit(["alpha beta gamma", "delta epsilon zeta"])
    with pytest.raises(ValueError, match="is not the one the store was built with"):
        HybridRetriever(small, other)


# --------------------------------------------------------------------------------------------
# Oracles on ADI
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def adi(shared_datasets: Path):  # type: ignore[no-untyped-def]
    dataset = load_dataset(str(shared_datasets / "adi"), "test")
    documents = list(dataset.corpus.values())
    embedder = TfidfEmbedder(dim=64, seed=0).fit([d.full_text for d in sorted(documents, key=lambda d: d.id)])
    store = build_store(documents, embedder)
    chunked = build_store(
        documents, embedder, StoreConfig.from_dict({"chunking": {"size": 16, "overlap": 4}})
    )
    return [query.text for query in dataset.queries.values()], store, chunked, embedder


@pytest.mark.needs_data
@pytest.mark.parametrize("fusion", ["rrf", "convex", "combsum", "combmnz"])
@pytest.mark.parametrize("chunked", [False, True])
def test_batch_equals_single(adi, fusion: str, chunked: bool) -> None:  # type: ignore[no-untyped-def]
    queries, store, chunked_store, embedder = adi
    retriever = HybridRetriever(
        chunked_store if chunked else store, embedder, fusion=fusion, query_batch_size=7
    )
    batch = retriever.retrieve_batch(queries, 20)
    assert batch == [retriever.retrieve(query, 20) for query in queries]
    serial = HybridRetriever(chunked_store if chunked else store, embedder, fusion=fusion, parallel=False)
    assert serial.retrieve_batch(queries, 20) == batch
    assert all(len(results) == 20 for results in batch[:5])


@pytest.mark.needs_data
def test_one_leg_weights_reproduce_the_flat_retrievers(adi) -> None:  # type: ignore[no-untyped-def]
    queries, store, _, embedder = adi
    dense_only = HybridRetriever(store, embedder, keyword_weight=0.0)
    bm25_only = HybridRetriever(store, None, keyword_weight=1.0)
    dense, bm25 = DenseRetriever(store, embedder), BM25Retriever(store)
    for query in queries:
        assert [r.doc_id for r in dense_only.retrieve(query, 10)] == [
            r.doc_id for r in dense.retrieve(query, 10)
        ]
        assert [r.doc_id for r in bm25_only.retrieve(query, 10)] == [
            r.doc_id for r in bm25.retrieve(query, 10)
        ]


# -- context: the best neighbour's fused score -----------------------------------------------------


def _chained(store: ContextStore) -> ContextStore:
    """``small`` plus sequence edges d1 -> d2 -> d3 -> d4 (a copy: the module's store stays edgeless)."""
    from retrievers.store.edges import EdgeSet
    from retrievers.types import Edge

    chained = build_store(DOCS, TableEmbedder())
    pairs = [("d1", "d2"), ("d2", "d3"), ("d3", "d4")]
    chained = chained.with_parts(
        edges=EdgeSet.from_edges([Edge(a, b, "sequence", 1.0, "") for a, b in pairs], chained.row_of)
    )
    return chained


def test_context_adds_the_best_neighbours_fused_score_by_hand(small: ContextStore) -> None:
    store = _chained(small)
    fused = {  # weighted RRF as in test_weighted_rrf_by_hand
        "d1": 0.7 / 63 + 0.3 / 61,
        "d2": 0.7 / 62 + 0.3 / 62,
        "d3": 0.7 / 61,
        "d4": 0.7 / 64,
    }
    results = HybridRetriever(store, TableEmbedder(), context_weight=0.5).retrieve("apple", 4)
    expected = {  # each document: its own + 0.5 x the best of the documents before and after it
        "d1": fused["d1"] + 0.5 * fused["d2"],
        "d2": fused["d2"] + 0.5 * max(fused["d1"], fused["d3"]),
        "d3": fused["d3"] + 0.5 * max(fused["d2"], fused["d4"]),
        "d4": fused["d4"] + 0.5 * fused["d3"],
    }
    check(results, sorted(expected.items(), key=lambda pair: (-pair[1], pair[0])), rel=1e-12)
    top = results[0]
    assert top.provenance["own_score"] == pytest.approx(fused[top.doc_id])
    assert top.provenance["context_boost"] == pytest.approx((top.score - fused[top.doc_id]) / 0.5)
    # a neighbour neither leg returned joins the candidates with its neighbour's share only: BM25
    # alone finds d1 and d2; d3 (after d2) joins, d4 (after d3, which no leg found) does not
    keyword_only = HybridRetriever(store, None, keyword_weight=1.0, context_weight=0.5)
    assert dict(scored(keyword_only.retrieve("apple", 4))) == pytest.approx(
        {"d1": 1 / 61 + 0.5 / 62, "d2": 1 / 62 + 0.5 / 61, "d3": 0.5 / 62}
    )


def test_context_weight_zero_changes_nothing_and_respects_the_mask(small: ContextStore) -> None:
    store = _chained(small)
    plain = HybridRetriever(small, TableEmbedder()).retrieve("apple", 4)
    assert scored(HybridRetriever(store, TableEmbedder(), context_weight=0.0).retrieve("apple", 4)) == scored(
        plain
    )
    shelf_y = HybridRetriever(
        store, TableEmbedder(), context_weight=1.0, filters={"metadata": {"shelf": "y"}}
    ).retrieve("apple", 4)
    assert {result.doc_id for result in shelf_y} == {"d2", "d3"}  # d1 and d4 are neighbours, filtered out


def test_context_needs_edges_of_a_known_relation(small: ContextStore) -> None:
    with pytest.raises(ValueError, match="needs a store with edges"):
        HybridRetriever(small, TableEmbedder(), context_weight=0.5)
    with pytest.raises(ValueError, match=r"no relation \['cites'\]; they have \['sequence'\]"):
        HybridRetriever(_chained(small), TableEmbedder(), context_weight=0.5, context_relations=["cites"])
