"""A store's edges after a change, computed for what changed rather than for every document.

:func:`changed_edges` keeps every old edge between rows that stay (renumbered: rows shift when
ids are inserted or removed in the middle of the id order) and recomputes, per builder:

* ``similar_to``: the rows whose nearest neighbours can have changed. Against their whole
  group (as a build computes them): the new documents, the rows that had a removed neighbour,
  and every row of a group whose size moved k (groups of k rows or fewer). By a merge: a row
  some new document beats (its cosine reaches the row's k-th kept neighbour, or ``min_sim``
  when the row has fewer than k) takes the top k of its old k and the new documents (nothing
  else can enter). Cost: the new documents against their groups, plus one group row per
  document that lost a neighbour.
* ``sequence``: the chains of the groups (``group_keys``) that gained or lost a document are
  ordered again, and only the links that differ change: a kept edge that no longer joins a row
  to its successor goes, a row without its successor's edge gets one (an append to the end of a
  chain adds one link per new row).
* ``references`` and ``mentions``: built again over every document (references are cheap;
  mentions depend on every document's TF-IDF weights).
* ``llm``: refused (it would call the LLM again): rebuild the store.

What the cost is made of: each row's group as an integer code, taken from the old edge set's
(:mod:`retrievers.builders.edge_groups`: kept rows renumbered, the new documents' metadata read)
or, for an edge set loaded from disk, from the metadata column parsed once (one
``json.loads``), the merges of all beaten rows of a
group in one vectorised step, and the new edges sorted alone and merged into the kept ones,
which the renumbering leaves in CSR order (:func:`_merged`: no sort of every edge). Small
matrix products run on one BLAS thread (threads cost more than such products).

The result holds the edges a fresh build of the same documents holds, except where two
neighbours tie at the k-th place to float32 rounding: a cosine computed in a matrix product
of another shape can differ in its last bit, so such a tie can go the other way (tests compare
the edges; weights agree to 1e-6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.builders.edge_groups import RowGroups, group_name, recall, remember
from retrievers.builders.edges import _Links, _mention_edges, _order_value, _reference_edges
from retrievers.index.blas_threads import one_blas_thread
from retrievers.ranking import top_k_rows
from retrievers.store.columns import DocumentColumns, decode_metadata_column
from retrievers.store.edge_config import EdgeConfig, SequenceEdgeConfig, SimilarityEdgeConfig
from retrievers.store.edges import EdgeReport, EdgeSet
from retrievers.types import Document

__all__ = ["changed_edges"]

IntArray = npt.NDArray[np.int64]


class _Rows:
    """What the edge updates read of the changed store's rows: ids and metadata, and each row's
    group. The groups come from the old edge set's (:mod:`retrievers.builders.edge_groups`:
    kept rows renumbered, only the new documents' metadata read) when it has them; else the
    metadata column is parsed once for every row (:func:`decode_metadata_column`)."""

    def __init__(
        self, documents: Sequence[Document], old: EdgeSet, old_to_new: IntArray, new_rows: IntArray
    ) -> None:
        self.documents = documents
        self._old, self._old_to_new, self._new_rows = old, old_to_new, new_rows
        self._metadata: Sequence[Mapping[str, Any]] | None = None
        self._groups: dict[tuple[str, ...], tuple[IntArray, list[tuple[str, ...]], IntArray]] = {}
        #: the rows' groups by keys, to keep beside the new edge set
        self.known: dict[tuple[str, ...], RowGroups] = {}

    @property
    def metadata(self) -> Sequence[Mapping[str, Any]]:
        if self._metadata is None:
            docs = self.documents
            if isinstance(docs, DocumentColumns):
                self._metadata = decode_metadata_column(docs.metadata)
            else:
                self._metadata = [doc.metadata for doc in docs]
        return self._metadata

    def groups(self, keys: Sequence[str]) -> tuple[IntArray, list[tuple[str, ...]], IntArray]:
        """``(code, names, order)``: ``code[row]`` the index of the row's group in ``names``
        (the groups' values of ``keys``, sorted; -1 for a row lacking a key), and ``order`` the
        rows with a group sorted by (code, row). No keys: one group of every row."""
        key = tuple(keys)
        if key not in self._groups:
            n_rows = len(self.documents)
            if not key:
                code = np.zeros(n_rows, dtype=np.int64)
                self._groups[key] = (code, [()], np.arange(n_rows, dtype=np.int64))
                return self._groups[key]
            before = recall(self._old, key)
            if before is not None:
                docs = self.documents
                found = before.changed(
                    self._old_to_new,
                    self._new_rows,
                    [group_name(docs[row].metadata, key) for row in self._new_rows.tolist()],
                )
            else:
                found = self._parsed(key)
            self.known[key] = found
            order = np.argsort(found.code, kind="stable")
            order = order[found.code[order] >= 0]
            self._groups[key] = (found.code, list(found.names), order)
        return self._groups[key]

    def _parsed(self, key: tuple[str, ...]) -> RowGroups:
        """The rows' groups from every row's metadata."""
        missing = object()
        columns = [[md.get(k, missing) for md in self.metadata] for k in key]
        values: list[Any]
        if len(key) == 1:  # the group's one value as a string (tuples cost more)
            values = [None if v is missing else v if type(v) is str else str(v) for v in columns[0]]
        else:
            values = [None if missing in row else tuple(map(str, row)) for row in zip(*columns, strict=True)]
        distinct = sorted({value for value in values if value is not None})
        index = {value: i for i, value in enumerate(distinct)}
        code = np.array([index.get(value, -1) for value in values], dtype=np.int64)
        return RowGroups(code, tuple((value,) if len(key) == 1 else value for value in distinct))

    def members(self, keys: Sequence[str], codes: Iterable[int]) -> list[IntArray]:
        """The rows (ascending) of each group in ``codes`` (ascending codes)."""
        code, _, order = self.groups(keys)
        sorted_codes = code[order]
        wanted = np.asarray(sorted(set(codes)), dtype=np.int64)
        lo = np.searchsorted(sorted_codes, wanted, side="left")
        hi = np.searchsorted(sorted_codes, wanted, side="right")
        return [order[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]


def changed_edges(
    old: EdgeSet,
    documents: Sequence[Document],
    embeddings: npt.ArrayLike | None,
    config: EdgeConfig,
    *,
    old_to_new: IntArray,
    new_rows: IntArray,
) -> EdgeSet:
    """The edges of the changed store (module docstring): ``documents`` and ``embeddings`` are
    the changed store's rows, ``old_to_new[r]`` old row r's new row (-1 when removed; increasing
    over the kept rows) and ``new_rows`` the rows of the documents added."""
    if config.llm is not None:
        raise ValueError(
            "store.edges.llm edges cannot be kept up to date by add/delete/update (each change would "
            "ask the LLM again); build the store again instead"
        )
    n_rows = len(documents)
    rows = _Rows(documents, old, old_to_new, np.asarray(new_rows, dtype=np.int64))
    src = old_to_new[np.asarray(old.src, dtype=np.int64)]
    dst = old_to_new[np.asarray(old.dst, dtype=np.int64)]
    alive = (src >= 0) & (dst >= 0)
    names = list(old.relation_names)
    relation = np.asarray(old.relation, dtype=np.int64)
    weight = np.asarray(old.weight, dtype=np.float64)
    lost_neighbour = np.zeros(n_rows, dtype=np.bool_)
    lost_neighbour[src[(src >= 0) & (dst < 0)]] = True
    is_new = np.zeros(n_rows, dtype=np.bool_)
    is_new[new_rows] = True
    n_removed = int(np.count_nonzero(old_to_new < 0))
    links = _Links()
    drop_relations: set[str] = set()
    drop_sources: dict[str, npt.NDArray[np.bool_]] = {}
    if config.similar_to is not None:
        if embeddings is None:
            raise ValueError("similar_to edges need the store embeddings")
        sim = names.index("similar_to") if "similar_to" in names else -1
        mask = alive & (relation == sim)  # CSR order kept: the renumbering is increasing
        with one_blas_thread():  # small products: threads cost more
            drop_sources["similar_to"] = _similar(
                rows,
                np.asarray(embeddings),
                config.similar_to,
                _Kept(src[mask], dst[mask], weight[mask], n_rows),
                is_new,
                lost_neighbour,
                n_removed,
                links,
            )
    drop_edges = np.zeros(src.size, dtype=np.bool_)  # kept edges a builder replaces
    if config.sequence is not None:
        seq_id = names.index("sequence") if "sequence" in names else -1
        is_sequence = relation == seq_id
        touching = is_sequence & ((src < 0) | (dst < 0))
        ends = np.concatenate((src[touching], dst[touching]))
        drop_edges |= _sequence(
            rows, config.sequence, new_rows, ends[ends >= 0], n_removed, links, src, dst, is_sequence & alive
        )
    if config.references is not None:
        row_of = {doc.id: row for row, doc in enumerate(documents)}
        _reference_edges(documents, row_of, config.references, links)
        drop_relations.add(config.references.relation)
    if config.mentions is not None:
        _mention_edges(documents, config.mentions, links)
        drop_relations.add("mentions")
    keep = alive & ~drop_edges
    for name in drop_relations:
        if name in names:
            keep &= relation != names.index(name)
    for name, recomputed in drop_sources.items():
        if name in names:
            keep &= ~((relation == names.index(name)) & recomputed[np.maximum(src, 0)])
    result = _merged(n_rows, src[keep], dst[keep], weight[keep], relation[keep], names, links)
    remember(result, rows.known)
    return result


def _merged(
    n_rows: int,
    src: IntArray,
    dst: IntArray,
    weight: npt.NDArray[np.float64],
    relation: IntArray,
    names: list[str],
    links: _Links,
) -> EdgeSet:
    """The kept old edges (in CSR order, one per (src, dst, relation)) and the new ``links`` as
    one edge set: the new edges sorted alone, then merged into the kept ones in one pass (no sort
    of every edge). Equal to :meth:`EdgeSet.from_arrays` of all of them, report included: a
    triple both kept and new keeps the larger weight and counts as ``<relation>.duplicate``."""
    all_names = list(names)
    for name in links.relations:
        if name not in all_names:
            all_names.append(name)
    empty = np.zeros(0, dtype=np.int64)
    fresh = EdgeSet.from_arrays(
        n_rows,
        np.concatenate([empty, *links.sources]),
        np.concatenate([empty, *links.targets]),
        np.concatenate([np.zeros(0), *links.weights]),
        np.concatenate(
            [
                empty,
                *(
                    np.full(s.shape, all_names.index(r), dtype=np.int64)
                    for s, r in zip(links.sources, links.relations, strict=True)
                ),
            ]
        ),
        all_names,
        report={"dropped": dict(links.report.dropped)},
    )
    report = EdgeReport.of(fresh.report)
    width = len(all_names)
    kept_key = (src * n_rows + dst) * width + relation
    new_src = np.asarray(fresh.src, dtype=np.int64)
    new_dst = np.asarray(fresh.dst, dtype=np.int64)
    new_rel = np.asarray(fresh.relation, dtype=np.int64)
    new_weight = np.asarray(fresh.weight, dtype=np.float64)
    new_key = (new_src * n_rows + new_dst) * width + new_rel
    places = np.searchsorted(kept_key, new_key)
    inside = np.minimum(places, max(kept_key.size - 1, 0))
    repeated = (places < kept_key.size) & (kept_key[inside] == new_key) if kept_key.size else places < 0
    out_weight = weight.copy()
    if repeated.any():
        at = places[repeated]
        out_weight[at] = np.maximum(out_weight[at], new_weight[repeated])
        counts = np.bincount(new_rel[repeated], minlength=width)
        for rel_id in np.flatnonzero(counts).tolist():
            report.drop(f"{all_names[rel_id]}.duplicate", int(counts[rel_id]))
    added = ~repeated
    n_added = int(added.sum())
    total = src.size + n_added
    inserted_at = places[added] + np.arange(n_added)
    from_kept = np.ones(total, dtype=np.bool_)
    from_kept[inserted_at] = False
    out: list[npt.NDArray[Any]] = []
    for kept_part, new_part, dtype in (
        (src, new_src, np.int64),
        (dst, new_dst, np.int64),
        (out_weight, new_weight, np.float32),
        (relation, new_rel, np.int32),
    ):
        column = np.empty(total, dtype=dtype)
        column[from_kept] = kept_part
        column[inserted_at] = new_part[added]
        out.append(column)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(out[0], minlength=n_rows), out=indptr[1:])
    edge_set = EdgeSet(indptr, out[1], out[2], out[3], all_names)
    edge_set.report = report.as_dict(edge_set)
    return edge_set


class _Kept:
    """The kept ``similar_to`` edges (CSR order) with each row's count, first position and
    k-th (smallest kept) weight."""

    def __init__(self, src: IntArray, dst: IntArray, weight: npt.NDArray[np.float64], n_rows: int) -> None:
        self.dst, self.weight = dst, weight
        self.count = np.bincount(src, minlength=n_rows)
        self.starts = np.concatenate(([0], np.cumsum(self.count)))[:-1]
        self.kth = np.full(n_rows, np.inf)
        has = self.count > 0
        if weight.size:
            self.kth[has] = np.minimum.reduceat(weight, self.starts[has])


def _sequence(
    rows: _Rows,
    config: SequenceEdgeConfig,
    new_rows: IntArray,
    removed_neighbours: IntArray,
    n_removed: int,
    links: _Links,
    src: IntArray,
    dst: IntArray,
    kept_sequence: npt.NDArray[np.bool_],
) -> npt.NDArray[np.bool_]:
    """The chains of the groups that gained or lost a document, ordered as a build orders them:
    each of their rows' successor in the new chain is compared with its kept edge (``src`` ->
    ``dst`` where ``kept_sequence``), so only the links that differ change: the new ones go
    into ``links``, and the mask of kept edges that no longer link successors is returned."""
    n_rows = len(rows.documents)
    code, _, _ = rows.groups(config.group_keys)
    changed = set(code[new_rows].tolist())
    if n_removed:
        # a removed row's group: that of its old neighbours in the chain, or any kept member
        changed.update(code[removed_neighbours].tolist() if config.group_keys else [0])
    changed.discard(-1)
    in_changed = np.zeros(n_rows, dtype=np.bool_)
    successor = np.full(n_rows, -1, dtype=np.int64)
    for members in rows.members(config.group_keys, changed):
        in_changed[members] = True
        if config.order_key is None:
            chain = members  # order value ties everywhere: row order
        else:
            metadata, key = rows.metadata, config.order_key
            ordered = sorted(
                (_order_value(metadata[row][key]), row) for row in members.tolist() if key in metadata[row]
            )
            chain = np.asarray([row for _, row in ordered], dtype=np.int64)
        successor[chain[:-1]] = chain[1:]
    mine = kept_sequence & in_changed[np.maximum(src, 0)]
    stale: npt.NDArray[np.bool_] = mine & (successor[np.maximum(src, 0)] != dst)
    linked = np.zeros(n_rows, dtype=np.bool_)  # rows whose kept edge still links their successor
    linked[src[mine & ~stale]] = True
    starts = np.flatnonzero(in_changed & (successor >= 0) & ~linked)
    if starts.size:
        links.add("sequence", starts, successor[starts], config.weight)
    return stale


def _similar(
    rows: _Rows,
    matrix: npt.NDArray[np.float32],
    config: SimilarityEdgeConfig,
    kept: _Kept,
    is_new: npt.NDArray[np.bool_],
    lost_neighbour: npt.NDArray[np.bool_],
    n_removed: int,
    links: _Links,
) -> npt.NDArray[np.bool_]:
    """Recompute the ``similar_to`` rows that can have changed (module docstring) into
    ``links``; returns the mask of rows recomputed (their old edges are dropped)."""
    n_rows = is_new.size
    code, names, _ = rows.groups(config.same_keys)
    touched = set(code[is_new | lost_neighbour].tolist())
    touched.discard(-1)
    groups = rows.members(config.same_keys, range(len(names)) if n_removed else touched)
    redo = np.zeros(n_rows, dtype=np.bool_)
    for members in groups:
        new_here = members[is_new[members]]
        k = min(config.k, members.size - 1)
        group = matrix[members]
        wanted = is_new[members] | lost_neighbour[members]
        whole = wanted.copy()  # rows scored against their whole group
        if new_here.size:
            against_new = group @ matrix[new_here].T
            beats = against_new.max(axis=1)
            # a margin for float32 rounding across matrix shapes: one row too many is harmless
            bar = np.where(kept.count[members] >= k, kept.kth[members], config.min_sim)
            wanted |= beats >= bar - 1e-5
        if n_removed or new_here.size:  # k itself moves for groups of k rows or fewer
            old_size = members.size - new_here.size
            if old_size - 1 < config.k or k < config.k:
                wanted[:] = True
                whole[:] = True
        redo[members[wanted]] = True
        if new_here.size and k >= 1:
            merged = np.flatnonzero(wanted & ~whole)
            if merged.size:
                _merge_new(members[merged], against_new[merged], new_here, kept, k, config.min_sim, links)
            wanted = whole
        if k < 1 or not wanted.any():
            continue
        local = np.flatnonzero(wanted)
        for start in range(0, local.size, 1024):
            part = local[start : start + 1024]
            block = group[part] @ group.T
            block[np.arange(part.size), part] = -np.inf
            scores, columns = top_k_rows(block, k)
            keep = np.isfinite(scores) & (scores >= config.min_sim)
            src = np.repeat(members[part], k).reshape(-1, k)[keep]
            links.add(
                "similar_to", src, members[columns[keep]], np.clip(scores[keep].astype(np.float64), 0.0, 1.0)
            )
    return redo


def _merge_new(
    targets: IntArray,
    against_new: npt.NDArray[np.float32],
    new_here: IntArray,
    kept: _Kept,
    k: int,
    min_sim: float,
    links: _Links,
) -> None:
    """Rows that lost no neighbour and that a new document beats: each takes the top k (ties
    by row) of its old k neighbours and the new documents of its group (nothing else can enter),
    all rows at once."""
    counts = kept.count[targets]
    slot = np.arange(int(counts.max()) if counts.size else 0)
    valid = slot[None, :] < counts[:, None]
    at = np.where(valid, kept.starts[targets][:, None] + slot[None, :], 0)
    candidates = np.concatenate(
        (
            np.where(valid, kept.dst[at] if kept.dst.size else -1, -1),
            np.broadcast_to(new_here, (targets.size, new_here.size)),
        ),
        axis=1,
    )
    scores = np.concatenate(
        (
            np.where(valid, kept.weight[at] if kept.weight.size else -np.inf, -np.inf),
            against_new.astype(np.float64),
        ),
        axis=1,
    )
    order = np.lexsort((candidates, -scores), axis=1)[:, :k]
    chosen = np.take_along_axis(candidates, order, axis=1)
    values = np.take_along_axis(scores, order, axis=1)
    keep = np.isfinite(values) & (values >= min_sim)
    sources = np.repeat(targets, order.shape[1]).reshape(order.shape)
    links.add("similar_to", sources[keep], chosen[keep], np.clip(values[keep], 0.0, 1.0))
