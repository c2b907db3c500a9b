"""Where every row goes when a store changes: the old rows kept, the new rows inserted.

A store's rows are its documents sorted by id, so adding a document in the middle of the id
order shifts the rows after it. :class:`RowPlan` says, for one change, which old rows stay
(``keep``), where each kept row lands (``old_to_new``, -1 for a dropped row) and which rows of
the result are the added documents (``new_rows``, ascending, in the order of the added ids,
sorted). Every per-row part of the store (documents, embeddings, times, BM25 counts, edges,
tree leaves) is merged through it, so they all agree on the new row order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.store.columns import DocumentColumns, encode_metadata
from retrievers.store.ids import IdColumn, check_id
from retrievers.store.text_column import TextColumn
from retrievers.types import Document

__all__ = ["RowPlan", "merge_columns", "merge_text", "plan_rows"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class RowPlan:
    """One change's row mapping (see the module docstring)."""

    keep: BoolArray  #: (old rows,) True for a row that stays
    old_to_new: IntArray  #: (old rows,) its row in the result, -1 when dropped
    new_rows: IntArray  #: (added,) rows of the added documents in the result, ascending
    n_rows: int  #: rows of the result

    @property
    def kept_rows(self) -> IntArray:
        """Rows of the result that hold kept old rows (ascending)."""
        return self.old_to_new[self.keep]

    def merge(self, old: npt.ArrayLike, new: npt.ArrayLike) -> npt.NDArray[Any]:
        """``old``'s kept rows and ``new``'s rows (in ``new_rows`` order) merged along axis 0."""
        before = np.asarray(old)
        after = np.asarray(new, dtype=before.dtype)
        out = np.empty((self.n_rows, *before.shape[1:]), dtype=before.dtype)
        runs = self.runs()
        if len(runs) * 16 <= max(self.n_rows, 1):  # few long runs: copied as slices (no gather)
            for old_start, new_start, length in runs:
                out[new_start : new_start + length] = before[old_start : old_start + length]
        else:
            out[self.kept_rows] = before[self.keep]
        out[self.new_rows] = after
        return out

    def runs(self) -> list[tuple[int, int, int]]:
        """Kept old rows as runs ``(old start, new start, length)``: consecutive in both."""
        old_rows = np.flatnonzero(self.keep)
        if not old_rows.size:
            return []
        new_rows = self.old_to_new[old_rows]
        breaks = np.flatnonzero((np.diff(old_rows) != 1) | (np.diff(new_rows) != 1)) + 1
        starts = np.concatenate(([0], breaks))
        ends = np.concatenate((breaks, [old_rows.size]))
        return [(int(old_rows[s]), int(new_rows[s]), int(e - s)) for s, e in zip(starts, ends, strict=True)]


def plan_rows(ids: IdColumn, removed: Sequence[str], added: Sequence[str]) -> RowPlan:
    """The plan of a change removing the ids ``removed`` (each must be a row) and adding
    ``added`` (sorted, distinct, none of them a kept row)."""
    n_old = len(ids)
    keep = np.ones(n_old, dtype=np.bool_)
    if removed:
        wanted = np.array([check_id(doc_id) for doc_id in removed], dtype=np.bytes_)
        rows = _rows_of(ids.array, wanted)
        missing = [doc_id for doc_id, row in zip(removed, rows.tolist(), strict=True) if row < 0]
        if missing:
            raise ValueError(
                f"{len(missing)} id(s) are not in the store, e.g. {missing[0]!r}: only stored documents "
                "can be deleted or updated"
            )
        keep[rows] = False
    kept_ids = ids.array[keep]
    added_ids = np.array([check_id(doc_id) for doc_id in added], dtype=np.bytes_)
    if added_ids.size:
        present = _rows_of(kept_ids, added_ids)
        if (present >= 0).any():
            doc_id = added[int(np.flatnonzero(present >= 0)[0])]
            raise ValueError(
                f"document {doc_id!r} is already in the store: use update() to replace it, or "
                "delete() it first"
            )
    width = max(kept_ids.dtype.itemsize, added_ids.dtype.itemsize if added_ids.size else 1)
    places = np.searchsorted(kept_ids.astype(f"S{width}"), added_ids.astype(f"S{width}"))
    new_rows = places + np.arange(added_ids.size, dtype=np.int64)
    n_rows = int(keep.sum()) + added_ids.size
    is_new = np.zeros(n_rows, dtype=np.bool_)
    is_new[new_rows] = True
    old_to_new = np.full(n_old, -1, dtype=np.int64)
    old_to_new[keep] = np.flatnonzero(~is_new)
    return RowPlan(keep=keep, old_to_new=old_to_new, new_rows=new_rows.astype(np.int64), n_rows=n_rows)


def _rows_of(ids: npt.NDArray[Any], wanted: npt.NDArray[Any]) -> IntArray:
    """Row of each ``wanted`` id in the sorted ``ids`` (-1 where absent)."""
    out = np.full(wanted.size, -1, dtype=np.int64)
    if not ids.size or not wanted.size:
        return out
    width = max(ids.dtype.itemsize, wanted.dtype.itemsize)
    haystack, needles = ids.astype(f"S{width}"), wanted.astype(f"S{width}")
    places = np.minimum(np.searchsorted(haystack, needles), ids.size - 1)
    found = haystack[places] == needles
    out[found] = places[found]
    return out


def merge_text(
    old: TextColumn, plan: RowPlan, runs: list[tuple[int, int, int]], new: list[str]
) -> TextColumn:
    """``old``'s kept strings and ``new`` (rows ``plan.new_rows``) as one column: kept runs are
    copied as whole byte ranges, so the cost is a copy of the blob, not a loop over rows."""
    encoded = [text.encode("utf-8") for text in new]
    lengths = np.empty(plan.n_rows, dtype=np.int64)
    old_lengths = np.diff(np.asarray(old.offsets))
    lengths[plan.kept_rows] = old_lengths[plan.keep]
    lengths[plan.new_rows] = [len(data) for data in encoded]
    offsets = np.zeros(plan.n_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    blob = np.empty(int(offsets[-1]), dtype=np.uint8)
    for old_start, new_start, length in runs:
        source = old.blob[int(old.offsets[old_start]) : int(old.offsets[old_start + length])]
        blob[int(offsets[new_start]) : int(offsets[new_start + length])] = source
    for row, data in zip(plan.new_rows.tolist(), encoded, strict=True):
        blob[int(offsets[row]) : int(offsets[row + 1])] = np.frombuffer(data, dtype=np.uint8)
    return TextColumn(offsets, blob)


def merge_columns(old: DocumentColumns, plan: RowPlan, added: Sequence[Document]) -> DocumentColumns:
    """The documents after a change: ``old``'s kept rows and ``added`` (sorted by id, rows
    ``plan.new_rows``), as in-memory columns."""
    runs = plan.runs()
    new_ids = np.array([check_id(doc.id) for doc in added], dtype=np.bytes_)
    width = max(old.ids.array.dtype.itemsize, new_ids.dtype.itemsize if new_ids.size else 1)
    ids = plan.merge(old.ids.array.astype(f"S{width}"), new_ids.astype(f"S{width}"))
    return DocumentColumns(
        IdColumn(ids, check=False),
        merge_text(old.titles, plan, runs, [doc.title for doc in added]),
        merge_text(old.texts, plan, runs, [doc.text for doc in added]),
        merge_text(
            old.metadata,
            plan,
            runs,
            [encode_metadata(doc.metadata, f"document {doc.id!r}: metadata") for doc in added],
        ),
    )
