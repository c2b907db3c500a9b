"""Each row's metadata group, kept beside an edge set so that a change need not parse every row.

``similar_to`` (``same_keys``) and ``sequence`` (``group_keys``) edges link rows within groups
of equal metadata values. A build reads every document's metadata anyway and remembers the
rows' groups (:class:`RowGroups`) beside the :class:`~retrievers.store.edges.EdgeSet` it makes
(:func:`remember`); a change (:mod:`retrievers.builders.edge_changes`) takes the old edge set's
groups, renumbers the kept rows and reads only the new documents' metadata
(:meth:`RowGroups.changed`), and remembers the result beside the new edge set. The groups are
kept in memory only (never saved): an edge set loaded from disk has none, and its first change
parses the metadata column once (:func:`recall` returns None).

A group's name is the tuple of its keys' values as strings (``str(value)``); a row lacking a
key belongs to no group (code -1). Names are sorted; codes index them.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.store.edges import EdgeSet

__all__ = ["RowGroups", "group_name", "recall", "remember"]

IntArray = npt.NDArray[np.int64]
GroupName = tuple[str, ...]

#: the groups of each live edge set, by the keys they group on (entries go with their edge set)
_KNOWN: weakref.WeakKeyDictionary[EdgeSet, dict[tuple[str, ...], RowGroups]] = weakref.WeakKeyDictionary()


def group_name(metadata: Mapping[str, Any], keys: Sequence[str]) -> GroupName | None:
    """The group of a row with ``metadata``: its values of ``keys`` as strings, or None when it
    lacks one."""
    if any(key not in metadata for key in keys):
        return None
    return tuple(str(metadata[key]) for key in keys)


@dataclass(frozen=True)
class RowGroups:
    """``code[row]``: the index of the row's group in ``names`` (sorted), -1 for no group."""

    code: IntArray
    names: tuple[GroupName, ...]

    @classmethod
    def of_names(cls, names_of_rows: Sequence[GroupName | None]) -> RowGroups:
        """The groups of rows whose group names are ``names_of_rows`` (None: no group)."""
        names = tuple(sorted({name for name in names_of_rows if name is not None}))
        index = {name: i for i, name in enumerate(names)}
        code = np.fromiter(
            (-1 if name is None else index[name] for name in names_of_rows),
            dtype=np.int64,
            count=len(names_of_rows),
        )
        return cls(code, names)

    def changed(
        self, old_to_new: IntArray, new_rows: IntArray, new_names: Sequence[GroupName | None]
    ) -> RowGroups:
        """The groups after a change: old row r is row ``old_to_new[r]`` (-1: removed; the kept
        rows fill every row but ``new_rows``), and ``new_rows[i]`` is in group ``new_names[i]``.
        Groups no row is in any more are dropped."""
        kept = old_to_new >= 0
        n_rows = int(np.count_nonzero(kept)) + len(new_rows)
        unseen = {name for name in new_names if name is not None}.difference(self.names)
        names = sorted({*self.names, *unseen})
        index = {name: i for i, name in enumerate(names)}
        remap = np.asarray([index[name] for name in self.names] + [-1], dtype=np.int64)  # -1 stays -1
        code = np.empty(n_rows, dtype=np.int64)
        code[old_to_new[kept]] = remap[self.code[kept]]
        code[new_rows] = [-1 if name is None else index[name] for name in new_names]
        used = np.zeros(len(names) + 1, dtype=np.bool_)
        used[code] = True  # code -1 marks the last slot
        if used[: len(names)].all():
            return RowGroups(code, tuple(names))
        renumber = np.cumsum(used[: len(names)]) - 1
        renumber = np.append(renumber, -1)
        return RowGroups(
            renumber[code], tuple(name for name, here in zip(names, used.tolist(), strict=False) if here)
        )


def remember(edges: EdgeSet, groups: Mapping[tuple[str, ...], RowGroups]) -> None:
    """Keep ``groups`` (by their keys) beside ``edges`` while it lives."""
    _KNOWN.setdefault(edges, {}).update(groups)


def recall(edges: EdgeSet, keys: Iterable[str]) -> RowGroups | None:
    """The groups kept beside ``edges`` for ``keys``, or None (e.g. an edge set loaded from disk)."""
    return _KNOWN.get(edges, {}).get(tuple(keys))
