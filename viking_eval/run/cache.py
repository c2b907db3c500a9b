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
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from retrievers.types import Embedder, EncodeKind
from viking_eval.files import sha256_file
from viking_eval.progress import progress_bar, quiet_model_bars, stage

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


ENCODE_CHUNK = 256
"""Texts per call of the wrapped embedder on a cache miss (a multiple of the usual batch sizes)."""

RESUME_CHUNK = 4096
"""Texts per cache entry when more texts than this are encoded (a multiple of
:data:`ENCODE_CHUNK`): a corpus is cached in parts, so a build that stops (a crash, a kill, a
full disk) keeps what it encoded and the next run encodes only the missing parts."""

_LOADED: weakref.WeakSet[Any] = weakref.WeakSet()  # embedders whose model a wrapper loaded (said once)
_MEMO_BYTES = 256 << 20  # results larger than this are not kept in memory by ``encode``


class CachedEmbedder:
    """An Embedder whose ``encode`` goes through the cache: the same texts, kind and embedder
    are embedded once per machine (and held in memory once per process).

    On a cache miss the texts are encoded longest first in calls of :data:`ENCODE_CHUNK` texts
    under one labelled progress bar (``embedding scifact corpus (5,183 docs)``, with docs/s and
    the time left; ``label`` names what is embedded, ``show_progress`` as the config's: True,
    False, or None for a terminal only). Longest first is the order sentence-transformers
    batches in anyway, so batches are as full as in one call; the wrapped embedder never draws
    its own bar (a call is below its 1,000-text threshold).

    More than :data:`RESUME_CHUNK` texts are cached in parts of that many (in the longest-first
    order), each its own content-addressed entry (``.npy``, never pickled): an interrupted
    encoding resumes where it stopped, and the bar starts at what was already done. A corpus
    cached whole by an earlier version (one entry for all its texts) is still found. The parts
    make the same calls of the wrapped embedder as one whole encoding would (the part size is a
    multiple of the call size), so the vectors are the same.

    Several processes. When the wrapped embedder has more than one worker (``workers > 1``:
    ``SentenceTransformerEmbedder(processes=2)`` or ``devices=[...]``, sentence-transformers'
    multi-process pool), each part goes to it in one call of ``encode_chunked(texts, kind,
    ENCODE_CHUNK)``, which encodes the same calls of :data:`ENCODE_CHUNK` texts on its workers.

    :meth:`encode_into` writes the rows into an array it is given (a store's memory-mapped
    ``embeddings.npy``, :func:`retrievers.builders.build_store`), holding one part at a time."""

    def __init__(
        self, inner: Embedder, cache: ArtifactCache, *, label: str = "", show_progress: bool | None = False
    ) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.label = label
        self.show_progress = show_progress
        self._dim: int | None = None  # the wrapped embedder's, once asked (its model loaded)
        #: parts found in the cache / encoded by the last call with more than RESUME_CHUNK texts
        self.parts_cached = 0
        self.parts_encoded = 0

    @property
    def dim(self) -> int:
        return self._loaded_dim()

    def _loaded_dim(self) -> int:
        """The wrapped embedder's width, its model loaded first when it loads one lazily (a
        ``model`` property: sentence-transformers), as a stage of its own (``loading model
        <name>``: plain lines without a terminal) with Hugging Face's own bars off."""
        if self._dim is not None:
            return self._dim
        if isinstance(getattr(type(self.inner), "model", None), property) and self.inner not in _LOADED:
            quiet_model_bars()
            what = getattr(self.inner, "model_name", self.name)
            with stage(f"loading model {what}", self.show_progress):
                dim = self.inner.dim
        else:
            dim = self.inner.dim
        self._dim = dim
        with contextlib.suppress(TypeError):  # not weakly referable: said again by the next wrapper
            _LOADED.add(self.inner)
        return dim

    def _key(self, kind: EncodeKind, texts: Sequence[str]) -> str:
        return content_key(["embeddings", self.name, kind, texts_key(texts)])

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        if len(texts) <= RESUME_CHUNK:
            return self.cache.embeddings(
                self.name, kind, list(texts), lambda batch: self._encode(batch, kind)
            )
        key = self._key(kind, texts)
        memo = _MEMO.get(key)
        if isinstance(memo, np.ndarray):  # what an embeddings key holds
            self.cache.hits += 1
            return memo
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        self.encode_into(texts, kind=kind, out=out)
        out.setflags(write=False)
        if out.nbytes <= _MEMO_BYTES:
            _MEMO[key] = out
        return out

    def encode_into(self, texts: Sequence[str], *, kind: EncodeKind, out: np.ndarray) -> None:
        """Write the embeddings of ``texts`` into ``out`` (``(len(texts), dim)`` float32), part
        by part (see the class docstring). ``texts`` may be any sequence; it is read a part at
        a time."""
        n = len(texts)
        if out.shape != (n, self.dim) or out.dtype != np.float32:
            raise ValueError(f"out must be float32 of shape ({n}, {self.dim}), got {out.dtype} {out.shape}")
        if n <= RESUME_CHUNK:
            out[:] = self.encode(list(texts), kind=kind)
            return
        whole = self.cache.find("embeddings", self._key(kind, texts))
        if whole is not None:  # cached in one entry (an earlier version, or a query set)
            self.cache.hits += 1
            vectors = np.load(whole / "vectors.npy", mmap_mode="r", allow_pickle=False)
            for start in range(0, n, RESUME_CHUNK):
                out[start : start + RESUME_CHUNK] = vectors[start : start + RESUME_CHUNK]
            return
        lengths = np.fromiter((len(text) for text in texts), dtype=np.int64, count=n)
        order = np.argsort(-lengths, kind="stable")  # longest first; ties keep their order
        parts = [order[start : start + RESUME_CHUNK] for start in range(0, n, RESUME_CHUNK)]
        missing: list[tuple[np.ndarray, str]] = []  # (rows, key): texts are read again when encoded
        self.parts_cached = self.parts_encoded = 0
        done = 0
        for rows in parts:
            part_texts = [texts[int(i)] for i in rows]
            key = self._key(kind, part_texts)
            found = self.cache.find("embeddings", key)
            if found is None:
                missing.append((rows, key))
                continue
            self.cache.hits += 1
            self.parts_cached += 1
            out[rows] = np.load(found / "vectors.npy", allow_pickle=False)
            done += rows.size
        if not missing:
            return
        unit = "doc" if kind == "document" else "query"
        what = f"{n:,} {'docs' if kind == 'document' else 'queries'}"
        desc = f"embedding {self.label} ({what})" if self.label else f"embedding {what}"
        if done:
            desc += f", {done:,} cached"
        with progress_bar(total=n, desc=desc, unit=unit, show=self.show_progress, initial=done) as bar:
            for rows, key in missing:
                part_texts = [texts[int(i)] for i in rows]

                def build(folder: Path, part_texts: list[str] = part_texts) -> None:
                    vectors = np.ascontiguousarray(self._encode_part(part_texts, kind, bar), dtype=np.float32)
                    if vectors.shape != (len(part_texts), self.dim) or not np.isfinite(vectors).all():
                        raise ValueError(f"embedder {self.name} returned bad vectors: shape {vectors.shape}")
                    np.save(folder / "vectors.npy", vectors, allow_pickle=False)

                folder = self.cache.get_or_build("embeddings", key, build)
                out[rows] = np.load(folder / "vectors.npy", allow_pickle=False)
                self.parts_encoded += 1

    def _encode_part(self, texts: list[str], kind: EncodeKind, bar: Any) -> np.ndarray:
        """One part (already longest first): calls of ENCODE_CHUNK texts, on the wrapped
        embedder's workers when it has several."""
        encode_chunked = getattr(self.inner, "encode_chunked", None)
        if callable(encode_chunked) and getattr(self.inner, "workers", 1) > 1:
            vectors = np.asarray(encode_chunked(texts, kind, ENCODE_CHUNK))
            bar.update(len(texts))
            return vectors
        blocks = []
        for start in range(0, len(texts), ENCODE_CHUNK):
            piece = texts[start : start + ENCODE_CHUNK]
            blocks.append(np.asarray(self.inner.encode(piece, kind=kind), dtype=np.float32))
            bar.update(len(piece))
        return np.concatenate(blocks)

    def _encode(self, texts: Sequence[str], kind: EncodeKind) -> np.ndarray:
        self._loaded_dim()  # a model loads here, as a stage, rather than inside the first call
        if len(texts) <= ENCODE_CHUNK:  # one call, as before; no bar for a few texts
            return self.inner.encode(texts, kind=kind)
        unit = "doc" if kind == "document" else "query"
        what = f"{len(texts):,} {'docs' if kind == 'document' else 'queries'}"
        desc = f"embedding {self.label} ({what})" if self.label else f"embedding {what}"
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # stable: ties keep their order
        with progress_bar(total=len(texts), desc=desc, unit=unit, show=self.show_progress) as bar:
            vectors = self._encode_part([texts[i] for i in order], kind, bar)
        out = np.empty_like(vectors)
        out[np.asarray(order)] = vectors
        return out
