"""Columnar, memory-mapped documents: what lets a 1M-document store load in a fraction of a second.

A store used to keep its documents (and its tree's nodes) as JSON lines parsed into Python
objects on every load: 1.0 s and 2.2 s at 100k documents, linear in N. Here every field is a
column of ``.npy`` files that loading memory-maps; a row is decoded only when it is read:

* :class:`~retrievers.store.text_column.TextColumn` — ``n`` strings as one UTF-8 blob
  (``<name>.blob.npy``, uint8) and ``n + 1`` int64 offsets (``<name>.offsets.npy``): string
  ``i`` is ``blob[offsets[i]:offsets[i + 1]]``. Metadata is a text column of JSON objects
  (``""`` for an empty one; :func:`encode_metadata`).
* :class:`~retrievers.store.ids.IdColumn` — sorted ids as one fixed-width bytes array
  (``ids.npy``, numpy ``S<w>``, ``w`` the longest id's UTF-8 length): ``ids[i]`` is row ``i``'s
  id. UTF-8 byte order is code point order, so the array is sorted exactly as Python sorts the
  ids, and
* :class:`~retrievers.store.ids.RowIndex` — the ``row_of`` mapping (id -> row) is a binary
  search in that array (``np.searchsorted``, ~2 us) instead of a dict of a million strings built
  at every load. Ids must not hold a NUL character (the fixed-width format pads with NULs); the
  harness refuses such ids in datasets anyway (a TREC line cannot carry them).
* :class:`DocumentColumns` (this module) — a ``Sequence[Document]`` over the four columns:
  ``documents[i]`` builds the :class:`~retrievers.types.Document` of row ``i`` (metadata parsed
  then), slices give lists, iteration decodes in blocks, and it compares equal to any sequence
  of the same documents (a list included).

Writers stream: :class:`~retrievers.store.text_column.TextColumnWriter` appends strings to the
blob file as they come (the ``.npy`` header is rewritten with the final length at the end,
:mod:`retrievers.store.npy_files`), so a store's documents are written column by column without
holding another copy of the corpus.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.store.ids import IdColumn
from retrievers.store.npy_files import load_npy, save_npy
from retrievers.store.rows import BLOCK, RowSequence, sequence_equal
from retrievers.store.text_column import TextColumn, TextColumnWriter
from retrievers.types import Document

__all__ = ["DocumentColumns", "decode_metadata", "decode_metadata_column", "encode_metadata"]


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


def decode_metadata_column(column: TextColumn) -> list[dict[str, Any]]:
    """Every row's metadata of a metadata column, parsed with ONE ``json.loads`` of the rows
    joined into a JSON array (``{}`` for an empty row): ~20x faster than a parse per row."""
    offsets = np.asarray(column.offsets, dtype=np.int64)
    if offsets.size <= 1:
        return []
    blob = np.asarray(column.blob, dtype=np.uint8)
    lengths = np.diff(offsets)
    empty = lengths == 0
    source = np.concatenate((blob, np.frombuffer(b"{}", dtype=np.uint8)))
    starts = np.where(empty, blob.size, offsets[:-1])
    lengths = np.where(empty, 2, lengths)
    ends = np.cumsum(lengths)
    picked = source[np.arange(int(ends[-1])) - np.repeat(ends - lengths - starts, lengths)]
    joined = np.insert(picked, ends[:-1], ord(","))
    objects = bool(np.all(source[starts] == ord("{")))  # each row one JSON object: one dict each
    rows = json.loads(b"[" + joined.tobytes() + b"]") if objects else []
    if len(rows) != lengths.size:
        raise ValueError("a metadata column holds a row that is not one JSON object")
    return rows


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
        ids = load_npy(folder / "ids.npy", mmap=mmap)
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
        for start in range(0, len(self), BLOCK):
            stop = min(len(self), start + BLOCK)
            ids = self.ids[start:stop]
            titles = self.titles._block(start, stop)
            texts = self.texts._block(start, stop)
            metadata = self.metadata._block(start, stop)
            for doc_id, title, text, meta in zip(ids, titles, texts, metadata, strict=True):
                yield Document(id=doc_id, text=text, title=title, metadata=decode_metadata(meta))

    def __eq__(self, other: object) -> bool:
        return sequence_equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = f", {self.folder}" if self.folder is not None else ""
        return f"DocumentColumns({len(self)} documents{where})"
