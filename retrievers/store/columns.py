"""Columnar, memory-mapped documents: what lets a 1M-document store load in a fraction of a second.

A store used to keep its documents (and its tree's nodes) as JSON lines parsed into Python
objects on every load: 1.0 s and 2.2 s at 100k documents, linear in N. Here every field is a
column of ``.npy`` files that loading memory-maps; a row is decoded only when it is read:

* :class:`TextColumn` — ``n`` strings as one UTF-8 blob (``<name>.blob.npy``, uint8) and
  ``n + 1`` int64 offsets (``<name>.offsets.npy``): string ``i`` is
  ``blob[offsets[i]:offsets[i + 1]]``. Metadata is a text column of JSON objects (``""`` for
  an empty one).
* :class:`IdColumn` — sorted ids as one fixed-width bytes array (``ids.npy``, numpy ``S<w>``,
  ``w`` the longest id's UTF-8 length): ``ids[i]`` is row ``i``'s id. UTF-8 byte order is code
  point order, so the array is sorted exactly as Python sorts the ids, and
* :class:`RowIndex` — the ``row_of`` mapping (id -> row) is a binary search in that array
  (``np.searchsorted``, ~2 us) instead of a dict of a million strings built at every load.
  Ids must not hold a NUL character (the fixed-width format pads with NULs); the harness
  refuses such ids in datasets anyway (a TREC line cannot carry them).
* :class:`DocumentColumns` — a ``Sequence[Document]`` over the four columns: ``documents[i]``
  builds the :class:`~retrievers.types.Document` of row ``i`` (metadata parsed then), slices
  give lists, iteration decodes in blocks, and it compares equal to any sequence of the same
  documents (a list included).

Writers stream: :class:`TextColumnWriter` appends strings to the blob file as they come (the
``.npy`` header is rewritten with the final length at the end), so a store's documents are
written column by column without holding another copy of the corpus.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Literal, TypeVar, overload

import numpy as np
import numpy.typing as npt

from retrievers.types import Document

__all__ = [
    "DocumentColumns",
    "IdColumn",
    "RowIndex",
    "RowSequence",
    "TextColumn",
    "TextColumnWriter",
    "check_id",
    "decode_metadata",
    "encode_metadata",
    "save_npy",
]

IntArray = npt.NDArray[np.int64]
_BLOCK = 4096  # rows decoded at a time when iterating


def save_npy(path: Path, array: npt.ArrayLike) -> None:
    """``np.save`` into a temporary file renamed over ``path``: a process that memory-maps the
    old file keeps reading it (overwriting a mapped file in place kills its readers with
    SIGBUS)."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as handle:
        np.save(handle, np.asarray(array), allow_pickle=False)
    os.replace(temporary, path)


def check_id(doc_id: str, what: str = "document id") -> bytes:
    """``doc_id`` as UTF-8; an id holding NUL cannot be stored (fixed-width bytes pad with NUL)."""
    if "\x00" in doc_id:
        raise ValueError(f"{what} {doc_id!r} contains a NUL character (\\x00); a store cannot hold it")
    return doc_id.encode("utf-8")


def encode_metadata(metadata: Mapping[str, Any], where: str = "") -> str:
    """Metadata as stored: a JSON object (``""`` when empty). JSON's types only (str, numbers,
    bools, null, lists, objects with string keys); anything else is a ValueError naming it."""
    if not metadata:
        return ""
    try:
        return json.dumps(dict(metadata), ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"{where or 'metadata'}: cannot be stored as JSON ({error}); use strings, numbers, "
            "booleans, null, lists and objects with string keys"
        ) from None


def decode_metadata(text: str) -> dict[str, Any]:
    return {} if not text else dict(json.loads(text))


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


# ----------------------------------------------------------------------------------- text


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
        mode: Literal["r"] | None = "r" if mmap else None
        offsets = np.load(folder / f"{name}.offsets.npy", mmap_mode=mode, allow_pickle=False)
        blob = np.load(folder / f"{name}.blob.npy", mmap_mode=mode, allow_pickle=False)
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
        for start in range(0, len(self), _BLOCK):
            yield from self._block(start, min(len(self), start + _BLOCK))

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
        return _sequence_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TextColumn({len(self)} strings, {self.blob.size} bytes)"


class TextColumnWriter:
    """Append strings to ``<name>.blob.npy`` / ``<name>.offsets.npy`` in ``folder`` as they come
    (``with TextColumnWriter(folder, name) as writer: writer.append(text)``)."""

    def __init__(self, folder: Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._blob = _NpyAppender(folder / f"{name}.blob.npy", np.dtype(np.uint8))
        self._offsets = _NpyAppender(folder / f"{name}.offsets.npy", np.dtype(np.int64))
        self._end = 0
        self._pending: list[int] = [0]

    def append(self, text: str) -> None:
        data = text.encode("utf-8")
        self._blob.write_bytes(data)
        self._end += len(data)
        self._pending.append(self._end)
        if len(self._pending) >= _BLOCK:
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


class _NpyAppender:
    """A 1-D ``.npy`` file written front to back: a header for a huge placeholder length first,
    rewritten with the real length (same size: numpy pads headers to 128 bytes) when done."""

    def __init__(self, path: Path, dtype: np.dtype[Any]) -> None:
        self.path = path
        self.dtype = dtype
        self.count = 0
        # written beside, renamed over ``path`` when done (see save_npy)
        self._temporary = path.with_name(path.name + ".tmp")
        self._handle: BinaryIO = open(self._temporary, "wb")  # noqa: SIM115 (closed in close())
        self._header_size = self._write_header(2**62)

    def _write_header(self, count: int) -> int:
        start = self._handle.tell()
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": (count,),
        }
        np.lib.format.write_array_header_1_0(self._handle, header)
        return self._handle.tell() - start

    def write_bytes(self, data: bytes) -> None:
        self._handle.write(data)
        self.count += len(data) // self.dtype.itemsize

    def write_array(self, array: npt.NDArray[Any]) -> None:
        self._handle.write(np.ascontiguousarray(array, dtype=self.dtype).tobytes())
        self.count += int(array.size)

    def close(self, *, finish: bool = True) -> None:
        if finish:
            self._handle.seek(0)
            if self._write_header(self.count) != self._header_size:  # never: numpy pads to 128 bytes
                raise RuntimeError(f"{self.path}: the .npy header changed size; cannot finish the file")
        self._handle.close()
        if finish:
            os.replace(self._temporary, self.path)
        else:
            os.unlink(self._temporary)


