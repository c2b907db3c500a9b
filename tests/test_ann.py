"""faiss ANN indexes (retrievers/index/ann.py) against the exact index, their store setting, the
retrievers' query-time knobs, and ANN quality in the harness's reports.

The oracle is :class:`ExactVectorIndex` (bm25s-style oracle tests, STYLE.md): ``flat`` must give
exactly its results; HNSW and IVF high recall on easy (clustered) data; every kind its contract
(score desc then row asc, batch == single bit for bit, masks, k beyond the index, save/load).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import smoke_multirun

from retrievers import ContextStore, DenseRetriever, Document, StoreConfig, TfidfEmbedder
from retrievers.baselines import BM25Retriever
from retrievers.builders import build_store
from retrievers.hybrid import HybridRetriever
from retrievers.index import ExactVectorIndex, FaissVectorIndex, VectorIndexError
from retrievers.index.ann import DEFAULT_REFINE_FACTOR, EXACT_FRACTION
from retrievers.params import ParamError
from retrievers.store.vector_index_config import VectorIndexConfig, default_nlist, default_pq_m
from viking_eval.run.cache import clear_memo

N_ROWS, DIM = 2000, 32
#: small but not trivial settings per kind: IVF-PQ with one dimension per 4-bit code recalls well
KINDS: dict[str, dict[str, Any]] = {
    "flat": {},
    "hnsw": {},
    "ivf_flat": {},
    "ivf_pq": {"pq_m": 32, "pq_bits": 4},
}
#: recall@10 against exact search on clustered data with the default knobs
MIN_RECALL = {"flat": 1.0, "hnsw": 0.97, "ivf_flat": 0.95, "ivf_pq": 0.9}


def clustered(n: int, dim: int, seed: int = 0, *, clusters: int = 20, spread: float = 0.35) -> np.ndarray:
    """L2-normalised rows around ``clusters`` gaussian centres (easy for ANN: real embeddings
    are clustered too)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    rows = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, dim)).astype(np.float32)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rows = clustered(N_ROWS + 40, DIM)
    return rows[:N_ROWS], rows[N_ROWS:]


@pytest.fixture(scope="module")
def exact(data: tuple[np.ndarray, np.ndarray]) -> ExactVectorIndex:
    return ExactVectorIndex(data[0])


@pytest.fixture(scope="module")
def indexes(exact: ExactVectorIndex) -> dict[str, FaissVectorIndex]:
    return {
        kind: FaissVectorIndex.build(exact, VectorIndexConfig(kind=kind, **extra))
        for kind, extra in KINDS.items()
    }


def _recall(found: list[tuple[np.ndarray, np.ndarray]], truth: list[tuple[np.ndarray, np.ndarray]]) -> float:
    return float(
        np.mean([np.intersect1d(a[1], b[1]).size / b[1].size for a, b in zip(found, truth, strict=True)])
    )


def _same(a: list[tuple[np.ndarray, np.ndarray]], b: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) and x[0].dtype == y[0].dtype
        for x, y in zip(a, b, strict=True)
    )


# --------------------------------------------------------------------------- results vs exact


@pytest.mark.parametrize("kind", list(KINDS))
def test_recall_against_exact_search(
    kind: str, indexes: dict[str, FaissVectorIndex], exact: ExactVectorIndex, data: Any
) -> None:
    queries = data[1]
    found = indexes[kind].search(queries, 10)
    assert _recall(found, exact.search(queries, 10)) >= MIN_RECALL[kind]
    assert indexes[kind].approximate is True


def test_flat_gives_the_exact_results_bit_for_bit(
    indexes: dict[str, FaissVectorIndex], exact: ExactVectorIndex, data: Any
) -> None:
    """faiss chooses the candidates, the exact index's formula scores them: identical values."""
    queries = data[1]
    assert _same(indexes["flat"].search(queries, 10), exact.search(queries, 10))


