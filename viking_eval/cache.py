"""Content-addressed cache of built artifacts (embeddings, ContextStores).

An entry is a folder ``<root>/<kind>/<key[:2]>/<key>/`` whose key is a sha256 over everything
that determines its content (embedder name and fingerprint, the exact texts, store settings).
Each entry carries ``manifest.json`` with the sha256 of every file; an entry whose files do not
match is reported, deleted and rebuilt, never trusted. Entries are built in a temporary folder and
renamed into place, under a file lock, so parallel sweep jobs share one build and an interrupted
build leaves nothing behind. Nothing is ever unpickled (``np.load(allow_pickle=False)``).

Within one process, loaded embeddings are also memoised by key, so the jobs of a Hydra sweep in
the basic launcher (one process) embed and read from disk once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from retrievers.types import Embedder, EncodeKind

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT_VERSION = "1"


def default_cache_root() -> Path:
    return Path(os.environ.get("VIKING_EVAL_CACHE") or Path.home() / ".cache" / "viking_eval").expanduser()


def content_key(parts: Iterable[str | bytes]) -> str:
    """sha256 over length-prefixed parts, so that ("ab", "c") and ("a", "bc") differ."""
    digest = hashlib.sha256(FORMAT_VERSION.encode())
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def texts_key(texts: Sequence[str]) -> str:
    """Fingerprint of an ordered list of texts."""
    return content_key(texts)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class CorruptCacheEntry(RuntimeError):
    """A cache entry whose files do not match its manifest."""


class ArtifactCache:
    """Folders keyed by content hash, built once, verified on every read."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or default_cache_root()).expanduser()
        self.hits = 0
        self.builds = 0
        self.rebuilt_corrupt = 0

    def entry_dir(self, kind: str, key: str) -> Path:
        return self.root / kind / key[:2] / key

    def get_or_build(self, kind: str, key: str, build: Callable[[Path], None]) -> Path:
        """Return the verified folder of ``(kind, key)``, building it with ``build(folder)`` if
        absent or corrupt. ``build`` writes files into the empty folder it is given."""
        final = self.entry_dir(kind, key)
        if self._valid(final, report=False):
            self.hits += 1
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(final) + ".lock"):
            if self._valid(final):  # another process built it while we waited
                self.hits += 1
                return final
            if final.exists():
                shutil.rmtree(final)
            staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", dir=final.parent))
            try:
                build(staging)
                _write_manifest(staging, kind, key)
                os.replace(staging, final)
            finally:
                if staging.exists():
                    shutil.rmtree(staging, ignore_errors=True)
            self.builds += 1
        return final

    def _valid(self, folder: Path, *, report: bool = True) -> bool:
        """Whether ``folder`` is a complete, uncorrupted entry; ``report`` logs and counts a
        corrupt one (done once, under the lock, right before it is rebuilt)."""
        if not folder.is_dir():
            return False
        try:
            verify_manifest(folder)
        except CorruptCacheEntry as error:
            if report:
                log.warning("cache entry %s is corrupt (%s); rebuilding it", folder, error)
                self.rebuilt_corrupt += 1
            return False
        return True

    # -- embeddings --------------------------------------------------------------------------
    def embeddings(
        self,
        embedder_name: str,
        kind: EncodeKind,
        texts: Sequence[str],
        encode: Callable[[Sequence[str]], np.ndarray],
    ) -> np.ndarray:
        """Embeddings of ``texts`` from cache, memo or ``encode``; the key covers the embedder
        name (model id + weights fingerprint + settings), the kind and every text in order."""
        key = content_key(["embeddings", embedder_name, kind, texts_key(texts)])
        memo = _MEMO.get(key)
        if memo is not None:
            self.hits += 1
            return memo

        def build(folder: Path) -> None:
            vectors = np.ascontiguousarray(encode(texts), dtype=np.float32)
            if vectors.shape[0] != len(texts) or not np.isfinite(vectors).all():
                raise ValueError(f"embedder {embedder_name} returned bad vectors: shape {vectors.shape}")
            np.save(folder / "vectors.npy", vectors, allow_pickle=False)

        folder = self.get_or_build("embeddings", key, build)
        vectors = np.load(folder / "vectors.npy", allow_pickle=False)
        vectors.setflags(write=False)
        _MEMO[key] = vectors
        return vectors


_MEMO: dict[str, Any] = {}


def clear_memo() -> None:
    """Forget everything memoised in this process (embeddings and loaded stores)."""
    _MEMO.clear()


def memo_get(key: str) -> Any:
    """An object loaded earlier in this process under a content key, or None."""
    return _MEMO.get(key)


def memo_put(key: str, value: Any) -> None:
    _MEMO[key] = value


def _write_manifest(folder: Path, kind: str, key: str) -> None:
    files = {
        str(path.relative_to(folder)): file_sha256(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }
    manifest = {"kind": kind, "key": key, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def verify_manifest(folder: Path) -> None:
    """Raise CorruptCacheEntry unless every file listed in the manifest exists with its checksum
    and no listed file is missing."""
    manifest_path = folder / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CorruptCacheEntry(f"unreadable manifest {manifest_path}: {error}") from None
    for name, expected in files.items():
        path = folder / name
        if not path.is_file():
            raise CorruptCacheEntry(f"missing file {path}")
        actual = file_sha256(path)
        if actual != expected:
            raise CorruptCacheEntry(f"checksum mismatch for {path}: {actual} != {expected}")


class CachedEmbedder:
    """An Embedder whose ``encode`` goes through the cache: the same texts, kind and embedder
    are embedded once per machine (and held in memory once per process)."""

    def __init__(self, inner: Embedder, cache: ArtifactCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        return self.cache.embeddings(
            self.name, kind, list(texts), lambda batch: self.inner.encode(batch, kind=kind)
        )
