"""Document edges: typed, weighted links between store rows, and the builders that make them.

An :class:`EdgeSet` holds directed edges in CSR form (compressed sparse rows): the edges leaving
row ``i`` are positions ``indptr[i]:indptr[i+1]`` of the arrays ``dst`` (target row), ``weight``
(float32 in [0, 1]) and ``relation`` (an index into ``relation_names``), sorted by (target row,
relation). A position is the edge's id and its *storage order*. Four ``.npy`` arrays plus a JSON
file, loaded with ``mmap``: a million edges cost ~20 MB and no Python objects. Incoming edges
(for bidirectional traversal) are derived when first asked for.

Builders (any combination, from :class:`EdgeConfig`, run once when the store is built):

- ``similar_to``: each document's ``k`` nearest neighbours by cosine of the store embeddings,
  kept when the cosine is >= ``min_sim`` (weight = cosine); ``same_keys`` limits neighbours to
  documents that agree on those metadata keys (LoCoMo: the same conversation). Exact search,
  ``O(n^2 / groups)`` dot products in blocks.
- ``sequence``: consecutive documents within a group (``group_keys``, e.g. LoCoMo's conversation
  and session), in ``order_key`` order (e.g. ``turn_index``; ties and a missing key: doc id order).
- ``references``: links given by the data: metadata ``fields`` naming other document ids, as a
  single id, a list of ids, or a list of lists whose ``id_index``-th element is the id (CISI's
  ``xrefs`` entries are ``[other_doc, count, this_doc]``).
- ``mentions``: documents sharing rare terms: each document's ``terms_per_doc`` top TF-IDF terms
  (the BM25 tokenizer's stemmed terms); a term among the top terms of more than ``max_fanout``
  documents links none (its fan-out is capped); weight = shared terms / ``terms_per_doc``.

Bad links are dropped and counted, never guessed: ids that name no document, links from a document
to itself, and repeats of an (src, dst, relation) triple (the largest weight is kept). The counts,
with a few examples, are in :attr:`EdgeSet.report` (saved with the arrays, logged at build).
Negative, non-finite or >1 weights are errors.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from retrievers.index import tokenize, top_k_rows
from retrievers.llm import ChatClient, LLMError, parse_json_content
from retrievers.types import Document, Edge

__all__ = [
    "EDGE_RELATIONS",
    "EdgeConfig",
    "EdgeSet",
    "LLMEdgeConfig",
    "MentionEdgeConfig",
    "ReferenceEdgeConfig",
    "SequenceEdgeConfig",
    "SimilarityEdgeConfig",
    "build_edges",
]

log = logging.getLogger(__name__)

#: relation names the builders produce (an EdgeSet accepts any non-empty name)
EDGE_RELATIONS = ("similar_to", "sequence", "references", "mentions", "part_of")
#: the relations an LLM may name (oasis's eight relation types) and what they mean, as the prompt says
LLM_RELATIONS = {
    "references": "A cites or mentions content of B",
    "elaborates": "A gives more detail on B's topic",
    "depends_on": "A assumes knowledge from B",
    "contradicts": "A conflicts with B",
    "part_of": "A is a component or subset of B",
    "similar_to": "A and B cover overlapping topics",
    "sequence": "A follows B in a logical order",
    "caused_by": "A is a consequence of B",
}
EDGES_FORMAT = 1
_MAX_EXAMPLES = 5
_SIMILARITY_BLOCK = 1024

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


def _is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _is_number(value: object) -> TypeGuard[int | float | np.integer[Any] | np.floating[Any]]:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def _check_unit(value: object, name: str) -> None:
    if not _is_number(value) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def _check_range(value: object, name: str, low: int, high: int) -> None:
    if not _is_int(value) or not low <= int(value) <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


def _keys(value: object, name: str, *, allow_empty: bool = True) -> tuple[str, ...]:
    """A list of metadata keys as a tuple (a bare string is refused: it is almost always a typo)."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a list of metadata keys, got {value!r}")
    keys = tuple(value)
    if any(not isinstance(key, str) or not key for key in keys):
        raise ValueError(f"{name} must be a list of non-empty strings, got {list(keys)}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"{name} has repeats: {list(keys)}")
    if not keys and not allow_empty:
        raise ValueError(f"{name} must name at least one metadata key")
    return keys


def _from_mapping(cls: type, values: object, where: str) -> Any:
    if not isinstance(values, Mapping):
        raise ValueError(f"{where} must be a mapping or null, got {values!r}")
    allowed = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ValueError(f"unknown {where} key(s) {unknown}; allowed: {allowed}")
    return cls(**dict(values))


@dataclass(frozen=True)
class SimilarityEdgeConfig:
    """``similar_to`` edges: ``k`` in [1, 1000] nearest neighbours with cosine >= ``min_sim`` in
    [0, 1]; ``same_keys``: neighbours must share these metadata values (documents lacking one of
    the keys get no edges and are counted)."""

    k: int = 5
    min_sim: float = 0.5
    same_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_range(self.k, "edges.similar_to.k", 1, 1000)
        _check_unit(self.min_sim, "edges.similar_to.min_sim")
        object.__setattr__(self, "same_keys", _keys(self.same_keys, "edges.similar_to.same_keys"))


@dataclass(frozen=True)
class SequenceEdgeConfig:
    """``sequence`` edges from each document to the next one of its group: ``group_keys``
    (metadata keys; empty = the whole corpus is one sequence), ``order_key`` (a metadata key,
    numbers before strings; None = doc id order), ``weight`` in [0, 1]."""

    group_keys: tuple[str, ...] = ()
    order_key: str | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "group_keys", _keys(self.group_keys, "edges.sequence.group_keys"))
        if self.order_key is not None and (not isinstance(self.order_key, str) or not self.order_key):
            raise ValueError(
                f"edges.sequence.order_key must be a metadata key or null, got {self.order_key!r}"
            )
        _check_unit(self.weight, "edges.sequence.weight")


