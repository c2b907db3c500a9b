"""Issue 30, IVF-PQ refinement at 10k: the one-query plan kept per (k, knobs), faiss's results
in per-thread arrays and IVF-PQ's candidates rescored by one compiled call
(retrievers/index/ann_one.py, retrievers/index/exact_kernel.py), bit for bit against the general path
(the same query as a (1, dim) matrix) and the previous path (faiss asked for the contract's
candidates, every one rescored: tests/test_ann_fast_path.py's ``previous``).

The corpus (``tied_corpus``) has 40 rows tied at the top of queries 0 and 1 (exact copies, and
copies 1 ulp apart).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np
import pytest
from test_ann_fast_path import assert_same, previous, tied_corpus

from retrievers.index import ExactVectorIndex, FaissVectorIndex
from retrievers.index import ann as ann_module
from retrievers.index import ann_one as ann_one_module
from retrievers.store.vector_index_config import VectorIndexConfig


@functools.cache
def _built(kind: str) -> tuple[FaissVectorIndex, np.ndarray]:
    vectors, queries = tied_corpus(41)
    extra: dict[str, Any] = {"nlist": 8} if kind.startswith("ivf") else {}
    if kind == "ivf_pq":
        extra.update(pq_m=4, pq_bits=4)
    return FaissVectorIndex.build(ExactVectorIndex(vectors), VectorIndexConfig(kind=kind, **extra)), queries


def built(kind: str) -> tuple[FaissVectorIndex, np.ndarray]:
    """The index of ``kind`` over ``tied_corpus`` (built once for this module), no plan kept."""
    index, queries = _built(kind)
    index._plans.clear()
    return index, queries


class PlanSpy:
    """ann.one_plan, counting the plans made."""

    def __init__(self) -> None:
        self.made: list[int] = []

    def __call__(self, *args: Any) -> Any:
        plan = ann_one_module.one_plan(*args)
        self.made.append(plan.length)
        return plan


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf_flat", "ivf_pq"])
def test_a_plan_is_made_once_per_k_and_knobs_and_answers_as_the_general_path(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, queries = built(kind)
    spy = PlanSpy()
    monkeypatch.setattr(ann_module, "one_plan", spy)
    knobs: dict[str, int] = {"nprobe": 8} if kind.startswith("ivf") else {}
    for k in (10, 3, 10):
        lean = [index.search(query, k, **knobs)[0] for query in queries]
        assert_same(lean, [index.search(query[None, :], k, **knobs)[0] for query in queries])
        assert_same(lean, index.search(queries, k, **knobs))
    assert spy.made == [10, 3]  # k = 10 again: its kept plan
    if kind == "ivf_pq":  # another refine_factor: another plan, the previous path's results
        lean = [index.search(query, 10, nprobe=8, refine_factor=60)[0] for query in queries]
        assert_same(lean, previous(index, queries, 10, 600, nprobe=8, refine_factor=60))
        assert spy.made == [10, 3, 10]


@pytest.mark.parametrize(
    ("kind", "name", "good", "bad"),
    [
        ("ivf_flat", "nprobe", 1, True),
        ("ivf_flat", "nprobe", 4, 4.0),
        ("hnsw", "ef_search", 1, True),
        ("hnsw", "ef_search", 32, 32.0),
        ("ivf_pq", "refine_factor", 1, True),
        ("ivf_pq", "refine_factor", 5, np.float64(5.0)),
    ],
)
def test_a_knob_equal_to_a_checked_int_is_still_refused(kind: str, name: str, good: int, bad: Any) -> None:
    """``True == 1`` and ``4.0 == 4`` with the same hash: a kept plan or a remembered check of
    the int must not let the bool or float through (it was let through before: nprobe=True ran
    with nprobe 1)."""
    index, queries = built(kind)
    index.search(queries[3], 10, **{name: good})
    index.search(queries[3:5], 10, **{name: good})  # the general path too
    for query in (queries[3], queries[3:5]):
        with pytest.raises(ValueError, match=f"{name} must be an integer >= 1"):
            index.search(query, 10, **{name: bad})
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        index.search(queries[3], 10.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        index.search(queries[3], 0)


@pytest.mark.parametrize("kind", ["hnsw", "ivf_pq"])
def test_the_index_own_knob_is_read_at_each_search(kind: str) -> None:
    """A plan is kept per knob value, so changing the faiss index's own efSearch / nprobe after a
    search changes the next one, as it does the general path's."""
    index, queries = built(kind)
    query = queries[6]
    index.search(query, 10)  # a plan for the index's own knob
    owner, name = (index._index.hnsw, "efSearch") if kind == "hnsw" else (index._index, "nprobe")
    knob, value = ("ef_search", 10) if kind == "hnsw" else ("nprobe", 1)
    before = getattr(owner, name)
    first = index.search(query, 10)
    try:
        setattr(owner, name, value)
        want = index.search(query, 10, **{knob: value})
        assert_same(index.search(query, 10), want)
        assert_same(index.search(query, 10), index.search(query[None, :], 10))
        assert index.default_knobs() == (
            {knob: value} if kind == "hnsw" else {knob: value, "refine_factor": 10}
        )
    finally:
        setattr(owner, name, before)
    assert_same(index.search(query, 10), first)
    if kind == "ivf_pq":  # one list of 8: other results, so a plan kept for 8 would have answered
        assert first[0][1].tobytes() != want[0][1].tobytes()


def test_a_result_is_not_overwritten_by_the_next_query() -> None:
    """faiss's arrays are reused by the thread's next query: a result keeps
    its own copies (a view would change under the caller)."""
    for kind in ("ivf_pq", "ivf_flat", "hnsw"):
        index, queries = built(kind)
        first = index.search(queries[4], 10)[0]
        kept = (first[0].copy(), first[1].copy())
        for query in queries[5:]:
            index.search(query, 10)
        assert_same([first], [kept])


def test_threads_do_not_share_their_arrays() -> None:
    index, queries = built("ivf_pq")
    want = [index.search(query[None, :], 10)[0] for query in queries]  # the general path
    found: dict[int, list[Any]] = {}

    def run(worker: int) -> None:
        found[worker] = [index.search(query, 10)[0] for _ in range(30) for query in queries]

    threads = [threading.Thread(target=run, args=(worker,)) for worker in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for results in found.values():
        assert_same(results, want * 30)
