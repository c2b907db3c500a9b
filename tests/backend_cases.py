"""Shared cases of the search-backend tests (tests/test_backend_*.py): a small synthetic corpus
with conversations, sessions, turns and times; stores over it (edges + tree, chunked); every
family with plain, filtered and scoped settings; and the checks that a backend's run equals the
local run (vector legs and filters exactly; keyword legs against the database's own scoring).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from retrievers import (
    BM25Retriever,
    DenseRetriever,
    GraphRetriever,
    HierarchicalRetriever,
    HybridRetriever,
    MultiStrategyRetriever,
    TfidfEmbedder,
)
from retrievers.backends import SearchBackend, attach
from retrievers.builders import build_store
from retrievers.filters import MetadataFilter
from retrievers.store import ContextStore, StoreConfig
from retrievers.types import Document

#: words every stemmer leaves as they are (porter, Snowball english), none a stopword
WORDS = [
    "cat",
    "dog",
    "fish",
    "bird",
    "tree",
    "rock",
    "river",
    "cloud",
    "sun",
    "moon",
    "star",
    "sea",
    "hill",
    "road",
    "car",
    "ship",
]
QUERIES = [
    "cat dog",
    "dog dog fish",
    "river sun moon",
    "ship car road",
    "bird",
    "tree rock cloud star",
    "sea hill fish",
]


def corpus(n: int = 96, seed: int = 0, words: Sequence[str] = WORDS) -> list[Document]:
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        length = int(rng.integers(4, 14))
        docs.append(
            Document(
                id=f"d{i:03d}",
                title="",
                text=" ".join(rng.choice(list(words), length)),
                metadata={
                    "conversation": f"c{i % 3}",
                    "session": f"s{(i // 3) % 4}",
                    "turn_index": i // 12,
                    "timestamp": f"2023-05-{1 + i % 28:02d}T10:00:00",
                },
            )
        )
    return docs


def embedder_for(docs: Sequence[Document]) -> TfidfEmbedder:
    return TfidfEmbedder(dim=16, seed=0).fit([doc.full_text for doc in docs])


def family_store(docs: Sequence[Document] | None = None) -> tuple[ContextStore, TfidfEmbedder]:
    """A store with edges (graph) and a k-means tree (hierarchical)."""
    docs = list(docs or corpus())
    embedder = embedder_for(docs)
    config = StoreConfig.from_dict(
        {
            "edges": {"sequence": {"group_keys": ["conversation", "session"], "order_key": "turn_index"}},
            "hierarchy": {"builder": "kmeans", "branching_factor": 3, "max_leaf_size": 12},
        }
    )
    return build_store(docs, embedder, config), embedder


def chunked_store() -> tuple[ContextStore, TfidfEmbedder]:
    """Rows are chunks of 4 words: searches are child searches, results their parents."""
    docs = corpus(48, seed=1)
    embedder = embedder_for(docs)
    return build_store(docs, embedder, StoreConfig.from_dict({"chunking": {"size": 4}})), embedder


FILTERS: dict[str, MetadataFilter | None] = {
    "none": None,
    "metadata": MetadataFilter.from_dict({"metadata": {"conversation": ["c1", "c2"]}}),
    "time": MetadataFilter.from_dict({"time_range": {"start": "2023-05-03", "end": "2023-05-09"}}),
    "ids": MetadataFilter.from_dict({"doc_ids": [f"d{i:03d}" for i in range(0, 96, 7)]}),
}

#: family -> (class, parameters); ef/knobs none: exact settings
FAMILIES: dict[str, tuple[type, dict[str, Any]]] = {
    "bm25": (BM25Retriever, {}),
    "dense": (DenseRetriever, {}),
    "hybrid": (HybridRetriever, {}),
    "graph": (GraphRetriever, {"seed_keyword_weight": 0.3}),
    "hierarchical": (HierarchicalRetriever, {}),
    "multi_strategy": (MultiStrategyRetriever, {}),
}


class LocalKeywords(SearchBackend):
    """A backend whose vector searches are ``inner``'s and whose keyword searches are the local
    bm25s index: a run through it isolates what the backend changes besides keyword scoring."""

    def __init__(self, inner: SearchBackend, store: ContextStore) -> None:
        super().__init__(inner.config, inner.identity)
        self.inner, self.bm25 = inner, store.bm25
        self.kind = inner.kind  # type: ignore[misc]

    def write(self, store: ContextStore) -> bool:
        return False

    def vector_search(self, queries: np.ndarray, k: int, rows: Any, **knobs: Any) -> Any:
        return self.inner.vector_search(queries, k, rows, **knobs)

    def _mask(self, rows: Any) -> Any:
        if rows is None:
            return None
        mask = np.zeros(self.identity.rows, dtype=bool)
        mask[rows] = True
        return mask

    def keyword_search(self, queries: Sequence[str], k: int, rows: Any) -> Any:
        return self.bm25.search(list(queries), k, mask=self._mask(rows))

    def keyword_scores(self, query: str) -> Any:
        return self.bm25.scores(query)


def run(retriever: Any, queries: Sequence[str] = QUERIES, top_k: int = 10) -> list[list[tuple[str, float]]]:
    return [
        [(r.doc_id, r.score) for r in results] for results in retriever.retrieve_batch(list(queries), top_k)
    ]


def assert_same_runs(
    local: list[list[tuple[str, float]]], other: list[list[tuple[str, float]]], what: str
) -> None:
    """Same rankings, scores within 1e-5."""
    assert len(local) == len(other), what
    for i, (a, b) in enumerate(zip(local, other, strict=True)):
        assert [doc for doc, _ in a] == [doc for doc, _ in b], f"{what}: query {i} ranks differently"
        assert all(abs(x - y) <= 1e-5 for (_, x), (_, y) in zip(a, b, strict=True)), (
            f"{what}: query {i} scores"
        )


def scoped(store: ContextStore) -> ContextStore:
    """The store restricted to conversation c1 (LoCoMo's per-conversation scope)."""
    return store.restricted(store.metadata_mask("conversation", "c1"))


def check_every_family(backend: SearchBackend, store: ContextStore, embedder: TfidfEmbedder) -> int:
    """Every family x {no filter, metadata, time, ids filter} x {whole, scoped store}: the backend
    (its keyword leg the local one) gives the local run. Returns the number of runs compared."""
    routed = LocalKeywords(backend, store)
    compared = 0
    for view in (store, scoped(store)):
        served = attach(view, routed)
        for family, (cls, params) in FAMILIES.items():
            for name, chosen in FILTERS.items():
                if family == "hierarchical" and name != "none":
                    continue  # the tree search scopes by subtree, not by these filters
                chosen_params = {**params, **({"filters": chosen} if chosen is not None else {})}
                local = run(cls(view, embedder, **chosen_params))
                other = run(cls(served, embedder, **chosen_params))
                assert_same_runs(local, other, f"{family} filter={name} scoped={view.allowed is not None}")
                compared += 1
    return compared


def check_vector_leg(backend: SearchBackend, store: ContextStore, embedder: TfidfEmbedder) -> None:
    """The dense family through the backend itself (no substitution) equals the local run, with and
    without each filter, and a filtered top-k is the top-k of the filtered rows."""
    served = attach(store, backend)
    for name, chosen in FILTERS.items():
        params = {"filters": chosen} if chosen is not None else {}
        local = run(DenseRetriever(store, embedder, **params), top_k=12)
        other = run(DenseRetriever(served, embedder, **params), top_k=12)
        assert_same_runs(local, other, f"dense filter={name}")
        assert local == other  # to the bit: each row is scored from its stored vector as locally
        if chosen is not None:  # a filtered top-k holds k allowed rows whenever k exist
            allowed = {
                store.doc_ids[int(row)]
                for row in np.flatnonzero(DenseRetriever(store, embedder, filters=chosen).scope)
            }
            assert all(
                len(hits) == min(12, len(allowed)) and {d for d, _ in hits} <= allowed for hits in other
            )


def check_chunked(backend: SearchBackend, store: ContextStore, embedder: TfidfEmbedder) -> None:
    """Child (chunk) searches resolve to the same parents with the same scores."""
    routed = attach(store, LocalKeywords(backend, store))
    for cls in (DenseRetriever, HybridRetriever, BM25Retriever):
        assert_same_runs(run(cls(store, embedder)), run(cls(routed, embedder)), f"chunked {cls.__name__}")
    assert_same_runs(
        run(DenseRetriever(store, embedder)),
        run(DenseRetriever(attach(store, backend), embedder)),
        "chunked dense",
    )


def hand_bm25(
    texts: Sequence[list[str]],
    query: list[str],
    *,
    k1: float,
    b: float,
    idf: Callable[[int, int], float],
    repeats: bool = False,
) -> np.ndarray:
    """BM25 written out: sum over distinct query terms (each occurrence, with ``repeats``) of
    idf(n, N) * tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl))."""
    n_docs = len(texts)
    counts = [Counter(terms) for terms in texts]
    lengths = np.asarray([len(terms) for terms in texts], dtype=np.float64)
    average = lengths.mean()
    scores = np.zeros(n_docs)
    for term, times in Counter(query).items():
        holding = sum(1 for count in counts if term in count)
        if not holding:
            continue
        weight = idf(holding, n_docs)
        for row, count in enumerate(counts):
            tf = count.get(term, 0)
            if tf:
                part = weight * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[row] / average))
                scores[row] += part * (times if repeats else 1)
    return scores