@pytest.mark.parametrize("kind", list(KINDS))
def test_scores_are_exact_scores_in_ranking_order(
    kind: str, indexes: dict[str, FaissVectorIndex], exact: ExactVectorIndex, data: Any
) -> None:
    """Every returned score is the exact index's score of that row (not faiss's, not PQ's),
    and results follow (score desc, row asc)."""
    queries = data[1]
    reference = {
        (i, int(row)): score
        for i, (scores, rows) in enumerate(exact.search(queries, N_ROWS))
        for score, row in zip(scores, rows, strict=True)
    }
    for i, (scores, rows) in enumerate(indexes[kind].search(queries, 25)):
        assert scores.dtype == np.float32 and rows.dtype == np.int64
        assert [reference[(i, int(row))] for row in rows] == scores.tolist()
        keys = list(zip((-scores).tolist(), rows.tolist(), strict=True))
        assert keys == sorted(keys)


@pytest.mark.parametrize("kind", list(KINDS))
def test_ties_break_by_row_even_at_the_cut(kind: str) -> None:
    """Five copies of one vector (a duplicated document): k=3 returns the three lowest rows,
    the rule every index follows, whichever copies faiss met first."""
    rows = clustered(700, DIM, seed=3)
    copies = [17, 123, 250, 400, 699]
    rows[copies] = rows[5]
    extra = {"pq_m": 32, "pq_bits": 4} if kind == "ivf_pq" else {}
    index = FaissVectorIndex.build(ExactVectorIndex(rows), VectorIndexConfig(kind=kind, **extra))
    ((scores, found),) = index.search(rows[5], 3)
    assert found.tolist() == [5, 17, 123]
    assert scores[0] == scores[1] == scores[2]


@pytest.mark.parametrize("kind", list(KINDS))
def test_batch_equals_single_bit_for_bit(kind: str, indexes: dict[str, FaissVectorIndex], data: Any) -> None:
    """40 queries: enough for faiss's BLAS path (20 or more), which the flat and IVF kinds avoid
    by searching one query at a time; HNSW walks each query alone in any batch."""
    queries = data[1]
    index = indexes[kind]
    batch = index.search(queries, 10)
    assert _same(batch, [index.search(query, 10)[0] for query in queries])
    for knob in index.knobs:
        value = {"ef_search": 8, "nprobe": 2, "refine_factor": 5}[knob]
        batch = index.search(queries, 10, **{knob: value})
        assert _same(batch, [index.search(query, 10, **{knob: value})[0] for query in queries])


# --------------------------------------------------------------------------- masks and k


@pytest.mark.parametrize("kind", list(KINDS))
def test_masks_hold_and_recall_stays_high(
    kind: str, indexes: dict[str, FaissVectorIndex], exact: ExactVectorIndex, data: Any
) -> None:
    queries = data[1]
    mask = np.zeros(N_ROWS, dtype=bool)
    mask[::3] = True  # a third of the rows: faiss searches with an IDSelectorBitmap
    found = indexes[kind].search(queries, 10, mask=mask)
    for _, rows in found:
        assert rows.size == 10 and mask[rows].all()
    assert _recall(found, exact.search(queries, 10, mask=mask)) >= MIN_RECALL[kind] - 0.05


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_small_scope_is_searched_exactly(
    kind: str, indexes: dict[str, FaissVectorIndex], exact: ExactVectorIndex, data: Any
) -> None:
    """Under EXACT_FRACTION of the rows allowed: a graph walk would find few of them; they are
    all scored instead, so the results are the exact ones."""
    queries = data[1]
    mask = np.zeros(N_ROWS, dtype=bool)
    mask[np.arange(7, N_ROWS, 97)] = True
    assert mask.sum() < EXACT_FRACTION * N_ROWS
    assert _same(indexes[kind].search(queries, 10, mask=mask), exact.search(queries, 10, mask=mask))
    nothing = np.zeros(N_ROWS, dtype=bool)
    assert all(rows.size == 0 for _, rows in indexes[kind].search(queries[:3], 10, mask=nothing))


@pytest.mark.parametrize("kind", list(KINDS))
def test_k_larger_than_the_index_returns_every_row(
    kind: str, indexes: dict[str, FaissVectorIndex], exact: ExactVectorIndex, data: Any
) -> None:
    """faiss's HNSW returns only what its walk reached (about half the rows here); asking for
    more rows than allowed scores them all."""
    queries = data[1][:3]
    assert _same(indexes[kind].search(queries, N_ROWS + 5), exact.search(queries, N_ROWS + 5))
    mask = np.zeros(N_ROWS, dtype=bool)
    mask[:500] = True
    for _, rows in indexes[kind].search(queries, 600, mask=mask):
        assert sorted(rows.tolist()) == list(range(500))


