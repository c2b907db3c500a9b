"""The errors of the data layer: :class:`DataError` (bad input data, one line) and
:class:`DatasetNotFound` (a name found in no folder searched). A leaf: the callers compute the
messages, so this module imports nothing of the harness.

Every :class:`DataError` is one line, ``<file>:<line>: <what>`` (``<file>: <what>`` where no line
applies), with the same location in its ``path`` and ``line`` attributes (:func:`located`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["DataError", "DatasetNotFound", "located"]


class DataError(ValueError):
    """Bad input data: one line ``<file>:<line>: <what>`` (or ``<file>: <what>``) saying what is
    wrong and what is expected. ``path`` and ``line`` give the location to code; either is
    ``None`` when it does not apply (``path`` is ``None`` only for errors about no file, such as
    an empty dataset name)."""

    def __init__(
        self, message: str, *, path: str | os.PathLike[str] | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.path = Path(path) if path is not None else None
        self.line = line


def located(path: Path, what: str, line: int | None = None) -> DataError:
    """A :class:`DataError` ``<path>:<line>: <what>`` (or ``<path>: <what>``) with its location."""
    where = f"{path}:{line}" if line is not None else str(path)
    return DataError(f"{where}: {what}", path=path, line=line)


class DatasetNotFound(DataError):
    """A dataset name found in none of the folders searched (``folders``, in order). The message
    (one line: the name, the folders, the datasets they hold and how to get this one) is written
    by the caller (:func:`viking_eval.data.resolve.resolve_dataset`). Pickles like any
    :class:`DataError` (Hydra launchers send errors between processes): the message is the only
    argument, ``name`` and ``folders`` travel in the instance's attributes."""

    name: str = ""
    folders: tuple[Path, ...] = ()

    @classmethod
    def searched(cls, name: str, folders: Sequence[Path], message: str) -> DatasetNotFound:
        """The error for ``name`` looked for in ``folders``, saying ``message``."""
        error = cls(message, path=Path(name))
        error.name, error.folders = name, tuple(folders)
        return error