# ------------------------------------------------------------------------------------ ids


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
            return [value.decode("utf-8") for value in self.array[index].tolist()]
        return bytes(self.array[index]).decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), _BLOCK):
            for value in self.array[start : start + _BLOCK].tolist():
                yield value.decode("utf-8")

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and _find(self.array, value) >= 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdColumn):
            return bool(np.array_equal(self.array, other.array))
        return _sequence_equal(self, other)

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
        row = _find(self.ids.array, key) if isinstance(key, str) else -1
        if row < 0:
            raise KeyError(key)
        return row

    def get(self, key: str, default: Any = None) -> Any:
        row = _find(self.ids.array, key) if isinstance(key, str) else -1
        return default if row < 0 else row

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and _find(self.ids.array, key) >= 0

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


# ------------------------------------------------------------------------------ documents

_FIELDS = ("title", "text", "metadata")


class DocumentColumns(RowSequence[Document]):
    """Documents sorted by id, as columns (see the module docstring). ``folder`` is where they
    were loaded from (None when built in memory)."""

    def __init__(
        self,
        ids: IdColumn,
        titles: TextColumn,
        texts: TextColumn,
        metadata: TextColumn,
        *,
        folder: Path | None = None,
    ) -> None:
        n = len(ids)
        if not (len(titles) == len(texts) == len(metadata) == n):
            raise ValueError(
                f"document columns disagree: {n} ids, {len(titles)} titles, {len(texts)} texts, "
                f"{len(metadata)} metadata"
            )
        self.ids = ids
        self.titles = titles
        self.texts = texts
        self.metadata = metadata
        self.folder = folder

    @classmethod
    def from_documents(cls, documents: Sequence[Document], what: str = "document") -> DocumentColumns:
        """In-memory columns of ``documents`` (already sorted by id; checked)."""
        return cls(
            IdColumn.from_strings((doc.id for doc in documents), f"{what} id"),
            TextColumn.from_strings(doc.title for doc in documents),
            TextColumn.from_strings(doc.text for doc in documents),
            TextColumn.from_strings(
                encode_metadata(doc.metadata, f"{what} {doc.id!r}: metadata") for doc in documents
            ),
        )

    @staticmethod
    def write(folder: Path, documents: Sequence[Document], what: str = "document") -> None:
        """Write ``documents`` (sorted by id) into ``folder`` column by column, streaming."""
        folder.mkdir(parents=True, exist_ok=True)
        ids = IdColumn.from_strings((doc.id for doc in documents), f"{what} id")
        save_npy(folder / "ids.npy", ids.array)
        del ids
        for field in _FIELDS:
            with TextColumnWriter(folder, field) as writer:
                for doc in documents:
                    if field == "title":
                        writer.append(doc.title)
                    elif field == "text":
                        writer.append(doc.text)
                    else:
                        writer.append(encode_metadata(doc.metadata, f"{what} {doc.id!r}: metadata"))

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        save_npy(folder / "ids.npy", self.ids.array)
        for field, column in zip(_FIELDS, (self.titles, self.texts, self.metadata), strict=True):
            column.save(folder, field)

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> DocumentColumns:
        ids = np.load(folder / "ids.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
        columns = [TextColumn.load(folder, field, mmap=mmap) for field in _FIELDS]
        # sorted and unique when written; a full check would read the whole column at every load
        return cls(IdColumn(ids, check=False), *columns, folder=folder)

    def __len__(self) -> int:
        return len(self.ids)

    def _row(self, i: int) -> Document:
        return Document(
            id=self.ids[i],
            text=self.texts[i],
            title=self.titles[i],
            metadata=decode_metadata(self.metadata[i]),
        )

    def full_text(self, index: int) -> str:
        """``documents[index].full_text`` without building the document."""
        title, text = self.titles[index], self.texts[index]
        return f"{title} {text}".strip() if title else text

    def __iter__(self) -> Iterator[Document]:
        for start in range(0, len(self), _BLOCK):
            stop = min(len(self), start + _BLOCK)
            ids = self.ids[start:stop]
            titles = self.titles._block(start, stop)
            texts = self.texts._block(start, stop)
            metadata = self.metadata._block(start, stop)
            for doc_id, title, text, meta in zip(ids, titles, texts, metadata, strict=True):
                yield Document(id=doc_id, text=text, title=title, metadata=decode_metadata(meta))

    def __eq__(self, other: object) -> bool:
        return _sequence_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = f", {self.folder}" if self.folder is not None else ""
        return f"DocumentColumns({len(self)} documents{where})"


def _sequence_equal(column: Sequence[Any], other: object) -> bool:
    if not isinstance(other, Sequence) or isinstance(other, str | bytes):
        return NotImplemented  # type: ignore[no-any-return]
    if len(column) != len(other):
        return False
    return all(a == b for a, b in zip(column, other, strict=True))
