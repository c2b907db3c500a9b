"""The context tree artifact: OpenViking's virtual filesystem of context, and its settings.

A :class:`ContextTree` holds directories and leaves as :class:`~retrievers.types.ContextNode`
values. Leaves (level 2) are documents of the store; directories (level 0 or 1; the builders emit
0, and the retriever treats both alike) carry an L0 ``abstract`` and optionally an L1 overview in
``content``. Every URI lies under one of OpenViking's roots (:data:`CONTEXT_ROOTS`), which also
gives the node's context type (memory, resource, skill), and a child's URI extends its parent's.

Vectors. Leaves are scored with the store's document embeddings; directories have their own
*records*, as in OpenViking's vector index: a level-0 record (the abstract embedded, or the centroid
of the directory's leaf vectors) and, when the directory has an overview, a level-1 record (the
overview embedded). Records are one float32 matrix, saved as ``.npy`` and memory-mapped on load.

:class:`HierarchyConfig` says how a tree is built (``store.hierarchy``); the builders live in
:mod:`retrievers.build.hierarchy`. This module holds only what loading and searching need.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from retrievers.params import Params, param
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
_FORMAT_VERSION = 1
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
    nodes alone has no records; :func:`retrievers.build.hierarchy.embed_directories` adds them.
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
        ordered = sorted(nodes, key=lambda node: node.uri)
        if not ordered:
            raise TreeError("a context tree needs at least one node")
        self.nodes: list[ContextNode] = ordered
        self.uris: list[str] = [node.uri for node in ordered]
        self.index_of: dict[str, int] = {}
        for i, node in enumerate(ordered):
            if not isinstance(node, ContextNode):
                raise TreeError(f"tree nodes must be ContextNode values, got {type(node).__name__}")
            if node.uri in self.index_of:
                raise TreeError(f"duplicate node URI {node.uri!r}")
            self.index_of[node.uri] = i
        n = len(ordered)
        self.is_leaf = np.fromiter((node.level == 2 for node in ordered), dtype=bool, count=n)
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
                parent = self.index_of.get(node.parent_uri)
                if parent is None:
                    raise TreeError(
                        f"orphan node {node.uri!r}: its parent_uri {node.parent_uri!r} is not a node of the tree"
                    )
                if ordered[parent].level == 2:
                    raise TreeError(
                        f"node {node.uri!r} has leaf {node.parent_uri!r} as parent; leaves have no children"
                    )
                parents[i] = parent
        _check_acyclic(parents, self.uris)
        for i, node in enumerate(ordered):
            context_type_of(node.uri)
            if parents[i] >= 0 and not node.uri.startswith(self.uris[parents[i]] + "/"):
                raise TreeError(
                    f"node {node.uri!r} does not extend its parent's URI {self.uris[parents[i]]!r} "
                    "(child URIs must be <parent URI>/<name>)"
                )
        self.parents: IntArray = parents
        counts = np.bincount(parents[parents >= 0], minlength=n)
        empty = np.flatnonzero((counts == 0) & ~self.is_leaf)
        if empty.size:
            raise TreeError(
                f"directory {self.uris[int(empty[0])]!r} has no children"
                + (f" (and {empty.size - 1} more)" if empty.size > 1 else "")
                + "; every directory needs at least one child"
            )
        # Children in CSR form, each list in node (URI) order.
        order = np.argsort(parents, kind="stable")
        order = order[parents[order] >= 0]
        self.child_ptr: IntArray = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.child_index: IntArray = order.astype(np.int64)
        self.roots: IntArray = np.flatnonzero(parents < 0).astype(np.int64)
        self.doc_ids: list[str | None] = [node.doc_id for node in ordered]
        self.context_types: list[str] = [context_type_of(uri) for uri in self.uris]
        depth = np.zeros(n, dtype=np.int64)
        for i in range(n):  # parents precede children in URI order
            depth[i] = 0 if parents[i] < 0 else depth[parents[i]] + 1
        self.depth: IntArray = depth
        self.info: dict[str, Any] = dict(info or {})
        self._set_records(record_nodes, record_levels, record_vectors)

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
        """Store row of every leaf (-1 for directories); a leaf naming no document is an error."""
        rows = np.full(len(self.nodes), -1, dtype=np.int64)
        for i, doc_id in enumerate(self.doc_ids):
            if doc_id is None:
                continue
            row = row_of.get(doc_id)
            if row is None:
                raise TreeError(f"leaf {self.uris[i]!r} names document {doc_id!r}, which is not in the store")
            rows[i] = row
        return rows

    # -- persistence ---------------------------------------------------------------------------

    def save(self, folder: Path) -> None:
        """Write ``tree.json`` (format, counts, info), ``nodes.jsonl`` and the record arrays as
        ``.npy`` into ``folder`` (created if needed). No pickle."""
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
        (folder / "tree.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        with open(folder / "nodes.jsonl", "w", encoding="utf-8") as handle:
            for node in self.nodes:
                record = {
                    "uri": node.uri,
                    "level": node.level,
                    "parent_uri": node.parent_uri,
                    "abstract": node.abstract,
                    "content": node.content,
                    "doc_id": node.doc_id,
                    "metadata": dict(node.metadata),
                }
                handle.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        if self.record_vectors is not None:
            np.save(folder / "record_nodes.npy", self.record_nodes, allow_pickle=False)
            np.save(folder / "record_levels.npy", self.record_levels, allow_pickle=False)
            np.save(
                folder / "record_vectors.npy", np.ascontiguousarray(self.record_vectors), allow_pickle=False
            )

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> ContextTree:
        """Read a tree written by :meth:`save`; record vectors are memory-mapped when ``mmap``."""
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
        nodes = []
        with open(folder / "nodes.jsonl", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    record = json.loads(line)
                    nodes.append(
                        ContextNode(
                            uri=record["uri"],
                            level=record["level"],
                            parent_uri=record["parent_uri"],
                            abstract=record["abstract"],
                            content=record["content"],
                            doc_id=record["doc_id"],
                            metadata=record["metadata"],
                        )
                    )
                except (ValueError, KeyError, TypeError) as error:
                    raise TreeError(f"{folder / 'nodes.jsonl'}:{number}: bad node record: {error}") from None
        if len(nodes) != meta.get("n_nodes"):
            raise TreeError(
                f"{folder}: tree.json says {meta.get('n_nodes')} nodes, nodes.jsonl has {len(nodes)}"
            )
        arrays: dict[str, Any] = {}
        if meta.get("n_records"):
            vectors_path = folder / "record_vectors.npy"
            arrays = {
                "record_nodes": np.load(folder / "record_nodes.npy", allow_pickle=False),
                "record_levels": np.load(folder / "record_levels.npy", allow_pickle=False),
                "record_vectors": (
                    np.load(vectors_path, mmap_mode="r", allow_pickle=False)
                    if mmap
                    else np.load(vectors_path, allow_pickle=False)
                ),
            }
        return cls(nodes, info=meta.get("info"), **arrays)


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
