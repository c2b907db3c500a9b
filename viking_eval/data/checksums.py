"""``CHECKSUMS.json``: the sha256 of every file of a downloaded dataset, re-verified on load.

A folder written by ``python -m viking_eval.data.download`` holds ``CHECKSUMS.json`` (the sha256
of every file as downloaded: trust on first use where the registry publishes none).
:func:`viking_eval.data.beir.load_beir` re-verifies every file listed there
(:func:`verify_checksums`) and refuses a file that changed. A folder without ``CHECKSUMS.json``
has nothing to verify.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from viking_eval.data.errors import located
from viking_eval.data.locations import is_file
from viking_eval.data.records import read_bytes
from viking_eval.files import sha256_file

__all__ = ["CHECKSUMS_FILE", "read_checksums", "record_checksums", "sha256_bytes", "verify_checksums"]

CHECKSUMS_FILE = "CHECKSUMS.json"
"""Written into a downloaded dataset folder: the sha256 of each file, re-verified on every load."""

_SHA256_RE = re.compile(r"[0-9a-f]{64}")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_checksums(folder: Path) -> dict[str, str] | None:
    """The ``files`` map (relative path -> sha256) of ``folder/CHECKSUMS.json``, or ``None`` when
    the folder has none. A file that is not valid, or names a path outside the folder, is a
    :class:`DataError`."""
    path = Path(folder) / CHECKSUMS_FILE
    if not is_file(path):
        return None
    try:
        raw = json.loads(read_bytes(path).decode("utf-8"))
    except UnicodeDecodeError:
        raise located(path, "not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise located(path, f"malformed JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    files = raw.get("files") if isinstance(raw, dict) else None
    if not isinstance(files, dict):
        raise located(path, "expected a JSON object with a 'files' object (relative path -> sha256)")
    for rel, digest in files.items():
        if not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest):
            raise located(path, f"files.{rel}: expected 64 lowercase hex digits, got {digest!r}")
        parts = rel.split("/")
        if not rel or rel.startswith("/") or "\\" in rel or ".." in parts or "" in parts:
            raise located(path, f"files.{rel}: paths must be relative and stay inside the dataset folder")
    return dict(files)


def record_checksums(folder: Path, **info: Any) -> dict[str, str]:
    """Write ``folder/CHECKSUMS.json``: the sha256 of every file under ``folder`` (relative
    posix paths) plus ``info`` (source URL, archive checksum, ...); return the file map. The
    file is written next to the data and renamed into place, so it is never half-written."""
    folder = Path(folder)
    files = {
        path.relative_to(folder).as_posix(): sha256_file(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.relative_to(folder).as_posix() != CHECKSUMS_FILE
    }
    record = {
        "format": 1,
        **info,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "note": f"sha256 of every file as downloaded; viking_eval.data re-verifies them on load "
        f"(delete {CHECKSUMS_FILE} to accept an intended change)",
        "files": files,
    }
    staging = folder / f".{CHECKSUMS_FILE}.part"
    staging.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(staging, folder / CHECKSUMS_FILE)
    return files


def verify_checksums(folder: Path, read: Mapping[str, str]) -> tuple[str, ...]:
    """Check every file listed in ``CHECKSUMS.json`` (``read``: hashes already computed, by
    relative path); return the files verified (none without a ``CHECKSUMS.json``)."""
    recorded = read_checksums(folder)
    if recorded is None:
        return ()
    checksums = folder / CHECKSUMS_FILE
    for rel, expected in sorted(recorded.items()):
        path = folder / rel
        actual = read.get(rel)
        if actual is None:
            if not is_file(path):
                raise located(
                    path,
                    f"listed in {checksums} but missing; download the dataset again "
                    f"(or delete {CHECKSUMS_FILE} if the removal is intended)",
                )
            actual = sha256_file(path)
        if actual != expected:
            raise located(
                path,
                f"sha256 {actual} differs from {expected} recorded in {checksums} at download: the "
                f"file changed; download the dataset again, or delete {CHECKSUMS_FILE} if the change "
                "is intended",
            )
    return tuple(sorted(recorded))
