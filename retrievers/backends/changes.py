"""Bringing a backend from the store version it holds to a later version: only the rows that differ.

A backend records, next to the store's identity, the store's own content key (``store_key``:
:attr:`retrievers.store.ContextStore.content_key`, the key its :attr:`~ContextStore.history`
names) and a digest per row (of the row's id, text and vector:
:mod:`retrievers.store.row_digests`). When it is opened with a store whose history names the key
it holds (a later version made by ``add`` / ``delete`` / ``update``):

* a row whose number, id, text and vector are unchanged stays as it is (not rewritten);
* every other held row is dropped (a removed document, a replaced one, or a kept one whose
  number moved because documents were added or removed before it: rows are the documents
  sorted by id);
* every row of the store not kept is written (with its keyword-index entry).

Which rows those are comes from the store's history when every version since the held one
records its rows (:class:`retrievers.store.change_config.RowRecord`; :func:`replay`), without a
pass over the rows or the database, and only after checks: the held version's digests, rebuilt
from the store's digests and the recorded removed rows, must hash to the rows key the backend
holds (its identity), the recorded added rows' digests must be the store's, and every row to be
written (and a sample of the kept ones) is hashed again from the store's rows and must match.
A mismatch is refused (:class:`RecordMismatch`), never trusted. Without such a record (stores
saved before rows were recorded, a backend identity of the first scheme, an interrupted Qdrant
change), the held digests are read from the database and compared with the store's, row by
row (:func:`row_change`): correct whatever lies between the two versions.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from retrievers.store.row_digests import DIGEST_BYTES, row_digests

if TYPE_CHECKING:
    from retrievers.store import ContextStore, StoreVersion

__all__ = [
    "DIGEST_BYTES",
    "RecordMismatch",
    "RowChange",
    "descends_from",
    "recorded_path",
    "replay",
    "row_change",
    "row_digests",
    "rows_key",
    "store_key",
]

IntArray = npt.NDArray[np.int64]
DigestArray = npt.NDArray[np.uint8]


class RecordMismatch(ValueError):
    """The store's recorded change does not fit its digests or the rows the backend holds."""


def store_key(store: ContextStore) -> str:
    """The store's content key, as its history names it (the last version's key)."""
    return store.history[-1].content_key if store.history else store.content_key


def descends_from(store: ContextStore, key: str) -> bool:
    """True when ``key`` names ``store`` or a version its history says it was made from."""
    return key == store_key(store) or any(version.content_key == key for version in store.history)


def rows_key(digests: DigestArray) -> str:
    """sha256 of the row digests in row order (the identity's rows key, scheme 2)."""
    array = np.ascontiguousarray(digests, dtype=np.uint8)
    digest = hashlib.sha256(b"viking_eval.backend.rows.v2\n" + struct.pack("<Q", array.shape[0]))
    digest.update(array.tobytes())
    return digest.hexdigest()


def recorded_path(store: ContextStore, key: str) -> tuple[StoreVersion, tuple[StoreVersion, ...]] | None:
    """The version of ``store``'s history named ``key`` (the last one so named) and the
    versions after it, when each of those records its rows; else None."""
    history = store.history
    found = [number for number, version in enumerate(history) if version.content_key == key]
    if not found:
        return None
    later = tuple(history[found[-1] + 1 :])
    if any(version.rows is None for version in later):
        return None
    return history[found[-1]], later


def _rows(values: tuple[int, ...], size: int, what: str) -> IntArray:
    rows = np.asarray(values, dtype=np.int64)
    if rows.size and (rows[0] < 0 or rows[-1] >= size or (np.diff(rows) <= 0).any()):
        raise RecordMismatch(f"its {what} rows are not ascending rows below {size}")
    return rows


def _hex_digests(values: tuple[str, ...]) -> DigestArray:
    try:
        data = bytes.fromhex("".join(values))
    except ValueError:
        raise RecordMismatch("its digests are not hex") from None
    if len(data) != len(values) * DIGEST_BYTES:
        raise RecordMismatch(f"its digests are not {DIGEST_BYTES} bytes each")
    return np.frombuffer(data, dtype=np.uint8).reshape(len(values), DIGEST_BYTES)


