"""Content-addressed cache: built once, verified on read, corrupt entries rebuilt, nothing half-written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from viking_eval.cache import ArtifactCache, CachedEmbedder, clear_memo, content_key


class CountingEmbedder:
    name = "counting-v1"
    dim = 3

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts, *, kind):  # type: ignore[no-untyped-def]
        self.calls += 1
        return np.asarray([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)


def test_content_key_is_length_prefixed() -> None:
    assert content_key(["ab", "c"]) != content_key(["a", "bc"])
    assert content_key(["x"]) == content_key([b"x"])


def test_second_encode_is_a_cache_hit_across_instances(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    first = CachedEmbedder(inner, ArtifactCache(tmp_path)).encode(["a", "bb"], kind="document")
    clear_memo()  # a new process: only the disk cache is left
    second = CachedEmbedder(inner, ArtifactCache(tmp_path)).encode(["a", "bb"], kind="document")
    assert inner.calls == 1
    np.testing.assert_array_equal(first, second)
    # another kind or other texts are other keys
    CachedEmbedder(inner, ArtifactCache(tmp_path)).encode(["a", "bb"], kind="query")
    CachedEmbedder(inner, ArtifactCache(tmp_path)).encode(["a", "b"], kind="document")
    assert inner.calls == 3


def test_corrupt_entry_is_detected_and_rebuilt(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cache = ArtifactCache(tmp_path)
    CachedEmbedder(inner, cache).encode(["hello"], kind="document")
    (vectors,) = list(tmp_path.rglob("vectors.npy"))
    data = bytearray(vectors.read_bytes())
    data[-1] ^= 0xFF  # flip bits in the payload
    vectors.write_bytes(bytes(data))
    clear_memo()
    fresh = ArtifactCache(tmp_path)
    again = CachedEmbedder(inner, fresh).encode(["hello"], kind="document")
    assert inner.calls == 2
    assert fresh.rebuilt_corrupt == 1
    np.testing.assert_array_equal(again, [[5.0, 1.0, 0.0]])


def test_missing_manifest_means_rebuild(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    built: list[int] = []

    def build(folder: Path) -> None:
        built.append(1)
        (folder / "payload.txt").write_text("x")

    folder = cache.get_or_build("things", "k" * 64, build)
    (folder / "manifest.json").unlink()
    cache.get_or_build("things", "k" * 64, build)
    assert len(built) == 2


def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)

    def build(folder: Path) -> None:
        (folder / "half.txt").write_text("partial")
        raise KeyboardInterrupt  # an interrupted build

    with pytest.raises(KeyboardInterrupt):
        cache.get_or_build("things", "a" * 64, build)
    leftovers = [p for p in (tmp_path / "things").rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert leftovers == []
    assert not cache.entry_dir("things", "a" * 64).exists()


def test_bad_vectors_are_not_cached(tmp_path: Path) -> None:
    class NanEmbedder(CountingEmbedder):
        def encode(self, texts, *, kind):  # type: ignore[no-untyped-def]
            return np.full((len(texts), 3), np.nan, dtype=np.float32)

    with pytest.raises(ValueError, match="bad vectors"):
        CachedEmbedder(NanEmbedder(), ArtifactCache(tmp_path)).encode(["x"], kind="query")
    assert not list(tmp_path.rglob("vectors.npy"))


def test_no_pickle_in_cache(tmp_path: Path) -> None:
    CachedEmbedder(CountingEmbedder(), ArtifactCache(tmp_path)).encode(["a"], kind="document")
    (vectors,) = list(tmp_path.rglob("vectors.npy"))
    # a numpy header with dtype '<f4' and no object arrays: loadable with allow_pickle=False
    assert np.load(vectors, allow_pickle=False).dtype == np.float32
