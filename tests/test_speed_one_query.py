"""Issue 30's wrapper overhead: the lean one-query path (retrievers/index/ann_one.py) and IVF-PQ's
float32 heap (retrievers.index.rescore.refined_top), bit for bit against the general path and the
previous path (faiss asked for the contract's candidates, every one rescored).

The corpus has 40 rows tied at the top of queries 0 and 1 (exact copies, and copies 1 ulp apart):
there the best 2k candidates all lie within the rounding band, so the lean path must hand the
query to the general path and IVF-PQ must score every candidate.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np
import pytest
from test_ann_fast_path import assert_same, previous, tied_corpus

from retrievers.index import ExactVectorIndex, FaissVectorIndex
from retrievers.index import ann as ann_module
from retrievers.index import ann_one as ann_one_module
from retrievers.index.exact_kernel import NUMPY
from retrievers.index.rescore import float32_scores, refined_top, rescore
from retrievers.store.vector_index_config import VectorIndexConfig

KNOBS: dict[str, dict[str, int]] = {
    "flat": {},
    "hnsw": {"ef_search": 64},
    "ivf_flat": {"nprobe": 8},
    "ivf_pq": {"nprobe": 8, "refine_factor": 60},  # 600 candidates: every tied row among them
}


def built(kind: str, seed: int) -> tuple[FaissVectorIndex, np.ndarray]:
    vectors, queries = tied_corpus(seed)
    extra: dict[str, Any] = {"nlist": 8} if kind.startswith("ivf") else {}
    if kind == "ivf_pq":
        extra.update(pq_m=4, pq_bits=4)
    return FaissVectorIndex.build(ExactVectorIndex(vectors), VectorIndexConfig(kind=kind, **extra)), queries


class OneQuerySpy:
    """ann.one_query, recording whether each call answered (True) or handed over (False)."""

    def __init__(self) -> None:
        self.answered: list[bool] = []

    def __call__(self, *args: Any) -> Any:
        found = ann_one_module.one_query(*args)
        self.answered.append(found is not None)
        return found


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf_flat", "ivf_pq"])
def test_one_query_equals_the_general_path_and_hands_over_at_ties(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, queries = built(kind, seed=31)
    spy = OneQuerySpy()
    monkeypatch.setattr(ann_module, "one_query", spy)
    knobs = KNOBS[kind]
    lean = [index.search(query, 10, **knobs)[0] for query in queries]
    # flat and HNSW ask for 2k first, IVF-Flat for k + 3: all within the band at the tied
    # queries 0 and 1; IVF-PQ's 600 are all rescored, so it never asks again
    tied = [kind != "ivf_pq"] * 2
    assert spy.answered == [not tie for tie in tied] + [True] * 10
    general = [index.search(query[None, :], 10, **knobs)[0] for query in queries]  # (1, dim): general
    assert len(spy.answered) == 12
    assert_same(lean, general)
    assert_same(lean, index.search(queries, 10, **knobs))  # batch == single
    if kind == "flat":
        want = index.exact.search(queries, 10)
    else:
        fetch = {"hnsw": 64, "ivf_flat": 20, "ivf_pq": 600}[kind]
        want = previous(index, queries, 10, fetch, **knobs)
    assert_same(lean, want)
    np.testing.assert_array_equal(lean[0][1], [7, *range(200, 209)])  # ties by row


def test_one_query_takes_the_general_path_for_what_it_does_not_handle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index, queries = built("hnsw", seed=32)
    spy = OneQuerySpy()
    monkeypatch.setattr(ann_module, "one_query", spy)
    query = queries[5]
    want = index.search(query, 10)
    assert spy.answered == [True]
    mask = np.ones(index.size, dtype=bool)
    assert_same(index.search(query, 10, mask=mask), want)  # a mask
    assert_same(index.search(query.astype(np.float64), 10), want)  # float64: converted
    assert_same(index.search(np.asfortranarray(queries)[5], 10), want)  # a strided view
    assert len(index.search(query, index.size)[0][1]) == index.size  # k = every row
    for value in (np.nan, np.inf):
        bad = query.copy()
        bad[3] = value
        with pytest.raises(ValueError, match="NaN or infinite"):
            index.search(bad, 10)
    # faiss searched them (it answers a query that is not finite without harm), the compiled
    # call found the query's norm not finite and handed it over: the general path refused it
    assert spy.answered == [True, False, False]


def test_one_query_runs_faiss_on_one_thread_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    index, queries = built("ivf_flat", seed=33)
    seen: list[int] = []
    search_one = ann_one_module.search_one

    def recording(*args: Any) -> Any:
        seen.append(faiss.omp_get_max_threads())
        return search_one(*args)

    monkeypatch.setattr(ann_one_module, "search_one", recording)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)
    try:
        index.search(queries[4], 10)
        assert seen == [1]
        assert faiss.omp_get_max_threads() == 2
    finally:
        faiss.omp_set_num_threads(before)


def test_refined_top_keeps_the_best_float32_candidates_best_first() -> None:
    rng = np.random.default_rng(34)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    queries = rng.standard_normal((5, 16)).astype(np.float32)
    labels = np.stack([rng.choice(300, size=40, replace=False) for _ in range(5)]).astype(np.int64)
    labels[1, 30:] = -1  # faiss found 30
    labels[2, 6:] = -1  # fewer than wanted
    scores, rows, missing = refined_top(faiss, vectors, queries, labels, 12)
    assert missing == []
    everything = float32_scores(faiss, vectors, queries, labels)  # the same dot products
    for i in range(5):
        order = np.argsort(-everything[i], kind="stable")[: min(12, int((labels[i] >= 0).sum()))]
        assert rows[i, : order.size].tolist() == labels[i, order].tolist()
        assert scores[i, : order.size].tobytes() == everything[i, order].tobytes()
        assert (rows[i, order.size :] == -1).all()
    one_scores, one_rows, _ = refined_top(faiss, vectors, queries[2], labels[2:3], 12)  # a (dim,) query
    assert one_rows.tobytes() == rows[2:3].tobytes() and one_scores.tobytes() == scores[2:3].tobytes()


def test_refined_top_reports_a_candidate_its_heap_dropped() -> None:
    """A product that overflows to -inf never enters faiss's heap: refined_top says so, so the
    caller scores every candidate (and its rescoring refuses the overflow)."""
    vectors = np.zeros((6, 4), dtype=np.float32)
    vectors[:, 1] = np.arange(6, dtype=np.float32)
    vectors[0, 0] = -3e38
    query = np.array([[10, 1, 0, 0]], dtype=np.float32)
    labels = np.array([[0, 2, 5, -1]], dtype=np.int64)
    _, rows, missing = refined_top(faiss, vectors, query, labels, 4)
    assert rows[0].tolist() == [5, 2, -1, -1] and missing == [0]
    _, rows, missing = refined_top(faiss, vectors, query, labels[:, 1:], 2)  # full heaps: nothing dropped
    assert rows[0].tolist() == [5, 2] and missing == []


def test_a_query_whose_heap_dropped_a_candidate_is_scored_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    index, queries = built("ivf_pq", seed=35)
    knobs = KNOBS["ivf_pq"]
    want = previous(index, queries, 10, 600, **knobs)

    def dropping(*args: Any) -> Any:  # query 4's heap lost everything
        scores, rows, _ = refined_top(*args)
        if rows.shape[0] > 4:
            rows[4] = -1
            return scores, rows, [4]
        rows[0] = -1
        return scores, rows, [0]

    monkeypatch.setattr(ann_module, "refined_top", dropping)
    assert_same(index.search(queries, 10, **knobs), want)
    spy = OneQuerySpy()
    monkeypatch.setattr(ann_module, "one_query", spy)
    monkeypatch.setattr(ann_one_module, "checked_top", lambda *args: NUMPY)  # a score not finite
    monkeypatch.setattr(ann_module, "refined_top", refined_top)
    assert_same([index.search(queries[4], 10, **knobs)[0]], want[4:5])
    assert spy.answered == [False]  # handed over to the general path


def test_rescoring_every_candidate_is_the_reference() -> None:
    """The reference of these tests is what the exact index returns over the same rows."""
    vectors, queries = tied_corpus(36)
    rows = np.arange(vectors.shape[0], dtype=np.int64)
    assert_same(
        rescore(vectors, queries, [rows] * len(queries), 10), ExactVectorIndex(vectors).search(queries, 10)
    )