def fts5_idf(holding: int, n_docs: int) -> float:
    """FTS5's bm25() idf: log((N - n + 0.5) / (n + 0.5)), at least 1e-6."""
    value = math.log((n_docs - holding + 0.5) / (holding + 0.5))
    return value if value > 0 else 1e-6


def qdrant_idf(holding: int, n_docs: int) -> float:
    """Qdrant's Modifier.IDF: ln(1 + (N - n + 0.5) / (n + 0.5))."""
    return math.log(1 + (n_docs - holding + 0.5) / (holding + 0.5))


def top(scores: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[int]:
    rows = [int(row) for row in np.flatnonzero(scores > 0) if allowed is None or allowed[row]]
    return sorted(rows, key=lambda row: (-scores[row], row))[:k]


def assert_top(rows: Sequence[int], expected: np.ndarray, k: int, allowed: np.ndarray | None = None) -> None:
    """``rows`` is a top-``k`` of ``expected`` (rows scoring > 0, within ``allowed``) in score
    order, up to ties within float32 rounding (a database sums in float32, in its own order)."""
    wanted = top(expected, k, allowed)
    assert len(rows) == len(wanted)
    if not wanted:
        return
    tolerance = 1e-5 * float(expected.max())
    got = expected[list(rows)]
    assert all(got[i] >= got[i + 1] - tolerance for i in range(len(got) - 1)), "not in score order"
    assert got.min() >= expected[wanted[-1]] - tolerance, "a row outside the top k"
    assert allowed is None or all(allowed[row] for row in rows)
