"""The context tree artifact: OpenViking's virtual filesystem of context, and its settings.

A :class:`ContextTree` holds directories and leaves as :class:`~retrievers.types.ContextNode`
values. Leaves (level 2) are documents of the store; directories (level 0 or 1; the builders emit
0, and the retriever treats both alike) carry an L0 ``abstract`` and optionally an L1 overview in
``content``. Every URI lies under one of OpenViking's roots (:data:`CONTEXT_ROOTS`), which also
gives the node's context type (memory, resource, skill), and a child's URI extends its parent's.

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

:class:`HierarchyConfig` says how a tree is built (``store.hierarchy``); the builders live in
:mod:`retrievers.builders.hierarchy`. This module holds only what loading and searching need.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from retrievers.params import Params, param
from retrievers.store.columns import (
    RowIndex,
    RowSequence,
    TextColumn,
    decode_metadata,
    encode_metadata,
    save_npy,
)
from retrievers.types import ContextNode

__all__ = [
    "CONTEXT_ROOTS",
    "CONTEXT_TYPES",
    "ContextTree",
    "HierarchyConfig",
    "TreeError",
    "context_type_of",
    "uri_segment",
]

FloatMatrix = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]

#: OpenViking's roots and the context type of everything below them.
CONTEXT_ROOTS: dict[str, str] = {
    "viking://resources": "resource",
    "viking://user/memories": "memory",
    "viking://agent/memories": "memory",
    "viking://agent/skills": "skill",
}
CONTEXT_TYPES: tuple[str, ...] = ("memory", "resource", "skill")

_FORMAT = "viking_eval.retrievers.ContextTree"
_FORMAT_VERSION = 2  # 2: columns (1: nodes.jsonl)
_TEXT_FIELDS = ("uri", "abstract", "content", "doc_id", "metadata")
_ARRAYS = ("level", "parents", "child_ptr", "child_index", "depth", "context_type")
# Characters kept unescaped in a URI path segment (RFC 3986 pchar minus "/").
_SAFE_SEGMENT = "-_.~:@!$&'()*+,;="


class TreeError(ValueError):
    """A context tree (or its settings) that cannot be used; the message names the node or key."""


def context_type_of(uri: str) -> str:
    """``memory``, ``resource`` or ``skill``: the type of the OpenViking root ``uri`` lies under."""
    for root, kind in CONTEXT_ROOTS.items():
        if uri == root or uri.startswith(root + "/"):
            return kind
    raise TreeError(f"URI {uri!r} is not under an OpenViking root; allowed roots: {sorted(CONTEXT_ROOTS)}")


def uri_segment(value: object) -> str:
    """``value`` as one percent-escaped URI path segment (never empty)."""
    text = str(value)
    if not text:
        raise TreeError("a URI path segment cannot be empty")
    return quote(text, safe=_SAFE_SEGMENT)


@dataclass(frozen=True)
class HierarchyConfig(Params):
    """How the store's context tree is built (``store.hierarchy``; None = no tree).

    Common: ``builder`` (``kmeans`` | ``metadata_path``), ``root_uri`` (under an OpenViking root),
    ``directory_vector`` (``abstract``: embed the L0 text; ``centroid``: the normalised mean of
    the directory's leaf vectors), ``overview`` (also embed an L1 overview record), and the size
    of extractive texts: ``abstract_snippets``/``abstract_terms`` (L0) and
    ``overview_snippets``/``overview_terms`` (L1), ``snippet_chars`` (opening characters of a
    document used when it has no title).

    kmeans: ``branching_factor``, ``max_leaf_size``, ``seed``, ``kmeans_iterations``.

    metadata_path: ``path_keys`` (document metadata keys, outermost first; at least one),
    ``summaries_file`` (JSON lines in the dataset folder; a record holding every path key up to
    depth d describes the directory at depth d), ``abstract_template``/``overview_template``
    (``str.format`` templates over a summary record's fields).
    """

    SECTION = "store.hierarchy"

    builder: Literal["kmeans", "metadata_path"] = param("kmeans")
    root_uri: str = param("viking://resources", doc="an OpenViking root, without a trailing '/'")
    directory_vector: Literal["abstract", "centroid"] = param("abstract")
    overview: bool = param(True)
    abstract_snippets: int = param(3, low=0, high=100)
    abstract_terms: int = param(8, low=0, high=200)
    overview_snippets: int = param(10, low=0, high=1000)
    overview_terms: int = param(24, low=0, high=1000)
    snippet_chars: int = param(120, low=1, high=100_000)
    branching_factor: int = param(8, low=2, high=256)
    max_leaf_size: int = param(32, low=1, high=1_000_000)
    seed: int = param(0, low=0, high=2**32 - 1)
    kmeans_iterations: int = param(25, low=1, high=1000)
    path_keys: tuple[str, ...] = param((), non_empty=False, unique=True)
    summaries_file: str | None = param(None, non_empty=True)
    abstract_template: str | None = param(None, non_empty=True)
    overview_template: str | None = param(None, non_empty=True)

    def check(self) -> None:
        try:
            context_type_of(self.root_uri)
        except TreeError as error:
            raise self.fail("root_uri", f"must lie under an OpenViking root: {error}") from None
        if self.root_uri.endswith("/"):
            raise self.fail("root_uri", f"must not end with '/', got {self.root_uri!r}")
        if self.abstract_snippets + self.abstract_terms == 0:
            raise self.fail("abstract_snippets", "and abstract_terms cannot both be 0 (empty abstracts)")
        if any(not key for key in self.path_keys):
            raise self.fail("path_keys", f"must be non-empty strings, got {list(self.path_keys)}")
        if self.builder == "metadata_path" and not self.path_keys:
            raise self.fail("path_keys", "must name at least one metadata key for builder metadata_path")
        if self.builder == "kmeans" and (self.path_keys or self.summaries_file):
            raise self.fail("path_keys", "and summaries_file are for builder metadata_path, not kmeans")
        if self.summaries_file is not None and Path(self.summaries_file).is_absolute():
            raise self.fail(
                "summaries_file", f"must be relative to the dataset folder, got {self.summaries_file!r}"
            )
        if (self.abstract_template or self.overview_template) and self.summaries_file is None:
            raise self.fail("abstract_template", "and overview_template need store.hierarchy.summaries_file")

    def input_files(self, source_folder: Path | None) -> list[Path]:
        """Files besides the corpus that a build reads (their content belongs in cache keys)."""
        if self.summaries_file is None:
            return []
        if source_folder is None:
            raise TreeError(
                f"hierarchy.summaries_file={self.summaries_file!r} needs the dataset folder, but none was given"
            )
        return [Path(source_folder) / self.summaries_file]


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
        self.doc_ids: Sequence[str | None] = _DocIds(self._texts["doc_id"], self.is_leaf)
        #: ``memory`` / ``resource`` / ``skill`` of every node
        self.context_types: Sequence[str] = _Codes(arrays["context_type"], CONTEXT_TYPES)
        self._context_codes = arrays["context_type"]
        self.info: dict[str, Any] = dict(info or {})
        self._leaf_rows: tuple[Mapping[str, int], IntArray] | None = None

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
        mode: Literal["r"] | None = "r" if mmap else None
        try:
            texts = {name: TextColumn.load(folder, name, mmap=mmap) for name in _TEXT_FIELDS}
            arrays = {
                name: np.load(folder / f"{name}.npy", mmap_mode=mode, allow_pickle=False) for name in _ARRAYS
            }
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
                np.load(vectors_path, mmap_mode=mode, allow_pickle=False),
            ]
        tree._set_records(*record_args)
        if row_of is not None and (folder / "leaf_rows.npy").is_file():
            rows = np.load(folder / "leaf_rows.npy", mmap_mode=mode, allow_pickle=False)
            if rows.shape != (len(tree.nodes),):
                raise TreeError(
                    f"{folder}: leaf_rows.npy has shape {rows.shape}, expected ({len(tree.nodes)},)"
                )
            tree._leaf_rows = (row_of, rows)
        return tree


class NodeColumns(RowSequence[ContextNode]):
    """The nodes of a tree as columns: ``nodes[i]`` builds node ``i`` (metadata parsed then)."""

    _what = "node"

    def __init__(self, texts: Mapping[str, TextColumn], level: npt.NDArray[Any], parents: IntArray) -> None:
        self._texts = texts
        self._level = level
        self._parents = parents

    def __len__(self) -> int:
        return int(self._level.shape[0])

    def _row(self, i: int) -> ContextNode:
        texts = self._texts
        parent = int(self._parents[i])
        level = int(self._level[i])
        return ContextNode(
            uri=texts["uri"][i],
            level=level,
            parent_uri=None if parent < 0 else texts["uri"][parent],
            abstract=texts["abstract"][i],
            content=texts["content"][i],
            doc_id=texts["doc_id"][i] if level == 2 else None,
            metadata=decode_metadata(texts["metadata"][i]),
        )

    def __iter__(self) -> Iterator[ContextNode]:
        for i in range(len(self)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"NodeColumns({len(self)} nodes)"


class UriIndex(Mapping[str, int]):
    """URI -> node index: a binary search over the sorted URI column (UTF-8 byte order is
    code point order, the order nodes are sorted in)."""

    def __init__(self, uris: TextColumn) -> None:
        self._uris = uris

    def _find(self, key: object) -> int:
        if not isinstance(key, str):
            return -1
        data = key.encode("utf-8")
        lo, hi = 0, len(self._uris)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._uris.raw(mid) < data:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(self._uris) and self._uris.raw(lo) == data else -1

    def __getitem__(self, key: str) -> int:
        index = self._find(key)
        if index < 0:
            raise KeyError(key)
        return index

    def __contains__(self, key: object) -> bool:
        return self._find(key) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self._uris)

    def __len__(self) -> int:
        return len(self._uris)


class _DocIds(Sequence[str | None]):
    def __init__(self, column: TextColumn, is_leaf: npt.NDArray[np.bool_]) -> None:
        self._column = column
        self._is_leaf = is_leaf

    def __len__(self) -> int:
        return len(self._column)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._column[index] if self._is_leaf[index] else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


class _Codes(Sequence[str]):
    def __init__(self, codes: npt.NDArray[Any], names: Sequence[str]) -> None:
        self._codes = codes
        self._names = tuple(names)

    def __len__(self) -> int:
        return int(self._codes.shape[0])

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._names[code] for code in np.asarray(self._codes[index]).tolist()]
        return self._names[int(self._codes[index])]

    def __iter__(self) -> Iterator[str]:
        names = self._names
        return iter([names[code] for code in np.asarray(self._codes).tolist()])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


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
