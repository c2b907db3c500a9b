"""Traversal of the store's edges from the seeds: the two scoring modes' walks.

``propagated`` is a level-by-level max-product dynamic programme over walks, vectorised over the
CSR arrays of :class:`~retrievers.store.edges.EdgeSet`. Per level and document it keeps the best
value and the best value from a *different* origin seed (two slots), which is exactly what "best
walk from a seed other than v" needs; back-pointers per slot give the path. Cost per hop is
linear in the edges leaving the documents reached at the previous hop.

``oasis`` is oasis's loop (``rag/retriever.go``) kept exactly: a visited set seeded with the
seeds, edges of the frontier in storage order (outgoing by edge id, then incoming when
bidirectional), the first edge that reaches a document scores it.

Both follow only edges that pass the relation filter and ``min_traversal_score`` and that lead
to rows inside the retriever's mask (scope and metadata filters); what they found is kept as
arrays, and paths are rebuilt only for the documents that become results, all of a query's at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.graph.params import GraphParams
from retrievers.spans import lap, span
from retrievers.store.edges import EdgeSet
from retrievers.store.ids import IdColumn
from retrievers.types import EdgeContext

__all__ = ["Traversal", "WalkPath", "Walker", "empty_stats"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
#: a walk's steps from its origin seed, and that seed's row
WalkPath = tuple[tuple[EdgeContext, ...], int]


def empty_stats(n_seeds: int) -> dict[str, Any]:
    """A query's traversal cost before any hop: its seeds, nothing scanned or reached."""
    return {
        "seeds": int(n_seeds),
        "edges_scanned": 0,
        "edges_followed": 0,
        "nodes_reached": 0,
        "graph_found": 0,
        "hops": 0,
    }


@dataclass
class _Level:
    """The documents a walk reaches at one hop, with two slots each: the best walk value, and
    the best value among walks from another origin seed. Slot arrays are ``(n, 2)``."""

    nodes: IntArray  # store rows, ascending
    values: FloatArray  # -inf = empty slot
    origins: IntArray  # origin seed row, -1 = empty slot
    pred: IntArray  # index into the previous level's nodes
    pred_slot: IntArray
    edge: IntArray  # edge id
    expand: BoolArray  # expanded at the next hop (max_frontier)


@dataclass
class Traversal:
    """What a traversal found: the documents it reached (``rows``, ascending) with their bonus
    and hop, the query's stats, and ``paths(positions)``, which rebuilds the path of each
    ``rows[i]`` and names its origin seed row (asked once, for the documents that make the final
    list)."""

    rows: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    bonus: FloatArray = field(default_factory=lambda: np.empty(0, dtype=np.float64))
    hops: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    paths: Callable[[IntArray], list[WalkPath]] | None = None
    stats: dict[str, Any] = field(default_factory=dict)


def _gather(indptr: npt.NDArray[Any], rows: IntArray) -> tuple[IntArray, IntArray]:
    """For CSR ``indptr`` and ``rows``: ``(position in rows, entry index)`` of every entry of
    those rows, row by row, entries in order."""
    starts = np.asarray(indptr[rows], dtype=np.int64)
    counts = np.asarray(indptr[rows + 1], dtype=np.int64) - starts
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    positions = np.repeat(np.arange(rows.size, dtype=np.int64), counts)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return positions, np.repeat(starts, counts) + offsets


