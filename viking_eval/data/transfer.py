"""Moving bytes over the network for the data layer: streaming a URL to a file with a progress
bar and its sha256 (:func:`stream`), the per-dataset lock (:func:`dataset_lock`, :func:`holding`),
removing what a killed download left (:func:`remove_stale_partials`), the errors a transfer
raises (:class:`DownloadError`, :class:`Unreachable`) and the mirror (:func:`mirrored`,
``VIKING_EVAL_MIRROR``). Used by :mod:`viking_eval.data.download` (BEIR zips) and
:mod:`viking_eval.data.fetch` (raw releases a converter rebuilds a dataset from).
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import re
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout
from tqdm import tqdm

from viking_eval.data.errors import DataError

__all__ = [
    "MIRROR_ENV",
    "DownloadError",
    "Unreachable",
    "dataset_lock",
    "holding",
    "mirrored",
    "remove_stale_partials",
    "stream",
]

MIRROR_ENV = "VIKING_EVAL_MIRROR"
"""Environment variable: a base URL that replaces the scheme and host of every registry URL
(:func:`mirrored`), for a mirror or a test server."""


_CHUNK = 1 << 20


class DownloadError(OSError):
    """The network transfer failed (HTTP error, connection error, truncated body), the
    destination cannot be written, or another download of the dataset holds its lock too long."""


class Unreachable(DownloadError):
    """No server answered (offline, a refused connection, an unknown host): nothing was
    transferred. A run and ``python -m viking_eval.data.download`` both exit 2 on it, saying
    what to fetch by hand; a transfer that starts and fails stays a :class:`DownloadError`."""


def mirrored(url: str) -> str:
    """``url`` with its scheme and host replaced by ``VIKING_EVAL_MIRROR`` when that is set
    (``https://raw.githubusercontent.com/o/r/c/f`` with ``http://127.0.0.1:8000/base`` becomes
    ``http://127.0.0.1:8000/base/o/r/c/f``); unset or empty: ``url`` unchanged."""
    base = os.environ.get(MIRROR_ENV, "").strip()
    if not base:
        return url
    parsed = urllib.parse.urlsplit(base)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.query or parsed.fragment:
        raise DataError(
            f"{MIRROR_ENV}={base!r}: must be an http(s) base URL such as http://mirror.example:8000 "
            "(optionally with a path, no query or fragment)"
        )
    path = urllib.parse.urlsplit(url).path
    return base.rstrip("/") + "/" + path.lstrip("/")


def stream(url: str, sink: Path, desc: str, announce: str | None = None) -> str:
    """Write the body of ``url`` to ``sink``; return its sha256. ``announce`` is printed to
    stderr once the server answers (so that an offline machine sees only the error)."""
    digest = hashlib.sha256()
    received = 0
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(sink, "wb") as out:
            if announce:
                print(announce, file=sys.stderr, flush=True)
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            with tqdm(
                total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, disable=None
            ) as bar:
                for block in iter(lambda: response.read(_CHUNK), b""):
                    out.write(block)
                    digest.update(block)
                    received += len(block)
                    bar.update(len(block))
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:  # raised before any answer: no server reached
        raise Unreachable(f"{url}: download failed: {exc}") from exc
    except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets, short reads
        raise DownloadError(f"{url}: download failed: {exc}") from exc
    if total is not None and received != total:
        raise DownloadError(f"{url}: truncated download ({received} of {total} bytes)")
    if total is None and _cut_short_zip(sink):
        # no Content-Length to check against: a body cut short by a closed connection looks like
        # a finished one; a zip's start without its end record is such a body, a failed transfer
        raise DownloadError(
            f"download of {url} failed: the connection closed after {received} bytes with no "
            "Content-Length to check against, and they are not a complete zip archive (its end "
            "record is missing: the transfer was cut short); try again"
        )
    return digest.hexdigest()


def _cut_short_zip(path: Path) -> bool:
    """Whether ``path`` starts as a zip (a local file header) but has no end record: the first
    part of an archive (a body that is no zip at all is left to the unpacking's message)."""
    with open(path, "rb") as handle:
        starts_as_zip = handle.read(4) == b"PK\x03\x04"
    return starts_as_zip and not zipfile.is_zipfile(path)


def _partial_pattern(name: str) -> re.Pattern[str]:
    """Names of this dataset's temporary files and folders (``tempfile`` adds 8 characters of
    ``[a-z0-9_]``); anchored so that ``nq`` never matches ``nq.x``'s."""
    return re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.(?:zip\.part|unpack)")


def remove_stale_partials(dest: Path, name: str, *, before: float, log: logging.Logger) -> list[Path]:
    """Remove what a killed download of ``name`` left in ``dest``: only this dataset's partial
    files and folders, and only those older than ``before`` (when the lock was taken)."""
    pattern = _partial_pattern(name)
    removed = []
    for child in sorted(dest.iterdir()):
        if not pattern.fullmatch(child.name):
            continue
        try:
            if child.lstat().st_mtime >= before:
                continue
        except FileNotFoundError:
            continue
        log.warning("removing %s, left by an interrupted download of %s", child, name)
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
        removed.append(child)
    return removed


def dataset_lock(dest: Path, name: str) -> FileLock:
    """The lock of ``dest/name``, after checking that its file can be created (filelock retries
    some open errors, such as permission denied, until its timeout, which never comes)."""
    lock_path = dest / f".{name}.lock"
    os.close(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666))
    return FileLock(str(lock_path))


@contextmanager
def holding(lock: FileLock, name: str, timeout: float | None, log: logging.Logger) -> Iterator[None]:
    """Hold ``lock``; if another download holds it, say so once and wait (``timeout`` seconds,
    ``None``: as long as it takes; a killed holder releases it at once)."""
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning(
            "another download of %s is running (lock %s); waiting for it to finish", name, lock.lock_file
        )
        try:
            lock.acquire(timeout=-1 if timeout is None else timeout)
        except Timeout:
            raise DownloadError(
                f"{lock.lock_file}: another download of {name} still holds the lock after {timeout:g} s; "
                "wait for it to finish or stop it"
            ) from None
    try:
        yield
    finally:
        lock.release()
