"""The compiled exact scores (retrievers/index/exact_kernel.py) against numpy's: every dimension
from 1 to 300 and the common embedding sizes, ties broken by row, -0.0, non-finite scores and
rows outside the matrix handed back to numpy; its cut of faiss's ranked candidates against
``one_top``'s numpy steps (the same rows, the same "ask again")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrievers.index import ExactVectorIndex
from retrievers.index import rescore as rescore_module
from retrievers.index.exact_kernel import ASK_AGAIN, NUMPY, exact_top, pairwise_program
from retrievers.index.rescore import one_top, rescore

REPO = Path(__file__).resolve().parents[1]


def numpy_top(
    vectors: np.ndarray, query: np.ndarray, rows: np.ndarray, length: int
) -> tuple[np.ndarray, np.ndarray]:
    """What the exact index computes: float32 products, np.add.reduce per row, (score desc, row asc)."""
    products = vectors.take(rows, axis=0)
    products *= query
    scores = np.add.reduce(products, axis=1)
    picked = np.lexsort((rows, -scores))[:length]
    return scores[picked], rows[picked]


def assert_bits(
    found: tuple[np.ndarray, np.ndarray] | str | None, want: tuple[np.ndarray, np.ndarray]
) -> None:
    assert isinstance(found, tuple)
    assert found[0].dtype == np.float32 and found[1].dtype == np.int64
    assert found[0].tobytes() == want[0].tobytes() and found[1].tobytes() == want[1].tobytes()


@pytest.mark.parametrize("dims", [range(1, 301), [383, 384, 385, 512, 768, 1000, 1024, 1536, 3072]])
def test_scores_equal_numpys_bit_for_bit_in_every_dimension(dims: range | list[int]) -> None:
    rng = np.random.default_rng(7)
    for dim in dims:
        vectors = rng.standard_normal((60, dim)).astype(np.float32)
        query = rng.standard_normal(dim).astype(np.float32)
        rows = rng.permutation(60).astype(np.int64)
        # every score kept (the sums of all 60) and a top 7 of them
        assert_bits(exact_top(vectors, query, rows, 60), numpy_top(vectors, query, rows, 60))
        assert_bits(exact_top(vectors, query, rows[:25], 7), numpy_top(vectors, query, rows[:25], 7))


def test_the_program_is_numpys_split() -> None:
    """384 = four runs of 96 (384 -> 192 + 192 -> 96 + 96 each); 1000 -> 496 + 504, and on."""
    assert pairwise_program(384).tolist() == [
        [0, 96],
        [96, 96],
        [-1, 0],
        [192, 96],
        [288, 96],
        [-1, 0],
        [-1, 0],
    ]
    assert pairwise_program(100).tolist() == [[0, 100]]
    assert pairwise_program(129).tolist() == [[0, 64], [64, 65], [-1, 0]]


def test_ties_go_to_the_lower_row_and_a_longer_list_is_cut() -> None:
    rng = np.random.default_rng(8)
    vectors = rng.standard_normal((50, 32)).astype(np.float32)
    vectors[10:20] = vectors[3]  # ten copies of row 3
    query = vectors[3].copy()
    rows = np.array([19, 25, 3, 12, 40, 10, 18, 11, 2, 3], dtype=np.int64)  # row 3 twice
    for length in (1, 3, 5, 10, 20):
        assert_bits(exact_top(vectors, query, rows, length), numpy_top(vectors, query, rows, length))
    found = exact_top(vectors, query, rows, 4)
    assert isinstance(found, tuple) and found[1].tolist() == [3, 3, 10, 11]  # the copies by row, row 3 twice


def test_it_equals_the_exact_index_rescoring_on_unit_vectors() -> None:
    rng = np.random.default_rng(9)
    vectors = rng.standard_normal((3000, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[rng.choice(3000, 20, replace=False)] + np.float32(0.01)
    for query in queries:
        rows = rng.choice(3000, 100, replace=False).astype(np.int64)
        (want,) = rescore(vectors, query[None, :].astype(np.float32), [rows], 10)
        assert_bits(exact_top(vectors, query.astype(np.float32), rows, 10), want)


def test_a_sum_of_negative_zeros_is_zero_as_in_numpy() -> None:
    vectors = np.full((3, 16), -1.0, dtype=np.float32)
    query = np.zeros(16, dtype=np.float32)  # every product -0.0
    rows = np.array([2, 0, 1], dtype=np.int64)
    assert_bits(exact_top(vectors, query, rows, 3), numpy_top(vectors, query, rows, 3))
    found = exact_top(vectors, query, rows, 3)
    assert isinstance(found, tuple) and not np.signbit(found[0]).any()


def test_what_it_cannot_take_is_handed_back() -> None:
    """NUMPY, so the caller's numpy path answers (and refuses an overflow as numpy's does); -1
    (faiss: no row) is skipped."""
    vectors = np.ones((4, 8), dtype=np.float32)
    query = np.ones(8, dtype=np.float32)
    rows = np.array([0, 1], dtype=np.int64)
    overflow = vectors.copy()
    overflow[1] = 3e38
    assert exact_top(overflow, query, rows, 2) == NUMPY  # a score that is +inf
    nan = vectors.copy()
    nan[0, 3] = np.nan
    assert exact_top(nan, query, rows, 2) == NUMPY
    assert exact_top(vectors, query, np.array([0, 4], dtype=np.int64), 2) == NUMPY  # row 4 of 4
    assert exact_top(vectors.astype(np.float64), query, rows, 2) == NUMPY  # not float32
    assert exact_top(np.asfortranarray(vectors), query, rows, 2) == NUMPY
    assert exact_top(vectors, query, rows.astype(np.int32), 2) == NUMPY
    assert exact_top(vectors, np.ones(7, dtype=np.float32), rows, 2) == NUMPY
    assert exact_top(vectors, query, rows, 2, ranked=np.ones(3, dtype=np.float32)) == NUMPY
    found = exact_top(vectors, query, np.array([2, -1, -1], dtype=np.int64), 2)
    assert isinstance(found, tuple) and found[1].tolist() == [2]
    found = exact_top(vectors, query, np.empty(0, dtype=np.int64), 3)
    assert isinstance(found, tuple) and found[0].size == 0 and found[1].size == 0


def ranked_candidates(
    rng: np.random.Generator, vectors: np.ndarray, query: np.ndarray, fetch: int, shuffle: bool
) -> tuple[np.ndarray, np.ndarray]:
    """faiss-like candidates: the best ``fetch`` rows by float32 GEMV scores (not the exact
    index's sums), best first; ``shuffle`` swaps two of them (not in order after all)."""
    scores = vectors @ query
    order = np.argsort(-scores, kind="stable")[:fetch]
    labels, ranked = order.astype(np.int64), scores[order].astype(np.float32)
    if shuffle:
        i, j = rng.choice(fetch, 2, replace=False)
        labels[[i, j]], ranked[[i, j]] = labels[[j, i]], ranked[[j, i]]
    return labels, ranked


@pytest.mark.parametrize("case", range(40))
def test_its_cut_is_one_tops_numpy_cut(case: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled cut and scoring against one_top's numpy steps (exact_top patched out): the
    same bits, the same queries asked again, over ties, wide and narrow bands, -1 rows and
    candidates out of order."""
    rng = np.random.default_rng(100 + case)
    vectors = rng.standard_normal((400, 48)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    if case % 3 == 0:
        vectors[50:90] = vectors[7]  # 41 tied rows
    query = vectors[7] if case % 3 == 0 else rng.standard_normal(48).astype(np.float32)
    fetch, length = int(rng.integers(5, 60)), int(rng.integers(1, 12))
    labels, ranked = ranked_candidates(rng, vectors, query, fetch, shuffle=case % 4 == 1)
    if case % 5 == 2:
        labels[-3:], ranked[-3:] = -1, -np.inf  # faiss found fewer
    band = float([0.0, 1e-6, 1e-3, 0.5][case % 4])
    for check_gap in (False, True):
        compiled = one_top(vectors, query, labels, ranked, band, length, check_gap, True)
        with monkeypatch.context() as patch:
            patch.setattr(rescore_module, "exact_top", lambda *args, **kwargs: NUMPY)
            numpy_answer = one_top(vectors, query, labels, ranked, band, length, check_gap, True)
        if numpy_answer is None:
            assert compiled is None  # asked again
            assert (
                exact_top(vectors, query, labels, length, ranked=ranked, band=band, check_gap=check_gap)
                == ASK_AGAIN
            )
        else:
            assert_bits(compiled, numpy_answer)


@pytest.mark.parametrize("case", range(12))
def test_the_band_worked_out_in_the_call_is_one_bands(case: int) -> None:
    """``band_factor``: the compiled call works the band out from the query's norm; the answer
    equals the one given ``ExactVectorIndex.one_band`` (the same bits, the same asks again),
    with ties among the candidates so that the band decides what is scored."""
    rng = np.random.default_rng(300 + case)
    vectors = rng.standard_normal((300, 40)).astype(np.float32)
    vectors[60:80] = vectors[9]  # 21 tied rows
    if case % 2:
        vectors[80:90] = np.nextafter(vectors[9], np.float32(np.inf))  # 1 ulp away
    exact = ExactVectorIndex(vectors)
    query = vectors[9] if case % 3 == 0 else rng.standard_normal(40).astype(np.float32)
    labels, ranked = ranked_candidates(rng, vectors, query, int(rng.integers(12, 40)), shuffle=case % 4 == 1)
    band = exact.one_band(query)
    assert band is not None
    for check_gap in (False, True):
        given = exact_top(vectors, query, labels, 10, ranked=ranked, band=band, check_gap=check_gap)
        worked_out = exact_top(
            vectors, query, labels, 10, ranked=ranked, band_factor=exact.band_factor, check_gap=check_gap
        )
        if isinstance(given, str):
            assert worked_out == given
        else:
            assert_bits(worked_out, given)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_query_that_is_not_finite_is_handed_over_when_the_call_works_the_band_out(value: float) -> None:
    rng = np.random.default_rng(310)
    vectors = rng.standard_normal((50, 16)).astype(np.float32)
    query = rng.standard_normal(16).astype(np.float32)
    labels, ranked = ranked_candidates(rng, vectors, query, 12, shuffle=False)
    query[5] = value
    factor = ExactVectorIndex(vectors).band_factor
    assert exact_top(vectors, query, labels, 10, ranked=ranked, band_factor=factor) == ASK_AGAIN
    assert exact_top(vectors, query, labels, 10, band_factor=factor) == ASK_AGAIN  # IVF-PQ's call
    assert exact_top(vectors, query, labels, 10) == NUMPY  # no band asked for: a score not finite


def test_a_memory_mapped_matrix_is_read_in_place(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(10)
    vectors = rng.standard_normal((40, 24)).astype(np.float32)
    mapped = np.memmap(tmp_path / "v.f32", dtype=np.float32, mode="w+", shape=vectors.shape)
    mapped[:] = vectors
    mapped.flush()
    reopened = np.memmap(tmp_path / "v.f32", dtype=np.float32, mode="r", shape=vectors.shape)
    rows = np.arange(40, dtype=np.int64)
    assert_bits(exact_top(reopened, vectors[5], rows, 6), numpy_top(vectors, vectors[5], rows, 6))


def test_it_is_compiled_when_numba_is_off_and_its_environment_changed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A fresh process with NUMBA_DISABLE_JIT=1 (as this test session sets for ranx) that changes
    a NUMBA_* variable after importing numba (as test_fusion_methods.py does): numba's compiler
    re-reads its environment mid-compilation, which once undid the settings the kernel is
    compiled with (an AttributeError in two tests of a full run)."""
    script = (
        "import os, numpy as np, numba\n"
        f"os.environ['NUMBA_CACHE_DIR'] = {str(tmp_path)!r}\n"
        "from retrievers.index import exact_kernel\n"
        "vectors = np.random.default_rng(0).standard_normal((100, 32)).astype(np.float32)\n"
        "found = exact_kernel.exact_top(vectors, vectors[3], np.arange(20), 5)\n"
        "print(found[1].tolist(), type(exact_kernel._COMPILED).__name__, len(exact_kernel._COMPILED.signatures))\n"
    )
    environment = {**os.environ, "NUMBA_DISABLE_JIT": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows, kind, signatures = done.stdout.split("] ")[0] + "]", *done.stdout.split("] ")[1].split()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((100, 32)).astype(np.float32)
    assert rows == str(numpy_top(vectors, vectors[3], np.arange(20), 5)[1].tolist())
    assert kind == "CPUDispatcher" and signatures == "1"
