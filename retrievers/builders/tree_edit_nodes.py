"""The nodes of a tree being changed (:mod:`retrievers.builders.tree_insert`), by URI, built only
when read.

A change touches a few hundred nodes of a tree of a hundred thousand; making a
:class:`~retrievers.types.ContextNode` of every node up front cost more than the change itself.
:class:`EditNodes` is a mapping URI -> node over the old tree's decoded columns: a node is made
when it is first read (and kept), nodes set or removed by the change are held apart, and the
fields a walk of the whole tree reads (level, parent, doc id) are read from the columns without
making the node. :func:`subtree_sums` gives the directories' leaf-vector sums and leaf counts in
one pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.store.columns import decode_metadata_column
from retrievers.store.tree import ContextTree
from retrievers.types import ContextNode

__all__ = ["EditNodes", "subtree_sums"]

IntArray = npt.NDArray[np.int64]


class EditNodes(MutableMapping[str, ContextNode]):
    """URI -> node of a tree under change (see the module docstring)."""

    def __init__(self, tree: ContextTree) -> None:
        n = len(tree)
        self.uris: list[str] = tree.uris._block(0, n)  # whole columns at once: no per-node decoding
        self._abstracts = tree.text_column("abstract")._block(0, n)
        self._contents = tree.text_column("content")._block(0, n)
        self._doc_ids = tree.text_column("doc_id")._block(0, n)
        self._metadata = decode_metadata_column(tree.text_column("metadata"))
        self._levels: list[int] = np.asarray(tree.levels).tolist()
        self._parents: list[int] = np.asarray(tree.parents).tolist()
        #: URI -> node index in the old tree
        self.old_index: dict[str, int] = {uri: i for i, uri in enumerate(self.uris)}
        self._read: dict[str, ContextNode] = {}  # old nodes made so far
        self._changed: dict[str, ContextNode | None] = {}  # set by the change; None: removed
        self._size = n

    def _old_node(self, uri: str) -> ContextNode:
        node = self._read.get(uri)
        if node is None:
            i = self.old_index[uri]
            parent = self._parents[i]
            node = ContextNode(
                uri=uri,
                level=self._levels[i],
                parent_uri=self.uris[parent] if parent >= 0 else None,
                abstract=self._abstracts[i],
                content=self._contents[i],
                doc_id=self._doc_ids[i] or None,
                metadata=self._metadata[i],
            )
            self._read[uri] = node
        return node

    def __getitem__(self, uri: str) -> ContextNode:
        if uri in self._changed:
            node = self._changed[uri]
            if node is None:
                raise KeyError(uri)
            return node
        return self._old_node(uri)

    def __contains__(self, uri: object) -> bool:
        if uri in self._changed:
            return self._changed[uri] is not None
        return uri in self.old_index

    def __setitem__(self, uri: str, node: ContextNode) -> None:
        if uri not in self:
            self._size += 1
        self._changed[uri] = node

    def __delitem__(self, uri: str) -> None:
        if uri not in self:
            raise KeyError(uri)
        self._size -= 1
        self._changed[uri] = None

    def __iter__(self) -> Iterator[str]:
        for uri in self.uris:
            if self._changed.get(uri, True) is not None:  # not removed
                yield uri
        for uri, node in self._changed.items():
            if node is not None and uri not in self.old_index:
                yield uri

    def __len__(self) -> int:
        return self._size

    # -- fields without making the node ---------------------------------------------------
    def level(self, uri: str) -> int:
        if uri in self._changed:
            return self[uri].level
        return self._levels[self.old_index[uri]]

    def parent_uri(self, uri: str) -> str | None:
        if uri in self._changed:
            return self[uri].parent_uri
        parent = self._parents[self.old_index[uri]]
        return self.uris[parent] if parent >= 0 else None

    def doc_id(self, uri: str) -> str | None:
        if uri in self._changed:
            return self[uri].doc_id
        return self._doc_ids[self.old_index[uri]] or None

    def children_lists(self) -> dict[str, list[str]]:
        """Every old node's children (URIs, in node order), from the parent column."""
        uris = self.uris
        children: dict[str, list[str]] = {uri: [] for uri in uris}
        for uri, parent in zip(uris, self._parents, strict=True):
            if parent >= 0:
                children[uris[parent]].append(uri)
        return children

    def leaf_of(self) -> dict[str, str]:
        """doc id -> leaf URI of every old leaf."""
        return {
            doc_id: uri
            for uri, doc_id, level in zip(self.uris, self._doc_ids, self._levels, strict=True)
            if level == 2 and doc_id
        }

    def roots(self) -> list[str]:
        """URIs of the nodes without a parent, sorted."""
        found = {self.uris[i] for i, parent in enumerate(self._parents) if parent < 0}
        for uri, node in self._changed.items():
            found.discard(uri)
            if node is not None and node.parent_uri is None:
                found.add(uri)
        return sorted(found)

    def n_directories(self) -> int:
        count = sum(1 for level in self._levels if level != 2)
        for uri, node in self._changed.items():
            if uri in self.old_index and self._levels[self.old_index[uri]] != 2:
                count -= 1
            if node is not None and node.level != 2:
                count += 1
        return count