@dataclass(frozen=True)
class ReferenceEdgeConfig:
    """Edges given by the data: metadata ``fields`` naming other documents' ids (a scalar id, a
    list of ids, or a list of lists whose ``id_index``-th element, in [0, 100], is the id);
    ``relation`` names the edges (``references``; ``part_of`` for a ``parent_id`` field);
    ``weight`` in [0, 1]. Integer ids are matched as their decimal string."""

    fields: tuple[str, ...] = ("references",)
    id_index: int = 0
    relation: str = "references"
    weight: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", _keys(self.fields, "edges.references.fields", allow_empty=False))
        _check_range(self.id_index, "edges.references.id_index", 0, 100)
        if not isinstance(self.relation, str) or not self.relation:
            raise ValueError(f"edges.references.relation must be a non-empty name, got {self.relation!r}")
        _check_unit(self.weight, "edges.references.weight")


@dataclass(frozen=True)
class MentionEdgeConfig:
    """``mentions`` edges between documents sharing rare terms: each document's
    ``terms_per_doc`` in [1, 1000] top TF-IDF terms; a term in the top terms of more than
    ``max_fanout`` in [2, 100000] documents links none; a pair needs ``min_shared`` in
    [1, terms_per_doc] shared terms; weight = shared / terms_per_doc."""

    terms_per_doc: int = 10
    max_fanout: int = 20
    min_shared: int = 1

    def __post_init__(self) -> None:
        _check_range(self.terms_per_doc, "edges.mentions.terms_per_doc", 1, 1000)
        _check_range(self.max_fanout, "edges.mentions.max_fanout", 2, 100_000)
        _check_range(self.min_shared, "edges.mentions.min_shared", 1, int(self.terms_per_doc))


