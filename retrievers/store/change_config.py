"""Settings of a store change (:meth:`retrievers.store.ContextStore.add` and friends) and the
record of a version (:class:`StoreVersion`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ChangeSettings", "RowRecord", "StoreVersion"]


@dataclass(frozen=True)
class ChangeSettings:
    """How a change treats the context tree (retrievers/builders/tree_insert.py):

    ``tree_rebuild_fraction``: when the documents inserted and removed since the tree was built
    exceed this fraction of the documents it was built over, the tree is built again (needs the
    embedder); 0 rebuilds at every change, ``float('inf')`` never.
    ``tree_split_factor``: a directory holding more than this many times ``max_leaf_size``
    leaves is split by k-means (kmeans trees).
    ``source_folder``: the dataset folder, where a rebuild of the tree finds its
    ``summaries_file`` (as ``build_store(source_folder=)``); None when the tree reads none."""

    tree_rebuild_fraction: float = 0.2
    tree_split_factor: float = 2.0
    source_folder: str | None = None

    def __post_init__(self) -> None:
        fraction, factor = self.tree_rebuild_fraction, self.tree_split_factor
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not fraction >= 0:
            raise ValueError(f"tree_rebuild_fraction must be a number >= 0, got {fraction!r}")
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor >= 1:
            raise ValueError(f"tree_split_factor must be a number >= 1, got {factor!r}")


@dataclass(frozen=True)
class RowRecord:
    """Which rows a change touched: ``removed`` rows of the version it was made from (ascending)
    and the digests those rows had, ``added`` rows of the new version (ascending) and their
    digests (:mod:`retrievers.store.row_digests`, hex). Every other row of the new version is a
    kept row of the old one, in the same order. An update is a removed and an added row."""

    removed: tuple[int, ...]
    removed_digests: tuple[str, ...]
    added: tuple[int, ...]
    added_digests: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {key: list(value) for key, value in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RowRecord:
        record = cls(
            removed=tuple(int(row) for row in data["removed"]),
            removed_digests=tuple(str(digest) for digest in data["removed_digests"]),
            added=tuple(int(row) for row in data["added"]),
            added_digests=tuple(str(digest) for digest in data["added_digests"]),
        )
        if len(record.removed) != len(record.removed_digests) or len(record.added) != len(
            record.added_digests
        ):
            raise ValueError("a version's row record has not one digest per removed and added row")
        return record


@dataclass(frozen=True)
class StoreVersion:
    """One version of a store: its number (1 = built), its content key (sha256 of its rows'
    ids and texts, embeddings, embedder name and settings: :func:`retrievers.store.changes.content_key`),
    its size, what the change that made it did, and which rows it touched (``rows``; None for a
    built version and for versions recorded before rows were)."""

    version: int
    content_key: str
    n_documents: int
    added: int = 0
    deleted: int = 0
    updated: int = 0
    rows: RowRecord | None = None

    def to_dict(self, *, with_rows: bool = False) -> dict[str, Any]:
        """The version as JSON values; its row record only ``with_rows`` (store.json keeps it;
        reports show the counts)."""
        data = {key: value for key, value in asdict(self).items() if key != "rows"}
        if with_rows and self.rows is not None:
            data["rows"] = self.rows.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoreVersion:
        rows = data.get("rows")
        return cls(
            version=int(data["version"]),
            content_key=str(data["content_key"]),
            n_documents=int(data["n_documents"]),
            added=int(data.get("added", 0)),
            deleted=int(data.get("deleted", 0)),
            updated=int(data.get("updated", 0)),
            rows=None if rows is None else RowRecord.from_dict(rows),
        )
