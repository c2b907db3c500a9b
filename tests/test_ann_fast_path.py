"""The faiss wrapper's fast path (issue 30) against the previous path, bit for bit.

The previous path asked faiss for the contract's candidates (HNSW ``max(k, efSearch)``, flat and
IVF-Flat ``2k``, IVF-PQ ``refine_factor x k``) and rescored every one of them (or those within the
rounding band) one query at a time. The fast path asks flat and HNSW for ``2k`` only, cuts and
rescores the whole batch at once (:func:`retrievers.index.rescore.band_top`) and asks again with
the contract's number only for a query whose ``2k`` candidates all lie within the band of its
k-th best. The reference here is the previous path written out: faiss asked for the contract's
number, every returned row rescored by :func:`retrievers.index.rescore.rescore` (unchanged).
Near-tie cases: exact duplicates of a row and copies 1 ulp apart, tied at the cut.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np
import pytest

from retrievers.index import ExactVectorIndex, FaissVectorIndex
from retrievers.index import rescore as rescore_module
from retrievers.index.rescore import band_top, rescore
from retrievers.store.vector_index_config import VectorIndexConfig

DIM = 16


class AskedSpy:
    """A faiss index stand-in that records how many candidates each search asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.asked: list[tuple[int, int]] = []  # (queries, k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def search(self, matrix: np.ndarray, k: int, **kwargs: Any) -> Any:
        self.asked.append((matrix.shape[0], k))
        return self.inner.search(matrix, k, **kwargs)