@dataclass(frozen=True)
class LLMEdgeConfig:
    """Edges an LLM names between the documents of a batch (oasis's LLM graph extraction).

    Batches of ``batch_size`` in [2, 50] documents: ``batching: sequential`` (oasis: consecutive
    documents in store order, so only neighbours in that order can be linked) or ``neighbours``
    (each document with its ``batch_size - 1`` nearest neighbours by embedding: one request per
    document, links across the whole corpus). Each request lists the batch as
    ``[doc id]: text`` (cut to ``max_text_chars``) and asks for
    ``{"edges": [{"source", "target", "relation", "weight"}]}`` with ``relation`` one of
    ``relations`` (a subset of :data:`LLM_RELATIONS`) and ``weight`` a confidence in (0, 1].
    An edge naming an id outside its batch, itself, another relation or a bad weight is dropped
    and counted (``llm.<reason>``), as are edges under ``min_weight`` in [0, 1];
    ``max_edges_per_doc`` in [0, 100000] (0 = no limit) keeps each source's strongest. A batch
    whose request fails or whose answer does not parse is skipped and counted
    (``llm.failed_batch``); when more than ``max_failed_fraction`` in [0, 1] of the batches
    fail, the build stops with an error, so that a store missing its LLM edges (say, the server
    was down) is never cached. ``workers`` in [1, 64] requests run at once; answers are merged in
    batch order. ``base_url``, ``model``, ``api_key_env``, ``timeout_s`` and ``temperature`` go to
    :class:`retrievers.llm.ChatClient`."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 5
    batching: str = "sequential"
    relations: tuple[str, ...] = tuple(LLM_RELATIONS)
    min_weight: float = 0.0
    max_edges_per_doc: int = 0
    max_text_chars: int = 1000
    timeout_s: float = 60.0
    temperature: float = 0.0
    workers: int = 4
    max_failed_fraction: float = 0.1

    def __post_init__(self) -> None:
        try:
            self.client()  # validates the endpoint settings
        except ValueError as error:
            raise ValueError(f"edges.llm.{error}") from None
        _check_range(self.batch_size, "edges.llm.batch_size", 2, 50)
        if self.batching not in ("sequential", "neighbours"):
            raise ValueError(
                f"edges.llm.batching must be 'sequential' or 'neighbours', got {self.batching!r}"
            )
        relations = self.relations
        if isinstance(relations, str) or not isinstance(relations, Sequence) or not relations:
            raise ValueError(
                f"edges.llm.relations must be a non-empty list of relation names, got {relations!r}"
            )
        unknown = [name for name in relations if name not in LLM_RELATIONS]
        if unknown or len(set(relations)) != len(relations):
            raise ValueError(
                f"edges.llm.relations must name distinct relations of {list(LLM_RELATIONS)}, got {list(relations)}"
            )
        object.__setattr__(self, "relations", tuple(relations))
        _check_unit(self.min_weight, "edges.llm.min_weight")
        _check_range(self.max_edges_per_doc, "edges.llm.max_edges_per_doc", 0, 100_000)
        _check_range(self.max_text_chars, "edges.llm.max_text_chars", 1, 1_000_000)
        _check_range(self.workers, "edges.llm.workers", 1, 64)
        _check_unit(self.max_failed_fraction, "edges.llm.max_failed_fraction")

    def client(self) -> ChatClient:
        return ChatClient(
            self.base_url,
            self.model,
            api_key_env=self.api_key_env,
            timeout_s=self.timeout_s,
            temperature=self.temperature,
        )


@dataclass(frozen=True)
class EdgeConfig:
    """Which edge builders run at store build (None = not that one). An EdgeConfig with every
    builder off gives an empty edge set: retrievers then fall back to plain vector search."""

    similar_to: SimilarityEdgeConfig | None = None
    sequence: SequenceEdgeConfig | None = None
    references: ReferenceEdgeConfig | None = None
    mentions: MentionEdgeConfig | None = None
    llm: LLMEdgeConfig | None = None

    @classmethod
    def from_dict(cls, values: object) -> EdgeConfig:
        """Build from plain config data (``store.edges``), rejecting unknown keys at every level."""
        if not isinstance(values, Mapping):
            raise ValueError(f"store.edges must be a mapping of builders or null, got {values!r}")
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise ValueError(f"unknown store.edges builder(s) {unknown}; allowed: {allowed}")
        kinds: dict[str, type] = {
            "similar_to": SimilarityEdgeConfig,
            "sequence": SequenceEdgeConfig,
            "references": ReferenceEdgeConfig,
            "mentions": MentionEdgeConfig,
            "llm": LLMEdgeConfig,
        }
        built = {
            name: None
            if values.get(name) is None
            else _from_mapping(kinds[name], values[name], f"store.edges.{name}")
            for name in allowed
        }
        return cls(**built)


# --------------------------------------------------------------------------------------------
# The edge set
# --------------------------------------------------------------------------------------------


def _as_index_array(values: npt.ArrayLike, name: str) -> IntArray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def _check_weights(weights: npt.ArrayLike, what: str) -> npt.NDArray[np.float64]:
    array = np.asarray(weights, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{what} weights must be 1-D, got shape {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array) | (array < 0.0) | (array > 1.0))
    if bad.size:
        raise ValueError(
            f"{what}: edge weights must be finite numbers in [0, 1]; {bad.size} are not "
            f"(first at position {int(bad[0])}: {float(array[bad[0]])!r})"
        )
    return array


class EdgeSet:
    """Directed, typed edges between the rows of a store, in CSR form (see the module docstring).

    Use :meth:`from_arrays` or :meth:`from_edges` to make one (they sort, deduplicate, drop and
    count); the constructor only validates already-sorted arrays, e.g. ones read from disk."""

    def __init__(
        self,
        indptr: npt.ArrayLike,
        dst: npt.ArrayLike,
        weight: npt.ArrayLike,
        relation: npt.ArrayLike,
        relation_names: Sequence[str],
        report: Mapping[str, Any] | None = None,
    ) -> None:
        # asanyarray: memory-mapped arrays stay memory-mapped
        self.indptr = np.asanyarray(indptr)
        self.dst = np.asanyarray(dst)
        self.weight = np.asanyarray(weight)
        self.relation = np.asanyarray(relation)
        self.relation_names: tuple[str, ...] = tuple(relation_names)
        if self.indptr.ndim != 1 or self.indptr.size < 1 or not np.issubdtype(self.indptr.dtype, np.integer):
            raise ValueError(
                f"indptr must be a 1-D integer array of n_nodes + 1 entries, got {self.indptr.shape}"
            )
        n_edges = int(self.dst.shape[0]) if self.dst.ndim == 1 else -1
        if n_edges < 0 or self.weight.shape != (n_edges,) or self.relation.shape != (n_edges,):
            raise ValueError(
                f"dst, weight and relation must be 1-D arrays of one length, got shapes "
                f"{self.dst.shape}, {self.weight.shape}, {self.relation.shape}"
            )
        if int(self.indptr[0]) != 0 or int(self.indptr[-1]) != n_edges or np.any(np.diff(self.indptr) < 0):
            raise ValueError(f"indptr must rise from 0 to the number of edges ({n_edges})")
        if n_edges and (int(self.dst.min()) < 0 or int(self.dst.max()) >= self.n_nodes):
            raise ValueError(f"dst holds rows outside [0, {self.n_nodes})")
        if any(not isinstance(name, str) or not name for name in self.relation_names):
            raise ValueError(f"relation names must be non-empty strings, got {list(self.relation_names)}")
        if len(set(self.relation_names)) != len(self.relation_names):
            raise ValueError(f"relation names repeat: {list(self.relation_names)}")
        if n_edges and (int(self.relation.min()) < 0 or int(self.relation.max()) >= len(self.relation_names)):
            raise ValueError(f"relation ids must index relation_names ({len(self.relation_names)} names)")
        _check_weights(self.weight, "EdgeSet")
        self.report: dict[str, Any] = dict(report or {})
        self._src: IntArray | None = None
        self._incoming: tuple[IntArray, IntArray] | None = None

    # -- shape ----------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def n_edges(self) -> int:
        return int(self.dst.shape[0])

    def __len__(self) -> int:
        return self.n_edges

    @property
    def src(self) -> IntArray:
        """Source row of every edge (derived from ``indptr``, computed once)."""
        if self._src is None:
            self._src = np.repeat(np.arange(self.n_nodes, dtype=np.int64), np.diff(self.indptr))
        return self._src

    def incoming(self) -> tuple[IntArray, IntArray]:
        """``(in_indptr, in_edge_ids)``: the edges entering row ``i`` are
        ``in_edge_ids[in_indptr[i]:in_indptr[i+1]]``, in storage order (computed once)."""
        if self._incoming is None:
            order = np.argsort(self.dst, kind="stable").astype(np.int64)
            counts = np.bincount(self.dst.astype(np.int64), minlength=self.n_nodes)
            in_indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
            self._incoming = (in_indptr, order)
        return self._incoming

    def relation_counts(self) -> dict[str, int]:
        counts = np.bincount(self.relation.astype(np.int64), minlength=len(self.relation_names))
        return {name: int(count) for name, count in zip(self.relation_names, counts, strict=True)}

    def to_edges(self, doc_ids: Sequence[str]) -> list[Edge]:
        """Every edge as an :class:`Edge` of document ids, in storage order (for inspection)."""
        if len(doc_ids) != self.n_nodes:
            raise ValueError(f"{len(doc_ids)} doc ids for an edge set over {self.n_nodes} rows")
        return [
            Edge(
                src=doc_ids[int(src)],
                dst=doc_ids[int(dst)],
                relation=self.relation_names[int(rel)],
                weight=float(weight),
            )
            for src, dst, rel, weight in zip(self.src, self.dst, self.relation, self.weight, strict=True)
        ]

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        n_nodes: int,
        src: npt.ArrayLike,
        dst: npt.ArrayLike,
        weight: npt.ArrayLike,
        relation: npt.ArrayLike,
        relation_names: Sequence[str],
        *,
        report: Mapping[str, Any] | None = None,
    ) -> EdgeSet:
        """Sort edges given as parallel arrays of rows into CSR. Self-loops are dropped and an
        (src, dst, relation) triple given more than once keeps its largest weight; both are
        counted in the report (``dropped``: ``<relation>.self_loop``, ``<relation>.duplicate``).
        Rows outside [0, n_nodes) and weights outside [0, 1] are errors."""
        if not _is_int(n_nodes) or n_nodes < 1:
            raise ValueError(f"n_nodes must be an integer >= 1, got {n_nodes!r}")
        sources = _as_index_array(src, "src")
        targets = _as_index_array(dst, "dst")
        relations = _as_index_array(relation, "relation")
        weights = _check_weights(weight, "from_arrays")
        if not sources.shape == targets.shape == relations.shape == weights.shape:
            raise ValueError(
                f"src, dst, weight and relation must have one length, got "
                f"{sources.shape}, {targets.shape}, {weights.shape}, {relations.shape}"
            )
        names = tuple(relation_names)
        for array, what in ((sources, "src"), (targets, "dst")):
            if array.size and (int(array.min()) < 0 or int(array.max()) >= n_nodes):
                raise ValueError(f"{what} holds rows outside [0, {n_nodes})")
        if relations.size and (int(relations.min()) < 0 or int(relations.max()) >= len(names)):
            raise ValueError(f"relation ids must index relation_names ({len(names)} names)")
        summary = _Report.of(report)

        loops = sources == targets
        for rel_id in np.unique(relations[loops]):
            summary.drop(f"{names[int(rel_id)]}.self_loop", int(np.count_nonzero(relations[loops] == rel_id)))
        keep = ~loops
        sources, targets, relations, weights = sources[keep], targets[keep], relations[keep], weights[keep]

        # sort by (src, dst, relation, weight desc): the first of each triple has the largest weight
        order = np.lexsort((-weights, relations, targets, sources))
        sources, targets, relations, weights = (
            sources[order],
            targets[order],
            relations[order],
            weights[order],
        )
        if sources.size:
            first = np.concatenate(
                (
                    [True],
                    (sources[1:] != sources[:-1])
                    | (targets[1:] != targets[:-1])
                    | (relations[1:] != relations[:-1]),
                )
            )
            repeats = relations[~first]
            for rel_id in np.unique(repeats):
                summary.drop(f"{names[int(rel_id)]}.duplicate", int(np.count_nonzero(repeats == rel_id)))
            sources, targets, relations, weights = (
                sources[first],
                targets[first],
                relations[first],
                weights[first],
            )
        counts = np.bincount(sources, minlength=n_nodes)
        indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        edge_set = cls(
            indptr,
            targets.astype(np.int64),
            weights.astype(np.float32),
            relations.astype(np.int32),
            names,
        )
        edge_set.report = summary.as_dict(edge_set)
        return edge_set

    @classmethod
    def from_edges(
        cls,
        edges: Iterable[Edge],
        row_of: Mapping[str, int],
        *,
        report: Mapping[str, Any] | None = None,
    ) -> EdgeSet:
        """Edges between document ids (``row_of``: doc id -> store row). An edge naming an id
        that is not a document is dropped and counted (``<relation>.unknown_id``, with examples),
        never an error: links in data often point outside the corpus."""
        if not row_of:
            raise ValueError("row_of is empty: an edge set needs at least one document")
        summary = _Report.of(report)
        names: dict[str, int] = {}
        sources: list[int] = []
        targets: list[int] = []
        weights: list[float] = []
        relations: list[int] = []
        for edge in edges:
            if not isinstance(edge, Edge):
                raise ValueError(f"edges must be Edge values, got {type(edge).__name__}")
            src_row = row_of.get(edge.src)
            dst_row = row_of.get(edge.dst)
            if src_row is None or dst_row is None:
                missing = edge.src if src_row is None else edge.dst
                summary.drop(
                    f"{edge.relation}.unknown_id",
                    1,
                    f"{edge.src} -> {edge.dst} ({missing!r} is not a document)",
                )
                continue
            sources.append(src_row)
            targets.append(dst_row)
            weights.append(edge.weight)
            relations.append(names.setdefault(edge.relation, len(names)))
        return cls.from_arrays(
            len(row_of),
            np.asarray(sources, dtype=np.int64),
            np.asarray(targets, dtype=np.int64),
            np.asarray(weights, dtype=np.float64),
            np.asarray(relations, dtype=np.int64),
            tuple(names),
            report=summary.as_dict(),
        )

    # -- persistence ----------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        """Write ``edges.json`` (format, counts, relation names, report) and four ``.npy``
        arrays into ``folder`` (created if needed). No pickle."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": EDGES_FORMAT,
            "n_nodes": self.n_nodes,
            "n_edges": self.n_edges,
            "relation_names": list(self.relation_names),
            "report": self.report,
        }
        (folder / "edges.json").write_text(
            json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        np.save(folder / "indptr.npy", np.ascontiguousarray(self.indptr, dtype=np.int64), allow_pickle=False)
        np.save(folder / "dst.npy", np.ascontiguousarray(self.dst, dtype=np.int64), allow_pickle=False)
        np.save(
            folder / "weight.npy", np.ascontiguousarray(self.weight, dtype=np.float32), allow_pickle=False
        )
        np.save(
            folder / "relation.npy", np.ascontiguousarray(self.relation, dtype=np.int32), allow_pickle=False
        )

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True, n_nodes: int | None = None) -> EdgeSet:
        """Read an edge set written by :meth:`save` (arrays memory-mapped with ``mmap``);
        ``n_nodes``, when given, must match (the store's document count)."""
        folder = Path(folder)
        meta_path = folder / "edges.json"
        if not meta_path.is_file():
            raise ValueError(f"{folder} is not a saved EdgeSet (missing edges.json)")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != EDGES_FORMAT:
            raise ValueError(
                f"{meta_path}: edge format {meta.get('format')!r} is not {EDGES_FORMAT}; rebuild the store"
            )
        arrays = {
            name: np.load(folder / f"{name}.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
            for name in ("indptr", "dst", "weight", "relation")
        }
        edge_set = cls(
            arrays["indptr"],
            arrays["dst"],
            arrays["weight"],
            arrays["relation"],
            meta["relation_names"],
            report=meta.get("report"),
        )
        if edge_set.n_nodes != meta.get("n_nodes") or edge_set.n_edges != meta.get("n_edges"):
            raise ValueError(
                f"{folder}: arrays hold {edge_set.n_nodes} nodes / {edge_set.n_edges} edges, "
                f"edges.json says {meta.get('n_nodes')} / {meta.get('n_edges')}"
            )
        if n_nodes is not None and edge_set.n_nodes != n_nodes:
            raise ValueError(f"{folder}: edges cover {edge_set.n_nodes} rows, the store has {n_nodes}")
        return edge_set


@dataclass
class _Report:
    """What happened while building: links dropped (by ``<relation>.<reason>``, with a few
    examples) and candidate links per builder before deduplication."""

    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    candidates: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, report: Mapping[str, Any] | None) -> _Report:
        report = report or {}
        return cls(
            dropped=dict(report.get("dropped") or {}),
            examples={key: list(values) for key, values in (report.get("examples") or {}).items()},
            candidates=dict(report.get("candidates") or {}),
        )

    def drop(self, key: str, count: int, example: str | None = None) -> None:
        if count <= 0:
            return
        self.dropped[key] = self.dropped.get(key, 0) + count
        if example is not None:
            kept = self.examples.setdefault(key, [])
            if len(kept) < _MAX_EXAMPLES:
                kept.append(example)

    def as_dict(self, edge_set: EdgeSet | None = None) -> dict[str, Any]:
        summary: dict[str, Any] = {}
        if edge_set is not None:
            summary["n_edges"] = edge_set.n_edges
            summary["by_relation"] = edge_set.relation_counts()
        if self.candidates:
            summary["candidates"] = dict(self.candidates)
        summary["dropped"] = dict(sorted(self.dropped.items()))
        summary["examples"] = dict(sorted(self.examples.items()))
        return summary


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