def test_bad_queries_and_k_are_refused(indexes: dict[str, FaissVectorIndex]) -> None:
    index = indexes["hnsw"]
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        index.search(np.zeros(DIM, dtype=np.float32), 0)
    with pytest.raises(ValueError, match=r"queries must have shape \(32,\)"):
        index.search(np.zeros(DIM + 1, dtype=np.float32), 3)
    with pytest.raises(ValueError, match="finite"):
        index.search(np.full(DIM, np.nan, dtype=np.float32), 3)
    with pytest.raises(ValueError, match="mask must be a boolean array"):
        index.search(np.zeros(DIM, dtype=np.float32), 3, mask=np.ones(5, dtype=bool))


# --------------------------------------------------------------------------- knobs


def test_knobs_change_the_search_and_are_checked(
    indexes: dict[str, FaissVectorIndex], exact: ExactVectorIndex, data: Any
) -> None:
    queries = data[1]
    truth = exact.search(queries, 10)
    hnsw, ivf = indexes["hnsw"], indexes["ivf_flat"]
    assert _recall(hnsw.search(queries, 10, ef_search=1), truth) < _recall(
        hnsw.search(queries, 10, ef_search=200), truth
    )
    assert _recall(ivf.search(queries, 10, nprobe=1), truth) < _recall(
        ivf.search(queries, 10, nprobe=ivf.nlist), truth
    )
    assert _recall(ivf.search(queries, 10, nprobe=ivf.nlist), truth) == 1.0  # every list: exact
    assert hnsw.default_knobs() == {"ef_search": 64} and ivf.default_knobs() == {"nprobe": 16}
    assert indexes["ivf_pq"].default_knobs() == {"nprobe": 16, "refine_factor": 10}
    with pytest.raises(
        ValueError,
        match=r"refine_factor=4 applies to a store.vector_index.kind of ivf_pq; "
        r"this store's vector index is ivf_flat \(its knobs: nprobe\)",
    ):
        ivf.search(queries, 10, refine_factor=4)
    with pytest.raises(ValueError, match=r"refine_factor must be an integer >= 1, got 0"):
        indexes["ivf_pq"].search(queries, 10, refine_factor=0)
    with pytest.raises(
        ValueError,
        match=r"nprobe=3 applies to a store.vector_index.kind of ivf_flat or ivf_pq; this store's vector index is hnsw",
    ):
        hnsw.search(queries, 10, nprobe=3)
    with pytest.raises(ValueError, match=r"ef_search=3 applies to a store.vector_index.kind of hnsw"):
        ivf.search(queries, 10, ef_search=3)
    with pytest.raises(ValueError, match=f"nprobe=1000 exceeds the index's {ivf.nlist} IVF lists"):
        ivf.search(queries, 10, nprobe=1000)
    with pytest.raises(ValueError, match="it has no query-time knob"):
        indexes["flat"].search(queries, 10, ef_search=3)


