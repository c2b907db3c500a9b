"""Reranking inside the hierarchical traversal (thinking mode) through the one fallback policy
(retrievers.rerank.rerank_with_fallback): a reranker that raises, times out, returns None, the
wrong length, a string or a non-finite value for one item voids that whole call, and the reason is
in the provenance of what the call scored; empty texts are never sent; quick mode never calls it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
from test_hierarchical import R, TableEmbedder, scored, small_store  # tests/ is on sys.path (no package)

from retrievers import ContextNode, ContextStore
from retrievers.builders.hierarchy import embed_directories
from retrievers.hierarchical import HierarchicalRetriever
from retrievers.types import RetrievalResult

# Reranker scores by node name; compare with the vector scores in test_hierarchical.TABLE.
RERANK = {"": 0.0, "a": 0.25, "b": 1.0, "a1": 0.5, "a2": 0.25, "b1": 0.5, "b2": 1.0}


def name_of(candidate: RetrievalResult) -> str:
    return candidate.uri.removeprefix(R).rsplit("/", 1)[-1]


class TableReranker:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.texts: list[list[str]] = []

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        self.calls.append([name_of(c) for c in candidates])
        self.texts.append(list(texts))
        return [RERANK[name_of(c)] for c in candidates]


class Broken:
    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.calls = 0

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> object:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        if callable(self.answer):
            return self.answer(candidates)
        return self.answer


class Slow:
    """Blocks until released: a reranker that never answers in time (no sleeping in tests)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        self.started.set()
        self.release.wait(timeout=30)
        return [100.0] * len(candidates)


@pytest.fixture
def small() -> tuple[ContextStore, TableEmbedder]:
    return small_store()


COMMON = {"global_search_topk": 3, "max_convergence_rounds": None}
VECTOR_ONLY = [("b1", 0.75), ("a1", 0.625), ("b2", 0.625), ("a2", 0.5)]  # test_hierarchical, worked out


def test_rerank_scores_replace_vector_scores_in_thinking_mode(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    reranker = TableReranker()
    results = HierarchicalRetriever(store, embedder, reranker=reranker, **COMMON).retrieve("q", 4)
    # start points reranked: b 1.0, a .25, root 0.0 (in that order on the heap)
    # pop b: b1 = .5*.5 + .5*1 = .75, b2 = .5*1 + .5*1 = 1.0; pop a: a1 = .5*.5 + .5*.25 = .375, a2 = .25
    assert scored(results) == [("b2", 1.0), ("b1", 0.75), ("a1", 0.375), ("a2", 0.25)]
    assert results[0].provenance["rerank_score"] == 1.0
    assert results[0].provenance["pre_propagation_score"] == 0.75  # the vector score
    assert all(r.provenance["rerank_fallback"] is None for r in results)
    assert reranker.calls[0] == ["a", "b", ""]  # the start points (the root's name is empty)
    assert ["b1", "b2"] in reranker.calls and ["a1", "a2"] in reranker.calls
    assert reranker.texts[0] == ["about a", "about b", "root abstract"]  # directories: abstracts
    assert ["doc b1", "doc b2"] in reranker.texts  # leaves: the document text
    stats = results[0].provenance["stats"]
    assert stats["rerank_calls"] == len(reranker.calls) and stats["rerank_fallbacks"] == 0


def test_quick_mode_never_reranks(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    reranker = TableReranker()
    results = HierarchicalRetriever(store, embedder, reranker=reranker, mode="quick", **COMMON).retrieve(
        "q", 4
    )
    assert scored(results) == VECTOR_ONLY and reranker.calls == []
    assert "rerank_fallback" not in results[0].provenance  # quick mode does not rerank


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (RuntimeError("model crashed"), "raised RuntimeError: model crashed"),
        (None, "returned None"),
        ([0.5], "returned 1 scores for 2 candidates"),  # leaves are scored in pairs here
        ("1,2", "returned str, not a list of scores"),
    ],
    ids=["raises", "none", "wrong-length", "string"],
)
def test_whole_call_falls_back_to_vector_scores(small, answer: object, reason: str) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    reranker = Broken(answer)
    results = HierarchicalRetriever(store, embedder, reranker=reranker, **COMMON).retrieve("q", 4)
    assert scored(results) == VECTOR_ONLY
    assert all(r.provenance["rerank_fallback"] == reason for r in results)
    assert all("rerank_score" not in r.provenance for r in results)
    stats = results[0].provenance["stats"]
    assert stats["rerank_fallbacks"] == stats["rerank_calls"] == reranker.calls > 0


