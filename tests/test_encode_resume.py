"""Encoding big corpora in cached parts that survive a crash (viking_eval/run/cache.py, issue 17).

A build is "killed" by an embedder that raises after N calls; the rerun must encode only the
parts the first run did not finish, and give the vectors an uninterrupted run gives. Stores
built into their folder get the rows written straight into ``embeddings.npy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import viking_eval.run.cached_embedder as cache_module
from retrievers import ContextStore, Document
from retrievers.builders import build_store
from retrievers.types import EncodeKind
from viking_eval.run.cache import ArtifactCache, clear_memo
from viking_eval.run.cached_embedder import CachedEmbedder


class Crash(RuntimeError):
    pass


class CountingEmbedder:
    """Row = (len(text), sum of code points % 997): depends on the text only. Counts the texts
    it encodes; raises Crash once ``crash_after`` calls have been made."""

    name = "counting-v1"
    dim = 2

    def __init__(self, crash_after: int | None = None) -> None:
        self.crash_after = crash_after
        self.calls = 0
        self.encoded: list[str] = []

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        if self.crash_after is not None and self.calls >= self.crash_after:
            raise Crash(f"killed after {self.calls} calls")
        self.calls += 1
        self.encoded += list(texts)
        return np.array([[len(text), sum(map(ord, text)) % 997] for text in texts], dtype=np.float32)


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "ENCODE_CHUNK", 2)
    monkeypatch.setattr(cache_module, "RESUME_CHUNK", 4)  # a part is 2 calls
    clear_memo()


TEXTS = [f"text {'x' * (i % 5)} {i}" for i in range(19)]  # 5 parts: 4+4+4+4+3


def expected(texts: Sequence[str]) -> np.ndarray:
    return CountingEmbedder().encode(list(texts), kind="document")


def test_a_killed_encoding_resumes_with_only_the_missing_parts(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    crashing = CountingEmbedder(crash_after=5)  # parts 1-2 done (4 calls), part 3 dies halfway
    with pytest.raises(Crash):
        CachedEmbedder(crashing, cache).encode(TEXTS, kind="document")
    assert len(crashing.encoded) == 10  # 2 whole parts and half of the third
    clear_memo()  # a new process
    rerun = CountingEmbedder()
    embedder = CachedEmbedder(rerun, ArtifactCache(tmp_path))
    vectors = embedder.encode(TEXTS, kind="document")
    assert np.array_equal(vectors, expected(TEXTS))
    assert (embedder.parts_cached, embedder.parts_encoded) == (2, 3)
    assert len(rerun.encoded) == 19 - 8  # the half-done part is encoded again, nothing else
    assert not set(rerun.encoded) & set(crashing.encoded[:8])
    # everything is cached now: a third run encodes nothing
    clear_memo()
    third = CountingEmbedder()
    again = CachedEmbedder(third, ArtifactCache(tmp_path))
    assert np.array_equal(again.encode(TEXTS, kind="document"), vectors) and third.calls == 0
    assert (again.parts_cached, again.parts_encoded) == (5, 0)
    assert not list(tmp_path.rglob("*.pkl")) and not list(tmp_path.rglob("*.pickle"))


def test_parts_are_longest_first_and_the_vectors_equal_one_whole_encoding(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    vectors = CachedEmbedder(inner, ArtifactCache(tmp_path)).encode(TEXTS, kind="document")
    lengths = [len(text) for text in inner.encoded]
    assert lengths == sorted(lengths, reverse=True)  # the order a single encoding would batch in
    assert np.array_equal(vectors, expected(TEXTS))


def test_a_corpus_cached_whole_by_an_earlier_version_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "RESUME_CHUNK", 100)  # the old way: one entry for all texts
    CachedEmbedder(CountingEmbedder(), ArtifactCache(tmp_path)).encode(TEXTS, kind="document")
    monkeypatch.setattr(cache_module, "RESUME_CHUNK", 4)
    clear_memo()
    inner = CountingEmbedder()
    out = np.zeros((len(TEXTS), 2), dtype=np.float32)
    CachedEmbedder(inner, ArtifactCache(tmp_path)).encode_into(TEXTS, kind="document", out=out)
    assert inner.calls == 0 and np.array_equal(out, expected(TEXTS))


def test_a_store_build_resumes_and_writes_rows_into_its_memory_mapped_file(tmp_path: Path) -> None:
    docs = [Document(f"d{i:02d}", text) for i, text in enumerate(TEXTS)]
    with pytest.raises(Crash):
        build_store(
            docs,
            CachedEmbedder(CountingEmbedder(crash_after=3), ArtifactCache(tmp_path / "c")),
            folder=tmp_path / "s1",
        )
    rerun = CountingEmbedder()
    store = build_store(docs, CachedEmbedder(rerun, ArtifactCache(tmp_path / "c")), folder=tmp_path / "s2")
    assert len(rerun.encoded) == 19 - 4  # part 1 was cached before the crash
    assert isinstance(store.embeddings, np.memmap)
    assert np.array_equal(store.embeddings, expected(TEXTS))
    assert np.array_equal(ContextStore.load(tmp_path / "s2").embeddings, expected(TEXTS))


def test_the_progress_bar_counts_cached_parts_and_shows_rate_and_time_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(Crash):
        CachedEmbedder(CountingEmbedder(crash_after=2), ArtifactCache(tmp_path)).encode(
            TEXTS, kind="document"
        )
    capsys.readouterr()
    clear_memo()
    CachedEmbedder(CountingEmbedder(), ArtifactCache(tmp_path), label="tiny", show_progress=True).encode(
        TEXTS, kind="document"
    )
    err = capsys.readouterr().err
    assert "embedding tiny (19 docs), 4 cached" in err
    assert "19/19" in err and "doc/s" in err and "<" in err  # [elapsed<remaining, rate]


def test_out_must_fit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"out must be float32 of shape \(19, 2\)"):
        CachedEmbedder(CountingEmbedder(), ArtifactCache(tmp_path)).encode_into(
            TEXTS, kind="document", out=np.zeros((3, 2), dtype=np.float32)
        )


class PooledEmbedder(CountingEmbedder):
    """Stands in for a multi-process embedder: ``workers`` > 1 and ``encode_chunked``."""

    workers = 2

    def __init__(self) -> None:
        super().__init__()
        self.chunked_calls: list[tuple[int, int]] = []

    def encode_chunked(self, texts: Sequence[str], kind: EncodeKind, chunk_size: int) -> np.ndarray:
        self.chunked_calls.append((len(texts), chunk_size))
        return np.concatenate(
            [self.encode(texts[i : i + chunk_size], kind=kind) for i in range(0, len(texts), chunk_size)]
        )


def test_a_pooled_embedder_gets_a_whole_part_cut_in_the_same_calls(tmp_path: Path) -> None:
    inner = PooledEmbedder()
    vectors = CachedEmbedder(inner, ArtifactCache(tmp_path)).encode(TEXTS, kind="document")
    assert inner.chunked_calls == [(4, 2)] * 4 + [(3, 2)]
    assert np.array_equal(vectors, expected(TEXTS))