@dataclass
class _Links:
    """Edges collected from the builders before they become one EdgeSet."""

    sources: list[IntArray] = field(default_factory=list)
    targets: list[IntArray] = field(default_factory=list)
    weights: list[npt.NDArray[np.float64]] = field(default_factory=list)
    relations: list[str] = field(default_factory=list)
    report: _Report = field(default_factory=_Report)

    def add(
        self, relation: str, sources: npt.ArrayLike, targets: npt.ArrayLike, weights: npt.ArrayLike
    ) -> None:
        src = np.asarray(sources, dtype=np.int64)
        self.sources.append(src)
        self.targets.append(np.asarray(targets, dtype=np.int64))
        self.weights.append(np.broadcast_to(np.asarray(weights, dtype=np.float64), src.shape).copy())
        self.relations.append(relation)


def _group_rows(
    documents: Sequence[Document], keys: Sequence[str], report: _Report, what: str
) -> list[IntArray]:
    """Rows grouped by their values of metadata ``keys`` (one group of all rows when there are no
    keys); documents lacking a key belong to no group and are counted as ``<what>.missing_key``."""
    if not keys:
        return [np.arange(len(documents), dtype=np.int64)]
    groups: dict[tuple[str, ...], list[int]] = {}
    for row, doc in enumerate(documents):
        if any(key not in doc.metadata for key in keys):
            report.drop(f"{what}.missing_key", 1, doc.id)
            continue
        groups.setdefault(tuple(str(doc.metadata[key]) for key in keys), []).append(row)
    return [np.asarray(rows, dtype=np.int64) for _, rows in sorted(groups.items())]


