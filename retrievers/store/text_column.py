"""Text columns: ``n`` strings as one UTF-8 blob and ``n + 1`` offsets, memory-mapped on load.

:class:`TextColumn` — ``<name>.blob.npy`` (uint8) and ``<name>.offsets.npy`` (int64): string
``i`` is ``blob[offsets[i]:offsets[i + 1]]``. :class:`TextColumnWriter` streams strings into
those files as they come (see :mod:`retrievers.store.columns` for how a store uses them).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.store.npy_files import NpyAppender, load_npy
from retrievers.store.rows import BLOCK, RowSequence, sequence_equal

__all__ = ["TextColumn", "TextColumnWriter"]


class TextColumn(RowSequence[str]):
    """``n`` strings: a UTF-8 ``blob`` (uint8) and ``n + 1`` int64 ``offsets``."""

    def __init__(self, offsets: npt.NDArray[Any], blob: npt.NDArray[Any]) -> None:
        if offsets.ndim != 1 or offsets.size < 1 or blob.ndim != 1:
            raise ValueError(
                f"text column: offsets {offsets.shape} and blob {blob.shape} must be 1-D, n + 1 >= 1"
            )
        if int(offsets[0]) != 0 or int(offsets[-1]) != blob.size:
            raise ValueError(
                f"text column: offsets run from {int(offsets[0])} to {int(offsets[-1])}, the blob holds {blob.size} bytes"
            )
        self.offsets = offsets
        self.blob = blob

    @classmethod
    def from_strings(cls, strings: Iterable[str]) -> TextColumn:
        """An in-memory column of ``strings``."""
        encoded = [text.encode("utf-8") for text in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(data) for data in encoded], out=offsets[1:])
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8) if encoded else np.zeros(0, np.uint8)
        return cls(offsets, blob)

    @classmethod
    def load(cls, folder: Path, name: str, *, mmap: bool = True) -> TextColumn:
        offsets = load_npy(folder / f"{name}.offsets.npy", mmap=mmap)
        blob = load_npy(folder / f"{name}.blob.npy", mmap=mmap)
        if offsets.dtype != np.int64 or blob.dtype != np.uint8:
            raise ValueError(
                f"{folder}: column {name!r} has dtypes {offsets.dtype}/{blob.dtype}, expected int64/uint8"
            )
        return cls(offsets, blob)

    def save(self, folder: Path, name: str) -> None:
        with TextColumnWriter(folder, name) as writer:
            writer.append_column(self)

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def raw(self, index: int) -> bytes:
        """The UTF-8 bytes of string ``index`` (no bounds check beyond numpy's)."""
        return self.blob[int(self.offsets[index]) : int(self.offsets[index + 1])].tobytes()

    def _row(self, i: int) -> str:
        return self.blob[int(self.offsets[i]) : int(self.offsets[i + 1])].tobytes().decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), BLOCK):
            yield from self._block(start, min(len(self), start + BLOCK))

    def _block(self, start: int, stop: int) -> list[str]:
        """Strings ``start:stop``, decoded with one call when the block is ASCII (byte offsets
        are then character offsets)."""
        offsets = np.asarray(self.offsets[start : stop + 1])
        data = self.blob[int(offsets[0]) : int(offsets[-1])].tobytes()
        text = data.decode("utf-8")
        local = (offsets - offsets[0]).tolist()
        if len(text) == len(data):
            return [text[a:b] for a, b in itertools.pairwise(local)]
        return [data[a:b].decode("utf-8") for a, b in itertools.pairwise(local)]

    def fixed_width(self, rows: npt.ArrayLike | None = None) -> npt.NDArray[np.bytes_]:
        """Strings (all, or ``rows``) as a fixed-width bytes array, built without a Python loop."""
        starts = np.asarray(self.offsets[:-1])
        lengths = np.diff(np.asarray(self.offsets))
        if rows is not None:
            picked = np.asarray(rows, dtype=np.int64)
            starts, lengths = starts[picked], lengths[picked]
        width = max(1, int(lengths.max(initial=0)))
        out = np.zeros((starts.size, width), dtype=np.uint8)
        total = int(lengths.sum())
        if total:
            which = np.repeat(np.arange(starts.size), lengths)
            first = np.cumsum(lengths) - lengths
            within = np.arange(total) - np.repeat(first, lengths)
            out[which, within] = np.asarray(self.blob)[np.repeat(starts - first, lengths) + np.arange(total)]
        return out.view(f"S{width}").reshape(starts.size)

    def __eq__(self, other: object) -> bool:
        return sequence_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TextColumn({len(self)} strings, {self.blob.size} bytes)"


class TextColumnWriter:
    """Append strings to ``<name>.blob.npy`` / ``<name>.offsets.npy`` in ``folder`` as they come
    (``with TextColumnWriter(folder, name) as writer: writer.append(text)``)."""

    def __init__(self, folder: Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._blob = NpyAppender(folder / f"{name}.blob.npy", np.dtype(np.uint8))
        self._offsets = NpyAppender(folder / f"{name}.offsets.npy", np.dtype(np.int64))
        self._end = 0
        self._pending: list[int] = [0]

    def append(self, text: str) -> None:
        data = text.encode("utf-8")
        self._blob.write_bytes(data)
        self._end += len(data)
        self._pending.append(self._end)
        if len(self._pending) >= BLOCK:
            self._flush_offsets()

    def append_column(self, column: TextColumn) -> None:
        """Append every string of ``column`` (copied as bytes, in blocks)."""
        step = 1 << 24
        for start in range(0, column.blob.size, step):
            self._blob.write_bytes(np.asarray(column.blob[start : start + step]).tobytes())
        self._flush_offsets()
        self._offsets.write_array(np.asarray(column.offsets[1:], dtype=np.int64) + self._end)
        self._end += int(column.blob.size)

    def _flush_offsets(self) -> None:
        if self._pending:
            self._offsets.write_array(np.asarray(self._pending, dtype=np.int64))
            self._pending = []

    def __enter__(self) -> TextColumnWriter:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self._flush_offsets()
        self._blob.close(finish=kind is None)
        self._offsets.close(finish=kind is None)
