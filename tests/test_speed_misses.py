"""Issue 30's remaining misses: the exact batch on one thread per BLAS thread, the lean one-query
path of the faiss wrapper. Every result is checked bit for bit against a straightforward
reference (a full argsort of exact integer scores, or every candidate rescored) with ties.

Integer vectors (-3..3) make every float32 product and sum exact in any order, so the reference
scores are known and ties are real ties, broken by row.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import faiss
import numpy as np
import pytest
from test_exact_batch_floor import integer_rows, reference

from retrievers.index import ExactVectorIndex, FaissVectorIndex
from retrievers.index import blas_threads as blas_module
from retrievers.index import vectors as vectors_module
from retrievers.index.faiss_calls import search_one
from retrievers.index.rescore import band_top, float32_scores, rescore
from retrievers.store.vector_index_config import VectorIndexConfig


def same_bits(found: Any, want: Any) -> bool:
    return len(found) == len(want) and all(
        rows.tobytes() == want_rows.tobytes() and scores.tobytes() == want_scores.tobytes()
        for (scores, rows), (want_scores, want_rows) in zip(found, want, strict=True)
    )


class FakeBlas:
    """threadpoolctl's BLAS selection, ``threads`` threads, recording what it was limited to."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.limited: list[int] = []
        self.lib_controllers = [self]

    @property
    def num_threads(self) -> int:
        return self.limited[-1] if self.limited else self.threads

    @contextlib.contextmanager
    def limit(self, limits: int) -> Iterator[None]:
        self.limited.append(limits)
        try:
            yield
        finally:
            self.limited.pop()