def test_ivf_pq_rescores_refine_factor_times_k_candidates(exact: ExactVectorIndex, data: Any) -> None:
    """Coarse codes (4 sub-vectors of 4 bits) rank badly; asking faiss for refine_factor x k
    candidates and rescoring them exactly brings recall up, and with every list probed and as many
    candidates as rows the results are exact search's, bit for bit."""
    queries = data[1]
    truth = exact.search(queries, 10)
    coarse = FaissVectorIndex.build(exact, VectorIndexConfig(kind="ivf_pq", pq_m=4, pq_bits=4))
    asked: list[int] = []
    inner = coarse._index

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def search(self, matrix: Any, k: int, **kwargs: Any) -> Any:
            asked.append(k)
            return inner.search(matrix, k, **kwargs)

    coarse._index = Spy()
    factors = (1, 2, DEFAULT_REFINE_FACTOR, 50)
    recalls = [
        _recall(coarse.search(queries, 10, nprobe=coarse.nlist, refine_factor=factor), truth)
        for factor in factors
    ]
    assert list(dict.fromkeys(asked)) == [10 * factor for factor in factors]  # one query at a time
    assert recalls == sorted(recalls) and recalls[0] < 0.8 and recalls[-1] > 0.99, recalls
    default = coarse.search(queries, 10, nprobe=coarse.nlist)
    assert asked[-1] == 10 * DEFAULT_REFINE_FACTOR and recalls[2] == _recall(default, truth)
    assert 2 < DEFAULT_REFINE_FACTOR < 50
    everything = coarse.search(queries, 10, nprobe=coarse.nlist, refine_factor=N_ROWS // 10)
    assert asked[-1] == N_ROWS and _same(everything, truth)


# --------------------------------------------------------------------------- build settings


def test_settings_are_validated() -> None:
    with pytest.raises(ParamError, match=r"store.vector_index.kind must be one of"):
        VectorIndexConfig(kind="annoy")  # type: ignore[arg-type]
    with pytest.raises(ParamError, match=r"store.vector_index.hnsw_m must be an integer in \[2, 256\]"):
        VectorIndexConfig(kind="hnsw", hnsw_m=1)
    with pytest.raises(ParamError, match=r"store.vector_index.nlist does not apply to kind 'hnsw'"):
        VectorIndexConfig(kind="hnsw", nlist=10)
    with pytest.raises(ParamError, match=r"store.vector_index.pq_m does not apply to kind 'ivf_flat'"):
        VectorIndexConfig(kind="ivf_flat", pq_m=8)
    with pytest.raises(ParamError, match=r"store.vector_index.pq_bits must be an integer in \[1, 16\]"):
        VectorIndexConfig(kind="ivf_pq", pq_bits=0)
    rows = ExactVectorIndex(clustered(300, DIM))
    with pytest.raises(ValueError, match=r"store.vector_index.pq_m 5 must divide the embedding dimension 32"):
        FaissVectorIndex.build(rows, VectorIndexConfig(kind="ivf_pq", pq_m=5))
    with pytest.raises(ValueError, match=r"store.vector_index.nlist 400 exceeds the 300 rows"):
        FaissVectorIndex.build(rows, VectorIndexConfig(kind="ivf_flat", nlist=400))
    with pytest.raises(ValueError, match="needs at least 256 training rows, got 100"):
        FaissVectorIndex.build(rows, VectorIndexConfig(kind="ivf_pq", train_size=100))
    with pytest.warns(UserWarning, match="fewer than the 3900 faiss recommends"):
        FaissVectorIndex.build(rows, VectorIndexConfig(kind="ivf_flat", nlist=100))
    assert default_nlist(2000) == 51 and default_nlist(1_000_000) == 4000 and default_nlist(10) == 1
    assert default_pq_m(384) == 48 and default_pq_m(32) == 4 and default_pq_m(7) == 1


def test_builds_are_reproducible(exact: ExactVectorIndex) -> None:
    """The same settings and seed give the same index file (HNSW levels and IVF training are
    seeded); another seed another one."""
    faiss = pytest.importorskip("faiss")

    def serialised(kind: str, seed: int) -> bytes:
        index = FaissVectorIndex.build(exact, VectorIndexConfig(kind=kind, seed=seed))
        return bytes(faiss.serialize_index(index._index))

    for kind in ("hnsw", "ivf_flat"):
        assert serialised(kind, 0) == serialised(kind, 0)
        assert serialised(kind, 0) != serialised(kind, 1)


# --------------------------------------------------------------------------- save, load, bad files


@pytest.mark.parametrize("kind", list(KINDS))
def test_save_load_round_trip_memory_mapped(
    kind: str, indexes: dict[str, FaissVectorIndex], exact: ExactVectorIndex, data: Any, tmp_path: Path
) -> None:
    index = indexes[kind]
    index.save(tmp_path)
    loaded = FaissVectorIndex.load(tmp_path, exact, kind)
    assert loaded.mmapped and not FaissVectorIndex.load(tmp_path, exact, kind, mmap=False).mmapped
    assert loaded.settings == index.settings and loaded.default_knobs() == index.default_knobs()
    assert _same(loaded.search(data[1], 10), index.search(data[1], 10))
    meta = json.loads((tmp_path / "index.json").read_text())
    assert meta["kind"] == kind and meta["rows"] == N_ROWS and meta["dim"] == DIM and meta["faiss_version"]


def test_stale_files_are_refused(indexes: dict[str, FaissVectorIndex], data: Any, tmp_path: Path) -> None:
    indexes["hnsw"].save(tmp_path)
    fewer = ExactVectorIndex(data[0][:-1])
    with pytest.raises(
        VectorIndexError,
        match=r"stale: it holds 2000 vectors of dimension 32, the store's embeddings are 1999 x 32; rebuild the store",
    ):
        FaissVectorIndex.load(tmp_path, fewer, "hnsw")
    wider = ExactVectorIndex(np.hstack([data[0], data[0]]))
    with pytest.raises(VectorIndexError, match="dimension 32, the store's embeddings are 2000 x 64"):
        FaissVectorIndex.load(tmp_path, wider, "hnsw")
    with pytest.raises(
        VectorIndexError, match="a hnsw index, the store's settings say ivf_flat; rebuild the store"
    ):
        FaissVectorIndex.load(tmp_path, ExactVectorIndex(data[0]), "ivf_flat")
    with pytest.raises(VectorIndexError, match="is missing; rebuild the store"):
        FaissVectorIndex.load(tmp_path / "nowhere", ExactVectorIndex(data[0]), "hnsw")


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("keep", [0.5, 0.999, 0.0])
def test_truncated_files_are_refused_in_one_line(
    kind: str, keep: float, indexes: dict[str, FaissVectorIndex], exact: ExactVectorIndex, tmp_path: Path
) -> None:
    indexes[kind].save(tmp_path)
    path = tmp_path / "index.faiss"
    content = path.read_bytes()
    path.write_bytes(content[: int(len(content) * keep)])
    for mmap in (True, False):
        with pytest.raises(VectorIndexError) as raised:
            FaissVectorIndex.load(tmp_path, exact, kind, mmap=mmap)
        message = str(raised.value)
        assert "\n" not in message and message.startswith(str(path)) and message.endswith("rebuild the store")
        assert "not a readable faiss index (truncated or damaged" in message


# --------------------------------------------------------------------------- the store


WORDS = [
    "apple",
    "banana",
    "cherry",
    "grape",
    "lemon",
    "mango",
    "melon",
    "olive",
    "peach",
    "pear",
    "plum",
    "berry",
    "kiwi",
    "lime",
    "fig",
    "date",
]


def _documents(n: int = 300) -> list[Document]:
    return [
        Document(
            id=f"d{i:03d}",
            text=" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(6)) + f" item{i % 11}",
            metadata={"group": f"g{i % 4}"},
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def embedder() -> TfidfEmbedder:
    return TfidfEmbedder(dim=16, seed=0).fit([doc.full_text for doc in _documents()])


def _store(embedder: TfidfEmbedder, kind: str, **extra: Any) -> ContextStore:
    return build_store(
        _documents(), embedder, StoreConfig.from_dict({"vector_index": {"kind": kind, **extra}})
    )


@pytest.fixture(scope="module")
def hnsw_store(embedder: TfidfEmbedder) -> ContextStore:
    return _store(embedder, "hnsw")


def test_the_store_builds_saves_and_maps_its_index(
    hnsw_store: ContextStore, embedder: TfidfEmbedder, tmp_path: Path
) -> None:
    assert isinstance(hnsw_store.vectors, FaissVectorIndex) and hnsw_store.vectors.kind == "hnsw"
    assert isinstance(hnsw_store.exact_vectors, ExactVectorIndex)
    assert "vector_index" in hnsw_store.build_seconds
    hnsw_store.save(tmp_path / "store")
    assert (tmp_path / "store" / "vector_index" / "index.faiss").is_file()
    loaded = ContextStore.load(tmp_path / "store")
    assert isinstance(loaded.vectors, FaissVectorIndex) and loaded.vectors.mmapped
    queries = embedder.encode(["apple banana", "kiwi lime"], kind="query")
    assert _same(loaded.vectors.search(queries, 5), hnsw_store.vectors.search(queries, 5))
    # a scoped view searches the same index within its scope
    view = loaded.restricted(loaded.metadata_mask("group", "g1"))
    retriever = DenseRetriever(view, embedder)
    for results in retriever.retrieve_batch(["apple banana", "kiwi lime"], 5):
        assert len(results) == 5 and all(
            r.doc_id in {d.id for d in view.documents if d.metadata["group"] == "g1"} for r in results
        )
    # an exact store has no index file and its vectors are the exact index
    exact = build_store(_documents(), embedder, StoreConfig())
    exact.save(tmp_path / "exact")
    assert not (tmp_path / "exact" / "vector_index").exists()
    assert isinstance(ContextStore.load(tmp_path / "exact").vectors, ExactVectorIndex)


def test_the_store_refuses_a_damaged_or_stale_index(hnsw_store: ContextStore, tmp_path: Path) -> None:
    hnsw_store.save(tmp_path / "store")
    index_file = tmp_path / "store" / "vector_index" / "index.faiss"
    index_file.write_bytes(index_file.read_bytes()[:1000])
    with pytest.raises(VectorIndexError, match="not a readable faiss index"):
        ContextStore.load(tmp_path / "store")
    (tmp_path / "store" / "vector_index" / "index.faiss").unlink()
    with pytest.raises(VectorIndexError, match="is missing; rebuild the store"):
        ContextStore.load(tmp_path / "store")


def test_an_index_without_an_embedder_is_refused() -> None:
    with pytest.raises(ValueError, match=r"store.vector_index.kind=hnsw .*need document embeddings"):
        build_store(_documents(), None, StoreConfig.from_dict({"vector_index": {"kind": "hnsw"}}))


# --------------------------------------------------------------------------- retriever knobs


def test_retriever_knobs_are_validated_and_refused_where_they_do_not_apply(
    hnsw_store: ContextStore, embedder: TfidfEmbedder
) -> None:
    DenseRetriever(hnsw_store, embedder, ef_search=128)
    with pytest.raises(ParamError, match=r"ef_search must be an integer in \[1, 65536\] or null, got 0"):
        DenseRetriever(hnsw_store, embedder, ef_search=0)
    with pytest.raises(ParamError, match=r"nprobe must be an integer in \[1, 1048576\] or null, got -1"):
        DenseRetriever(hnsw_store, embedder, nprobe=-1)
    with pytest.raises(
        ParamError,
        match=r"nprobe=4 applies to a store.vector_index.kind of ivf_flat or ivf_pq; this store's vector index is hnsw",
    ):
        DenseRetriever(hnsw_store, embedder, nprobe=4)
    exact = build_store(_documents(), embedder, StoreConfig())
    with pytest.raises(
        ParamError,
        match=r"ef_search=64 applies to an approximate vector index .*this store's vector index is exact",
    ):
        DenseRetriever(exact, embedder, ef_search=64)
    with pytest.raises(ParamError, match="ef_search=64: BM25Retriever searches no vectors here"):
        BM25Retriever(hnsw_store, ef_search=64)
    with pytest.raises(ParamError, match="ef_search=64: HybridRetriever searches no vectors here"):
        HybridRetriever(hnsw_store, embedder, keyword_weight=1.0, ef_search=64)
    ivf = _store(embedder, "ivf_flat")
    nlist = ivf.vectors.nlist
    DenseRetriever(ivf, embedder, nprobe=nlist)
    with pytest.raises(ParamError, match=f"nprobe={nlist + 1} exceeds the index's {nlist} IVF lists"):
        DenseRetriever(ivf, embedder, nprobe=nlist + 1)
    with pytest.raises(ParamError, match=r"refine_factor=5 applies to a store.vector_index.kind of ivf_pq"):
        DenseRetriever(ivf, embedder, refine_factor=5)
    with pytest.raises(ParamError, match=r"refine_factor must be an integer in \[1, 1024\] or null, got 0"):
        DenseRetriever(ivf, embedder, refine_factor=0)
    with pytest.raises(
        ParamError,
        match=r"refine_factor=5 applies to an approximate vector index \(store.vector_index.kind=ivf_pq\)",
    ):
        DenseRetriever(exact, embedder, refine_factor=5)


def test_retriever_knobs_reach_the_index(
    hnsw_store: ContextStore, embedder: TfidfEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every family's vector search passes the retriever's knobs (vector_search.search_vectors)."""
    from retrievers.graph import GraphRetriever
    from retrievers.multi_strategy import MultiStrategyRetriever

    seen: list[tuple[int | None, int | None, int | None]] = []
    original = FaissVectorIndex.search

    def spy(self: FaissVectorIndex, queries: Any, k: int, **kwargs: Any) -> Any:
        seen.append((kwargs.get("ef_search"), kwargs.get("nprobe"), kwargs.get("refine_factor")))
        return original(self, queries, k, **kwargs)

    monkeypatch.setattr(FaissVectorIndex, "search", spy)
    for make in (
        lambda: DenseRetriever(hnsw_store, embedder, ef_search=77),
        lambda: HybridRetriever(hnsw_store, embedder, ef_search=77),
        lambda: GraphRetriever(hnsw_store, embedder, ef_search=77),
        lambda: MultiStrategyRetriever(hnsw_store, embedder, strategies=["semantic"], ef_search=77),
    ):
        seen.clear()
        make().retrieve_batch(["apple banana", "kiwi"], 5)
        assert seen and all(knobs == (77, None, None) for knobs in seen), make
    with pytest.warns(UserWarning, match="training ivf_pq on 300 rows"):  # a tiny store: codes are coarse
        pq_store = _store(embedder, "ivf_pq", pq_m=8, pq_bits=4)
    pq = {"nprobe": 3, "refine_factor": 7}
    for make in (
        lambda: DenseRetriever(pq_store, embedder, **pq),
        lambda: HybridRetriever(pq_store, embedder, **pq),
        lambda: GraphRetriever(pq_store, embedder, **pq),
        lambda: MultiStrategyRetriever(pq_store, embedder, strategies=["semantic"], **pq),
    ):
        seen.clear()
        make().retrieve_batch(["apple banana", "kiwi"], 5)
        assert seen and all(knobs == (None, 3, 7) for knobs in seen), make


def test_a_hierarchical_retriever_searches_leaves_through_the_index(
    embedder: TfidfEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from retrievers.hierarchical import HierarchicalRetriever

    store = build_store(
        _documents(),
        embedder,
        StoreConfig.from_dict(
            {
                "vector_index": {"kind": "hnsw"},
                "hierarchy": {
                    "builder": "metadata_path",
                    "path_keys": ["group"],
                    "root_uri": "viking://resources",
                },
            }
        ),
    )
    seen: list[Any] = []
    original = FaissVectorIndex.search
    monkeypatch.setattr(
        FaissVectorIndex,
        "search",
        lambda self, queries, k, **kwargs: (
            seen.append(kwargs.get("ef_search")) or original(self, queries, k, **kwargs)
        ),
    )
    retriever = HierarchicalRetriever(store, embedder, global_search_levels=[0, 1, 2], ef_search=33)
    found = retriever.retrieve_batch(["apple banana", "kiwi"], 5)
    assert any(found) and seen and set(seen) == {33}


# --------------------------------------------------------------------------- the harness

REPO = Path(__file__).resolve().parents[1]


def _run(folder: Path, *overrides: str) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir

    from viking_eval.config import load_settings
    from viking_eval.run.experiment import run_experiment

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        config = compose(
            config_name="config", overrides=["experiment=smoke", "run.latency.n_queries=3", *overrides]
        )
    run_experiment(load_settings(config), folder, config_yaml="name: smoke\n")
    return {
        "metrics": json.loads((folder / "metrics.json").read_text()),
        "environment": json.loads((folder / "environment.json").read_text()),
        "report": (folder / "report.md").read_text(),
        "csv": (folder / "metrics.csv").read_text().splitlines(),
    }


@pytest.mark.needs_data
def test_a_run_over_an_hnsw_store_reports_ann_recall(data_env: Path, tmp_path: Path) -> None:
    """ADI with TF-IDF (experiment=smoke) over an HNSW store: the dense retriever gets
    ann_recall@10 beside nDCG, its knobs and the approximate flag; BM25, which searches no
    vectors, gets none. A second run with another ef_search reuses the store (the knob is not
    part of its key); a truncated index file in the cache is caught by the entry's checksums
    and the store is rebuilt."""
    first = _run(tmp_path / "first", "store.vector_index.kind=hnsw", "retrievers.dense.ef_search=8")
    dense = first["metrics"]["retrievers"]["dense"]
    assert 0.5 <= dense["metrics"]["ann_recall@10"] <= 1.0
    assert 0.5 <= dense["metrics"]["ann_recall@100"] <= 1.0  # run.top_k: the depth searched
    assert dense["vector_search"] == {
        "index": "hnsw",
        "approximate": True,
        "knobs": {"ef_search": 8},
        "depth": 100,
        "n_queries": dense["n_queries"],
        "ann_recall@10": dense["metrics"]["ann_recall@10"],
        "ann_recall@100": dense["metrics"]["ann_recall@100"],
    }
    bm25 = first["metrics"]["retrievers"]["bm25"]
    assert "ann_recall@10" not in bm25["metrics"] and "vector_search" not in bm25
    index = first["environment"]["vector_index"]
    assert index["kind"] == "hnsw" and index["approximate"] and index["mmap"]
    assert index["default_knobs"] == {"ef_search": 64}
    assert "Vector search was **approximate** (faiss hnsw" in first["report"]
    assert "  - dense: ef_search 8, depth 100; ann_recall@10 " in first["report"]
    assert re.search(
        r"\|\s*AP@100\s*\|\s*ann_recall@10\s*\|\s*ann_recall@100\s*\|\s*p50 ms", first["report"]
    )  # the summary table
    header = first["csv"][0].split(",")
    assert header[header.index("AP@100") + 1 : header.index("AP@100") + 3] == [
        "ann_recall@10",
        "ann_recall@100",
    ]
    assert first["environment"]["store_built_now"] is True

    second = _run(tmp_path / "second", "store.vector_index.kind=hnsw", "retrievers.dense.ef_search=64")
    assert second["environment"]["store_key"] == first["environment"]["store_key"]
    assert second["environment"]["store_built_now"] is False
    assert second["metrics"]["retrievers"]["dense"]["vector_search"]["knobs"] == {"ef_search": 64}

    index_file = Path(first["environment"]["store_folder"]) / "vector_index" / "index.faiss"
    index_file.write_bytes(index_file.read_bytes()[:-100])
    clear_memo()  # as a new process: the store is read from the cache again
    third = _run(tmp_path / "third", "store.vector_index.kind=hnsw")
    assert third["environment"]["store_built_now"] is True
    assert third["metrics"]["retrievers"]["dense"]["vector_search"]["knobs"] == {"ef_search": 64}

    exact = _run(tmp_path / "exact")
    assert "ann_recall@10" not in exact["metrics"]["retrievers"]["dense"]["metrics"]
    assert exact["environment"]["vector_index"] == {"kind": "exact", "approximate": False}
    assert "approximate" not in exact["report"].split("## Store")[0]


@pytest.mark.slow
@pytest.mark.needs_data
def test_a_sweep_over_ef_search_plots_ann_recall_against_latency(data_env: Path, tmp_path: Path) -> None:
    import csv

    sweep_dir = tmp_path / "sweep"
    done = smoke_multirun(
        sweep_dir,
        "store=hnsw",
        "run.latency.n_queries=3",
        "sweep.evaluate_best=false",
        "retrievers.dense.ef_search=1,16,64",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open(sweep_dir / "sweep.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row["retriever"] == "dense"]
    assert [row["retrievers.dense.ef_search"] for row in rows] == ["1", "16", "64"]
    assert all(0.0 < float(row["ann_recall@10"]) <= 1.0 for row in rows)
    assert (sweep_dir / "pareto_dense_ann_recall_10.png").is_file()
    assert (sweep_dir / "plot_dense_ann_recall_10_vs_retrievers_dense_ef_search.png").is_file()
    keys = {json.loads((sweep_dir / job / "environment.json").read_text())["store_key"] for job in "012"}
    assert len(keys) == 1  # one store for the whole sweep
