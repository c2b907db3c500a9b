"""Store versions on disk: every change a new folder, published by an atomic pointer swap.

Layout of a versions folder::

    root/
      CURRENT            {"version": 3, "folder": "v000003", "content_key": "..."}
      v000001/           a complete saved ContextStore (store.json holds its history, with the
                         rows each change touched) and row_digests.npy (its rows' digests)
      v000002/
      v000003/

:meth:`StoreVersions.commit` writes the new version into a hidden temporary folder
(``.v000004.partial``), flushes its files to disk, renames it to ``v000004`` and then replaces
``CURRENT`` by ``os.replace`` of a flushed temporary file: the one step that publishes it. A
process killed at any point before that rename leaves ``CURRENT`` naming the previous version,
whose folder is never written again, so the previous version stays loadable; the leftover
folder of the interrupted commit is removed by the next commit. Readers that opened an older
version keep reading it (its files are never rewritten).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from retrievers.store.change_config import ChangeSettings, StoreVersion
from retrievers.store.context_store import ContextStore
from retrievers.store.row_digests import load_digests, save_digests

if TYPE_CHECKING:
    import numpy.typing as npt

    from retrievers.types import Document, Embedder

__all__ = ["StoreVersions"]

POINTER = "CURRENT"


def _folder_name(version: int) -> str:
    return f"v{version:06d}"


def _flush_tree(folder: Path) -> None:
    """fsync every file under ``folder`` and the folders themselves."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    for path in [folder, *sorted(p for p in folder.rglob("*") if p.is_dir())]:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


class StoreVersions:
    """The versions of one store in ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def create(cls, root: Path, store: ContextStore) -> StoreVersions:
        """A new versions folder whose version 1 is ``store`` (a built store). ``root`` must not
        hold versions yet."""
        versions = cls(root)
        if (versions.root / POINTER).exists():
            raise ValueError(f"{root} already holds store versions ({POINTER}); open it instead")
        versions.root.mkdir(parents=True, exist_ok=True)
        if not store.history:
            store.history = (StoreVersion(1, store.content_key, len(store)),)
        versions.commit(store)
        return versions

    @classmethod
    def open(cls, root: Path) -> StoreVersions:
        versions = cls(root)
        versions.pointer()  # refuses a folder without versions
        return versions

    def pointer(self) -> dict[str, object]:
        """What ``CURRENT`` says (version, folder, content key)."""
        path = self.root / POINTER
        if not path.is_file():
            raise ValueError(f"{self.root} holds no store versions (missing {POINTER})")
        data = json.loads(path.read_text(encoding="utf-8"))
        return dict(data)

    @property
    def current_version(self) -> int:
        version = self.pointer()["version"]
        if not isinstance(version, int):
            raise ValueError(f"{self.root / POINTER}: version {version!r} is not an integer")
        return version

    def load(self, version: int | None = None, *, mmap: bool = True) -> ContextStore:
        """The store of ``version`` (None: the current one), loaded from its folder."""
        number = self.current_version if version is None else version
        folder = self.root / _folder_name(number)
        if version is not None and number > self.current_version:
            raise ValueError(
                f"{self.root}: version {number} was never published (current: {self.current_version})"
            )
        store = ContextStore.load(folder, mmap=mmap)
        if not store.history or store.history[-1].version != number:
            raise ValueError(f"{folder}: its store.json does not record version {number}")
        load_digests(store, folder)
        return store

    def history(self) -> tuple[StoreVersion, ...]:
        """Every published version, oldest first (from the current version's record)."""
        return self.load().history

    def commit(self, store: ContextStore) -> StoreVersion:
        """Write ``store`` (made from the current version by add/delete/update: its history
        ends with the next version) as a new version and publish it (module docstring)."""
        if not store.history:
            raise ValueError("the store has no version record: commit stores made by add/delete/update")
        record = store.history[-1]
        pointer = self.root / POINTER
        if pointer.is_file():
            current = self.current_version
            if record.version != current + 1:
                raise ValueError(
                    f"{self.root}: this store is version {record.version}, the next version is "
                    f"{current + 1} (was it made from the current version?)"
                )
        name = _folder_name(record.version)
        final = self.root / name
        partial = self.root / f".{name}.partial"
        for leftover in (partial, final):  # from an interrupted commit: never published
            if leftover.exists():
                shutil.rmtree(leftover)
        store.save(partial)
        save_digests(store, partial)  # the backend identity's parts (retrievers/store/row_digests.py)
        _flush_tree(partial)
        os.rename(partial, final)
        temporary = self.root / f".{POINTER}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump({"version": record.version, "folder": name, "content_key": record.content_key}, handle)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, pointer)  # the publishing step
        descriptor = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        return record

    def add(
        self,
        documents: Iterable[Document],
        embedder: Embedder | None = None,
        *,
        embeddings: npt.ArrayLike | None = None,
        settings: ChangeSettings | None = None,
    ) -> ContextStore:
        """:meth:`ContextStore.add` on the current version, committed; returns the new store."""
        store = self.load().add(documents, embedder, embeddings=embeddings, settings=settings)
        self.commit(store)
        return store

    def delete(
        self, ids: Iterable[str], embedder: Embedder | None = None, *, settings: ChangeSettings | None = None
    ) -> ContextStore:
        """:meth:`ContextStore.delete` on the current version, committed."""
        store = self.load().delete(ids, embedder, settings=settings)
        self.commit(store)
        return store

    def update(
        self,
        documents: Iterable[Document],
        embedder: Embedder | None = None,
        *,
        embeddings: npt.ArrayLike | None = None,
        settings: ChangeSettings | None = None,
    ) -> ContextStore:
        """:meth:`ContextStore.update` on the current version, committed."""
        store = self.load().update(documents, embedder, embeddings=embeddings, settings=settings)
        self.commit(store)
        return store