def _similarity_edges(
    documents: Sequence[Document], embeddings: npt.ArrayLike, config: SimilarityEdgeConfig, links: _Links
) -> None:
    matrix = np.asarray(embeddings, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(documents):
        raise ValueError(
            f"similar_to edges need one embedding row per document, got shape {matrix.shape} "
            f"for {len(documents)} documents"
        )
    for rows in _group_rows(documents, config.same_keys, links.report, "similar_to"):
        k = min(config.k, rows.size - 1)
        if k < 1:
            continue
        group = matrix[rows]
        for start in range(0, rows.size, _SIMILARITY_BLOCK):
            block = group[start : start + _SIMILARITY_BLOCK] @ group.T
            local = np.arange(block.shape[0])
            block[local, start + local] = -np.inf  # never its own neighbour
            scores, columns = top_k_rows(block, k)
            keep = np.isfinite(scores) & (scores >= config.min_sim)
            src = np.repeat(rows[start + local], k).reshape(-1, k)[keep]
            links.add(
                "similar_to",
                src,
                rows[columns[keep]],
                np.clip(scores[keep].astype(np.float64), 0.0, 1.0),
            )


def _order_value(value: object) -> tuple[int, float, str]:
    """Numbers (and numeric strings) in numeric order, then other values as strings."""
    if _is_number(value):
        return (0, float(value), "")
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return (1, 0.0, text)
    return (0, number, "") if math.isfinite(number) else (1, 0.0, text)


def _sequence_edges(documents: Sequence[Document], config: SequenceEdgeConfig, links: _Links) -> None:
    for rows in _group_rows(documents, config.group_keys, links.report, "sequence"):
        ordered: list[tuple[tuple[int, float, str], int]] = []
        for row in rows.tolist():
            metadata = documents[row].metadata
            if config.order_key is None:
                ordered.append(((0, 0.0, ""), row))
            elif config.order_key in metadata:
                ordered.append((_order_value(metadata[config.order_key]), row))
            else:
                links.report.drop("sequence.missing_order_key", 1, documents[row].id)
        ordered.sort()  # by order value, then row (= doc id) for ties
        chain = np.asarray([row for _, row in ordered], dtype=np.int64)
        if chain.size > 1:
            links.add("sequence", chain[:-1], chain[1:], config.weight)


def _reference_id(value: object) -> str | None:
    """A referenced document id: strings as they are, integers (and integral floats) in decimal."""
    if isinstance(value, str):
        return value or None
    if _is_int(value):
        return str(int(value))
    if _is_number(value) and math.isfinite(float(value)) and float(value).is_integer():
        return str(int(float(value)))
    return None


def _reference_edges(
    documents: Sequence[Document], row_of: Mapping[str, int], config: ReferenceEdgeConfig, links: _Links
) -> None:
    relation = config.relation
    sources: list[int] = []
    targets: list[int] = []
    for row, doc in enumerate(documents):
        for name in config.fields:
            if name not in doc.metadata or doc.metadata[name] is None:
                continue
            value = doc.metadata[name]
            entries = value if isinstance(value, list | tuple) else [value]
            for entry in entries:
                if isinstance(entry, list | tuple):
                    entry = entry[config.id_index] if config.id_index < len(entry) else None
                target = _reference_id(entry)
                if target is None:
                    links.report.drop(f"{relation}.bad_value", 1, f"{doc.id}.{name}: {entry!r}")
                    continue
                target_row = row_of.get(target)
                if target_row is None:
                    links.report.drop(f"{relation}.unknown_id", 1, f"{doc.id} -> {target!r}")
                    continue
                sources.append(row)
                targets.append(target_row)
    links.add(relation, sources, targets, config.weight)


def _mention_edges(documents: Sequence[Document], config: MentionEdgeConfig, links: _Links) -> None:
    tokens = tokenize([doc.full_text for doc in documents])
    n_docs = len(documents)
    doc_freq: dict[str, int] = {}
    for terms in tokens:
        for term in set(terms):
            doc_freq[term] = doc_freq.get(term, 0) + 1
    postings: dict[str, list[int]] = {}
    for row, terms in enumerate(tokens):
        counts: dict[str, int] = {}
        for term in terms:
            counts[term] = counts.get(term, 0) + 1
        # sublinear tf x idf; a term in one document only links nothing and is skipped
        scored = sorted(
            (-(1.0 + math.log(count)) * math.log(n_docs / doc_freq[term]), term)
            for term, count in counts.items()
            if doc_freq[term] > 1
        )
        for _, term in scored[: config.terms_per_doc]:
            postings.setdefault(term, []).append(row)
    pair_counts: dict[tuple[int, int], int] = {}
    over = 0
    for term in sorted(postings):
        rows = postings[term]
        if len(rows) > config.max_fanout:
            over += 1
            continue
        for a in rows:
            for b in rows:
                if a != b:
                    pair_counts[(a, b)] = pair_counts.get((a, b), 0) + 1
    links.report.drop("mentions.terms_over_fanout", over)
    kept = sorted((pair, shared) for pair, shared in pair_counts.items() if shared >= config.min_shared)
    links.add(
        "mentions",
        [a for (a, _), _ in kept],
        [b for (_, b), _ in kept],
        [min(shared / config.terms_per_doc, 1.0) for _, shared in kept],
    )


_LLM_SYSTEM_PROMPT = """You find relationships between passages. Each passage is given as [id]: text.
For every pair of passages A, B where A clearly relates to B, give one edge from A (source) to
B (target) with one of these relations:
{relations}
and a weight: your confidence in (0, 1]. Reply with JSON only, exactly
{{"edges": [{{"source": "<id>", "target": "<id>", "relation": "<relation>", "weight": <number>}}]}}
using only the ids given, never linking a passage to itself; {{"edges": []}} when nothing relates."""


def _llm_batches(
    documents: Sequence[Document], embeddings: npt.ArrayLike | None, config: LLMEdgeConfig
) -> list[list[int]]:
    """Rows of each request. ``sequential``: consecutive rows (a lone last row joins the row
    before it); ``neighbours``: each row followed by its nearest neighbours (cosine, ties by row)."""
    n_docs, size = len(documents), config.batch_size
    if n_docs < 2:
        return []
    if config.batching == "sequential":
        batches = [list(range(start, min(start + size, n_docs))) for start in range(0, n_docs, size)]
        if len(batches[-1]) == 1:
            batches[-1] = [n_docs - 2, n_docs - 1]
        return batches
    if embeddings is None:
        raise ValueError("edges.llm.batching=neighbours needs the store embeddings")
    matrix = np.asarray(embeddings, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != n_docs:
        raise ValueError(f"llm edges need one embedding row per document, got shape {matrix.shape}")
    k = min(size - 1, n_docs - 1)
    batches = []
    for start in range(0, n_docs, _SIMILARITY_BLOCK):
        block = matrix[start : start + _SIMILARITY_BLOCK] @ matrix.T
        local = np.arange(block.shape[0])
        block[local, start + local] = -np.inf  # never its own neighbour
        _, columns = top_k_rows(block, k)
        batches += [[start + i, *columns[i].tolist()] for i in local.tolist()]
    return batches


def _llm_answer(client: ChatClient, system: str, user: str) -> list[Any] | LLMError:
    """The raw edge list of one request, or the error that kept it from coming."""
    try:
        data = parse_json_content(client.complete(system, user))
    except LLMError as error:
        return error
    edges = data.get("edges") if isinstance(data, dict) else data
    if not isinstance(edges, list):
        return LLMError("format", f'answer has no "edges" list: {str(data)[:80]!r}')
    return edges


def _llm_edges(
    documents: Sequence[Document], embeddings: npt.ArrayLike | None, config: LLMEdgeConfig, links: _Links
) -> None:
    batches = _llm_batches(documents, embeddings, config)
    if not batches:
        return
    client = config.client()
    system = _LLM_SYSTEM_PROMPT.format(
        relations="\n".join(f"- {name}: {LLM_RELATIONS[name]}" for name in config.relations)
    )

    def prompt(rows: list[int]) -> str:
        return "\n".join(
            f"[{documents[row].id}]: {' '.join(documents[row].full_text[: config.max_text_chars].split())}"
            for row in rows
        )

    with ThreadPoolExecutor(max_workers=config.workers) as pool:
        answers = list(pool.map(lambda rows: _llm_answer(client, system, prompt(rows)), batches))
    report = links.report
    found: dict[tuple[int, int, str], float] = {}
    failed: list[str] = []
    for number, (rows, answer) in enumerate(zip(batches, answers, strict=True)):
        if isinstance(answer, LLMError):
            failed.append(f"batch {number}: {answer}")
            report.drop("llm.failed_batch", 1, failed[-1])
            continue
        in_batch = {documents[row].id: row for row in rows}
        for item in answer:
            if not isinstance(item, dict):
                report.drop("llm.bad_edge", 1, f"batch {number}: {str(item)[:80]}")
                continue
            source, target = in_batch.get(str(item.get("source"))), in_batch.get(str(item.get("target")))
            relation, weight = item.get("relation"), item.get("weight")
            where = f"batch {number}: {item.get('source')!r} -> {item.get('target')!r}"
            if source is None or target is None:
                report.drop("llm.unknown_id", 1, where + " (not an id of the batch)")
            elif source == target:
                report.drop("llm.self_link", 1, where)
            elif relation not in config.relations:
                report.drop("llm.bad_relation", 1, f"{where}: {relation!r}")
            elif not _is_number(weight) or not 0.0 < float(weight) <= 1.0:
                report.drop("llm.bad_weight", 1, f"{where}: {weight!r}")
            elif float(weight) < config.min_weight:
                report.drop("llm.below_min_weight", 1, f"{where}: {weight!r}")
            else:
                key = (source, target, str(relation))
                found[key] = max(found.get(key, 0.0), float(weight))
    if len(failed) > config.max_failed_fraction * len(batches):
        raise RuntimeError(
            f"LLM edge extraction failed for {len(failed)} of {len(batches)} batches, more than "
            f"edges.llm.max_failed_fraction={config.max_failed_fraction:g} (first: {failed[0]}); "
            "nothing was built. Check the endpoint, or raise max_failed_fraction to keep a partial graph"
        )
    kept = sorted(found.items(), key=lambda item: (item[0][0], -item[1], item[0][1], item[0][2]))
    if config.max_edges_per_doc:
        per_source: dict[int, int] = {}
        capped = []
        for key, weight in kept:  # each source's strongest first
            per_source[key[0]] = per_source.get(key[0], 0) + 1
            if per_source[key[0]] <= config.max_edges_per_doc:
                capped.append((key, weight))
        report.drop("llm.over_max_edges_per_doc", len(kept) - len(capped))
        kept = capped
    for relation in config.relations:
        chosen = [(key, weight) for key, weight in kept if key[2] == relation]
        if chosen:
            links.add(
                relation, [key[0] for key, _ in chosen], [key[1] for key, _ in chosen], [w for _, w in chosen]
            )


def build_edges(
    documents: Sequence[Document],
    embeddings: npt.ArrayLike | None,
    config: EdgeConfig,
    *,
    extra_edges: Iterable[Edge] = (),
) -> EdgeSet:
    """Run the configured builders over ``documents`` (store order: sorted by id; row i is
    ``documents[i]``, ``embeddings[i]`` its vector) and merge their edges, plus ``extra_edges``
    given by id (e.g. from an LLM), into one EdgeSet. Dropped links are counted in its report and
    logged."""
    if not documents:
        raise ValueError("cannot build edges over an empty corpus")
    row_of = {doc.id: row for row, doc in enumerate(documents)}
    if len(row_of) != len(documents):
        raise ValueError("documents must have distinct ids")
    links = _Links()
    if config.similar_to is not None:
        if embeddings is None:
            raise ValueError("similar_to edges need the store embeddings")
        _similarity_edges(documents, embeddings, config.similar_to, links)
    if config.sequence is not None:
        _sequence_edges(documents, config.sequence, links)
    if config.references is not None:
        _reference_edges(documents, row_of, config.references, links)
    if config.mentions is not None:
        _mention_edges(documents, config.mentions, links)
    if config.llm is not None:
        _llm_edges(documents, embeddings, config.llm, links)
    extra = EdgeSet.from_edges(extra_edges, row_of) if extra_edges else None

    names: list[str] = []
    for relation in [*links.relations, *(extra.relation_names if extra is not None else ())]:
        if relation not in names:
            names.append(relation)
    sources = [*links.sources]
    targets = [*links.targets]
    weights = [*links.weights]
    relation_ids = [
        np.full(src.shape, names.index(rel), dtype=np.int64)
        for src, rel in zip(links.sources, links.relations, strict=True)
    ]
    if extra is not None:
        sources.append(extra.src)
        targets.append(np.asarray(extra.dst, dtype=np.int64))
        weights.append(np.asarray(extra.weight, dtype=np.float64))
        mapping = np.asarray([names.index(name) for name in extra.relation_names], dtype=np.int64)
        relation_ids.append(mapping[np.asarray(extra.relation, dtype=np.int64)])
        extra_report = _Report.of(extra.report)
        for key, count in extra_report.dropped.items():
            links.report.drop(key, count)
            links.report.examples.setdefault(key, []).extend(
                extra_report.examples.get(key, [])[:_MAX_EXAMPLES]
            )

    def joined(parts: list[Any], dtype: type) -> Any:
        return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype=dtype)

    for src, relation in zip(links.sources, links.relations, strict=True):
        links.report.candidates[relation] = links.report.candidates.get(relation, 0) + int(src.size)
    if extra is not None:
        links.report.candidates["extra_edges"] = extra.n_edges
    edge_set = EdgeSet.from_arrays(
        len(documents),
        joined(sources, np.int64),
        joined(targets, np.int64),
        joined(weights, np.float64),
        joined(relation_ids, np.int64),
        names,
        report=links.report.as_dict(),
    )
    if edge_set.report["dropped"]:
        log.warning(
            "edges: %d kept (%s); dropped or skipped: %s",
            edge_set.n_edges,
            edge_set.report["by_relation"],
            edge_set.report["dropped"],
        )
    return edge_set
