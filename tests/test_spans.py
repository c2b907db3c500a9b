"""The span recorder (retrievers/spans.py) and the per-stage summary (viking_eval/run/stages.py):
nesting, laps, threads, nothing recorded when nobody records, the summary's sums and counts
worked out by hand, and a retriever whose fake stage does a known number of laps timed through
measure_latency (structure only: no wall time is asserted)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from retrievers import Document, StoreConfig
from retrievers.builders import build_store
from retrievers.kernel import Candidates, KernelRetriever
from retrievers.spans import Span, carry, lap, recording, span
from viking_eval.run.latency import measure_latency
from viking_eval.run.stages import OTHER, QuerySpans, span_paths, span_rows, summarize


def _shape(spans: Sequence[Span]) -> list[tuple[str, str]]:
    """(path, detail) of each span in start order."""
    return list(zip(span_paths(spans), [s.detail for s in spans], strict=True))


def test_nothing_is_recorded_and_nothing_checked_without_a_recording() -> None:
    first, second = span("encode"), span("no such stage")
    assert first is second  # the one shared do-nothing context manager
    with first:
        lap("hop")  # returns at once: no open span needed
    with recording() as recorder:
        pass
    assert recorder.spans == ()
    with recording(), pytest.raises(ValueError, match="'no such stage' is not one of"), span("no such stage"):
        pass


def test_spans_nest_and_laps_end_each_other_and_with_their_span() -> None:
    with recording() as recorder:
        with span("encode"):
            pass
        with span("traverse"):
            lap("global")
            with span("vector"):
                pass
            for _ in range(3):
                lap("round")
                with span("rerank"):
                    pass
        with span("parents"):
            pass
    spans = recorder.spans
    assert _shape(spans) == [
        ("encode", ""),
        ("traverse", ""),
        ("traverse/global", ""),
        ("traverse/global/vector", ""),
        *[("traverse/round", ""), ("traverse/round/rerank", "")] * 3,
        ("parents", ""),
    ]
    by_stage = {}
    for s in spans:
        by_stage.setdefault(s.stage, []).append(s)
    traverse = by_stage["traverse"][0]
    laps = [by_stage["global"][0], *by_stage["round"]]
    for before, after in itertools.pairwise(laps):
        assert before.end_ns <= after.start_ns  # a lap ends before the next begins
    assert traverse.start_ns <= laps[0].start_ns and laps[-1].end_ns <= traverse.end_ns
    assert by_stage["parents"][0].parent == -1  # the laps did not leak out of traverse
    for child in spans:
        if child.parent >= 0:
            parent = spans[child.parent]
            assert parent.start_ns <= child.start_ns and child.end_ns <= parent.end_ns


def test_a_carried_thread_records_under_the_span_open_where_it_was_carried() -> None:
    def leg(stage: str) -> None:
        with span(stage):
            pass

    with recording() as recorder, span("legs"):
        threads = [
            threading.Thread(target=carry(leg), args=("bm25",)),
            threading.Thread(target=leg, args=("vector",)),  # not carried: not recorded
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert _shape(recorder.spans) == [("legs", ""), ("legs/bm25", "")]


def test_a_span_ending_after_its_recording_is_dropped() -> None:
    release = threading.Event()
    done = threading.Event()

    def late() -> None:
        with span("strategy", "slow"):
            release.wait(10)
        done.set()

    with recording() as recorder:
        thread = threading.Thread(target=carry(late))
        thread.start()
    release.set()
    thread.join()
    assert done.is_set() and recorder.spans == ()


def _span(index: int, parent: int, stage: str, start: int, end: int, detail: str = "") -> Span:
    return Span(index, parent, stage, detail, start * 1_000_000, end * 1_000_000)  # ms -> ns


def test_summary_worked_out_by_hand() -> None:
    # query 0: 10 ms total: encode 2, traverse 6 (hops 1 + 2 + 2), 2 ms other
    # query 1: 20 ms total: encode 4, traverse 12 (one hop of 3), rerank 1, 3 ms other
    queries = [
        QuerySpans(
            0,
            0,
            10_000_000,
            0,
            (
                _span(0, -1, "encode", 0, 2),
                _span(1, -1, "traverse", 2, 8),
                _span(2, 1, "hop", 2, 3),
                _span(3, 1, "hop", 3, 5),
                _span(4, 1, "hop", 5, 7),
            ),
        ),
        QuerySpans(
            1,
            100_000_000,
            120_000_000,
            0,
            (
                _span(0, -1, "encode", 100, 104),
                _span(1, -1, "traverse", 104, 116),
                _span(2, 1, "hop", 104, 107),
                _span(3, -1, "rerank", 116, 117, detail="cross"),
            ),
        ),
    ]
    stages = {stage.path: stage for stage in summarize(queries)}
    assert list(stages) == ["encode", "traverse", "traverse/hop", "rerank[cross]", OTHER]
    assert stages["traverse/hop"].count_mean == 2.0 and stages["traverse/hop"].depth == 1
    assert stages["traverse/hop"].mean_ms == pytest.approx(4.0)  # (5 + 3) / 2
    assert stages["rerank[cross]"].mean_ms == pytest.approx(0.5)  # absent in query 0: counts 0
    assert stages["rerank[cross]"].p50_ms == pytest.approx(0.5)
    assert stages[OTHER].mean_ms == pytest.approx(2.5)  # (2 + 3) / 2
    assert stages["encode"].share == pytest.approx(3.0 / 15.0)
    top = [stage for stage in stages.values() if stage.depth == 0]
    assert sum(stage.mean_ms for stage in top) == pytest.approx(15.0)  # the mean total
    assert sum(stage.share for stage in top) == pytest.approx(1.0)
    rows = span_rows(queries)
    assert rows[2] == [0, 2, 1, "traverse/hop", "hop", "", 2.0, 1.0]
    assert rows[-1] == [1, 3, -1, "rerank[cross]", "rerank", "cross", 16.0, 1.0]
    assert summarize([]) == ()


class LapsRetriever(KernelRetriever):
    """A family whose search walks ``len(query.split())`` hops, each doing a fixed amount of
    work (sums over a fixed array), inside a ``traverse`` span: the fake slow stage."""

    def uses_embedder(self) -> bool:
        return False

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        found = []
        work = np.arange(20_000, dtype=np.float64)
        for query in queries:
            with span("traverse"):
                for _ in query.split():
                    lap("hop")
                    float(np.sum(work * work))
            found.append(Candidates.of([1.0, 0.5], [0, 1]))
        return found


class NoEmbedder:
    name = "none"
    dim = 1

    def encode(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        raise AssertionError("LapsRetriever encodes nothing")


def test_a_fake_stage_is_counted_through_measure_latency() -> None:
    docs = [Document(f"d{i}", f"document number {i} about words") for i in range(4)]
    store = build_store(docs, None, StoreConfig(timestamps=None))  # BM25 only
    retriever = LapsRetriever(store)
    queries = [("one two three", None), ("one", None), ("a b c d e", None), ("x y", None)]
    report = measure_latency(
        lambda embedder, scope: retriever, NoEmbedder(), queries, top_k=2, n_queries=4, warmup=1
    )
    assert report is not None
    hops = [sum(1 for s in query.spans if s.stage == "hop") for query in report.queries]
    assert hops == [3, 1, 5, 2]  # one hop span per lap the traversal did, in sample order
    for query in report.queries:
        assert span_paths(query.spans)[0] == "traverse"
        assert all(s.parent == 0 for s in query.spans[1:])
        top = sum(s.ms for s in query.spans if s.parent == -1)
        assert top <= query.total_ms
    stages = {stage.path: stage for stage in report.stages}
    assert set(stages) == {"traverse", "traverse/hop", OTHER}
    assert stages["traverse/hop"].count_mean == pytest.approx(11 / 4)
    assert stages["traverse"].mean_ms + stages[OTHER].mean_ms == pytest.approx(report.mean_ms)
    assert report.samples_ms == pytest.approx([q.total_ms for q in report.queries], abs=1e-5)
    document = report.as_dict()
    assert "queries" not in document and document["stages"][0]["path"] == "traverse"
    assert document["index_bytes"]["total"] == document["index_bytes"]["own"] == 0  # reads no index


def test_index_bytes_count_the_parts_a_retriever_reads() -> None:
    import faiss

    from retrievers import BM25Retriever, DenseRetriever, HybridRetriever, TfidfEmbedder
    from retrievers.store.vector_index_config import VectorIndexConfig
    from viking_eval.run.memory import index_bytes

    docs = [Document(f"d{i}", f"text number {i} about topic {i % 7} and words {i % 11}") for i in range(300)]
    embedder = TfidfEmbedder(dim=32).fit([doc.text for doc in docs])
    exact = build_store(docs, embedder, StoreConfig(timestamps=None))
    matrix = 300 * 32 * 4  # float32 rows x dim
    assert index_bytes(DenseRetriever(exact, embedder)) == {"vectors": matrix, "own": 0, "total": matrix}
    bm25 = index_bytes(BM25Retriever(exact))
    assert set(bm25) == {"bm25", "own", "total"} and bm25["bm25"] > 0
    hybrid = index_bytes(HybridRetriever(exact, embedder))
    assert hybrid == {"vectors": matrix, "bm25": bm25["bm25"], "own": 0, "total": matrix + bm25["bm25"]}
    hnsw_store = build_store(
        docs, embedder, StoreConfig(timestamps=None, vector_index=VectorIndexConfig(kind="hnsw"))
    )
    index = next(value for value in vars(hnsw_store.vectors).values() if hasattr(value, "hnsw"))
    graph = index.hnsw.neighbors.size() * 4 + index.hnsw.offsets.size() * 8 + index.hnsw.levels.size() * 4
    assert faiss.downcast_index(index.storage).code_size == 32 * 4
    # the exact matrix it rescores with, the HNSW storage's copy, the graph's links
    assert index_bytes(DenseRetriever(hnsw_store, embedder))["vectors"] == 2 * matrix + graph
