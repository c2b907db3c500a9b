"""Context trees (OpenViking's virtual filesystem of context) and the builders that make them.

A :class:`ContextTree` holds directories and leaves as :class:`~retrievers.types.ContextNode`
values. Leaves (level 2) are documents of the store; directories (level 0 or 1; the builders emit
0, and the retriever treats both alike) carry an L0 ``abstract`` and optionally an L1 overview in
``content``. Every URI lies under one of OpenViking's roots (:data:`CONTEXT_ROOTS`), which also
gives the node's context type (memory, resource, skill), and a child's URI extends its parent's.

Vectors. Leaves are scored with the store's document embeddings; directories have their own
*records*, as in OpenViking's vector index: a level-0 record (the abstract embedded, or the centroid
of the directory's leaf vectors) and, when the directory has an overview, a level-1 record (the
overview embedded). Records are one float32 matrix, saved as ``.npy`` and memory-mapped on load.

Builders (chosen by :class:`HierarchyConfig.builder`):

* ``kmeans``: recursive spherical k-means over the document embeddings (flat corpora such as
  SciFact). A set of at most ``max_leaf_size`` documents becomes one directory of leaves; a larger
  set is split into ``branching_factor`` clusters, recursively. Abstracts are extractive: the
  titles (or opening words) of the directory's most central documents and its top TF-IDF terms;
  nothing is generated.
* ``metadata_path``: directories from metadata values, e.g. LoCoMo's conversation -> session
  (``viking://user/memories/<conversation>/<session>/<turn>``). A JSON-lines ``summaries_file``
  in the dataset folder (LoCoMo's ``sessions.jsonl``) can give a directory its abstract and
  overview through ``str.format`` templates over the record's fields (the session's date and its
  summary); other directories get the extractive abstract.

Both are deterministic: the same documents, vectors and settings give the same tree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from retrievers.types import ContextNode, Document, Embedder

__all__ = [
    "CONTEXT_ROOTS",
    "CONTEXT_TYPES",
    "ContextTree",
    "HierarchyConfig",
    "TreeError",
    "build_tree",
    "context_type_of",
    "kmeans_nodes",
    "metadata_path_nodes",
    "spherical_kmeans",
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

BUILDERS = ("kmeans", "metadata_path")
DIRECTORY_VECTORS = ("abstract", "centroid")

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


def _segment(value: object) -> str:
    text = str(value)
    if not text:
        raise TreeError("a URI path segment cannot be empty")
    return quote(text, safe=_SAFE_SEGMENT)


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class HierarchyConfig:
    """How the store's context tree is built (``store.hierarchy``; None = no tree).

    Common: ``builder`` (``kmeans`` | ``metadata_path``), ``root_uri`` (under an OpenViking root),
    ``directory_vector`` (``abstract``: embed the L0 text; ``centroid``: the normalised mean of
    the directory's leaf vectors), ``overview`` (also embed an L1 overview record), and the size
    of extractive texts: ``abstract_snippets``/``abstract_terms`` (L0) and
    ``overview_snippets``/``overview_terms`` (L1), ``snippet_chars`` (opening characters of a
    document used when it has no title).

    kmeans: ``branching_factor`` in [2, 256], ``max_leaf_size`` in [1, 1000000], ``seed``,
    ``kmeans_iterations`` in [1, 1000].

    metadata_path: ``path_keys`` (document metadata keys, outermost first; at least one),
    ``summaries_file`` (JSON lines in the dataset folder; a record holding every path key up to
    depth d describes the directory at depth d), ``abstract_template``/``overview_template``
    (``str.format`` templates over a summary record's fields).
    """

    builder: str = "kmeans"
    root_uri: str = "viking://resources"
    directory_vector: str = "abstract"
    overview: bool = True
    abstract_snippets: int = 3
    abstract_terms: int = 8
    overview_snippets: int = 10
    overview_terms: int = 24
    snippet_chars: int = 120
    branching_factor: int = 8
    max_leaf_size: int = 32
    seed: int = 0
    kmeans_iterations: int = 25
    path_keys: tuple[str, ...] = ()
    summaries_file: str | None = None
    abstract_template: str | None = None
    overview_template: str | None = None

    def __post_init__(self) -> None:
        if self.builder not in BUILDERS:
            raise TreeError(f"hierarchy.builder must be one of {list(BUILDERS)}, got {self.builder!r}")
        if not isinstance(self.root_uri, str):
            raise TreeError(f"hierarchy.root_uri must be a string, got {self.root_uri!r}")
        context_type_of(self.root_uri)
        if self.root_uri.endswith("/"):
            raise TreeError(f"hierarchy.root_uri must not end with '/', got {self.root_uri!r}")
        if self.directory_vector not in DIRECTORY_VECTORS:
            raise TreeError(
                f"hierarchy.directory_vector must be one of {list(DIRECTORY_VECTORS)}, got {self.directory_vector!r}"
            )
        if not isinstance(self.overview, bool):
            raise TreeError(f"hierarchy.overview must be true or false, got {self.overview!r}")
        ranges = {
            "abstract_snippets": (0, 100),
            "abstract_terms": (0, 200),
            "overview_snippets": (0, 1000),
            "overview_terms": (0, 1000),
            "snippet_chars": (1, 100_000),
            "branching_factor": (2, 256),
            "max_leaf_size": (1, 1_000_000),
            "seed": (0, 2**32 - 1),
            "kmeans_iterations": (1, 1000),
        }
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            if not _is_int(value) or not low <= value <= high:
                raise TreeError(f"hierarchy.{name} must be an integer in [{low}, {high}], got {value!r}")
        if self.abstract_snippets + self.abstract_terms == 0:
            raise TreeError(
                "hierarchy.abstract_snippets and abstract_terms cannot both be 0 (empty abstracts)"
            )
        keys = self.path_keys
        if isinstance(keys, str) or not isinstance(keys, Sequence):
            raise TreeError(f"hierarchy.path_keys must be a list of metadata keys, got {keys!r}")
        object.__setattr__(self, "path_keys", tuple(keys))
        if any(not isinstance(key, str) or not key for key in self.path_keys):
            raise TreeError(f"hierarchy.path_keys must be non-empty strings, got {list(self.path_keys)}")
        if len(set(self.path_keys)) != len(self.path_keys):
            raise TreeError(f"hierarchy.path_keys has duplicates: {list(self.path_keys)}")
        if self.builder == "metadata_path" and not self.path_keys:
            raise TreeError(
                "hierarchy.path_keys must name at least one metadata key for builder metadata_path"
            )
        if self.builder == "kmeans" and (self.path_keys or self.summaries_file):
            raise TreeError(
                "hierarchy.path_keys and summaries_file are for builder metadata_path, not kmeans"
            )
        for name in ("summaries_file", "abstract_template", "overview_template"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise TreeError(f"hierarchy.{name} must be a non-empty string or null, got {value!r}")
        if self.summaries_file is not None and Path(self.summaries_file).is_absolute():
            raise TreeError(
                f"hierarchy.summaries_file must be relative to the dataset folder, got {self.summaries_file!r}"
            )
        if (self.abstract_template or self.overview_template) and self.summaries_file is None:
            raise TreeError("hierarchy.abstract_template/overview_template need hierarchy.summaries_file")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> HierarchyConfig:
        """Settings from a plain mapping; unknown keys are an error listing the allowed ones."""
        if not isinstance(values, Mapping):
            raise TreeError(f"store.hierarchy must be a mapping or null, got {values!r}")
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise TreeError(f"unknown store.hierarchy key(s) {unknown}; allowed: {allowed}")
        items = dict(values)
        if isinstance(items.get("path_keys"), list):
            items["path_keys"] = tuple(items["path_keys"])
        return cls(**items)

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["path_keys"] = list(self.path_keys)
        return values

    def input_files(self, source_folder: Path | None) -> list[Path]:
        """Files besides the corpus that a build reads (their content belongs in cache keys)."""
        if self.summaries_file is None:
            return []
        if source_folder is None:
            raise TreeError(
                f"hierarchy.summaries_file={self.summaries_file!r} needs the dataset folder, but none was given"
            )
        return [Path(source_folder) / self.summaries_file]


# --------------------------------------------------------------------------------------------
# The tree
# --------------------------------------------------------------------------------------------


class ContextTree:
    """A validated context tree with its directory vectors.

    Nodes are kept sorted by URI (so node index order is URI order and a parent's index is
    smaller than its children's). Errors found at construction: duplicate URIs, a ``parent_uri``
    naming no node (orphan) or naming a leaf, cycles, a directory with no children, a leaf
    without ``doc_id`` (or a directory with one), a document in two leaves, a URI outside the
    OpenViking roots, a child URI that does not extend its parent's.

    Directory records: ``record_nodes[i]`` is the node of record ``i``, ``record_levels[i]`` its
    level (0 abstract/centroid, 1 overview), ``record_vectors[i]`` its vector. A tree built from
    nodes alone has no records; :func:`embed_directories` adds them.
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


# --------------------------------------------------------------------------------------------
# Extractive abstracts
# --------------------------------------------------------------------------------------------


def _snippet(doc: Document, chars: int) -> str:
    """A document's title, else its opening ``chars`` characters (cut at a word boundary)."""
    if doc.title.strip():
        return " ".join(doc.title.split())
    text = " ".join(doc.text.split())
    if len(text) <= chars:
        return text
    cut = text[:chars]
    space = cut.rfind(" ")
    return (cut[:space] if space > chars // 2 else cut) + "..."


class _Extractor:
    """Extractive directory texts: central documents' snippets and top TF-IDF terms."""

    def __init__(self, documents: Sequence[Document], vectors: FloatMatrix, config: HierarchyConfig) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.documents = documents
        self.vectors = vectors
        self.config = config
        self.terms: list[str] = []
        self.matrix: Any = None
        texts = [doc.full_text for doc in documents]
        if max(config.abstract_terms, config.overview_terms if config.overview else 0) > 0:
            vectorizer = TfidfVectorizer(
                sublinear_tf=True,
                stop_words="english",
                token_pattern=r"(?u)\b[^\W\d_]{3,}\b",
                dtype=np.float64,
            )
            try:
                self.matrix = vectorizer.fit_transform(texts).tocsr()
                self.terms = [str(term) for term in vectorizer.get_feature_names_out()]
            except ValueError:  # no usable term anywhere: abstracts fall back to snippets only
                self.matrix = None

    def central(self, members: Sequence[int], count: int) -> list[int]:
        """Up to ``count`` members closest to their normalised mean vector (ties: lower position)."""
        if count <= 0 or not members:
            return []
        rows = np.asarray(members, dtype=np.int64)
        block = self.vectors[rows].astype(np.float64)
        centre = block.mean(axis=0)
        norm = float(np.linalg.norm(centre))
        if norm > 0:
            centre /= norm
        # Vectors are float32: documents equally close to the centre differ only by rounding noise,
        # so similarities are compared at 1e-6 and such ties go to the lower position, as documented.
        similarity = np.round(block @ centre, 6)
        order = np.lexsort((rows, -similarity))[:count]
        return [int(rows[i]) for i in order]

    def top_terms(self, members: Sequence[int], count: int) -> list[str]:
        if count <= 0 or self.matrix is None or not members:
            return []
        weights = np.asarray(self.matrix[np.asarray(members, dtype=np.int64)].sum(axis=0)).ravel()
        positive = np.flatnonzero(weights > 0)
        if positive.size == 0:
            return []
        order = positive[np.lexsort((positive, -weights[positive]))][:count]
        return [self.terms[int(i)] for i in order]

    def text(self, members: Sequence[int], snippets: int, terms: int) -> str:
        parts: list[str] = []
        chosen = [
            _snippet(self.documents[i], self.config.snippet_chars) for i in self.central(members, snippets)
        ]
        chosen = [text for text in chosen if text]
        if chosen:
            parts.append("; ".join(chosen) + ".")
        words = self.top_terms(members, terms)
        if words:
            parts.append("Key terms: " + ", ".join(words) + ".")
        return " ".join(parts)

    def abstract(self, members: Sequence[int]) -> str:
        return self.text(members, self.config.abstract_snippets, self.config.abstract_terms)

    def overview(self, members: Sequence[int]) -> str:
        if not self.config.overview:
            return ""
        return self.text(members, self.config.overview_snippets, self.config.overview_terms)


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


def spherical_kmeans(vectors: npt.ArrayLike, k: int, *, seed: int, iterations: int = 25) -> IntArray:
    """Cluster unit vectors by cosine similarity; returns a label in ``[0, k)`` per row.

    k-means++ seeding (Arthur & Vassilvitskii, 2007) with distance ``1 - cos``, then Lloyd
    iterations on the sphere (Dhillon & Modha, 2001: centres are normalised member means) until
    no assignment changes or ``iterations`` rounds. Computed in float64 with a seeded
    ``numpy.random.Generator``: the same input and seed give the same labels. Ties in
    assignment go to the lower centre index; an empty cluster keeps its previous centre.
    """
    data = np.asarray(vectors, dtype=np.float64)
    m = data.shape[0]
    if not _is_int(k) or not 1 <= k <= m:
        raise ValueError(f"k must be an integer in [1, {m}], got {k!r}")
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(m))]
    distance = np.clip(1.0 - data @ data[chosen[0]], 0.0, None)
    for _ in range(1, k):
        total = float(distance.sum())
        if total <= 0.0:  # every point coincides with a centre: take unused points in order
            unused = np.setdiff1d(np.arange(m), np.asarray(chosen))
            chosen.append(int(unused[0]))
        else:
            chosen.append(int(rng.choice(m, p=distance / total)))
        distance = np.minimum(distance, np.clip(1.0 - data @ data[chosen[-1]], 0.0, None))
    centres = data[np.asarray(chosen)].copy()
    labels = np.full(m, -1, dtype=np.int64)
    for _ in range(iterations):
        new_labels = np.argmax(data @ centres.T, axis=1).astype(np.int64)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
        for j in range(k):
            members = data[labels == j]
            if members.shape[0] == 0:
                continue
            centre = members.sum(axis=0)
            norm = float(np.linalg.norm(centre))
            centres[j] = centre / norm if norm > 0 else centre
    return labels


def kmeans_nodes(
    documents: Sequence[Document], vectors: npt.ArrayLike, config: HierarchyConfig
) -> list[ContextNode]:
    """Recursive spherical k-means tree over ``documents`` (row i of ``vectors`` is document i).

    A set of at most ``max_leaf_size`` documents becomes one directory holding them as leaves;
    a larger set is split into ``min(branching_factor, ceil(size / max_leaf_size))`` clusters,
    each a subdirectory, recursively (clusters ordered by their smallest document id, named
    ``c0, c1, ...``). When k-means cannot split a set (identical vectors), it is cut into equal
    runs in document order instead, so the recursion always ends.
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(documents):
        raise TreeError(f"vectors shape {matrix.shape} does not match {len(documents)} documents")
    if not documents:
        raise TreeError("cannot build a tree from an empty corpus")
    order = sorted(range(len(documents)), key=lambda i: documents[i].id)
    extractor = _Extractor(documents, matrix, config)
    nodes: list[ContextNode] = []

    def directory(uri: str, parent: str | None, members: list[int], path: tuple[int, ...]) -> None:
        nodes.append(
            ContextNode(
                uri=uri,
                level=0,
                parent_uri=parent,
                abstract=extractor.abstract(members),
                content=extractor.overview(members),
                metadata={"n_documents": len(members), "depth": len(path)},
            )
        )
        if len(members) <= config.max_leaf_size:
            for i in members:
                doc = documents[i]
                nodes.append(
                    ContextNode(
                        uri=f"{uri}/{_segment(doc.id)}",
                        level=2,
                        parent_uri=uri,
                        abstract=_snippet(doc, config.snippet_chars),
                        doc_id=doc.id,
                    )
                )
            return
        k = min(config.branching_factor, math.ceil(len(members) / config.max_leaf_size))
        sequence = np.random.SeedSequence(entropy=config.seed, spawn_key=path)
        labels = spherical_kmeans(
            matrix[np.asarray(members)],
            k,
            seed=int(sequence.generate_state(1)[0]),
            iterations=config.kmeans_iterations,
        )
        groups: dict[int, list[int]] = {}
        for member, label in zip(members, labels.tolist(), strict=True):
            groups.setdefault(label, []).append(member)
        clusters = list(groups.values())
        if len(clusters) < 2:
            size = math.ceil(len(members) / k)
            clusters = [members[start : start + size] for start in range(0, len(members), size)]
        clusters.sort(key=lambda cluster: documents[cluster[0]].id)  # members are in id order
        for index, cluster in enumerate(clusters):
            directory(f"{uri}/c{index}", uri, cluster, (*path, index))

    directory(config.root_uri, None, order, ())
    return nodes


def _read_summaries(path: Path, keys: tuple[str, ...]) -> dict[tuple[str, ...], tuple[int, dict[str, Any]]]:
    """Summary records by the path they describe: the values of the longest prefix of ``keys``
    that the record holds (as strings). Returns ``{path: (line number, record)}``."""
    if not path.is_file():
        raise TreeError(f"hierarchy.summaries_file {path} does not exist")
    found: dict[tuple[str, ...], tuple[int, dict[str, Any]]] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as error:
                raise TreeError(f"{path}:{number}: not valid JSON: {error}") from None
            if not isinstance(record, dict):
                raise TreeError(f"{path}:{number}: a summary record must be a JSON object")
            prefix: list[str] = []
            for key in keys:
                if key not in record:
                    break
                prefix.append(str(record[key]))
            if not prefix:
                raise TreeError(f"{path}:{number}: the record holds none of the path keys {list(keys)}")
            described = tuple(prefix)
            if described in found:
                raise TreeError(
                    f"{path}:{number}: describes the same directory {list(described)} as line {found[described][0]}"
                )
            found[described] = (number, record)
    return found


def _fill(template: str, record: Mapping[str, Any], where: str) -> str:
    try:
        return " ".join(template.format_map(dict(record)).split())
    except (KeyError, IndexError, ValueError) as error:
        raise TreeError(
            f"{where}: template {template!r} cannot be filled from the record: {error!r}"
        ) from None


def metadata_path_nodes(
    documents: Sequence[Document],
    vectors: npt.ArrayLike,
    config: HierarchyConfig,
    *,
    source_folder: Path | None = None,
) -> list[ContextNode]:
    """Directories from the values of ``config.path_keys`` in each document's metadata.

    ``root_uri/<v1>/<v2>/.../<doc id>`` (values percent-escaped as URI segments). A document
    missing a path key is an error. With ``summaries_file``, a directory described by a record
    gets ``abstract_template`` (and ``overview_template``) filled from it; every other abstract
    and overview is extractive.
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(documents):
        raise TreeError(f"vectors shape {matrix.shape} does not match {len(documents)} documents")
    if not documents:
        raise TreeError("cannot build a tree from an empty corpus")
    keys = config.path_keys
    members: dict[tuple[str, ...], list[int]] = {(): []}
    for i in sorted(range(len(documents)), key=lambda i: documents[i].id):
        doc = documents[i]
        values: list[str] = []
        for key in keys:
            if key not in doc.metadata:
                raise TreeError(
                    f"document {doc.id!r} has no metadata key {key!r} (hierarchy.path_keys={list(keys)}); "
                    f"it has {sorted(doc.metadata)}"
                )
            values.append(str(doc.metadata[key]))
        for depth in range(len(values) + 1):
            members.setdefault(tuple(values[:depth]), []).append(i)
    summaries: dict[tuple[str, ...], tuple[int, dict[str, Any]]] = {}
    summary_path: Path | None = None
    if config.summaries_file is not None:
        summary_path = config.input_files(source_folder)[0]
        summaries = _read_summaries(summary_path, keys)
    extractor = _Extractor(documents, matrix, config)
    nodes: list[ContextNode] = []
    used = 0
    for path in sorted(members):
        uri = "/".join([config.root_uri, *(_segment(value) for value in path)])
        parent = None if not path else "/".join([config.root_uri, *(_segment(v) for v in path[:-1])])
        abstract = extractor.abstract(members[path])
        overview = extractor.overview(members[path])
        metadata: dict[str, Any] = {"n_documents": len(members[path]), "depth": len(path)}
        if path:
            metadata[keys[len(path) - 1]] = path[-1]
        if path in summaries and summary_path is not None:
            number, record = summaries[path]
            where = f"{summary_path}:{number}"
            used += 1
            if config.abstract_template is not None:
                abstract = _fill(config.abstract_template, record, where)
            if config.overview_template is not None:
                overview = _fill(config.overview_template, record, where) if config.overview else ""
            metadata["summary_line"] = number
        nodes.append(
            ContextNode(
                uri=uri, level=0, parent_uri=parent, abstract=abstract, content=overview, metadata=metadata
            )
        )
        if len(path) == len(keys):
            for i in members[path]:
                doc = documents[i]
                nodes.append(
                    ContextNode(
                        uri=f"{uri}/{_segment(doc.id)}",
                        level=2,
                        parent_uri=uri,
                        abstract=_snippet(doc, config.snippet_chars),
                        doc_id=doc.id,
                    )
                )
    if summary_path is not None and used == 0:
        raise TreeError(
            f"no record of {summary_path} matches a directory (path keys {list(keys)}); check the file and keys"
        )
    return nodes


def embed_directories(
    nodes: Sequence[ContextNode],
    embedder: Embedder,
    doc_vectors: npt.ArrayLike,
    row_of: Mapping[str, int],
    *,
    directory_vector: str = "abstract",
    info: Mapping[str, Any] | None = None,
) -> ContextTree:
    """A :class:`ContextTree` of ``nodes`` with directory records.

    Level 0: the abstract embedded (``directory_vector="abstract"``; an empty abstract is an
    error) or the normalised mean of the directory's leaf vectors (``"centroid"``; a directory
    without leaves below it, or whose mean is zero, gets its abstract embedded instead). Level 1:
    the overview (``content``) embedded, for directories that have one. All texts go to the
    embedder in one call, as documents.
    """
    if directory_vector not in DIRECTORY_VECTORS:
        raise TreeError(
            f"directory_vector must be one of {list(DIRECTORY_VECTORS)}, got {directory_vector!r}"
        )
    tree = ContextTree(nodes, info=info)
    matrix = np.asarray(doc_vectors)
    rows = tree.leaf_rows(row_of)
    below = tree.subtree_leaves() if directory_vector == "centroid" else []
    record_nodes: list[int] = []
    record_levels: list[int] = []
    texts: list[str] = []
    centroids: dict[int, FloatMatrix] = {}
    for i, node in enumerate(tree.nodes):
        if tree.is_leaf[i]:
            continue
        if directory_vector == "centroid" and below[i]:
            centre = matrix[rows[np.asarray(below[i])]].astype(np.float64).sum(axis=0)
            norm = float(np.linalg.norm(centre))
            if norm > 0:
                centroids[len(record_nodes)] = (centre / norm).astype(np.float32)
                record_nodes.append(i)
                record_levels.append(0)
                continue
        if not node.abstract.strip():
            raise TreeError(f"directory {node.uri!r} has an empty abstract; it cannot be embedded")
        record_nodes.append(i)
        record_levels.append(0)
        texts.append(node.abstract)
    for i, node in enumerate(tree.nodes):
        if not tree.is_leaf[i] and node.content.strip():
            record_nodes.append(i)
            record_levels.append(1)
            texts.append(node.content)
    dim = matrix.shape[1]
    encoded = (
        np.asarray(embedder.encode(texts, kind="document"), dtype=np.float32)
        if texts
        else np.zeros((0, dim), dtype=np.float32)
    )
    if encoded.shape != (len(texts), dim):
        raise TreeError(f"embedder returned shape {encoded.shape} for {len(texts)} texts; expected dim {dim}")
    vectors = np.empty((len(record_nodes), dim), dtype=np.float32)
    next_text = 0
    for position in range(len(record_nodes)):
        if position in centroids:
            vectors[position] = centroids[position]
        else:
            vectors[position] = encoded[next_text]
            next_text += 1
    if not np.isfinite(vectors).all():
        raise TreeError("directory vectors contain NaN or infinite values")
    return ContextTree(
        tree.nodes,
        record_nodes=np.asarray(record_nodes, dtype=np.int64),
        record_levels=np.asarray(record_levels, dtype=np.int64),
        record_vectors=vectors,
        info=info,
    )


def build_tree(
    documents: Sequence[Document],
    doc_vectors: npt.ArrayLike,
    embedder: Embedder,
    config: HierarchyConfig,
    *,
    source_folder: Path | None = None,
) -> ContextTree:
    """Build the tree ``config`` asks for over ``documents`` (row i of ``doc_vectors`` is
    document i, as in the store) and embed its directories."""
    if config.builder == "kmeans":
        nodes = kmeans_nodes(documents, doc_vectors, config)
    else:
        nodes = metadata_path_nodes(documents, doc_vectors, config, source_folder=source_folder)
    row_of = {doc.id: row for row, doc in enumerate(documents)}
    info = {
        "builder": config.builder,
        "n_nodes": len(nodes),
        "n_directories": sum(1 for node in nodes if node.level != 2),
        "max_depth": max(int(node.metadata.get("depth", 0)) for node in nodes if node.level != 2),
    }
    return embed_directories(
        nodes, embedder, doc_vectors, row_of, directory_vector=config.directory_vector, info=info
    )
