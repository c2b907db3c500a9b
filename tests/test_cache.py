"""Content-addressed cache: built once, verified on read, corrupt entries rebuilt, nothing half-written."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from viking_eval.run.cache import ArtifactCache, CacheError, clear_memo, content_key
from viking_eval.run.cached_embedder import CachedEmbedder


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


# --------------------------------------------------------------------------- unwritable caches (issue 12)


def write_payload(folder: Path) -> None:
    (folder / "payload.txt").write_text("built", encoding="utf-8")


@pytest.fixture
def unwritable_root(tmp_path: Path) -> Iterator[Path]:
    """A cache root nothing can be written under: a chmod 0o500 folder, or, where that does not
    stop the user (root ignores permission bits), a path below a regular file, which stops
    everyone."""
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        (folder / "probe").touch()
    except PermissionError:
        yield folder
    else:
        (folder / "probe").unlink()
        (tmp_path / "a_file").write_text("not a folder", encoding="utf-8")
        yield tmp_path / "a_file" / "cache"
    finally:
        folder.chmod(0o700)


def fallback_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "is not writable" in r.getMessage()]


def test_unwritable_cache_falls_back_to_a_temporary_one_and_says_so(
    unwritable_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = ArtifactCache(unwritable_root)
    with caplog.at_level(logging.WARNING, logger="viking_eval.run.cache"):
        folder = cache.get_or_build("things", "a" * 64, write_payload)
        cache.get_or_build("things", "b" * 64, write_payload)
    assert (folder / "payload.txt").read_text(encoding="utf-8") == "built"
    assert folder.is_relative_to(cache.root) and not folder.is_relative_to(unwritable_root)
    assert cache.root.is_relative_to(tempfile.gettempdir())
    assert cache.builds == 2
    info = cache.describe()
    assert info["cache_fallback"] is True
    assert info["cache_requested_root"] == str(unwritable_root)
    assert info["cache_root"] == str(cache.root) != str(unwritable_root)
    assert str(unwritable_root) in info["cache_fallback_reason"]
    (message,) = fallback_warnings(caplog)  # one line, once per cache, not once per entry
    assert "\n" not in message and "set VIKING_EVAL_CACHE to a writable folder" in message
    # a second cache over the same folder (the next job of a sweep) shares the fallback's builds
    again = ArtifactCache(unwritable_root)
    assert again.get_or_build("things", "a" * 64, write_payload) == folder
    assert (again.hits, again.builds) == (1, 0)


def test_a_lock_that_cannot_be_created_falls_back_but_old_entries_still_serve(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    built_before = cache.get_or_build("things", "a" * 64, write_payload)
    blocked = Path(f"{cache.entry_dir('things', 'b' * 64)}.lock")
    blocked.mkdir(parents=True)  # a lock path that cannot be opened as a file, for root as well
    with caplog.at_level(logging.WARNING, logger="viking_eval.run.cache"):
        built_after = cache.get_or_build("things", "b" * 64, write_payload)
    assert not built_after.is_relative_to(tmp_path / "cache")
    assert cache.describe()["cache_fallback"] is True and len(fallback_warnings(caplog)) == 1
    # an entry the requested folder already holds is still read from there
    assert cache.get_or_build("things", "a" * 64, write_payload) == built_before
    assert (cache.hits, cache.builds) == (1, 2)


def test_cache_error_when_the_fallback_fails_too(
    unwritable_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "tmp_is_a_file"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    cache = ArtifactCache(unwritable_root)
    with pytest.raises(CacheError) as info:
        cache.get_or_build("things", "c" * 64, write_payload)
    message = str(info.value)
    assert message.startswith(f"{unwritable_root}: cache folder not writable")
    assert "\n" not in message and message.endswith("set VIKING_EVAL_CACHE to a writable folder")
    assert isinstance(info.value, OSError)  # callers that caught the old PermissionError still do


def test_a_writable_cache_does_not_fall_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = ArtifactCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="viking_eval.run.cache"):
        cache.get_or_build("things", "d" * 64, write_payload)
    assert cache.describe() == {
        "cache_root": str(tmp_path),
        "cache_requested_root": str(tmp_path),
        "cache_fallback": False,
        "cache_fallback_reason": None,
    }
    assert caplog.records == []


def test_staging_left_by_a_killed_build_is_removed_on_the_next_build(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    key, other = "e" * 64, "e" * 12 + "f" * 52  # same shard, same 12-character prefix
    parent = cache.entry_dir("things", key).parent
    killed = [parent / f".{key}.k1ll3d_x", parent / f".{key[:12]}.oldforma"]  # new and old naming
    alive = parent / f".{other}.abcdefgh"  # another key's build: not ours to remove
    for folder in [*killed, alive]:
        folder.mkdir(parents=True)
        (folder / "half.npy").write_bytes(b"partial")
        os.utime(folder, (1_000_000_000, 1_000_000_000))
    cache.get_or_build("things", key, write_payload)
    assert not any(folder.exists() for folder in killed)
    assert alive.is_dir() and cache.stale_removed == 2
    names = sorted(p.name for p in parent.iterdir())
    assert names == sorted([key, f"{key}.lock", alive.name])


def test_a_cache_root_the_system_cannot_look_at_falls_back(tmp_path: Path) -> None:
    # stat() on a 300-character name fails with ENAMETOOLONG (not "does not exist"), for root too
    cache = ArtifactCache(tmp_path / ("x" * 300))
    folder = cache.get_or_build("things", "f" * 64, write_payload)
    assert (folder / "payload.txt").is_file()
    assert cache.describe()["cache_fallback"] is True
    assert "File name too long" in str(cache.fallback_reason)