class Walker:
    """Walks ``edges`` for one retriever: its parameters, the rows it may reach (``mask``, None
    = all) and the store's row ids (for the paths). A ``relation_filter`` naming a relation the
    edges do not have is refused here, at construction."""

    def __init__(
        self, edges: EdgeSet, params: GraphParams, mask: BoolArray | None, doc_ids: IdColumn
    ) -> None:
        self.edges = edges
        self.params = params
        self.mask = mask
        self.doc_ids = doc_ids
        self._relation_ok: BoolArray | None = None
        if params.relation_filter is not None:
            known = set(edges.relation_names)
            unknown = sorted(set(params.relation_filter) - known)
            if unknown:
                raise params.fail(
                    "relation_filter",
                    f"names relation(s) {unknown} that the store's edges do not have; they have {sorted(known)}",
                )
            self._relation_ok = np.asarray(
                [name in params.relation_filter for name in edges.relation_names], dtype=bool
            )
        self._decay = [1.0] + [params.hop_factor(hop) for hop in range(1, params.max_hops + 1)]

    def walk(self, seed_rows: IntArray, seed_scores: FloatArray) -> Traversal:
        """The documents reached from the seeds (``seed_scores`` in the order of ``seed_rows``)."""
        if self.params.max_hops == 0 or seed_rows.size == 0:
            return Traversal(stats=empty_stats(seed_rows.size))
        with span("traverse"):  # a hop lap per hop that scans edges
            if self.params.scoring == "propagated":
                return self._propagate(seed_rows, seed_scores)
            return self._oasis(seed_rows)

    # -- one hop's edges; a step of a path ---------------------------------------------------
    def _hop_edges(self, frontier: IntArray) -> tuple[IntArray, IntArray, IntArray, int]:
        """Edges a hop may follow from ``frontier`` (ascending rows): ``(position in frontier,
        edge id, neighbour row)`` for edges passing the relation, weight and scope filters,
        outgoing edges first (by edge id), then incoming ones (by edge id); and how many edges
        were scanned before filtering."""
        edges = self.edges
        positions, edge_ids = _gather(edges.indptr, frontier)
        neighbours = np.asarray(edges.dst[edge_ids], dtype=np.int64)
        if self.params.bidirectional:
            in_indptr, in_edges = edges.incoming()
            in_positions, entries = _gather(in_indptr, frontier)
            in_edge_ids = in_edges[entries]
            order = np.argsort(in_edge_ids, kind="stable")
            in_positions, in_edge_ids = in_positions[order], in_edge_ids[order]
            positions = np.concatenate((positions, in_positions))
            edge_ids = np.concatenate((edge_ids, in_edge_ids))
            neighbours = np.concatenate((neighbours, edges.src[in_edge_ids]))
        scanned = int(edge_ids.size)
        keep = np.asarray(edges.weight[edge_ids], dtype=np.float64) >= self.params.min_traversal_score
        if self._relation_ok is not None:
            keep &= self._relation_ok[np.asarray(edges.relation[edge_ids], dtype=np.int64)]
        if self.mask is not None:
            keep &= self.mask[neighbours]
        return positions[keep], edge_ids[keep], neighbours[keep], scanned

    def _contexts(
        self, edge_ids: IntArray, from_rows: IntArray, to_rows: IntArray, hops: IntArray
    ) -> list[EdgeContext]:
        """The steps ``from_rows[i] -> to_rows[i]`` over ``edge_ids[i]`` at ``hops[i]``: each
        column gathered once, then one EdgeContext a step."""
        edges = self.edges
        names = edges.relation_names
        return [
            EdgeContext(src=src, dst=dst, relation=names[relation], weight=weight, hop=hop)
            for src, dst, relation, weight, hop in zip(
                self.doc_ids.take(from_rows),
                self.doc_ids.take(to_rows),
                np.asarray(edges.relation[edge_ids], dtype=np.int64).tolist(),
                np.asarray(edges.weight[edge_ids], dtype=np.float64).tolist(),
                hops.tolist(),
                strict=True,
            )
        ]

    # -- propagated: the best path ------------------------------------------------------------
    def _propagate(self, seed_rows: IntArray, seed_scores: FloatArray) -> Traversal:
        edges = self.edges
        params = self.params
        order = np.argsort(seed_rows, kind="stable")
        nodes = seed_rows[order]
        n = nodes.size
        values = np.full((n, 2), -np.inf)
        values[:, 0] = np.maximum(seed_scores[order], 0.0)
        origins = np.full((n, 2), -1, dtype=np.int64)
        origins[:, 0] = nodes
        empty = np.full((n, 2), -1, dtype=np.int64)
        levels = [_Level(nodes, values, origins, empty, empty.copy(), empty.copy(), np.ones(n, dtype=bool))]
        records: list[tuple[IntArray, FloatArray, int, IntArray, IntArray]] = []
        scanned = followed = 0
        for hop in range(1, params.max_hops + 1):
            previous = levels[-1]
            expanding = np.flatnonzero(previous.expand)
            if expanding.size == 0:
                break
            lap("hop")
            positions, edge_ids, neighbours, hop_scanned = self._hop_edges(previous.nodes[expanding])
            scanned += hop_scanned
            followed += int(edge_ids.size)
            if edge_ids.size == 0:
                break
            sources = expanding[positions]  # indices into previous level
            weights = np.asarray(edges.weight[edge_ids], dtype=np.float64)
            # one candidate per edge and filled slot of its source
            filled = previous.origins[sources, 1] >= 0
            cand_node = np.concatenate((neighbours, neighbours[filled]))
            cand_value = np.concatenate(
                (weights * previous.values[sources, 0], weights[filled] * previous.values[sources[filled], 1])
            )
            cand_origin = np.concatenate((previous.origins[sources, 0], previous.origins[sources[filled], 1]))
            cand_pred = np.concatenate((sources, sources[filled]))
            cand_slot = np.concatenate(
                (np.zeros(sources.size, np.int64), np.ones(int(filled.sum()), np.int64))
            )
            cand_edge = np.concatenate((edge_ids, edge_ids[filled]))
            # per neighbour: best first; ties by origin row, predecessor, edge id (deterministic)
            ranked = np.lexsort((cand_edge, cand_slot, cand_pred, cand_origin, -cand_value, cand_node))
            cand_node, cand_value, cand_origin = cand_node[ranked], cand_value[ranked], cand_origin[ranked]
            cand_pred, cand_slot, cand_edge = cand_pred[ranked], cand_slot[ranked], cand_edge[ranked]
            starts = np.flatnonzero(np.concatenate(([True], cand_node[1:] != cand_node[:-1])))
            group = np.cumsum(np.concatenate(([True], cand_node[1:] != cand_node[:-1]))) - 1
            other = np.flatnonzero(cand_origin != cand_origin[starts][group])
            second_groups, first_other = np.unique(group[other], return_index=True)
            seconds = other[first_other]
            m = starts.size
            level = _Level(
                nodes=cand_node[starts],
                values=np.full((m, 2), -np.inf),
                origins=np.full((m, 2), -1, dtype=np.int64),
                pred=np.full((m, 2), -1, dtype=np.int64),
                pred_slot=np.full((m, 2), -1, dtype=np.int64),
                edge=np.full((m, 2), -1, dtype=np.int64),
                expand=np.ones(m, dtype=bool),
            )
            for slot, picks, targets in ((0, starts, np.arange(m)), (1, seconds, second_groups)):
                level.values[targets, slot] = cand_value[picks]
                level.origins[targets, slot] = cand_origin[picks]
                level.pred[targets, slot] = cand_pred[picks]
                level.pred_slot[targets, slot] = cand_slot[picks]
                level.edge[targets, slot] = cand_edge[picks]
            if params.max_frontier and m > params.max_frontier:
                best = np.lexsort((level.nodes, -level.values[:, 0]))[: params.max_frontier]
                level.expand = np.zeros(m, dtype=bool)
                level.expand[best] = True
            levels.append(level)
            # a document's bonus at this hop: its best walk from an origin other than itself
            use_first = level.origins[:, 0] != level.nodes
            slot_used = np.where(use_first, 0, 1)
            value = level.values[np.arange(m), slot_used]
            ok = np.isfinite(value)
            idx = np.flatnonzero(ok)
            records.append((level.nodes[idx], self._decay[hop] * value[idx], hop, idx, slot_used[idx]))
        traversal = Traversal()
        if records:
            all_nodes = np.concatenate([record[0] for record in records])
            all_bonus = np.concatenate([record[1] for record in records])
            all_hops = np.concatenate(
                [np.full(record[0].size, record[2], dtype=np.int64) for record in records]
            )
            all_index = np.concatenate([record[3] for record in records])
            all_slots = np.concatenate([record[4] for record in records])
            # per document: the largest bonus; ties go to the shorter walk
            ranked = np.lexsort((all_slots, all_hops, -all_bonus, all_nodes))
            nodes_ranked = all_nodes[ranked]
            firsts = ranked[np.concatenate(([True], nodes_ranked[1:] != nodes_ranked[:-1]))]
            hops, indices, slots = all_hops[firsts], all_index[firsts], all_slots[firsts]

            def paths(positions: IntArray) -> list[WalkPath]:
                return self._walk_back(levels, hops[positions], indices[positions], slots[positions])

            traversal = Traversal(rows=all_nodes[firsts], bonus=all_bonus[firsts], hops=hops, paths=paths)
        reached = (
            np.unique(np.concatenate([level.nodes for level in levels[1:]])) if len(levels) > 1 else None
        )
        stats = traversal.stats = empty_stats(seed_rows.size)
        stats.update(
            edges_scanned=scanned,
            edges_followed=followed,
            nodes_reached=0 if reached is None else int(reached.size),
            graph_found=0 if reached is None else int(np.count_nonzero(~np.isin(reached, seed_rows))),
            hops=len(levels) - 1,
        )
        return traversal

    def _walk_back(
        self, levels: list[_Level], hops: IntArray, indices: IntArray, slots: IntArray
    ) -> list[WalkPath]:
        """The path of each walk ending in slot ``slots[i]`` of ``levels[hops[i]].nodes[indices[i]]``,
        followed back along the back-pointers one hop at a time for every walk at once."""
        hop, index, slot = hops.copy(), indices.copy(), slots.copy()
        walks: list[IntArray] = []
        columns: list[tuple[IntArray, IntArray, IntArray, IntArray]] = []
        for level_hop in range(int(hop.max(initial=0)), 0, -1):
            at = np.flatnonzero(hop == level_hop)  # walks ending here, and those followed back to here
            level = levels[level_hop]
            here, here_slot = index[at], slot[at]
            pred = level.pred[here, here_slot]
            walks.append(at)
            columns.append(
                (
                    level.edge[here, here_slot],
                    levels[level_hop - 1].nodes[pred],
                    level.nodes[here],
                    np.full(at.size, level_hop, dtype=np.int64),
                )
            )
            hop[at] -= 1
            index[at], slot[at] = pred, level.pred_slot[here, here_slot]
        steps: list[list[EdgeContext]] = [[] for _ in range(hops.size)]
        if walks:
            contexts = self._contexts(*(np.concatenate(parts) for parts in zip(*columns, strict=True)))
            for walk, context in zip(np.concatenate(walks).tolist(), contexts, strict=True):
                steps[walk].append(context)  # last hop first
        origins = levels[0].nodes[index].tolist()  # every walk is back at its seed
        return [(tuple(reversed(walk)), origin) for walk, origin in zip(steps, origins, strict=True)]

    # -- oasis: the first edge, as oasis walks ------------------------------------------------
    def _oasis(self, seed_rows: IntArray) -> Traversal:
        edges = self.edges
        params = self.params
        visited = np.sort(seed_rows)
        frontier = seed_rows
        parent: dict[int, tuple[int, int, int, float]] = {}  # row -> (from row, edge id, hop, bonus)
        scanned = followed = hops = 0
        for hop in range(1, params.max_hops + 1):
            if frontier.size == 0:
                break
            lap("hop")
            ordered = np.sort(frontier)
            positions, edge_ids, neighbours, hop_scanned = self._hop_edges(ordered)
            scanned += hop_scanned
            followed += int(edge_ids.size)
            fresh = ~np.isin(neighbours, visited)
            positions, edge_ids, neighbours = positions[fresh], edge_ids[fresh], neighbours[fresh]
            if neighbours.size == 0:
                break
            hops = hop
            new_rows, first = np.unique(neighbours, return_index=True)
            first = np.sort(first)  # discovery order
            decay = self._decay[hop]
            bonuses = decay * np.asarray(edges.weight[edge_ids[first]], dtype=np.float64)
            for pick, bonus in zip(first.tolist(), bonuses.tolist(), strict=True):
                parent[int(neighbours[pick])] = (
                    int(ordered[positions[pick]]),
                    int(edge_ids[pick]),
                    hop,
                    bonus,
                )
            visited = np.union1d(visited, new_rows)
            discovered = neighbours[first]
            if params.max_frontier and discovered.size > params.max_frontier:
                keep = np.argsort(-bonuses, kind="stable")[: params.max_frontier]
                discovered = discovered[np.sort(keep)]
            frontier = discovered
        found_rows = np.asarray(sorted(parent), dtype=np.int64)

        def paths(positions: IntArray) -> list[WalkPath]:
            walks: list[int] = []
            origins: list[int] = []
            columns: list[tuple[int, int, int, int]] = []  # (edge id, from row, to row, hop)
            for walk, row in enumerate(found_rows[positions].tolist()):
                current = row
                while current in parent:
                    from_row, edge_id, step_hop, _ = parent[current]
                    walks.append(walk)
                    columns.append((edge_id, from_row, current, step_hop))
                    current = from_row
                origins.append(current)
            steps: list[list[EdgeContext]] = [[] for _ in origins]
            if columns:
                edge_ids, from_rows, to_rows, step_hops = (
                    np.asarray(part, dtype=np.int64) for part in zip(*columns, strict=True)
                )
                for walk, context in zip(
                    walks, self._contexts(edge_ids, from_rows, to_rows, step_hops), strict=True
                ):
                    steps[walk].append(context)  # last hop first
            return [(tuple(reversed(walk)), origin) for walk, origin in zip(steps, origins, strict=True)]

        stats = empty_stats(seed_rows.size)
        stats.update(
            edges_scanned=scanned,
            edges_followed=followed,
            nodes_reached=len(parent),
            graph_found=len(parent),
            hops=hops,
        )
        return Traversal(
            rows=found_rows,
            bonus=np.asarray([parent[row][3] for row in found_rows.tolist()], dtype=np.float64),
            hops=np.asarray([parent[row][2] for row in found_rows.tolist()], dtype=np.int64),
            paths=paths,
            stats=stats,
        )
