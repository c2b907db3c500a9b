"""Files: atomic writes (a finished file is either absent or complete, never half-written) and
the sha256 of a file's bytes.

Everything the harness writes goes through here: write to a temporary file in the same folder,
flush and fsync, then ``os.replace`` onto the final name (atomic on POSIX).

The temporary file is created as ``open()`` would create the file itself, with mode 0o666 less
the process's umask (``tempfile.mkstemp`` would make every report 0600, unreadable to the rest of
a team sharing a reports folder); ``O_EXCL`` and a random name keep the creation race-free.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FILE_MODE = 0o666  # the kernel removes the umask's bits at creation
_BLOCK = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex sha256 of the file's bytes, read a block at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _create_temp(folder: Path, name: str) -> Path:
    """A new, empty file beside ``name`` in ``folder``, created with ``FILE_MODE`` & ~umask."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        temp = folder / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            os.close(os.open(temp, flags, FILE_MODE))
        except FileExistsError:
            continue
        return temp
    raise FileExistsError(f"could not create a temporary file beside {folder / name}")


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _create_temp(path.parent, path.name)
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


def write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as temp:
        temp.write_bytes(data)


def write_json(path: Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
