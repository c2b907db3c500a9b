"""A digest per row of a store: the parts its backend identity is hashed from.

A row's digest is blake2b (16 bytes) of its id, title and text (each length-prefixed, read from
the store's columns as bytes) and its float32 vector's bytes. The digests of a store are one
``(rows, 16)`` uint8 array, computed once per store object (one pass over every row) or known
without that pass:

* a store made by ``add`` / ``delete`` / ``update`` (:mod:`retrievers.store.changes`) from a
  store whose digests are known gets its own from them: the kept rows' digests merged with the
  changed rows' (hashed now: the cost of the change, not of the store);
* a store loaded from a version folder (:class:`retrievers.store.versions.StoreVersions`) reads
  them from its ``row_digests.npy``, written with the version.

A backend (:mod:`retrievers.backends.changes`) hashes the digest array, not the rows, into the
store's identity, and checks the digests it relies on against the rows it writes (and a sample
of the kept rows) before trusting them.
"""

from __future__ import annotations

import hashlib
import struct
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "DIGEST_BYTES",
    "DIGEST_FILE",
    "compute_digests",
    "known_digests",
    "load_digests",
    "mismatched_rows",
    "remember_digests",
    "row_digests",
    "sample_rows",
    "save_digests",
]

#: bytes of a row digest (blake2b)
DIGEST_BYTES = 16
#: the file of a version folder holding its rows' digests
DIGEST_FILE = "row_digests.npy"

DigestArray = npt.NDArray[np.uint8]

#: digests known per store object (stores are never changed once made)
_KNOWN: weakref.WeakKeyDictionary[Any, DigestArray] = weakref.WeakKeyDictionary()


def compute_digests(store: Any, rows: npt.ArrayLike | None = None) -> DigestArray:
    """The digests of ``rows`` of ``store`` (all rows when None), hashed from the rows now:
    ``(len(rows), 16)`` uint8."""
    columns = store.documents
    wanted = np.arange(len(store), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    ids = columns.ids.array
    title_at = np.asarray(columns.titles.offsets)
    text_at = np.asarray(columns.texts.offsets)
    titles: memoryview = np.ascontiguousarray(columns.titles.blob, dtype=np.uint8).data
    bodies: memoryview = np.ascontiguousarray(columns.texts.blob, dtype=np.uint8).data
    vectors: memoryview | None = None
    width = store.dim * 4 if store.has_vectors else 0
    if store.has_vectors:
        vectors = np.ascontiguousarray(store.embeddings, dtype=np.float32).view(np.uint8).reshape(-1).data
    out = np.empty((wanted.size, DIGEST_BYTES), dtype=np.uint8)
    titles_from, titles_to = title_at[wanted].tolist(), title_at[wanted + 1].tolist()
    texts_from, texts_to = text_at[wanted].tolist(), text_at[wanted + 1].tolist()
    for i, row in enumerate(wanted.tolist()):
        doc_id = bytes(ids[row])
        title = titles[titles_from[i] : titles_to[i]]
        body = bodies[texts_from[i] : texts_to[i]]
        parts: list[bytes | memoryview] = [struct.pack("<QQQ", len(doc_id), len(title), len(body)), doc_id]
        parts += [title, body]
        if vectors is not None:
            parts.append(vectors[row * width : (row + 1) * width])
        out[i] = np.frombuffer(hashlib.blake2b(b"".join(parts), digest_size=DIGEST_BYTES).digest(), np.uint8)
    return out


def mismatched_rows(store: Any, digests: npt.ArrayLike, rows: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Those of ``rows`` whose digest in ``digests`` is not the one hashed from the row now."""
    wanted = np.asarray(rows, dtype=np.int64)
    given = np.asarray(digests, dtype=np.uint8)[wanted]
    wrong: npt.NDArray[np.int64] = wanted[(compute_digests(store, wanted) != given).any(axis=1)]
    return wrong


def sample_rows(size: int, count: int) -> npt.NDArray[np.int64]:
    """``count`` rows spread evenly over ``size`` rows (all of them when fewer), first and last included."""
    if size <= count:
        return np.arange(size, dtype=np.int64)
    return np.unique(np.linspace(0, size - 1, num=count).astype(np.int64))


def known_digests(store: Any) -> DigestArray | None:
    """The store's digests when known without hashing its rows (module doc), else None."""
    return _KNOWN.get(store)


def remember_digests(store: Any, digests: npt.ArrayLike) -> None:
    """Record ``digests`` as ``store``'s (ValueError unless one per row)."""
    array = np.asarray(digests, dtype=np.uint8)
    if array.shape != (len(store), DIGEST_BYTES):
        raise ValueError(f"row digests have shape {array.shape}, expected ({len(store)}, {DIGEST_BYTES})")
    array.setflags(write=False)
    _KNOWN[store] = array


def row_digests(store: Any) -> DigestArray:
    """Every row's digest: known ones, or hashed from the rows now (once per store object)."""
    known = _KNOWN.get(store)
    if known is None:
        known = compute_digests(store)
        remember_digests(store, known)
        known = _KNOWN[store]
    return known


def save_digests(store: Any, folder: Path) -> None:
    """Write the store's digests (hashed now if unknown) as ``folder/row_digests.npy``."""
    np.save(folder / DIGEST_FILE, row_digests(store), allow_pickle=False)


def load_digests(store: Any, folder: Path) -> None:
    """Take ``folder/row_digests.npy`` as ``store``'s digests when it is there and has one
    digest per row (a file of another shape is not taken: they are hashed again when asked)."""
    path = folder / DIGEST_FILE
    if not path.is_file():
        return
    array = np.load(path, allow_pickle=False)
    if array.dtype == np.uint8 and array.shape == (len(store), DIGEST_BYTES):
        remember_digests(store, array)
