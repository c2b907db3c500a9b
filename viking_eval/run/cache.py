"""Content-addressed cache of built artifacts (embeddings, ContextStores).

An entry is a folder ``<root>/<kind>/<key[:2]>/<key>/`` whose key is a sha256 over everything
that determines its content (embedder name and fingerprint, the exact texts, store settings).
Each entry carries ``manifest.json`` with the sha256 of every file; an entry whose files do not
match is reported, deleted and rebuilt, never trusted. Entries are built in a temporary folder and
renamed into place, under a file lock, so parallel sweep jobs share one build and an interrupted
build leaves nothing behind (a build killed outright leaves its staging folder, which the next
build of the same key removes). An entry's folder gets the mode the umask gives a new folder
(its staging folder, made by ``mkdtemp``, is 0700 until then). Nothing is ever unpickled
(``np.load(allow_pickle=False)``).

A cache folder that cannot be written (a read-only home, a path under a file, a lock file that
cannot be created) still serves the valid entries it holds; new entries then go to a temporary
folder for the rest of the process (removed when the process exits), with a one-line warning, and :meth:`ArtifactCache.describe`
says so for the run's ``environment.json``. Only when that fallback cannot be created either is
it an error: :class:`CacheError`, saying to set ``VIKING_EVAL_CACHE`` to a writable folder.

Within one process, loaded embeddings are also memoised by key, so the jobs of a Hydra sweep in
the basic launcher (one process) embed and read from disk once.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from retrievers.types import EncodeKind
from viking_eval.files import sha256_file

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT_VERSION = "1"
CACHE_ENV = "VIKING_EVAL_CACHE"

# one temporary fallback per unwritable cache folder and process, so the jobs of a sweep share it
_FALLBACKS: dict[Path, Path] = {}


def default_cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "viking_eval").expanduser()


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


class CorruptCacheEntry(RuntimeError):
    """A cache entry whose files do not match its manifest."""


class CacheError(OSError):
    """Neither the cache folder nor a temporary fallback can be written; the message is one line
    that names both and says what to do."""


def _reason(error: OSError) -> str:
    """An OS error in a few words, without repeating the path (the message names it)."""
    return error.strerror or type(error).__name__


class ArtifactCache:
    """Folders keyed by content hash, built once, verified on every read.

    ``requested_root`` is the folder asked for (``VIKING_EVAL_CACHE`` by default); ``root`` is
    where new entries are built: the same folder, or a temporary one after the requested folder
    turned out not to be writable (``fallback_reason`` then says why)."""

    def __init__(self, root: Path | None = None) -> None:
        self.requested_root = (root or default_cache_root()).expanduser()
        self.root = self.requested_root
        self.fallback_reason: str | None = None
        self.hits = 0
        self.builds = 0
        self.rebuilt_corrupt = 0
        self.stale_removed = 0

    def describe(self) -> dict[str, Any]:
        """Where this cache read and wrote, for a run's ``environment.json``."""
        return {
            "cache_root": str(self.root),
            "cache_requested_root": str(self.requested_root),
            "cache_fallback": self.fallback_reason is not None,
            "cache_fallback_reason": self.fallback_reason,
        }

    def entry_dir(self, kind: str, key: str) -> Path:
        """The folder of ``(kind, key)`` under ``root`` (where it is or would be built)."""
        return _entry_dir(self.root, kind, key)

    def find(self, kind: str, key: str) -> Path | None:
        """The verified folder of ``(kind, key)`` if it is built, else None (nothing is built)."""
        for root in dict.fromkeys([self.requested_root, self.root]):
            found = _entry_dir(root, kind, key)
            if self._valid(found, report=False):  # readable even where nothing can be written
                return found
        return None

    def get_or_build(self, kind: str, key: str, build: Callable[[Path], None]) -> Path:
        """Return the verified folder of ``(kind, key)``, building it with ``build(folder)`` if
        absent or corrupt. ``build`` writes files into the empty folder it is given."""
        found = self.find(kind, key)
        if found is not None:
            self.hits += 1
            return found
        lock = self._lock(kind, key)  # may switch ``root`` to the temporary fallback
        final = self.entry_dir(kind, key)
        with lock:
            if self._valid(final):  # another process built it while we waited
                self.hits += 1
                return final
            self._remove_stale_staging(final, key, before=time.time())
            if final.exists():
                shutil.rmtree(final)
            staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=final.parent))
            try:
                build(staging)
                _write_manifest(staging, kind, key)
                staging.chmod(0o777 & ~current_umask())  # mkdtemp made it 0700: follow the umask
                os.replace(staging, final)
            finally:
                if staging.exists():
                    shutil.rmtree(staging, ignore_errors=True)
            self.builds += 1
        return final

    def _lock(self, kind: str, key: str) -> FileLock:
        """The build lock of ``(kind, key)``, falling back to a temporary root (once) when the
        current root cannot hold it."""
        try:
            return _open_lock(self.entry_dir(kind, key))
        except OSError as error:
            if self.fallback_reason is not None:
                raise CacheError(
                    f"{self.root}: the temporary cache cannot be written either ({_reason(error)}); "
                    f"set {CACHE_ENV} to a writable folder"
                ) from error
            failed_at = self.entry_dir(kind, key).parent
            self._fall_back(f"{failed_at}: {_reason(error)}")
        try:
            return _open_lock(self.entry_dir(kind, key))
        except OSError as error:
            raise CacheError(
                f"{self.requested_root}: cache folder not writable ({self.fallback_reason}) and the "
                f"temporary cache {self.root} not either ({_reason(error)}); set {CACHE_ENV} to a "
                "writable folder"
            ) from error

    def _fall_back(self, reason: str) -> None:
        fallback = _FALLBACKS.get(self.requested_root)
        if fallback is None or not fallback.is_dir():
            try:
                fallback = Path(tempfile.mkdtemp(prefix="viking_eval-cache-"))
            except OSError as error:
                raise CacheError(
                    f"{self.requested_root}: cache folder not writable ({reason}) and no temporary "
                    f"cache could be created in {tempfile.gettempdir()} ({_reason(error)}); set "
                    f"{CACHE_ENV} to a writable folder"
                ) from error
            _FALLBACKS[self.requested_root] = fallback
            atexit.register(shutil.rmtree, fallback, ignore_errors=True)  # a temporary cache ends with us
        self.root = fallback
        self.fallback_reason = reason
        log.warning(
            "cache folder %s is not writable (%s); building into the temporary cache %s for this run "
            "(set %s to a writable folder to keep builds between runs)",
            self.requested_root,
            reason,
            fallback,
            CACHE_ENV,
        )

    def _remove_stale_staging(self, final: Path, key: str, *, before: float) -> None:
        """Remove staging folders of this key left by a build that was killed (we hold the
        key's lock, so no live build owns them; the age check guards against anything else)."""
        pattern = re.compile(rf"\.(?:{key}|{key[:12]})\.[a-z0-9_]{{8}}")
        for child in final.parent.iterdir():
            if not (child.is_dir() and pattern.fullmatch(child.name)):
                continue
            try:
                if child.stat().st_mtime >= before:
                    continue
            except FileNotFoundError:
                continue
            log.warning("removing %s, left by an interrupted cache build", child)
            shutil.rmtree(child, ignore_errors=True)
            self.stale_removed += 1

    def _valid(self, folder: Path, *, report: bool = True) -> bool:
        """Whether ``folder`` is a complete, uncorrupted entry; ``report`` logs and counts a
        corrupt one (done once, under the lock, right before it is rebuilt)."""
        try:
            if not folder.is_dir():
                return False
            verify_manifest(folder)
        except CorruptCacheEntry as error:
            if report:
                log.warning("cache entry %s is corrupt (%s); rebuilding it", folder, error)
                self.rebuilt_corrupt += 1
            return False
        except OSError:  # a folder or file that cannot be looked at (permission, name too long)
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
        if isinstance(memo, np.ndarray):  # what an embeddings key holds (below)
            self.hits += 1
            return memo

        def build(folder: Path) -> None:
            vectors = np.ascontiguousarray(encode(texts), dtype=np.float32)
            if vectors.shape[0] != len(texts) or not np.isfinite(vectors).all():
                raise ValueError(f"embedder {embedder_name} returned bad vectors: shape {vectors.shape}")
            np.save(folder / "vectors.npy", vectors, allow_pickle=False)

        folder = self.get_or_build("embeddings", key, build)
        loaded: np.ndarray = np.load(folder / "vectors.npy", allow_pickle=False)  # an .npy file: one array
        loaded.setflags(write=False)
        _MEMO[key] = loaded
        return loaded


def current_umask() -> int:
    """The process's umask (read from /proc where there is one: setting it to read it is not
    thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _entry_dir(root: Path, kind: str, key: str) -> Path:
    return root / kind / key[:2] / key


def _open_lock(final: Path) -> FileLock:
    """A lock beside ``final``, after checking that its file can be created: filelock retries
    some open errors (permission denied) until its timeout, which by default never comes."""
    final.parent.mkdir(parents=True, exist_ok=True)
    lock_path = Path(f"{final}.lock")
    os.close(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666))
    return FileLock(str(lock_path))


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
        str(path.relative_to(folder)): sha256_file(path)
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
        actual = sha256_file(path)
        if actual != expected:
            raise CorruptCacheEntry(f"checksum mismatch for {path}: {actual} != {expected}")
