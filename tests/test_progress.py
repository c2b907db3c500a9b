"""Commands a person enjoys (issue 14): labelled progress bars for the long phases, libraries'
debug and info lines silenced unless VIKING_EVAL_DEBUG=1, and one-query timing that a busy machine
does not turn into minutes (torch's threads held at run.latency.blas_threads)."""

from __future__ import annotations

import logging
import os
import sys
import types
from collections.abc import Sequence

import numpy as np
import pytest

from retrievers.types import EncodeKind, RetrievalResult
from viking_eval.measures.significance import SignificanceSettings, compare_with_baseline
from viking_eval.progress import progress_shown, quiet_libraries
from viking_eval.run import cached_embedder as cache_module
from viking_eval.run.cache import ArtifactCache
from viking_eval.run.cached_embedder import CachedEmbedder
from viking_eval.run.latency import measure_latency


class LengthEmbedder:
    """Row i = (len(text), calls so far): shows which call embedded a text and keeps its place."""

    name = "length"
    dim = 2

    def __init__(self) -> None:
        self.calls: list[int] = []

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        self.calls.append(len(texts))
        return np.array([[len(text), len(self.calls)] for text in texts], dtype=np.float32)


def test_cached_embedder_encodes_longest_first_in_chunks_under_one_labelled_bar(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cache_module, "ENCODE_CHUNK", 4)
    texts = ["a" * (n % 7 + 1) + str(n) for n in range(10)]  # lengths 2..9, with ties
    inner = LengthEmbedder()
    embedder = CachedEmbedder(inner, ArtifactCache(), label="tiny corpus", show_progress=True)
    vectors = embedder.encode(texts, kind="document")
    assert inner.calls == [4, 4, 2]  # chunks of ENCODE_CHUNK
    assert vectors[:, 0].tolist() == [len(text) for text in texts]  # each row back in its place
    # longest first: every text of the first call is at least as long as any of a later call
    first_call = [len(t) for t, call in zip(texts, vectors[:, 1], strict=True) if call == 1]
    later = [len(t) for t, call in zip(texts, vectors[:, 1], strict=True) if call > 1]
    assert min(first_call) >= max(later)
    assert "embedding tiny corpus (10 docs)" in capsys.readouterr().err
    # a hit: nothing embedded, no bar
    assert np.array_equal(embedder.encode(texts, kind="document"), vectors) and inner.calls == [4, 4, 2]
    assert capsys.readouterr().err == ""


def test_a_few_texts_are_one_call_without_a_bar(capsys: pytest.CaptureFixture[str]) -> None:
    inner = LengthEmbedder()
    CachedEmbedder(inner, ArtifactCache(), label="q", show_progress=True).encode(["x", "yy"], kind="query")
    assert inner.calls == [2] and capsys.readouterr().err == ""


class FakeTorch(types.ModuleType):
    """Stands in for torch in sys.modules: records set_num_threads."""

    def __init__(self) -> None:
        super().__init__("torch")
        self.threads = 2

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.threads = n


class ThreadRecorder:
    """A retriever that records torch's threads in every call (and imports 'torch' on the first)."""

    def __init__(self, torch: FakeTorch, monkeypatch: pytest.MonkeyPatch) -> None:
        self.torch = torch
        self.monkeypatch = monkeypatch
        self.single: list[int] = []
        self.batch: list[int] = []

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        if "torch" not in sys.modules:  # the model loads (and imports torch) on the first query
            self.monkeypatch.setitem(sys.modules, "torch", self.torch)
        self.single.append(self.torch.threads)
        return [RetrievalResult("d1", 1.0)]

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        self.batch.append(self.torch.threads)
        return [[RetrievalResult("d1", 1.0)] for _ in queries]


def test_one_query_timing_holds_torch_threads_and_shows_a_bar(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    torch = FakeTorch()
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    retriever = ThreadRecorder(torch, monkeypatch)
    queries = [(f"q{i}", None) for i in range(5)]
    report = measure_latency(
        lambda embedder, scope: retriever,  # type: ignore[arg-type,return-value]
        LengthEmbedder(),
        queries,
        top_k=10,
        n_queries=5,
        warmup=2,
        label="dense",
        show_progress=True,
    )
    assert report is not None and report.n_queries == 5
    # the first warm-up query imported torch with its own threads; from then on one thread
    assert retriever.single == [2, 1, 1, 1, 1, 1, 1]
    assert retriever.batch == [2] and torch.threads == 2  # throughput and after: as before
    assert "timing dense: 5 queries (+2 warm-up)" in capsys.readouterr().err
    # blas_threads=None leaves torch alone
    retriever.single.clear()
    measure_latency(
        lambda embedder, scope: retriever,  # type: ignore[arg-type,return-value]
        LengthEmbedder(),
        queries,
        top_k=10,
        n_queries=2,
        warmup=0,
        blas_threads=None,
    )
    assert retriever.single == [2, 2]


def test_significance_bar_names_the_baseline_and_resamples(capsys: pytest.CaptureFixture[str]) -> None:
    per_query = {
        name: {"nDCG@10": {f"q{i}": (i * step) % 1.0 for i in range(8)}}
        for name, step in [("a", 0.3), ("b", 0.7)]
    }
    settings = SignificanceSettings(permutations=100, bootstrap=100)
    compare_with_baseline(per_query, "a", ["nDCG@10"], settings, show_progress=True)
    assert "significance vs a: 1 comparisons (100 resamples)" in capsys.readouterr().err
    compare_with_baseline(per_query, "a", ["nDCG@10"], settings)  # off by default
    assert capsys.readouterr().err == ""


def test_progress_shown_follows_the_switch_or_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    assert progress_shown(True) and not progress_shown(False)
    monkeypatch.setattr(sys, "stderr", types.SimpleNamespace(isatty=lambda: False))
    assert not progress_shown(None)
    monkeypatch.setattr(sys, "stderr", types.SimpleNamespace(isatty=lambda: True))
    assert progress_shown(None)


def test_library_info_and_debug_lines_are_dropped_unless_debugging(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "")  # restored (to unset) after the test
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS")
    bm25s = logging.getLogger("bm25s")
    monkeypatch.setattr(bm25s, "level", logging.DEBUG)  # what bm25s does when imported
    try:
        quiet_libraries()
        with caplog.at_level(logging.DEBUG):
            bm25s.debug("Building index from IDs")
            logging.getLogger("sentence_transformers.base.model").info("Loading SentenceTransformer model")
            logging.getLogger("matplotlib.font_manager").info("generated new fontManager")
            bm25s.warning("a real problem")
            logging.getLogger("viking_eval.run.experiment").info("ours stay")
        assert [record.getMessage() for record in caplog.records] == ["a real problem", "ours stay"]
        assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
        caplog.clear()
        quiet_libraries(debug=True)
        with caplog.at_level(logging.DEBUG):
            bm25s.debug("Building index from IDs")
        assert [record.getMessage() for record in caplog.records] == ["Building index from IDs"]
    finally:
        quiet_libraries(debug=True)  # leave the session's loggers as they were
