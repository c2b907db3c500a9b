"""The nodes of a tree being changed (:mod:`retrievers.builders.tree_insert`), by URI, built only
when read.

A change touches a few hundred nodes of a tree of a hundred thousand; making a
:class:`~retrievers.types.ContextNode` of every node up front cost more than the change itself.
:class:`EditNodes` is a mapping URI -> node over the old tree's decoded columns: a node is made
when it is first read (and kept), nodes set or removed by the change are held apart, and the
fields a walk of the whole tree reads (level, parent, doc id) are read from the columns without
making the node.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

import numpy as np

from retrievers.store.columns import decode_metadata_column
from retrievers.store.tree import ContextTree
from retrievers.types import ContextNode

__all__ = ["EditNodes"]


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
