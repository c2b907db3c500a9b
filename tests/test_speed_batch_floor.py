"""Issue 30's 512-query batch: the floors from the maxima of groups of sampled scores
(retrievers.index.vectors._kth_lower_bound) and the batch's one-gather selection, against a full
sort and a float64 brute force."""

from __future__ import annotations

import numpy as np
import pytest
from test_exact_batch_floor import integer_rows, reference

from retrievers.index import ExactVectorIndex
from retrievers.index import vectors as vectors_module


@pytest.mark.parametrize(("width", "length"), [(3125, 10), (400, 10), (159, 10), (3125, 100), (30, 30)])
def test_kth_lower_bound_never_exceeds_the_kth_best(width: int, length: int) -> None:
    rng = np.random.default_rng(40)
    scores = rng.standard_normal((64, width)).astype(np.float32)
    scores[:8, : width // 2] = 9.0  # ties at the top
    scores[8:16] = scores[8:16].round(1)  # many ties everywhere
    bound = vectors_module._kth_lower_bound(scores, length)
    kth = np.sort(scores, axis=1)[:, width - length]
    assert bound.dtype == np.float32 and bound.shape == (64,)
    assert (bound <= kth).all()
    if width >= 2 * vectors_module._GROUPS_PER_RESULT * length:  # groups: close, not exact
        assert (bound[:8] == 9.0).all()  # the tied top: the k-th best itself
        above = np.count_nonzero(scores[16:] >= bound[16:, None], axis=1)  # distinct scores
        assert (above >= length).all() and (above < 3 * length).all()
    else:  # too few columns a group: the k-th best itself
        assert bound.tobytes() == kth.tobytes()


def test_kth_lower_bound_of_a_row_with_nan_cuts_nothing() -> None:
    scores = np.random.default_rng(41).standard_normal((3, 1000)).astype(np.float32)
    scores[1, 7] = np.nan
    bound = vectors_module._kth_lower_bound(scores, 10)
    assert bound[1] == -np.inf and np.isfinite(bound[[0, 2]]).all()


@pytest.mark.parametrize("masked", [False, True])
def test_batch_with_group_floors_equals_a_full_argsort_with_ties(masked: bool) -> None:
    """Integer vectors: exact scores, real ties broken by row; a batch of 40 queries (the
    one-gather selection) and the same queries one at a time give the reference."""
    vectors = integer_rows(6000, 24, seed=42)
    vectors[3000:3050] = vectors[11]  # 51 copies: ties at the cut for query 0
    queries = np.concatenate([vectors[[11]], integer_rows(39, 24, seed=43)])
    mask = np.random.default_rng(44).random(6000) < 0.7 if masked else None
    if mask is not None:
        mask[11] = True
    index = ExactVectorIndex(vectors)
    found = index.search(queries, 20, mask=mask)
    for query, (scores, rows) in zip(queries, found, strict=True):
        want = reference(vectors, query, 20, mask)
        np.testing.assert_array_equal(rows, want)
        np.testing.assert_array_equal(scores, (vectors[want] @ query).astype(np.float32))
        single_scores, single_rows = index.search(query, 20, mask=mask)[0]
        assert single_scores.tobytes() == scores.tobytes() and single_rows.tobytes() == rows.tobytes()


def test_a_batch_with_fewer_rows_than_k_returns_each_querys_allowed_rows() -> None:
    """Some queries have fewer than k candidates: the selection falls back to query by query."""
    vectors = integer_rows(300, 8, seed=45)
    mask = np.zeros(300, dtype=bool)
    mask[[3, 50, 120]] = True
    queries = integer_rows(5, 8, seed=46)
    found = ExactVectorIndex(vectors).search(queries, 10, mask=mask)
    for query, (scores, rows) in zip(queries, found, strict=True):
        np.testing.assert_array_equal(rows, reference(vectors, query, 10, mask))
        assert scores.dtype == np.float32 and rows.size == 3
