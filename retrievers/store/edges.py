"""The edge artifact: typed, weighted links between store rows.

An :class:`EdgeSet` holds directed edges in CSR form (compressed sparse rows): the edges leaving
row ``i`` are positions ``indptr[i]:indptr[i+1]`` of the arrays ``dst`` (target row), ``weight``
(float32 in [0, 1]) and ``relation`` (an index into ``relation_names``), sorted by (target row,
relation). A position is the edge's id and its *storage order*. Four ``.npy`` arrays plus a JSON
file, loaded with ``mmap``: a million edges cost ~20 MB and no Python objects. Incoming edges
(for bidirectional traversal) are derived when first asked for.

:class:`~retrievers.store.edge_config.EdgeConfig` says which builders run at store build
(:mod:`retrievers.builders.edges`). Bad links are dropped and counted, never guessed: ids that
name no document, links from a document to itself, and repeats of an (src, dst, relation) triple
(the largest weight is kept). The counts, with a few examples, are in :attr:`EdgeSet.report`
(:class:`EdgeReport`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.params import is_int
from retrievers.store.npy_files import load_npy
from retrievers.types import Edge

__all__ = ["EDGES_FORMAT", "MAX_EXAMPLES", "EdgeReport", "EdgeSet"]

EDGES_FORMAT = 1
MAX_EXAMPLES = 5

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]


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
        if not is_int(n_nodes) or n_nodes < 1:
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
        summary = EdgeReport.of(report)

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
        summary = EdgeReport.of(report)
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
            name: load_npy(folder / f"{name}.npy", mmap=mmap)
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
class EdgeReport:
    """What happened while building: links dropped (by ``<relation>.<reason>``, with a few
    examples) and candidate links per builder before deduplication."""

    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    candidates: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, report: Mapping[str, Any] | None) -> EdgeReport:
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
            if len(kept) < MAX_EXAMPLES:
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
