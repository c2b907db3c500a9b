"""Reranking inside the hierarchical traversal (thinking mode) and every fallback path: the
reranker raises, times out, returns None, the wrong length, or a non-finite value for one item;
empty texts are never sent; quick mode never calls it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest
from test_hierarchical import TABLE, R, TableEmbedder, scored  # tests/ is on sys.path (no package)

from retrievers import ContextNode, ContextStore, Document, StoreConfig
from retrievers.hierarchical import HierarchicalRetriever
from retrievers.build.hierarchy import embed_directories
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
    embedder = TableEmbedder(TABLE)
    docs = [Document(id=name, text=f"doc {name}") for name in ("a1", "a2", "b1", "b2")]
    store = ContextStore.build(docs, embedder, StoreConfig())
    nodes = [
        ContextNode(R, 0, None, abstract="root abstract"),
        ContextNode(f"{R}/a", 0, R, abstract="about a"),
        ContextNode(f"{R}/b", 0, R, abstract="about b"),
        *(ContextNode(f"{R}/{d[0]}/{d}", 2, f"{R}/{d[0]}", doc_id=d) for d in ("a1", "a2", "b1", "b2")),
    ]
    store.tree = embed_directories(nodes, embedder, store.embeddings, store.row_of)
    return store, embedder


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


@pytest.mark.parametrize(
    "answer",
    [
        RuntimeError("model crashed"),
        None,
        [0.5],  # wrong length
        "1,2",  # not a list of numbers
    ],
    ids=["raises", "none", "wrong-length", "string"],
)
def test_whole_call_falls_back_to_vector_scores(small, answer: object) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    reranker = Broken(answer)
    results = HierarchicalRetriever(store, embedder, reranker=reranker, **COMMON).retrieve("q", 4)
    assert scored(results) == VECTOR_ONLY
    assert all(r.provenance["rerank_fallback"] for r in results)
    assert all("rerank_score" not in r.provenance for r in results)
    stats = results[0].provenance["stats"]
    assert stats["rerank_fallbacks"] == stats["rerank_calls"] == reranker.calls > 0


def test_a_non_finite_item_falls_back_alone(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small

    def answer(candidates: Sequence[RetrievalResult]) -> list[float]:
        return [float("nan") if name_of(c) == "b2" else RERANK[name_of(c)] for c in candidates]

    results = HierarchicalRetriever(store, embedder, reranker=Broken(answer), **COMMON).retrieve("q", 4)
    by_id = {r.doc_id: r for r in results}
    # b2 keeps its vector score .75: .5*.75 + .5*1 = .875; the others are reranked as above
    assert scored(results) == [("b2", 0.875), ("b1", 0.75), ("a1", 0.375), ("a2", 0.25)]
    assert by_id["b2"].provenance["rerank_fallback"] is True
    assert by_id["b1"].provenance["rerank_fallback"] is False
    assert results[0].provenance["stats"]["rerank_fallbacks"] == 1


def test_time_out_falls_back(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    slow = Slow()
    try:
        retriever = HierarchicalRetriever(store, embedder, reranker=slow, rerank_timeout=0.05, **COMMON)
        results = retriever.retrieve("q", 4)
        assert slow.started.is_set()
        assert scored(results) == VECTOR_ONLY
        assert all(r.provenance["rerank_fallback"] for r in results)
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
    store.tree = embed_directories(
        nodes, embedder, store.embeddings, store.row_of, directory_vector="centroid"
    )
    reranker = TableReranker()
    results = HierarchicalRetriever(store, embedder, reranker=reranker, **COMMON).retrieve("q", 4)
    assert all(text.strip() for texts in reranker.texts for text in texts)
    assert all("b" not in call for call in reranker.calls)  # b was never sent, it kept its vector score
    assert {r.doc_id for r in results} == {"a1", "a2", "b1", "b2"}
    assert np.isfinite([r.score for r in results]).all()


def test_bad_rerank_timeout(small) -> None:  # type: ignore[no-untyped-def]
    store, embedder = small
    with pytest.raises(ValueError, match=r"rerank_timeout must be in \(0, 3600\] seconds or null"):
        HierarchicalRetriever(store, embedder, rerank_timeout=0)
