"""The exact index's batch path (issue 30): one floor per query from a sample of the rows, then
chunks of :data:`~retrievers.index.vectors.BATCH_CHUNK_ROWS` rows, against a full argsort.

Integer vectors (-3..3) make every float32 product and sum exact in any order, so the reference
scores are known and ties are real ties (thousands of them), broken by row.
"""

from __future__ import annotations

import numpy as np
import pytest

from retrievers.index import ExactVectorIndex
from retrievers.index import vectors as vectors_module
from retrievers.index.vectors import _floor32


def integer_rows(n: int, dim: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-3, 4, size=(n, dim)).astype(np.float32)


def reference(vectors: np.ndarray, query: np.ndarray, k: int, mask: np.ndarray | None) -> np.ndarray:
    """The top k rows by exact (int64) score desc, then row asc (test_speed_misses uses it too)."""
    scores = vectors.astype(np.int64) @ query.astype(np.int64)
    rows = np.arange(vectors.shape[0])
    if mask is not None:
        scores, rows = scores[mask], rows[mask]
    return rows[np.lexsort((rows, -scores))[:k]]


@pytest.mark.parametrize("k", [10, 60])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("max_sample", [32768, 100])
def test_batch_with_sample_floors_equals_a_full_argsort_and_single_queries(
    k: int, masked: bool, max_sample: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors_module, "_MAX_SAMPLE_ROWS", max_sample)  # 100: every 40th row
    monkeypatch.setattr(vectors_module, "BATCH_CHUNK_ROWS", 700)  # several chunks
    vectors = integer_rows(4000, 8, seed=11)
    vectors[1000:1100] = vectors[17]  # 101 exact copies: ties across the cut and the chunks
    queries = integer_rows(30, 8, seed=12)
    queries[0] = vectors[17]
    mask = np.random.default_rng(13).random(4000) < 0.8 if masked else None
    index = ExactVectorIndex(vectors)
    allowed = None if mask is None else mask
    bands = index.rounding_bands(queries)
    floors = index._sample_floors(queries, allowed, k, bands)
    assert floors is not None  # the floor path is the one tested
    batch = index.search(queries, k, mask=mask)
    for i, (query, (scores, rows)) in enumerate(zip(queries, batch, strict=True)):
        want = reference(vectors, query, k, mask)
        np.testing.assert_array_equal(rows, want)
        np.testing.assert_array_equal(scores, (vectors[want] @ query).astype(np.float32))
        assert floors[i] <= scores[-1]  # a lower bound of the k-th best
        single_scores, single_rows = index.search(query, k, mask=mask)[0]
        assert single_rows.tobytes() == rows.tobytes() and single_scores.tobytes() == scores.tobytes()


def test_batch_on_real_values_equals_float64_brute_force_and_single() -> None:
    rng = np.random.default_rng(14)
    vectors = rng.standard_normal((40_000, 24)).astype(np.float32)  # 3 batch chunks
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors[30_000:30_020] = vectors[5]  # ties
    queries = rng.standard_normal((20, 24)).astype(np.float32)
    queries[0] = vectors[5]
    index = ExactVectorIndex(vectors)
    batch = index.search(queries, 10)
    np.testing.assert_array_equal(batch[0][1], [5, *range(30_000, 30_009)])
    for query, (_, rows) in zip(queries[1:], batch[1:], strict=True):
        full = vectors.astype(np.float64) @ query.astype(np.float64)
        np.testing.assert_array_equal(rows, np.argsort(-full, kind="stable")[:10])
    for query, (scores, rows) in zip(queries, batch, strict=True):
        single_scores, single_rows = index.search(query, 10)[0]
        assert single_rows.tobytes() == rows.tobytes() and single_scores.tobytes() == scores.tobytes()


def test_too_few_sampled_rows_give_no_floor() -> None:
    index = ExactVectorIndex(integer_rows(600, 8, seed=15))
    queries = integer_rows(3, 8, seed=16)
    assert index._sample_floors(queries, None, 25, index.rounding_bands(queries)) is None  # 19 rows


def test_floor32_rounds_down_never_up() -> None:
    values = np.array([0.1, -0.1, 1 / 3, -1 / 3, 0.5, 2.0**-30, -1e-40], dtype=np.float64)
    rounded = _floor32(values)
    assert rounded.dtype == np.float32
    assert (rounded.astype(np.float64) <= values).all()
    # the largest float32 not above each value: the next float32 up is above it
    assert (np.nextafter(rounded, np.float32(np.inf)).astype(np.float64) > values).all()
    assert rounded[4] == 0.5  # exact values stay


@pytest.mark.parametrize("real_valued", [False, True])
def test_one_query_faiss_kernel_equals_the_einsum_kernel_bit_for_bit(
    real_valued: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One query's candidates come from faiss's dot products when faiss is installed, else from
    einsum: the results are the same bits (the rescoring decides), ties broken by row."""
    rng = np.random.default_rng(17)
    if real_valued:
        vectors = rng.standard_normal((5000, 40)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    else:
        vectors = integer_rows(5000, 40, seed=18)
    vectors[2000:2030] = vectors[11]
    others = (
        rng.standard_normal((15, 40)).astype(np.float32) if real_valued else integer_rows(15, 40, seed=19)
    )
    queries = np.concatenate([vectors[[11]], others])
    index = ExactVectorIndex(vectors)
    assert vectors_module.optional_faiss() is not None
    with_faiss = [index.search(query, 20, chunk_size=1500)[0] for query in queries]
    monkeypatch.setattr(vectors_module, "optional_faiss", lambda: None)
    with_einsum = [index.search(query, 20, chunk_size=1500)[0] for query in queries]
    for (scores, rows), (want_scores, want_rows) in zip(with_faiss, with_einsum, strict=True):
        assert rows.tobytes() == want_rows.tobytes() and scores.tobytes() == want_scores.tobytes()
    np.testing.assert_array_equal(with_faiss[0][1][:11], [11, *range(2000, 2010)])
    if not real_valued:
        for query, (_, rows) in zip(queries, with_faiss, strict=True):
            np.testing.assert_array_equal(rows, reference(vectors, query, 20, None))
