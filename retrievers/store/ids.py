"""Ids of store rows: sorted, fixed-width bytes (:class:`IdColumn`) and the id -> row mapping
that is a binary search in them (:class:`RowIndex`); see :mod:`retrievers.store.columns`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from retrievers.store.rows import BLOCK, sequence_equal

__all__ = ["IdColumn", "RowIndex", "check_id"]

IntArray = npt.NDArray[np.int64]


def check_id(doc_id: str, what: str = "document id") -> bytes:
    """``doc_id`` as UTF-8; an id holding NUL cannot be stored (fixed-width bytes pad with NUL)."""
    if "\x00" in doc_id:
        raise ValueError(f"{what} {doc_id!r} contains a NUL character (\\x00); a store cannot hold it")
    return doc_id.encode("utf-8")


class IdColumn(Sequence[str]):
    """Sorted, unique ids as a fixed-width bytes array (see the module docstring)."""

    def __init__(self, ids: npt.NDArray[Any], *, check: bool = True) -> None:
        if ids.ndim != 1 or ids.dtype.kind != "S":
            raise ValueError(f"ids must be a 1-D bytes array, got {ids.dtype} {ids.shape}")
        if check and ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            bad = int(np.flatnonzero(~(ids[1:] > ids[:-1]))[0])
            raise ValueError(
                f"ids must be sorted without duplicates: {ids[bad].decode()!r} comes before {ids[bad + 1].decode()!r}"
            )
        self.array = ids
        # element lookups go through a plain ndarray view of the same memory: a np.memmap's
        # Python-level __getitem__ costs about 1.4 us an element, most of an id lookup's time
        self._lookup: npt.NDArray[Any] = ids.view(np.ndarray) if isinstance(ids, np.memmap) else ids

    @classmethod
    def from_strings(cls, ids: Iterable[str], what: str = "document id") -> IdColumn:
        encoded = [check_id(doc_id, what) for doc_id in ids]
        width = max((len(data) for data in encoded), default=1) or 1
        return cls(np.array(encoded, dtype=f"S{width}") if encoded else np.zeros(0, dtype="S1"))

    def __len__(self) -> int:
        return int(self.array.shape[0])

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [value.decode("utf-8") for value in self._lookup[index].tolist()]
        return bytes(self._lookup[index]).decode("utf-8")

    def take(self, rows: npt.ArrayLike) -> list[str]:
        """The ids of ``rows`` (any order, repeats allowed): ``[self[row] for row in rows]`` in
        one gather and decode (a fifth of the time per id for a ranking's hundred rows)."""
        return [value.decode("utf-8") for value in self._lookup[np.asarray(rows, dtype=np.intp)].tolist()]

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), BLOCK):
            for value in self.array[start : start + BLOCK].tolist():
                yield value.decode("utf-8")

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and _find(self._lookup, value) >= 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdColumn):
            return bool(np.array_equal(self.array, other.array))
        return sequence_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IdColumn({len(self)} ids)"


def _find(ids: npt.NDArray[Any], key: str) -> int:
    """Row of ``key`` in sorted ``ids``, or -1."""
    data = key.encode("utf-8")
    if len(data) > ids.dtype.itemsize or not data or b"\x00" in data:
        return -1
    position = int(np.searchsorted(ids, data))
    if position < ids.shape[0] and ids[position] == data:
        return position
    return -1


class RowIndex(Mapping[str, int]):
    """id -> row over an :class:`IdColumn` (a binary search, not a dict; see the module docstring)."""

    def __init__(self, ids: IdColumn) -> None:
        self.ids = ids

    def __getitem__(self, key: str) -> int:
        row = _find(self.ids._lookup, key) if isinstance(key, str) else -1
        if row < 0:
            raise KeyError(key)
        return row

    def get(self, key: str, default: Any = None) -> Any:
        row = _find(self.ids._lookup, key) if isinstance(key, str) else -1
        return default if row < 0 else row

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and _find(self.ids._lookup, key) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def items(self) -> Any:
        return zip(self.ids, range(len(self.ids)), strict=True)

    def rows(self, keys: npt.NDArray[Any]) -> IntArray:
        """Rows of many ids at once (a fixed-width bytes array, or strings); -1 where absent."""
        wanted = np.asarray(keys)
        if wanted.dtype.kind != "S":
            wanted = np.array([str(key).encode("utf-8") for key in wanted.tolist()], dtype=np.bytes_)
        ids = self.ids.array
        out = np.full(wanted.shape[0], -1, dtype=np.int64)
        if not ids.size or not wanted.size:
            return out
        if wanted.dtype.itemsize > ids.dtype.itemsize:  # longer keys cannot be ids; compare at one width
            fits = np.char.str_len(wanted) <= ids.dtype.itemsize
        else:
            fits = np.ones(wanted.shape[0], dtype=bool)
        candidates = wanted[fits].astype(ids.dtype)
        positions = np.minimum(np.searchsorted(ids, candidates), ids.shape[0] - 1)
        found = ids[positions] == candidates
        out[np.flatnonzero(fits)[found]] = positions[found]
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RowIndex):
            return self.ids == other.ids
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowIndex({len(self)} ids)"
