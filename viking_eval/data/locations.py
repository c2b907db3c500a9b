"""Where datasets live: the folders searched by name and what a folder holds.

Datasets are found by name through ``VIKING_EVAL_DATA`` (a ``:``-separated list of folders), then
the repository's ``datasets/`` folder, then the data folder (:func:`data_home`); a directory path
is used as is (:func:`viking_eval.data.resolve.resolve_dataset`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from viking_eval.data.errors import DataError, located

__all__ = [
    "DATA_ENV",
    "REPO_DATASETS",
    "data_home",
    "data_search_path",
    "dataset_names",
    "is_dir",
    "is_file",
    "one_of",
    "quietly",
]

DATA_ENV = "VIKING_EVAL_DATA"
"""Environment variable: folders (``os.pathsep``-separated) searched for datasets by name."""

REPO_DATASETS = Path(__file__).resolve().parents[2] / "datasets"
"""The repository's ``datasets/`` folder, searched after ``VIKING_EVAL_DATA``."""


def data_home() -> Path:
    """The user's data folder, where downloads and converters write by default and the last
    place searched by name: ``$XDG_DATA_HOME/viking_eval/datasets`` (``~/.local/share/...``
    when ``XDG_DATA_HOME`` is unset), as the XDG base-directory convention places user data."""
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "viking_eval" / "datasets"


def data_search_path(repo_datasets: Path | None = None) -> list[Path]:
    """Folders searched for datasets by name, in order: each entry of ``VIKING_EVAL_DATA``
    (empty entries ignored, ``~`` expanded), the repository's ``datasets/`` folder, then
    :func:`data_home`. Duplicates are kept only at their first position."""
    folders: list[Path] = []
    for entry in os.environ.get(DATA_ENV, "").split(os.pathsep):
        if entry.strip():
            folders.append(Path(entry.strip()).expanduser())
    folders.append(repo_datasets if repo_datasets is not None else REPO_DATASETS)
    folders.append(data_home())
    unique: list[Path] = []
    for folder in folders:
        if folder not in unique:
            unique.append(folder)
    return unique


def is_dir(path: Path) -> bool:
    """``path.is_dir()``, but a path the system cannot look at (permission denied, a name too
    long) is a :class:`DataError` naming it instead of a traceback."""
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise located(path, f"cannot read: {exc.strerror or exc}") from None


def is_file(path: Path) -> bool:
    """``path.is_file()``, with the same errors as :func:`is_dir`."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise located(path, f"cannot read: {exc.strerror or exc}") from None


def quietly(check: Callable[[Path], bool], path: Path) -> bool:
    """``check(path)``, False where the path cannot be looked at (for searching by name: one
    unreadable folder must not hide the others)."""
    try:
        return check(path)
    except (DataError, OSError):
        return False


def one_of(plain: Path, gz: Path) -> Path | None:
    """``plain`` or its gzipped twin ``gz``, whichever exists; both present is ambiguous."""
    has_plain, has_gz = is_file(plain), is_file(gz)
    if has_plain and has_gz:
        raise located(gz, f"both {plain.name} and {gz.name} exist; keep one so it is clear which is read")
    if has_plain:
        return plain
    if has_gz:
        return gz
    return None


def dataset_names(folder: Path) -> list[str]:
    """Sub-folders of ``folder`` that hold a corpus file (i.e. look like BEIR datasets)."""
    if not quietly(is_dir, folder):
        return []
    names = []
    try:
        children = list(folder.iterdir())
    except OSError:
        return []
    for child in children:
        if quietly(is_file, child / "corpus.jsonl") or quietly(is_file, child / "corpus.jsonl.gz"):
            names.append(child.name)
    return sorted(names)
