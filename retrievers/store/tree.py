"""The context tree artifact: OpenViking's virtual filesystem of context.

A :class:`ContextTree` holds directories and leaves as :class:`~retrievers.types.ContextNode`
values. Leaves (level 2) are documents of the store; directories (level 0 or 1; the builders emit
0, and the retriever treats both alike) carry an L0 ``abstract`` and optionally an L1 overview in
``content``. Every URI lies under one of OpenViking's roots (:data:`~retrievers.store.tree_uris.CONTEXT_ROOTS`),
which also gives the node's context type (memory, resource, skill), and a child's URI extends its
parent's.

Storage. Nodes are columns (:mod:`retrievers.store.columns`): URIs, abstracts, overviews, doc
ids and metadata as UTF-8 blobs with offsets, levels and the structure (parents, children,
depth, context types) as integer arrays, all memory-mapped on load; ``tree.nodes[i]`` builds the
:class:`~retrievers.types.ContextNode` of node ``i`` when it is read. A tree is validated when
it is built from nodes; loading trusts the saved structure (checked for shape), so it costs the
same for a million nodes as for a thousand. Saved with a store, the tree also keeps each leaf's
store row (``leaf_rows.npy``), so loading maps no ids.

Vectors. Leaves are scored with the store's document embeddings; directories have their own
*records*, as in OpenViking's vector index: a level-0 record (the abstract embedded, or the centroid
of the directory's leaf vectors) and, when the directory has an overview, a level-1 record (the
overview embedded). Records are one float32 matrix, saved as ``.npy`` and memory-mapped on load.

:class:`~retrievers.store.hierarchy_config.HierarchyConfig` says how a tree is built
(``store.hierarchy``); the builders live in :mod:`retrievers.builders.hierarchy`. This module holds
only what loading and searching need; the views over the node columns are in
:mod:`retrievers.store.tree_nodes`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.store.columns import encode_metadata
from retrievers.store.ids import RowIndex
from retrievers.store.npy_files import load_npy, save_npy
from retrievers.store.text_column import TextColumn
from retrievers.store.tree_nodes import CodeNames, DocIds, NodeColumns, UriIndex
from retrievers.store.tree_uris import CONTEXT_TYPES, TreeError, context_type_of
from retrievers.types import ContextNode

__all__ = ["ContextTree"]

FloatMatrix = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]

_FORMAT = "viking_eval.retrievers.ContextTree"
_FORMAT_VERSION = 2  # 2: columns (1: nodes.jsonl)
_TEXT_FIELDS = ("uri", "abstract", "content", "doc_id", "metadata")
_ARRAYS = ("level", "parents", "child_ptr", "child_index", "depth", "context_type")


class ContextTree:
    """A validated context tree with its directory vectors.

    Nodes are kept sorted by URI (so node index order is URI order and a parent's index is
    smaller than its children's). Errors found at construction: duplicate URIs, a ``parent_uri``
    naming no node (orphan) or naming a leaf, cycles, a directory with no children, a leaf
    without ``doc_id`` (or a directory with one), a document in two leaves, a URI outside the
    OpenViking roots, a child URI that does not extend its parent's.

    Directory records: ``record_nodes[i]`` is the node of record ``i``, ``record_levels[i]`` its
    level (0 abstract/centroid, 1 overview), ``record_vectors[i]`` its vector. A tree built from
    nodes alone has no records; :func:`retrievers.builders.hierarchy.embed_directories` adds them.
    """

    def __init__(
        self,
        nodes: Sequence[ContextNode],
        *,
        record_nodes: npt.ArrayLike | None = None,
        record_levels: npt.ArrayLike | None = None,
        record_vectors: npt.ArrayLike | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        items = list(nodes)
        for node in items:
            if not isinstance(node, ContextNode):
                raise TreeError(f"tree nodes must be ContextNode values, got {type(node).__name__}")
        ordered = sorted(items, key=lambda node: node.uri)
        if not ordered:
            raise TreeError("a context tree needs at least one node")
        uris = [node.uri for node in ordered]
        index_of: dict[str, int] = {}
        for i, uri in enumerate(uris):
            if uri in index_of:
                raise TreeError(f"duplicate node URI {uri!r}")
            index_of[uri] = i
        n = len(ordered)
        is_leaf = np.fromiter((node.level == 2 for node in ordered), dtype=bool, count=n)
        parents = np.full(n, -1, dtype=np.int64)
        doc_ids: dict[str, str] = {}
        for i, node in enumerate(ordered):
            if node.level == 2:
                if not node.doc_id:
                    raise TreeError(f"leaf {node.uri!r} has no doc_id")
                if node.doc_id in doc_ids:
                    raise TreeError(
                        f"document {node.doc_id!r} is in two leaves: {doc_ids[node.doc_id]!r} and {node.uri!r}"
                    )
                doc_ids[node.doc_id] = node.uri
                if node.parent_uri is None:
                    raise TreeError(f"leaf {node.uri!r} has no parent directory; a root must be a directory")
            elif node.doc_id is not None:
                raise TreeError(
                    f"directory {node.uri!r} has doc_id {node.doc_id!r}; only leaves (level 2) map to documents"
                )
            if node.parent_uri is not None:
                parent = index_of.get(node.parent_uri)
                if parent is None:
                    raise TreeError(
                        f"orphan node {node.uri!r}: its parent_uri {node.parent_uri!r} is not a node of the tree"
                    )
                if ordered[parent].level == 2:
                    raise TreeError(
                        f"node {node.uri!r} has leaf {node.parent_uri!r} as parent; leaves have no children"
                    )
                parents[i] = parent
        _check_acyclic(parents, uris)
        for i, node in enumerate(ordered):
            context_type_of(node.uri)
            if parents[i] >= 0 and not node.uri.startswith(uris[parents[i]] + "/"):
                raise TreeError(
                    f"node {node.uri!r} does not extend its parent's URI {uris[parents[i]]!r} "
                    "(child URIs must be <parent URI>/<name>)"
                )
        counts = np.bincount(parents[parents >= 0], minlength=n)
        empty = np.flatnonzero((counts == 0) & ~is_leaf)
        if empty.size:
            raise TreeError(
                f"directory {uris[int(empty[0])]!r} has no children"
                + (f" (and {empty.size - 1} more)" if empty.size > 1 else "")
                + "; every directory needs at least one child"
            )
        # Children in CSR form, each list in node (URI) order.
        order = np.argsort(parents, kind="stable")
        order = order[parents[order] >= 0]
        depth = np.zeros(n, dtype=np.int64)
        for i in range(n):  # parents precede children in URI order
            depth[i] = 0 if parents[i] < 0 else depth[parents[i]] + 1
        arrays: dict[str, npt.NDArray[Any]] = {
            "level": np.fromiter((node.level for node in ordered), dtype=np.int8, count=n),
            "parents": parents,
            "child_ptr": np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            "child_index": order.astype(np.int64),
            "depth": depth,
            "context_type": np.fromiter(
                (CONTEXT_TYPES.index(context_type_of(uri)) for uri in uris), dtype=np.int8, count=n
            ),
        }
        texts = {
            "uri": TextColumn.from_strings(uris),
            "abstract": TextColumn.from_strings(node.abstract for node in ordered),
            "content": TextColumn.from_strings(node.content for node in ordered),
            "doc_id": TextColumn.from_strings(node.doc_id or "" for node in ordered),
            "metadata": TextColumn.from_strings(
                encode_metadata(node.metadata, f"node {node.uri!r}: metadata") for node in ordered
            ),
        }
        self._set_structure(texts, arrays, info)
        self._set_records(record_nodes, record_levels, record_vectors)

    def _set_structure(
        self,
        texts: Mapping[str, TextColumn],
        arrays: Mapping[str, npt.NDArray[Any]],
        info: Mapping[str, Any] | None,
    ) -> None:
        level = arrays["level"]
        n = int(level.shape[0])
        for name in _ARRAYS:
            expected = n + 1 if name == "child_ptr" else n
            if name == "child_index":
                expected = int(np.count_nonzero(np.asarray(arrays["parents"]) >= 0))
            if arrays[name].shape != (expected,):
                raise TreeError(f"tree array {name!r} has shape {arrays[name].shape}, expected ({expected},)")
        for name in _TEXT_FIELDS:
            if len(texts[name]) != n:
                raise TreeError(f"tree column {name!r} holds {len(texts[name])} values, expected {n}")
        self._level = level
        self.is_leaf: npt.NDArray[np.bool_] = np.asarray(level) == 2
        self.parents: IntArray = arrays["parents"]
        self.child_ptr: IntArray = arrays["child_ptr"]
        self.child_index: IntArray = arrays["child_index"]
        self.depth: IntArray = arrays["depth"]
        self.roots: IntArray = np.flatnonzero(np.asarray(self.parents) < 0).astype(np.int64)
        self._texts = dict(texts)
        #: every node, in URI order (a Sequence[ContextNode] decoding a node when it is read)
        self.nodes: NodeColumns = NodeColumns(self._texts, level, self.parents)
        #: every node's URI (sorted)
        self.uris: TextColumn = self._texts["uri"]
        #: URI -> node index (a binary search over ``uris``)
        self.index_of: UriIndex = UriIndex(self.uris)
        #: doc id of every node (None for directories)
        self.doc_ids: Sequence[str | None] = DocIds(self._texts["doc_id"], self.is_leaf)
        #: ``memory`` / ``resource`` / ``skill`` of every node
        self.context_types: Sequence[str] = CodeNames(arrays["context_type"], CONTEXT_TYPES)
        self._context_codes = arrays["context_type"]
        self.info: dict[str, Any] = dict(info or {})
        self._leaf_rows: tuple[Mapping[str, int], IntArray] | None = None

    def with_records(
        self, record_nodes: npt.ArrayLike, record_levels: npt.ArrayLike, record_vectors: npt.ArrayLike
    ) -> ContextTree:
        """This tree with directory records: the same (already validated) columns and structure,
        shared rather than rebuilt from decoded nodes; the records are checked as in ``__init__``."""
        tree = object.__new__(ContextTree)
        arrays = {
            "level": self._level,
            "parents": self.parents,
            "child_ptr": self.child_ptr,
            "child_index": self.child_index,
            "depth": self.depth,
            "context_type": self._context_codes,
        }
        tree._set_structure(self._texts, arrays, self.info)
        tree._set_records(record_nodes, record_levels, record_vectors)
        return tree

    # -- records -------------------------------------------------------------------------------

    def _set_records(
        self,
        record_nodes: npt.ArrayLike | None,
        record_levels: npt.ArrayLike | None,
        record_vectors: npt.ArrayLike | None,
    ) -> None:
        given = [value is not None for value in (record_nodes, record_levels, record_vectors)]
        if any(given) and not all(given):
            raise TreeError("record_nodes, record_levels and record_vectors go together")
        if record_nodes is None or record_levels is None or record_vectors is None:
            self.record_nodes: IntArray = np.empty(0, dtype=np.int64)
            self.record_levels: IntArray = np.empty(0, dtype=np.int64)
            self.record_vectors: FloatMatrix | None = None
            return
        nodes = np.asarray(record_nodes, dtype=np.int64)
        levels = np.asarray(record_levels, dtype=np.int64)
        # a memory-mapped matrix stays one (np.asarray would hand back a plain ndarray view)
        vectors = record_vectors if isinstance(record_vectors, np.ndarray) else np.asarray(record_vectors)
        if vectors.ndim != 2 or vectors.dtype != np.float32:
            raise TreeError(
                f"record_vectors must be a 2-D float32 matrix, got {vectors.dtype} {vectors.shape}"
            )
        if nodes.shape != (vectors.shape[0],) or levels.shape != nodes.shape:
            raise TreeError(
                f"record arrays disagree: nodes {nodes.shape}, levels {levels.shape}, vectors {vectors.shape}"
            )
        if nodes.size and (nodes.min() < 0 or nodes.max() >= len(self.nodes)):
            raise TreeError("record_nodes names a node index outside the tree")
        if nodes.size and self.is_leaf[nodes].any():
            raise TreeError("records belong to directories; a record names a leaf")
        if not np.isin(levels, (0, 1)).all():
            raise TreeError("record_levels must be 0 (abstract) or 1 (overview)")
        has_abstract = np.zeros(len(self.nodes), dtype=bool)
        has_abstract[nodes[levels == 0]] = True
        missing = np.flatnonzero(~self.is_leaf & ~has_abstract)
        if missing.size:
            raise TreeError(f"directory {self.uris[int(missing[0])]!r} has no level-0 record")
        self.record_nodes = nodes
        self.record_levels = levels
        self.record_vectors = vectors

    @property
    def has_vectors(self) -> bool:
        return self.record_vectors is not None

    @property
    def dim(self) -> int | None:
        return None if self.record_vectors is None else int(self.record_vectors.shape[1])

    # -- structure -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def n_directories(self) -> int:
        return int(np.count_nonzero(~self.is_leaf))

    @property
    def n_leaves(self) -> int:
        return int(np.count_nonzero(self.is_leaf))

    @classmethod
    def from_columns(
        cls,
        texts: Mapping[str, TextColumn],
        arrays: Mapping[str, npt.NDArray[Any]],
        *,
        record_nodes: npt.ArrayLike,
        record_levels: npt.ArrayLike,
        record_vectors: npt.ArrayLike,
        info: Mapping[str, Any] | None = None,
    ) -> ContextTree:
        """A tree from its node columns (``uri``, ``abstract``, ``content``, ``doc_id``,
        ``metadata``, sorted by URI) and arrays (``level``, ``parents``, ``child_ptr``,
        ``child_index``, ``depth``, ``context_type``), as :meth:`save` writes them: checked for
        shape as :meth:`load` checks them, the structure trusted (a tree changed column by
        column: :mod:`retrievers.builders.tree_insert`)."""
        tree = cls.__new__(cls)
        tree._set_structure(texts, arrays, info)
        tree._set_records(record_nodes, record_levels, record_vectors)
        return tree

    @property
    def context_codes(self) -> npt.NDArray[np.int8]:
        """Every node's context type as an index into :data:`CONTEXT_TYPES`."""
        return np.asarray(self._context_codes)

    @property
    def levels(self) -> npt.NDArray[np.int8]:
        """Every node's level (0/1 directory, 2 leaf)."""
        return np.asarray(self._level)

    def text_column(self, name: str) -> TextColumn:
        """The node column ``name`` (``uri``, ``abstract``, ``content``, ``doc_id``, ``metadata``)."""
        return self._texts[name]

    def children(self, node: int) -> IntArray:
        """Indices of ``node``'s children, in URI order."""
        return self.child_index[self.child_ptr[node] : self.child_ptr[node + 1]]

    def subtree_leaves(self) -> list[list[int]]:
        """For every node, the leaf node indices below it (a leaf lists itself)."""
        below: list[list[int]] = [[i] if self.is_leaf[i] else [] for i in range(len(self.nodes))]
        for i in range(len(self.nodes) - 1, -1, -1):  # children have larger indices than parents
            parent = int(self.parents[i])
            if parent >= 0:
                below[parent].extend(below[i])
        return below

    def leaf_rows(self, row_of: Mapping[str, int]) -> IntArray:
        """Store row of every leaf (-1 for directories); a leaf naming no document is an error.
        Remembered for the last ``row_of`` asked (a store's index: retrievers ask once each)."""
        if self._leaf_rows is not None and self._leaf_rows[0] is row_of:
            return self._leaf_rows[1]
        rows = np.full(len(self.nodes), -1, dtype=np.int64)
        leaves = np.flatnonzero(self.is_leaf)
        if isinstance(row_of, RowIndex):
            rows[leaves] = row_of.rows(self._texts["doc_id"].fixed_width(leaves))
        else:
            doc_ids = self._texts["doc_id"]
            rows[leaves] = [row_of.get(doc_ids[int(i)], -1) for i in leaves]
        missing = leaves[rows[leaves] < 0]
        if missing.size:
            i = int(missing[0])
            raise TreeError(
                f"leaf {self.uris[i]!r} names document {self.doc_ids[i]!r}, which is not in the store"
            )
        rows.setflags(write=False)
        self._leaf_rows = (row_of, rows)
        return rows

    # -- persistence ---------------------------------------------------------------------------

    def save(self, folder: Path, *, row_of: Mapping[str, int] | None = None) -> None:
        """Write ``tree.json`` (format, counts, info), the node columns and arrays, and the
        record arrays as ``.npy`` into ``folder`` (created if needed). No pickle. With the
        store's ``row_of``, each leaf's store row too (``leaf_rows.npy``)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "n_nodes": len(self.nodes),
            "n_records": int(self.record_nodes.size),
            "dim": self.dim,
            "info": self.info,
        }
        for name, column in self._texts.items():
            column.save(folder, name)
        arrays = {
            "level": self._level,
            "parents": self.parents,
            "child_ptr": self.child_ptr,
            "child_index": self.child_index,
            "depth": self.depth,
            "context_type": self._context_codes,
        }
        for name, array in arrays.items():
            save_npy(folder / f"{name}.npy", array)
        if row_of is not None:
            save_npy(folder / "leaf_rows.npy", self.leaf_rows(row_of))
        if self.record_vectors is not None:
            save_npy(folder / "record_nodes.npy", self.record_nodes)
            save_npy(folder / "record_levels.npy", self.record_levels)
            save_npy(folder / "record_vectors.npy", np.ascontiguousarray(self.record_vectors))
        (folder / "tree.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True, row_of: Mapping[str, int] | None = None) -> ContextTree:
        """Read a tree written by :meth:`save`; columns and arrays are memory-mapped when
        ``mmap``. With ``row_of`` (the store's index), the saved leaf rows are taken as the
        answer of ``leaf_rows(row_of)``."""
        folder = Path(folder)
        meta_path = folder / "tree.json"
        if not meta_path.is_file():
            raise TreeError(f"{folder} is not a saved ContextTree (missing tree.json)")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != _FORMAT or meta.get("version") != _FORMAT_VERSION:
            raise TreeError(
                f"{meta_path}: format {meta.get('format')!r} version {meta.get('version')!r} is not "
                f"{_FORMAT!r} version {_FORMAT_VERSION}; rebuild the store"
            )
        try:
            texts = {name: TextColumn.load(folder, name, mmap=mmap) for name in _TEXT_FIELDS}
            arrays = {name: load_npy(folder / f"{name}.npy", mmap=mmap) for name in _ARRAYS}
        except (OSError, ValueError) as error:
            raise TreeError(f"{folder}: unreadable tree ({error}); rebuild the store") from None
        if int(arrays["level"].shape[0]) != meta.get("n_nodes"):
            raise TreeError(
                f"{folder}: tree.json says {meta.get('n_nodes')} nodes, the columns hold {arrays['level'].shape[0]}"
            )
        tree = cls.__new__(cls)
        tree._set_structure(texts, arrays, meta.get("info"))
        record_args: list[Any] = [None, None, None]
        if meta.get("n_records"):
            vectors_path = folder / "record_vectors.npy"
            record_args = [
                np.load(folder / "record_nodes.npy", allow_pickle=False),
                np.load(folder / "record_levels.npy", allow_pickle=False),
                load_npy(vectors_path, mmap=mmap),
            ]
        tree._set_records(*record_args)
        if row_of is not None and (folder / "leaf_rows.npy").is_file():
            rows = load_npy(folder / "leaf_rows.npy", mmap=mmap)
            if rows.shape != (len(tree.nodes),):
                raise TreeError(
                    f"{folder}: leaf_rows.npy has shape {rows.shape}, expected ({len(tree.nodes)},)"
                )
            tree._leaf_rows = (row_of, rows)
        return tree


def _check_acyclic(parents: IntArray, uris: Sequence[str]) -> None:
    """Raise TreeError naming a cycle if following parent links ever returns to a node."""
    state = np.zeros(len(parents), dtype=np.int8)  # 0 unseen, 1 on the current walk, 2 known to reach a root
    for start in range(len(parents)):
        walk: list[int] = []
        node = start
        while node >= 0 and state[node] == 0:
            state[node] = 1
            walk.append(node)
            node = int(parents[node])
        if node >= 0 and state[node] == 1:
            cycle = [*walk[walk.index(node) :], node]
            raise TreeError("cycle in the context tree: " + " -> ".join(repr(uris[i]) for i in cycle))
        for visited in walk:
            state[visited] = 2