def test_a_non_finite_item_voids_its_whole_call(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small

    def answer(candidates: Sequence[RetrievalResult]) -> list[float]:
        return [float("nan") if name_of(c) == "b2" else RERANK[name_of(c)] for c in candidates]

    results = HierarchicalRetriever(store, embedder, reranker=Broken(answer), **COMMON).retrieve("q", 4)
    by_id = {r.doc_id: r for r in results}
    # start points reranked as above (b 1.0, a .25, root 0.0). Pop b: the call for [b1, b2] fails
    # on b2, so both keep their vector scores: b1 = .5*1 + .5*1 = 1.0, b2 = .5*.75 + .5*1 = .875.
    # Pop a: reranked, a1 = .5*.5 + .5*.25 = .375, a2 = .5*.25 + .5*.25 = .25.
    assert scored(results) == [("b1", 1.0), ("b2", 0.875), ("a1", 0.375), ("a2", 0.25)]
    reason = "returned nan for 'b2', not a finite number"
    assert by_id["b1"].provenance["rerank_fallback"] == by_id["b2"].provenance["rerank_fallback"] == reason
    assert "rerank_score" not in by_id["b1"].provenance
    assert by_id["a1"].provenance["rerank_fallback"] is None and by_id["a1"].provenance["rerank_score"] == 0.5
    assert results[0].provenance["stats"]["rerank_fallbacks"] == 1


def test_time_out_falls_back(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    slow = Slow()
    try:
        retriever = HierarchicalRetriever(store, embedder, reranker=slow, rerank_timeout=0.05, **COMMON)
        results = retriever.retrieve("q", 4)
        assert slow.started.is_set()
        assert scored(results) == VECTOR_ONLY
        assert all(r.provenance["rerank_fallback"] == "timed out after 0.05 s" for r in results)
    finally:
        slow.release.set()


def test_empty_texts_are_not_sent(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    tree = store.tree
    assert tree is not None
    # the same tree with b's abstract empty (its vector: the centroid of b1 and b2)
    nodes = [
        ContextNode(
            node.uri,
            node.level,
            node.parent_uri,
            abstract="" if node.uri == f"{R}/b" else node.abstract,
            doc_id=node.doc_id,
        )
        for node in tree.nodes
    ]
    store = store.with_parts(
        tree=embed_directories(nodes, embedder, store.embeddings, store.row_of, directory_vector="centroid")
    )
    reranker = TableReranker()
    results = HierarchicalRetriever(store, embedder, reranker=reranker, **COMMON).retrieve("q", 4)
    assert all(text.strip() for texts in reranker.texts for text in texts)
    assert all("b" not in call for call in reranker.calls)  # b is never sent
    # b scores the lowest reranker score of its call minus 1 (rerank_with_fallback's rule):
    # start points a .25, root 0.0, b 0.0 - 1 = -1. Pop a: a1 = .5*.5 + .5*.25 = .375,
    # a2 = .5*.25 + .5*.25 = .25. Pop root (0.0): a .25 -> .125, b .25 - 1 = -.75 -> -.375,
    # pushed again. Pop b (-.375): b1 = .5*.5 - .1875 = .0625, b2 = .5*1 - .1875 = .3125.
    assert scored(results) == [("a1", 0.375), ("b2", 0.3125), ("a2", 0.25), ("b1", 0.0625)]
    assert all(r.provenance["rerank_fallback"] is None for r in results)


def test_bad_rerank_timeout(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    with pytest.raises(ValueError, match=r"^rerank_timeout must be a number in \(0, 3600\] or null, got 0$"):
        HierarchicalRetriever(store, embedder, rerank_timeout=0)


def test_find_reranks_too_and_says_so(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    found = HierarchicalRetriever(store, embedder, reranker=TableReranker(), **COMMON).find("q", 4)
    assert [(m.doc_id, m.score) for m in found.resources] == [
        ("b2", 1.0),
        ("b1", 0.75),
        ("a1", 0.375),
        ("a2", 0.25),
    ]
    assert found.resources[0].provenance["rerank_fallback"] is None
    assert found.resources[0].provenance["rerank_score"] == 1.0
