"""Atomic file writes: a finished file is either absent or complete, never half-written.

Everything the harness writes goes through here: write to a temporary file in the same folder,
flush and fsync, then ``os.replace`` onto the final name (atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    temp = Path(temp_name)
    try:
        yield temp
        with open(temp, "rb+") as synced:
            os.fsync(synced.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as temp:
        temp.write_text(text, encoding="utf-8")


def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