def subtree_sums(
    nodes: EditNodes,
    children: Mapping[str, list[str]],
    wanted: Sequence[str],
    matrix: npt.NDArray[Any],
    row_of: Mapping[str, int],
) -> tuple[dict[str, npt.NDArray[np.float64]], dict[str, int]]:
    """The sum of the leaf vectors (float64) and the number of leaves under each directory of
    ``wanted``, for all of them in one pass: the directories under them numbered once, the
    leaves summed into their directory at once, the sums carried up level by level (not one
    walk of the subtree per directory)."""
    index: dict[str, int] = {}
    parent_uris: list[str | None] = []
    leaf_ids: list[str] = []
    leaf_parent: list[int] = []
    stack = list(wanted)
    while stack:  # every node under a wanted directory, each once (wanted ones nest)
        uri = stack.pop()
        if uri in index:
            continue
        index[uri] = len(parent_uris)
        parent_uris.append(nodes.parent_uri(uri))
        for child in children[uri]:
            if nodes.level(child) == 2:
                leaf_ids.append(str(nodes.doc_id(child)))
                leaf_parent.append(index[uri])
            else:
                stack.append(child)
    parent = np.asarray([index.get(uri or "", -1) for uri in parent_uris], dtype=np.int64)
    rows_of = getattr(row_of, "rows", None)
    if rows_of is not None:
        rows = np.asarray(rows_of(np.asarray(leaf_ids, dtype=object)), dtype=np.int64)
    else:
        rows = np.asarray([row_of[doc_id] for doc_id in leaf_ids], dtype=np.int64)
    sums = np.zeros((parent.size, matrix.shape[1]), dtype=np.float64)
    counts = np.zeros(parent.size, dtype=np.int64)
    _add_grouped(sums, counts, np.asarray(leaf_parent, dtype=np.int64), matrix, rows, 1)
    depth = np.zeros(parent.size, dtype=np.int64)
    up = parent.copy()
    while (up >= 0).any():
        depth += up >= 0
        up = np.where(up >= 0, parent[np.maximum(up, 0)], -1)
    for level in range(int(depth.max(initial=0)), 0, -1):
        at = np.flatnonzero(depth == level)
        _add_grouped(sums, counts, parent[at], sums, at, counts[at])
    return (
        {uri: sums[index[uri]] for uri in wanted},
        {uri: int(counts[index[uri]]) for uri in wanted},
    )


def _add_grouped(
    sums: npt.NDArray[np.float64],
    counts: IntArray,
    targets: IntArray,
    source: npt.NDArray[Any],
    rows: IntArray,
    weights: npt.ArrayLike,
) -> None:
    """``sums[targets[i]] += source[rows[i]]`` and ``counts[targets[i]] += weights[i]``, grouped
    by target (a sort and one ``reduceat``, float64 accumulation)."""
    if not targets.size:
        return
    order = np.argsort(targets, kind="stable")
    targets = targets[order]
    starts = np.flatnonzero(np.concatenate(([True], targets[1:] != targets[:-1])))
    sums[targets[starts]] += np.add.reduceat(source[rows[order]], starts, axis=0, dtype=np.float64)
    counts[targets[starts]] += np.add.reduceat(np.broadcast_to(weights, targets.shape)[order], starts)
