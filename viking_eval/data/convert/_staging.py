"""Staging folders for the converters: a dataset appears at ``<dest>/<name>`` only when complete.

A conversion writes into ``<dest>/.<name>.partial-<pid>`` and :func:`install` renames that into
place; with ``--force`` the old folder is first moved aside to ``.<name>.old-<pid>`` and removed
after the rename, so a failure never leaves a half-written folder where a finished one belongs.
Folders of killed runs (their process is gone) are removed by :func:`clean_stale`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from viking_eval.data.errors import DataError

__all__ = ["clean_stale", "install", "occupied"]


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (so its staging folder may still be in use)."""
    if pid == os.getpid():
        return False  # our own leftovers (an earlier call in this process) are stale
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(dest: Path, name: str, log: Callable[[str], None]) -> None:
    """Remove ``.<name>.partial-<pid>`` / ``.<name>.old-<pid>`` folders of processes that are
    gone (a killed run); folders of a run still in progress are left alone."""
    pattern = re.compile(rf"\.{re.escape(name)}\.(?:partial|old)-([0-9]+)")
    for child in dest.iterdir():
        match = pattern.fullmatch(child.name)
        if match and not _pid_alive(int(match.group(1))):
            shutil.rmtree(child, ignore_errors=True)
            log(f"removed stale staging folder {child}")


def occupied(target: Path) -> bool:
    """Whether ``target`` exists as a file or a non-empty folder (an empty folder may be replaced)."""
    return target.exists() and (not target.is_dir() or any(target.iterdir()))


def install(staging: Path, target: Path, force: bool) -> None:
    """Rename ``staging`` to ``target``; an existing non-empty target only with ``force``."""
    if target.is_dir() and not occupied(target):
        target.rmdir()
    if not occupied(target):
        staging.rename(target)
        return
    if not force:
        raise DataError(f"{target} already exists and is not empty; pass --force to replace it")
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    target.rename(old)
    try:
        staging.rename(target)
    except OSError:
        old.rename(target)  # put the previous dataset back rather than lose it
        raise
    if old.is_dir():
        shutil.rmtree(old)
    else:
        old.unlink()
