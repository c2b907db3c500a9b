"""Sequences whose rows are decoded when read: the base of the store's columns.

:class:`RowSequence` does indexing, bounds and slices for a subclass that gives ``__len__`` and
``_row(i)``; :func:`sequence_equal` compares a column with any sequence of the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, overload

__all__ = ["BLOCK", "RowSequence", "sequence_equal"]

BLOCK = 4096  # rows decoded at a time when iterating

T = TypeVar("T")


class RowSequence(Sequence[T]):
    """A sequence whose rows are made when read: a subclass gives ``__len__`` and ``_row(i)``
    (``0 <= i < len``); indexing (negative too), bounds and slices (lists) are done here."""

    _what = "row"

    def _row(self, i: int) -> T:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{self._what} {index} is outside [0, {n})")
        return self._row(i)


def sequence_equal(column: Sequence[Any], other: object) -> bool:
    if not isinstance(other, Sequence) or isinstance(other, str | bytes):
        return NotImplemented  # type: ignore[no-any-return]
    if len(column) != len(other):
        return False
    return all(a == b for a, b in zip(column, other, strict=True))