# -- the exact batch: a thread per BLAS thread --------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
def test_batch_on_three_workers_equals_a_full_argsort_and_single_queries(
    masked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBlas(threads=3)
    monkeypatch.setattr(blas_module, "_blas", lambda: fake)
    monkeypatch.setattr(vectors_module, "BATCH_CHUNK_ROWS", 500)  # 8 chunks among 3 workers
    monkeypatch.setattr(vectors_module, "_QUERY_BLOCK", 7)  # several query blocks per chunk
    gemm_threads: set[int] = set()
    blas_during_gemm: set[int] = set()
    steps = ExactVectorIndex._steps

    def spy_steps(self: ExactVectorIndex, *args: Any) -> Any:
        for step in steps(self, *args):
            gemm_threads.add(threading.get_ident())
            blas_during_gemm.add(fake.num_threads)
            yield step

    monkeypatch.setattr(ExactVectorIndex, "_steps", spy_steps)
    vectors = integer_rows(4000, 8, seed=21)
    vectors[1500:1600] = vectors[17]  # 101 exact copies: ties across the cut and the chunks
    queries = integer_rows(30, 8, seed=22)
    queries[0] = vectors[17]
    mask = np.random.default_rng(23).random(4000) < 0.7 if masked else None
    index = ExactVectorIndex(vectors)
    batch = index.search(queries, 25, mask=mask)
    assert gemm_threads and threading.get_ident() not in gemm_threads  # the GEMMs ran in the workers ...
    assert blas_during_gemm == {1}  # ... with BLAS at one thread each
    assert fake.limited == []  # and set back afterwards
    for query, (scores, rows) in zip(queries, batch, strict=True):
        want = reference(vectors, query, 25, mask)
        np.testing.assert_array_equal(rows, want)
        np.testing.assert_array_equal(scores, (vectors[want] @ query).astype(np.float32))
    singles = [index.search(query, 25, mask=mask)[0] for query in queries]
    assert same_bits(batch, singles)
    fake.threads = 1  # one BLAS thread: no worker, BLAS untouched
    gemm_threads.clear()
    assert same_bits(index.search(queries, 25, mask=mask), batch)
    assert gemm_threads == {threading.get_ident()}


def test_blas_workers_follow_the_blas_thread_count_and_restore_it() -> None:
    # the libraries blas_workers limits: those loaded when it first ran (numpy's, whose GEMM the
    # batch runs); faiss's own OpenBLAS, loaded later by a test importing faiss, is not one of them
    blas = blas_module._blas()
    assert blas is not None and blas.lib_controllers, "numpy's BLAS is not visible to threadpoolctl"
    with blas.limit(limits=2):
        available = max(library.num_threads for library in blas.lib_controllers)  # 2, or 1 on one core
        with blas_module.blas_workers(8) as workers:
            assert workers == available
            inside = max(library.num_threads for library in blas.lib_controllers)
            assert inside == (1 if available > 1 else available)
        assert max(library.num_threads for library in blas.lib_controllers) == available
        with blas_module.blas_workers(1) as workers:  # one task: no worker
            assert workers == 1
            assert max(library.num_threads for library in blas.lib_controllers) == available
    with blas.limit(limits=1), blas_module.blas_workers(8) as workers:
        assert workers == 1


# -- one query through the faiss wrapper --------------------------------------------------------


def test_checked_queries_gives_the_bands_of_the_batch_path_and_refuses_bad_values() -> None:
    rng = np.random.default_rng(24)
    index = ExactVectorIndex(rng.standard_normal((50, 12)).astype(np.float32))
    query = rng.standard_normal(12).astype(np.float32)
    matrix, bands = index.checked_queries(query)  # the fast path: one C-contiguous float32 vector
    assert matrix.shape == (1, 12) and np.shares_memory(matrix, query)
    assert bands.tobytes() == index.rounding_bands(query[None, :]).tobytes()
    strided = np.repeat(query, 2)[::2]  # the same values, not contiguous
    assert not strided.flags.c_contiguous
    matrix, strided_bands = index.checked_queries(strided)
    assert matrix.flags.c_contiguous and strided_bands.tobytes() == bands.tobytes()
    for bad in (np.float32(np.nan), np.float32(np.inf)):
        broken = query.copy()
        broken[3] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            index.checked_queries(broken)
    with pytest.raises(ValueError, match=r"shape \(12,\)"):
        index.checked_queries(np.zeros(11, dtype=np.float32))


def test_search_one_reuses_this_threads_arrays_and_the_results_do_not_alias_them() -> None:
    vectors = integer_rows(300, 8, seed=25)
    flat = faiss.IndexFlatIP(8)
    flat.add(vectors)
    query = vectors[:1].copy()
    first = search_one(faiss, flat, query, 12, faiss.SearchParameters())
    again = search_one(faiss, flat, query, 12, faiss.SearchParameters())
    assert first[0] is again[0] and first[1] is again[1]  # allocated once per thread and fetch
    other: list[Any] = []
    thread = threading.Thread(
        target=lambda: other.append(search_one(faiss, flat, query, 12, faiss.SearchParameters()))
    )
    thread.start()
    thread.join()
    assert other[0][0] is not first[0]  # another thread: its own arrays
    # the wrapper's results are copies: a later search does not change an earlier result
    index = FaissVectorIndex(flat, "flat", ExactVectorIndex(vectors), settings={"kind": "flat"})
    kept = index.search(vectors[5], 10)[0]
    before = (kept[0].copy(), kept[1].copy())
    index.search(vectors[200], 10)
    assert kept[0].tobytes() == before[0].tobytes() and kept[1].tobytes() == before[1].tobytes()
    np.testing.assert_array_equal(kept[1], reference(vectors, vectors[5], 10, None))


def tied_corpus(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """1,500 integer rows: rows 200-238 copies of row 7, and queries 0-1 on row 7's copies."""
    vectors = integer_rows(1500, 16, seed)
    vectors[200:239] = vectors[7]
    queries = np.concatenate([vectors[[7, 7]], integer_rows(10, 16, seed + 1)])
    return vectors, queries


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf_flat", "ivf_pq"])
def test_one_query_path_equals_rescoring_every_candidate_and_the_batch(kind: str) -> None:
    """Single queries (the lean path: per-thread arrays, the ranked cut on Python floats) give
    what rescoring every candidate faiss returns gives, and what the batch gives."""
    vectors, queries = tied_corpus(seed=26)
    extra = {"nlist": 8, "pq_m": 4, "pq_bits": 4} if kind == "ivf_pq" else {"nlist": 8}
    config = VectorIndexConfig(kind=kind, **(extra if kind.startswith("ivf") else {}))
    exact = ExactVectorIndex(vectors)
    index = FaissVectorIndex.build(exact, config)
    knobs: dict[str, int] = {"nprobe": 8} if kind.startswith("ivf") else {}
    if kind == "ivf_pq":
        knobs["refine_factor"] = 60  # 600 candidates: every tied row among them
    singles = [index.search(query, 10, **knobs)[0] for query in queries]
    assert same_bits(singles, index.search(queries, 10, **knobs))
    for query, (scores, rows) in zip(queries, singles, strict=True):
        want = reference(vectors, query, 10, None)
        np.testing.assert_array_equal(rows, want)  # every kind finds the exact top here
        np.testing.assert_array_equal(scores, (vectors[want] @ query).astype(np.float32))
    np.testing.assert_array_equal(singles[0][1], [7, *range(200, 209)])  # ties by row


@pytest.mark.parametrize("ranked", [True, False])
def test_one_query_cut_equals_rescoring_every_candidate_in_any_order(ranked: bool) -> None:
    """band_top for one query, told its scores are ranked (faiss's order) or not, and given them
    in faiss's order, shuffled, with ties at the cut and -1 padding: the result is every
    candidate rescored."""
    rng = np.random.default_rng(27)
    vectors = rng.standard_normal((400, 16)).astype(np.float32)
    vectors[50:80] = vectors[3]  # 31 exact copies
    queries = np.stack([vectors[3], rng.standard_normal(16).astype(np.float32)])
    bands = ExactVectorIndex(vectors).rounding_bands(queries)
    for i, query in enumerate(queries):
        for fetch, missing in ((40, 0), (40, 5), (12, 0), (8, 0)):
            labels = rng.choice(400, size=fetch, replace=False)
            if i == 0:
                labels[: min(fetch, 30)] = np.arange(50, 50 + min(fetch, 30))  # ties at the cut
            scores = (vectors[labels] @ query).astype(np.float32)
            order = np.argsort(-scores, kind="stable") if ranked else rng.permutation(fetch)
            labels, scores = labels[order].astype(np.int64), scores[order]
            if missing:
                labels[-missing:] = -1
                scores[-missing:] = -np.inf
            found, again = band_top(
                vectors,
                query[None, :],
                labels[None, :],
                scores[None, :],
                bands[i : i + 1],
                10,
                check_gap=False,
                ranked=ranked,
            )
            assert again == []
            want = rescore(vectors, query[None, :], [labels[labels >= 0]], 10)
            assert same_bits(found, want), (i, fetch, missing)
    # told "ranked" for unranked scores: the cut keeps more, never a wrong row
    labels = np.arange(50, 90, dtype=np.int64)
    scores = (vectors[labels] @ queries[0]).astype(np.float32)[::-1].copy()
    found, _ = band_top(
        vectors, queries[:1], labels[None, :], scores[None, :], bands[:1], 10, check_gap=False, ranked=True
    )
    assert same_bits(found, rescore(vectors, queries[:1], [labels], 10))


def test_float32_scores_of_one_query_with_and_without_missing_rows() -> None:
    rng = np.random.default_rng(28)
    vectors = rng.standard_normal((100, 16)).astype(np.float32)
    query = rng.standard_normal((1, 16)).astype(np.float32)
    labels = rng.choice(100, size=(1, 20), replace=False).astype(np.int64)
    full = float32_scores(faiss, vectors, query, labels)
    np.testing.assert_allclose(full[0], vectors[labels[0]] @ query[0], rtol=1e-5, atol=1e-5)
    labels[0, 15:] = -1
    partial = float32_scores(faiss, vectors, query, labels)
    assert partial[0, :15].tobytes() == full[0, :15].tobytes()
    assert (partial[0, 15:] == -np.inf).all()