def replay(
    digests: DigestArray, base: StoreVersion, later: Sequence[StoreVersion]
) -> tuple[IntArray, DigestArray]:
    """Walk the recorded changes from version ``base`` to the store whose digests are
    ``digests`` (``later``: the versions in between and the store's, each with rows):
    ``origin[row]``, the row of ``base`` each row is an unchanged copy of (-1: added since),
    and ``base``'s digests rebuilt (the kept rows' from ``digests``, the removed rows' from the
    records). :class:`RecordMismatch` when a record does not fit (sizes, row ranges, the added
    rows' digests against ``digests``)."""
    current = np.asarray(digests, dtype=np.uint8)
    masks: list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]] = []
    for version in reversed(later):
        record = version.rows
        if record is None:
            raise RecordMismatch(f"version {version.version} records no rows")
        size = current.shape[0]
        if size != version.n_documents:
            raise RecordMismatch(
                f"version {version.version} has {version.n_documents} rows, the digests {size}"
            )
        added = _rows(record.added, size, f"version {version.version}'s added")
        old_size = size - added.size + len(record.removed)
        removed = _rows(record.removed, old_size, f"version {version.version}'s removed")
        if not np.array_equal(current[added], _hex_digests(record.added_digests)):
            raise RecordMismatch(
                f"version {version.version}'s added rows do not have the digests it recorded"
            )
        keep_new = np.ones(size, dtype=np.bool_)
        keep_new[added] = False
        keep_old = np.ones(old_size, dtype=np.bool_)
        keep_old[removed] = False
        previous = np.empty((old_size, DIGEST_BYTES), dtype=np.uint8)
        previous[keep_old] = current[keep_new]
        previous[removed] = _hex_digests(record.removed_digests)
        masks.append((keep_old, keep_new))
        current = previous
    if current.shape[0] != base.n_documents:
        raise RecordMismatch(
            f"version {base.version} has {base.n_documents} rows, the records rebuild {current.shape[0]}"
        )
    origin = np.arange(current.shape[0], dtype=np.int64)
    for keep_old, keep_new in reversed(masks):
        forward = np.full(keep_new.size, -1, dtype=np.int64)
        forward[keep_new] = origin[keep_old]
        origin = forward
    return origin, current


def origin_change(origin: IntArray, held_rows: int) -> RowChange:
    """The change that keeps every row holding an unchanged copy of the same held row."""
    kept = origin == np.arange(origin.size, dtype=np.int64)
    kept_rows = np.flatnonzero(kept)
    return RowChange(
        drop=np.setdiff1d(np.arange(held_rows, dtype=np.int64), kept_rows).astype(np.int64),
        write=np.flatnonzero(~kept).astype(np.int64),
        kept=int(kept_rows.size),
    )


@dataclass(frozen=True)
class RowChange:
    """What a backend does to go from the rows it holds to the store's rows."""

    drop: IntArray  #: held rows to remove (ascending)
    write: IntArray  #: rows of the store to write (ascending)
    kept: int  #: rows left as they are

    @property
    def empty(self) -> bool:
        return not self.drop.size and not self.write.size


def row_change(held_rows: Sequence[int], held_digests: Sequence[bytes], digests: DigestArray) -> RowChange:
    """The change from held rows (``held_rows[i]`` holding ``held_digests[i]``) to rows whose
    digests are ``digests`` (row = index): rows equal in number and digest are kept."""
    size = len(digests)
    rows = np.asarray(held_rows, dtype=np.int64).reshape(-1)
    held = (
        np.frombuffer(b"".join(bytes(digest) for digest in held_digests), dtype=np.uint8).reshape(
            -1, DIGEST_BYTES
        )
        if len(held_digests)
        else np.empty((0, DIGEST_BYTES), dtype=np.uint8)
    )
    inside = (rows >= 0) & (rows < size)
    same = np.zeros(rows.size, dtype=np.bool_)
    same[inside] = (held[inside] == np.asarray(digests)[rows[inside]]).all(axis=1)
    _, first = np.unique(rows, return_index=True)
    once = np.zeros(rows.size, dtype=np.bool_)
    once[first] = True  # a row held twice is kept once
    same &= once
    kept = np.zeros(size, dtype=np.bool_)
    kept[rows[same]] = True
    return RowChange(
        drop=np.sort(rows[~same]).astype(np.int64),
        write=np.flatnonzero(~kept).astype(np.int64),
        kept=int(kept.sum()),
    )
