"""Issue 30: the search kernels' new paths against independent references, batch == single bit
for bit, faiss's threads, and the hierarchical retriever's convergence warning.

Exact references use small integer vectors: every product and sum is exact in float32 whatever
the order, so the true scores are known and ties (many of them) are real ties, broken by row.
"""

from __future__ import annotations

import warnings
from typing import Any

import faiss
import numpy as np
import pytest

from retrievers.hierarchical import convergence
from retrievers.hierarchical.convergence import ConvergenceWarning, warn_if_few_rounds
from retrievers.index import ExactVectorIndex, FaissVectorIndex
from retrievers.index.rescore import rescore
from retrievers.store.vector_index_config import VectorIndexConfig


def integer_rows(n: int, dim: int, seed: int) -> np.ndarray:
    """Rows of small integers (-3..3): float32 dot products are exact in any order."""
    return np.random.default_rng(seed).integers(-3, 4, size=(n, dim)).astype(np.float32)


def reference(vectors: np.ndarray, query: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
    """The top k rows by (exact integer score desc, row asc), by a full argsort."""
    scores = vectors.astype(np.int64) @ query.astype(np.int64)
    rows = np.arange(vectors.shape[0])
    if mask is not None:
        scores, rows = scores[mask], rows[mask]
    order = np.lexsort((rows, -scores))
    return rows[order[:k]]


@pytest.mark.parametrize("chunk_size", [7, 64, 10_000])
@pytest.mark.parametrize("masked", [False, True])
def test_exact_search_equals_a_full_argsort_with_ties_by_row(chunk_size: int, masked: bool) -> None:
    vectors = integer_rows(600, 8, seed=1)  # 8 dims of -3..3: thousands of tied scores
    vectors[200:260] = vectors[5]  # and exact duplicates
    queries = integer_rows(12, 8, seed=2)
    queries[0] = vectors[5]
    index = ExactVectorIndex(vectors)
    mask = np.random.default_rng(3).random(600) < 0.7 if masked else None
    batch = index.search(queries, 25, mask=mask, chunk_size=chunk_size)
    for query, (scores, rows) in zip(queries, batch, strict=True):
        want = reference(vectors, query, 25, mask)
        np.testing.assert_array_equal(rows, want)
        np.testing.assert_array_equal(scores, (vectors[want] @ query).astype(np.float32))
        single_scores, single_rows = index.search(query, 25, mask=mask, chunk_size=chunk_size)[0]
        np.testing.assert_array_equal(single_rows, rows)  # the einsum path (one query) ...
        assert single_scores.tobytes() == scores.tobytes()  # ... equals the GEMM path bit for bit


def test_exact_batch_equals_single_bit_for_bit_on_real_valued_vectors() -> None:
    rng = np.random.default_rng(4)
    vectors = rng.standard_normal((3000, 48)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.standard_normal((300, 48)).astype(np.float32)  # more than one GEMM block (256)
    index = ExactVectorIndex(vectors)
    batch = index.search(queries, 10, chunk_size=1000)
    for query, (scores, rows) in zip(queries, batch, strict=True):
        single_scores, single_rows = index.search(query, 10, chunk_size=1000)[0]
        assert single_scores.tobytes() == scores.tobytes() and single_rows.tobytes() == rows.tobytes()
        # and against a float64 brute force: the same rows (no near-ties at this size)
        full = vectors.astype(np.float64) @ query.astype(np.float64)
        np.testing.assert_array_equal(rows, np.argsort(-full, kind="stable")[:10])


# --------------------------------------------------------------------------- faiss flat and IVF


class Recorder:
    """A faiss index stand-in: records each search's batch size and faiss's OpenMP threads,
    then searches the real index (or, with ``ties_last``, returns the highest rows among ties)."""

    def __init__(self, inner: Any, vectors: np.ndarray | None = None) -> None:
        self.inner = inner
        self.vectors = vectors
        self.calls: list[tuple[int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def search(self, matrix: np.ndarray, k: int, **kwargs: Any) -> Any:
        self.calls.append((matrix.shape[0], faiss.omp_get_max_threads()))
        if self.vectors is None:
            return self.inner.search(matrix, k, **kwargs)
        scores = matrix @ self.vectors.T
        rows = np.arange(self.vectors.shape[0])
        picked = np.stack([np.lexsort((-rows, -row))[:k] for row in scores])  # ties: highest row first
        return np.take_along_axis(scores, picked, axis=1), picked.astype(np.int64)


@pytest.fixture
def omp_two() -> Any:
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)
    yield
    faiss.omp_set_num_threads(before)


def test_flat_searches_a_batch_at_once_and_equals_exact_search(omp_two: None) -> None:
    vectors = integer_rows(800, 16, seed=5)
    exact = ExactVectorIndex(vectors)
    flat = FaissVectorIndex.build(exact, VectorIndexConfig(kind="flat"))
    spy = Recorder(flat._index)
    flat._index = spy
    queries = integer_rows(45, 16, seed=6)
    batch = flat.search(queries, 10)
    assert [size for size, _ in spy.calls] == [45]  # one call (was 45 of one query)
    want = exact.search(queries, 10)
    for (scores, rows), (want_scores, want_rows) in zip(batch, want, strict=True):
        assert scores.tobytes() == want_scores.tobytes() and rows.tobytes() == want_rows.tobytes()
    for query, (scores, rows) in zip(queries, batch, strict=True):
        single_scores, single_rows = flat.search(query, 10)[0]
        assert single_scores.tobytes() == scores.tobytes() and single_rows.tobytes() == rows.tobytes()


def test_flat_with_ties_past_faiss_candidates_falls_back_to_exact_search() -> None:
    """61 rows tie at the top (row 3 and its 60 copies); faiss's 2k = 20 candidates hold the 20
    highest rows of them (a stand-in for float32 rounding that orders near-ties differently). The
    rows faiss did not return might rank first, so the query is searched exactly: rows 3 and
    100-108, not 141-150."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((500, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[3].copy()
    vectors[100:160] = query
    exact = ExactVectorIndex(vectors)
    flat = FaissVectorIndex.build(exact, VectorIndexConfig(kind="flat"))
    flat._index = Recorder(flat._index, vectors)
    scores, rows = flat.search(query, 10)[0]
    np.testing.assert_array_equal(rows, [3, *range(100, 109)])
    want_scores, want_rows = exact.search(query, 10)[0]
    assert scores.tobytes() == want_scores.tobytes() and rows.tobytes() == want_rows.tobytes()


def test_ivf_searches_one_query_at_a_time_and_batch_equals_single(omp_two: None) -> None:
    """faiss 1.15's IndexFlatIP rounds a query's scores differently in any batch of 2 or more than
    alone, so IVF's coarse quantizer could probe another list at a near tie: IVF kinds give faiss
    one query per call (each with one thread)."""
    rng = np.random.default_rng(8)
    vectors = rng.standard_normal((2000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    exact = ExactVectorIndex(vectors)
    ivf = FaissVectorIndex.build(exact, VectorIndexConfig(kind="ivf_flat", nlist=16))
    spy = Recorder(ivf._index)
    ivf._index = spy
    queries = rng.standard_normal((45, 16)).astype(np.float32)
    batch = ivf.search(queries, 10, nprobe=4)
    assert spy.calls == [(1, 1)] * 45
    for query, (scores, rows) in zip(queries, batch, strict=True):
        single_scores, single_rows = ivf.search(query, 10, nprobe=4)[0]
        assert single_scores.tobytes() == scores.tobytes() and single_rows.tobytes() == rows.tobytes()


def test_ivf_pq_float32_refinement_equals_rescoring_every_candidate() -> None:
    """The candidates are cut at the band of their float32 scores before the exact rescoring:
    the results equal rescoring all refine_factor x k of them (the previous way)."""
    rng = np.random.default_rng(9)
    vectors = rng.standard_normal((3000, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    exact = ExactVectorIndex(vectors)
    pq = FaissVectorIndex.build(exact, VectorIndexConfig(kind="ivf_pq", nlist=16, pq_m=8, pq_bits=4))
    queries = rng.standard_normal((30, 32)).astype(np.float32)
    found = pq.search(queries, 10, nprobe=8, refine_factor=20)
    _, labels = pq._index.search(queries, 200, params=faiss.SearchParametersIVF(nprobe=8))
    want = rescore(vectors, queries, [row[row >= 0] for row in labels], 10)
    for (scores, rows), (want_scores, want_rows) in zip(found, want, strict=True):
        assert scores.tobytes() == want_scores.tobytes() and rows.tobytes() == want_rows.tobytes()


def test_faiss_threads_follow_the_budget_and_never_exceed_the_queries(omp_two: None) -> None:
    rng = np.random.default_rng(10)
    vectors = rng.standard_normal((500, 16)).astype(np.float32)
    exact = ExactVectorIndex(vectors)
    hnsw = FaissVectorIndex.build(exact, VectorIndexConfig(kind="hnsw"))
    spy = Recorder(hnsw._index)
    hnsw._index = spy
    queries = rng.standard_normal((8, 16)).astype(np.float32)
    hnsw.search(queries[0], 5)  # one query: one thread
    hnsw.search(queries, 5)  # a batch: the process's two
    hnsw.threads = 1
    hnsw.search(queries, 5)  # an explicit budget
    assert [threads for _, threads in spy.calls] == [1, 2, 1]
    assert faiss.omp_get_max_threads() == 2  # restored after each search


# --------------------------------------------------------------------------- hierarchical


def test_few_convergence_rounds_on_a_large_store_warn_in_one_line() -> None:
    with pytest.warns(ConvergenceWarning) as caught:
        message = warn_if_few_rounds(3, 100_000)
    assert message is not None and "\n" not in message and "max_convergence_rounds=3" in message
    assert "100,000 leaves" in message and len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_few_rounds(3, 5_183) is None  # SciFact-sized: silent
        assert warn_if_few_rounds(None, 1_000_000) is None  # never stops early
        assert warn_if_few_rounds(convergence.MIN_ROUNDS_LARGE, 1_000_000) is None


def test_the_hierarchical_retriever_warns_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrievers import Document, StoreConfig, TfidfEmbedder
    from retrievers.builders import build_store
    from retrievers.hierarchical import HierarchicalRetriever

    documents = [
        Document(id=f"d{i:03d}", text=f"word{i % 7} item{i}", metadata={"g": f"g{i % 3}"}) for i in range(60)
    ]
    embedder = TfidfEmbedder(dim=8, seed=0).fit([doc.full_text for doc in documents])
    store = build_store(
        documents,
        embedder,
        StoreConfig.from_dict({"hierarchy": {"builder": "metadata_path", "path_keys": ["g"]}}),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HierarchicalRetriever(store, embedder)  # 60 leaves: silent
    monkeypatch.setattr(convergence, "LARGE_SCOPE", 50)
    with pytest.warns(ConvergenceWarning, match="max_convergence_rounds=3 over 60 leaves"):
        HierarchicalRetriever(store, embedder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HierarchicalRetriever(store, embedder, max_convergence_rounds=None)


def test_the_harness_thread_budget_reaches_faiss(omp_two: None) -> None:
    """run.latency.blas_threads limits faiss's OpenMP threads too (threadpoolctl finds the
    libgomp faiss-cpu ships): one-query latency is timed with faiss on that many threads."""
    from viking_eval.run.latency import _threads

    with _threads(1):
        assert faiss.omp_get_max_threads() == 1
    assert faiss.omp_get_max_threads() == 2