def unit_rows(n: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def tied_corpus(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """1,500 unit rows where queries 0 and 1 have 40 tied rows at the top (row 7 and 39 exact
    copies of it; row 9 and 39 copies 1 ulp apart in one coordinate, near-ties within the band)
    and the other queries none."""
    vectors = unit_rows(1500, seed)
    vectors[200:239] = vectors[7]
    ulp = np.nextafter(vectors[9, 0], np.float32(np.inf)) - vectors[9, 0]
    vectors[300:339] = vectors[9]
    vectors[300:339, 0] += ulp * np.arange(39, dtype=np.float32) % 3
    queries = np.concatenate([vectors[[7, 9]], unit_rows(10, seed + 1)])
    return vectors, queries


def previous(index: FaissVectorIndex, queries: np.ndarray, k: int, fetch: int, **knobs: Any) -> Any:
    """The previous path: faiss asked for ``fetch`` candidates, every one rescored."""
    if index.kind == "hnsw":
        params = faiss.SearchParametersHNSW(efSearch=knobs.get("ef_search", int(index._index.hnsw.efSearch)))
    elif index.kind == "flat":
        params = None
    else:
        params = faiss.SearchParametersIVF(nprobe=knobs.get("nprobe", int(index._index.nprobe)))
    inner = index._index.inner if isinstance(index._index, AskedSpy) else index._index
    found = []
    for query in queries:  # one query at a time
        _, labels = inner.search(query[None, :], fetch, params=params)
        found += rescore(index.exact.vectors, query[None, :], [labels[0][labels[0] >= 0]], k)
    return found


def assert_same(found: Any, want: Any) -> None:
    assert len(found) == len(want)
    for (scores, rows), (want_scores, want_rows) in zip(found, want, strict=True):
        assert rows.tobytes() == want_rows.tobytes()
        assert scores.tobytes() == want_scores.tobytes()


@pytest.mark.parametrize("ef_search", [64, 100])
def test_hnsw_asks_for_2k_and_again_only_at_ties_and_equals_the_previous_path(ef_search: int) -> None:
    vectors, queries = tied_corpus(seed=1)
    exact = ExactVectorIndex(vectors)
    hnsw = FaissVectorIndex.build(exact, VectorIndexConfig(kind="hnsw"))
    spy = AskedSpy(hnsw._index)
    hnsw._index = spy
    found = hnsw.search(queries, 10, ef_search=ef_search)
    # the batch with 2k, then the two tied queries with the contract's efSearch
    assert spy.asked == [(12, 20), (2, ef_search)]
    assert_same(found, previous(hnsw, queries, 10, ef_search, ef_search=ef_search))
    # the tied top holds the lowest tied rows, by exact score then row
    np.testing.assert_array_equal(found[0][1], [7, *range(200, 209)])
    spy.asked.clear()
    singles = [hnsw.search(query, 10, ef_search=ef_search)[0] for query in queries]
    assert_same(found, singles)  # batch == single
    assert spy.asked == [(1, 20), (1, ef_search), (1, 20), (1, ef_search)] + [(1, 20)] * 10


def test_hnsw_with_efsearch_at_most_2k_asks_once() -> None:
    vectors, queries = tied_corpus(seed=2)
    hnsw = FaissVectorIndex.build(ExactVectorIndex(vectors), VectorIndexConfig(kind="hnsw"))
    spy = AskedSpy(hnsw._index)
    hnsw._index = spy
    found = hnsw.search(queries, 10, ef_search=16)
    assert spy.asked == [(12, 16)]  # max(k, efSearch) = 16 < 2k: the contract's number, no gap
    assert_same(found, previous(hnsw, queries, 10, 16, ef_search=16))


def test_hnsw_masked_equals_the_previous_path() -> None:
    vectors, queries = tied_corpus(seed=3)
    hnsw = FaissVectorIndex.build(ExactVectorIndex(vectors), VectorIndexConfig(kind="hnsw"))
    mask = np.random.default_rng(4).random(vectors.shape[0]) < 0.6
    mask[[7, 9]] = True
    found = hnsw.search(queries, 10, mask=mask)
    params = faiss.SearchParametersHNSW(efSearch=int(hnsw._index.hnsw.efSearch))
    bits = np.packbits(mask, bitorder="little")
    params.sel = faiss.IDSelectorBitmap(mask.size, faiss.swig_ptr(bits))
    want = []
    for query in queries:
        _, labels = hnsw._index.search(query[None, :], 64, params=params)
        want += rescore(vectors, query[None, :], [labels[0][labels[0] >= 0]], 10)
    assert_same(found, want)
    assert all(mask[rows].all() for _, rows in found)


@pytest.mark.parametrize("kind", ["ivf_flat", "ivf_pq"])
def test_ivf_cut_and_batched_rescoring_equal_the_previous_path(kind: str) -> None:
    vectors, queries = tied_corpus(seed=5)
    config = VectorIndexConfig(kind=kind, nlist=8, **({"pq_m": 4, "pq_bits": 4} if kind == "ivf_pq" else {}))
    index = FaissVectorIndex.build(ExactVectorIndex(vectors), config)
    spy = AskedSpy(index._index)
    index._index = spy
    knobs: dict[str, int] = {"nprobe": 8}
    if kind == "ivf_pq":
        knobs["refine_factor"] = 60  # 600 candidates: every tied row among them
    found = index.search(queries, 10, **knobs)
    fetch = 20 if kind == "ivf_flat" else 600
    if kind == "ivf_flat":  # k + 3 first, one query a call; the queries whose top is one of the
        # tied groups ask again: 0, 1 and 11 (its best rows are the 40 copies too)
        assert spy.asked == [(1, 13)] * 12 + [(1, fetch)] * 3
    else:  # every candidate at once, never asked again
        assert spy.asked == [(1, fetch)] * 12
    assert_same(found, previous(index, queries, 10, fetch, **knobs))
    np.testing.assert_array_equal(found[0][1], [7, *range(200, 209)])


def test_flat_ties_past_2k_fall_back_to_exact_search_only_for_those_queries() -> None:
    vectors, queries = tied_corpus(seed=6)
    exact = ExactVectorIndex(vectors)
    flat = FaissVectorIndex.build(exact, VectorIndexConfig(kind="flat"))
    spy = AskedSpy(flat._index)
    flat._index = spy
    found = flat.search(queries, 10)
    assert spy.asked == [(12, 20)]  # one faiss call; queries 0 and 1 went to the exact index
    assert_same(found, exact.search(queries, 10))


def random_candidates(seed: int, n_queries: int, fetch: int, n_rows: int) -> tuple[np.ndarray, ...]:
    """Candidate rows per query (some -1 padded at the end, some with fewer than k), their
    float32 scores from a GEMM (rounded differently from the rescoring) and tied rows."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n_rows, DIM)).astype(np.float32)
    vectors[50:80] = vectors[3]  # exact duplicates
    queries = rng.standard_normal((n_queries, DIM)).astype(np.float32)
    queries[:4] = vectors[3]
    labels = np.stack([rng.choice(n_rows, size=fetch, replace=False) for _ in range(n_queries)])
    labels[:4, : 30 if fetch >= 30 else fetch] = np.arange(50, 50 + min(30, fetch))
    labels[5, fetch - 3 :] = -1
    labels[6, 4:] = -1  # fewer than k found
    scores = np.take_along_axis(queries @ vectors.T, np.maximum(labels, 0), axis=1)
    scores = np.where(labels >= 0, scores, np.float32(-np.inf)).astype(np.float32)
    return vectors, queries, labels.astype(np.int64), scores


@pytest.mark.parametrize("block_rows", [32768, 50])
def test_band_top_equals_rescoring_every_candidate(block_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rescore_module, "_RESCORE_ROWS", block_rows)  # 50: one query per block
    vectors, queries, labels, scores = random_candidates(seed=7, n_queries=40, fetch=40, n_rows=400)
    bands = ExactVectorIndex(vectors).rounding_bands(queries)
    found, again = band_top(vectors, queries, labels, scores, bands, 10, check_gap=False)
    assert again == []
    want = rescore(vectors, queries, [row[row >= 0] for row in labels], 10)
    assert_same(found, want)
    assert [rows.size for _, rows in found][5:7] == [10, 4]
    singles = [
        band_top(
            vectors,
            queries[i : i + 1],
            labels[i : i + 1],
            scores[i : i + 1],
            bands[i : i + 1],
            10,
            check_gap=False,
        )[0][0]
        for i in range(40)
    ]
    assert_same(found, singles)


def test_band_top_reports_the_queries_tied_past_their_candidates() -> None:
    vectors, queries, labels, scores = random_candidates(seed=8, n_queries=12, fetch=20, n_rows=400)
    bands = ExactVectorIndex(vectors).rounding_bands(queries)
    found, again = band_top(vectors, queries, labels, scores, bands, 10, check_gap=True)
    assert again == [0, 1, 2, 3]  # all 20 candidates tied (rows 50-69): rows 70-79 might rank first
    want = rescore(vectors, queries, [row[row >= 0] for row in labels], 10)
    assert_same(found[4:], want[4:])  # the others as before; query 5's -1 rows: nothing missed
