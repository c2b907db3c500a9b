"""Bringing a backend from the store version it holds to a later version: only the rows that differ.

A backend records, next to the store's identity, the store's own content key (``store_key``:
:attr:`retrievers.store.ContextStore.content_key`, the key its :attr:`~ContextStore.history`
names) and a digest per row (of the row's id, text and vector). When it is opened with a store
whose history names the key it holds (a later version made by ``add`` / ``delete`` /
``update``), it compares its rows' digests with the store's, row by row:

* a row whose number, id, text and vector are unchanged stays as it is (not rewritten);
* every other held row is dropped (a removed document, a replaced one, or a kept one whose
  number moved because documents were added or removed before it: rows are the documents
  sorted by id);
* every row of the store not kept is written (with its keyword-index entry).

The comparison reads what the database holds, not a change log, so it is correct whatever
number of versions lie between the two, and after an interrupted change (Qdrant, which has no
transactions: :mod:`retrievers.backends.qdrant_backend`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from retrievers.store import ContextStore

__all__ = ["DIGEST_BYTES", "RowChange", "descends_from", "row_change", "row_digests", "store_key"]

#: bytes of a row digest (blake2b)
DIGEST_BYTES = 16

IntArray = npt.NDArray[np.int64]


def store_key(store: ContextStore) -> str:
    """The store's content key, as its history names it (the last version's key)."""
    return store.history[-1].content_key if store.history else store.content_key


def descends_from(store: ContextStore, key: str) -> bool:
    """True when ``key`` names ``store`` or a version its history says it was made from."""
    return key == store_key(store) or any(version.content_key == key for version in store.history)


def row_digests(store: ContextStore) -> list[bytes]:
    """Per row: blake2b of its id, title and text (each length-prefixed, read from the store's
    columns as bytes) and its float32 vector's bytes."""
    columns = store.documents
    ids = columns.ids.array
    title_at = np.asarray(columns.titles.offsets).tolist()
    text_at = np.asarray(columns.texts.offsets).tolist()
    titles: memoryview = np.ascontiguousarray(columns.titles.blob, dtype=np.uint8).data
    bodies: memoryview = np.ascontiguousarray(columns.texts.blob, dtype=np.uint8).data
    vectors: memoryview | None = None
    width = store.dim * 4 if store.has_vectors else 0
    if store.has_vectors:
        vectors = np.ascontiguousarray(store.embeddings, dtype=np.float32).view(np.uint8).reshape(-1).data
    digests = []
    for row in range(len(store)):
        doc_id = bytes(ids[row])
        title = titles[title_at[row] : title_at[row + 1]]
        body = bodies[text_at[row] : text_at[row + 1]]
        parts: list[bytes | memoryview] = [struct.pack("<QQQ", len(doc_id), len(title), len(body)), doc_id]
        parts += [title, body]
        if vectors is not None:
            parts.append(vectors[row * width : (row + 1) * width])
        digests.append(hashlib.blake2b(b"".join(parts), digest_size=DIGEST_BYTES).digest())
    return digests


@dataclass(frozen=True)
class RowChange:
    """What a backend does to go from the rows it holds to the store's rows."""

    drop: IntArray  #: held rows to remove (ascending)
    write: IntArray  #: rows of the store to write (ascending)
    kept: int  #: rows left as they are

    @property
    def empty(self) -> bool:
        return not self.drop.size and not self.write.size


def row_change(
    held_rows: Sequence[int], held_digests: Sequence[bytes], digests: Sequence[bytes]
) -> RowChange:
    """The change from held rows (``held_rows[i]`` holding ``held_digests[i]``) to rows whose
    digests are ``digests`` (row = index): rows equal in number and digest are kept."""
    size = len(digests)
    kept = np.zeros(size, dtype=np.bool_)
    drop = []
    for row, digest in zip(held_rows, held_digests, strict=True):
        row = int(row)
        if 0 <= row < size and not kept[row] and bytes(digest) == digests[row]:
            kept[row] = True
        else:
            drop.append(row)
    return RowChange(
        drop=np.asarray(sorted(drop), dtype=np.int64),
        write=np.flatnonzero(~kept).astype(np.int64),
        kept=int(kept.sum()),
    )
