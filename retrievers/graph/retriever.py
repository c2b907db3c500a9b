"""GraphRetriever: seed search, then multi-hop traversal of the store's document edges with hop decay.

The algorithm is the ``GraphRetriever`` of the Go framework oasis (nevindra/oasis, ``rag``
package), with its scoring problems fixed; its exact behaviour stays available as
``scoring: oasis`` so the difference can be measured. Defaults in brackets.

1. **Seeds**: exact vector search for ``seed_top_k`` [10] documents; with
   ``seed_keyword_weight`` w > 0 [0 = off] also BM25 for ``seed_top_k``, and the two lists are
   fused by weighted reciprocal rank fusion, ``(1 - w) / (rrf_k + rank_v) + w / (rrf_k + rank_k)``
   (ranks from 1, ``rrf_k`` [60]), times ``rrf_k + 1`` so that a document first in both lists
   scores 1 (oasis's normalisation). A seed's ``seed_score`` is its cosine, or that fused score.
2. **Traversal**, breadth-first for up to ``max_hops`` [2] hops over outgoing edges, or over
   edges in both directions with ``bidirectional`` [false]; only relations in
   ``relation_filter`` [all] and edges with weight >= ``min_traversal_score`` [0] are followed;
   ``max_frontier`` [0 = no limit] keeps only the best that many of a hop's new documents for
   the next hop. Documents outside ``store.allowed`` (a scoped view) are never reached.
3. **Score** ``vector_weight * seed_score + graph_weight * bonus`` [0.7, 0.3], ``seed_score`` =
   0 for a document that is not a seed. ``hop_decay`` [(1.0, 0.7, 0.5)] gives the factor of hop
   h as ``hop_decay[h]`` (``hop_decay[0]`` belongs to the seeds and is not used, as in oasis); a
   single number d means ``d ** h``.

   ``scoring: propagated`` [default]: ``bonus(v)`` is the best path to v, the maximum over walks
   ``s = v0 -> v1 -> ... -> vh = v`` (1 <= h <= max_hops) from a seed ``s`` other than v of
   ``hop_decay[h] * w1 * ... * wh * max(seed_score(s), 0)``: the walk carries the relevance of
   the document it came from (``source_score``), each edge scales it by its weight, and the hop
   factor applies once, by depth. A seed reached from another seed gains its bonus; a seed never
   gains one from a walk that started at itself (cycles give nothing). Past the end of the
   decay list the last value holds.

   ``scoring: oasis`` keeps oasis's behaviour exactly: ``bonus = hop_decay[h] * w`` (the
   relevance of the source is ignored); seeds are marked visited before the walk, so they never
   gain a bonus; each document is scored once, through the *first* edge that reaches it in
   storage order (outgoing edges of the hop's documents by edge id, then, when bidirectional,
   incoming ones), not the best; past the decay list the factor is a constant 0.5.
4. **Final list**: by (score desc, doc id asc). ``graph_top_k`` n > 0 [0 = off] is oasis's fix
   for seeds crowding out graph-found documents: n of the top_k slots are reserved for
   documents the traversal found (the best n of them) and at most ``top_k - n`` go to seeds;
   the two pools are then merged in score order.

Departure, off by default: with ``rescore_reached`` a graph-found document that is not a seed
also gets ``vector_weight * cosine(query, document)`` (one dot product each), so documents
reached along equally good paths are ordered by their own similarity instead of by doc id.

Without edges (``store.edges`` None or empty) the retriever is vector search over the
``seed_top_k`` seeds, scored ``vector_weight * cosine``: no error. Every graph-found result
carries its path in ``provenance["path"]`` (a tuple of :class:`EdgeContext`, seed first; from/to
follow the walk, so an incoming edge traversed backwards appears reversed) and every result the
query's traversal cost in ``provenance["stats"]``: seeds, edges scanned and followed, documents
reached, hops run.

Implementation: the propagated traversal is a level-by-level max-product dynamic programme over
walks, vectorised over the CSR arrays. Per level and document it keeps the best value and the
best value from a *different* origin seed (two slots), which is exactly what "best walk from a
seed other than v" needs; back-pointers per slot give the path. Cost per hop is linear in the
edges leaving the documents reached at the previous hop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from retrievers.kernel import check_query
from retrievers.ranking import check_top_k
from retrievers.store.edges import EdgeSet
from retrievers.store import ContextStore
from retrievers.types import EdgeContext, Embedder, RetrievalResult

__all__ = ["GraphParams", "GraphRetriever"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

SCORING_MODES = ("propagated", "oasis")
#: oasis's factor for hops past the end of its decay list
OASIS_DECAY_PAST_LIST = 0.5
_MAX_HOPS = 10
_BIG = 10_000_000


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


@dataclass(frozen=True)
class GraphParams:
    """Query-time parameters (the edges themselves are a store setting, ``store.edges``).

    ``seed_top_k`` in [1, 10000000]; ``seed_keyword_weight`` in [0, 1]; ``rrf_k`` in
    [1, 10000000]; ``max_hops`` in [0, 10]; ``bidirectional``; ``relation_filter`` a non-empty
    list of relation names or None (all); ``min_traversal_score`` in [0, 1]; ``vector_weight``
    and ``graph_weight`` in [0, 1]; ``hop_decay`` a number in [0, 1] (d**h) or a non-empty list of
    numbers in [0, 1]; ``scoring`` propagated | oasis; ``graph_top_k`` in [0, 10000000] (0 = off);
    ``max_frontier`` in [0, 10000000] (0 = no limit); ``rescore_reached``;
    ``query_batch_size`` in [1, 65536].
    """

    seed_top_k: int = 10
    seed_keyword_weight: float = 0.0
    rrf_k: int = 60
    max_hops: int = 2
    bidirectional: bool = False
    relation_filter: tuple[str, ...] | None = None
    min_traversal_score: float = 0.0
    vector_weight: float = 0.7
    graph_weight: float = 0.3
    hop_decay: float | tuple[float, ...] = (1.0, 0.7, 0.5)
    scoring: str = "propagated"
    graph_top_k: int = 0
    max_frontier: int = 0
    rescore_reached: bool = False
    query_batch_size: int = 256

    def __post_init__(self) -> None:
        for name, low, high in (
            ("seed_top_k", 1, _BIG),
            ("rrf_k", 1, _BIG),
            ("max_hops", 0, _MAX_HOPS),
            ("graph_top_k", 0, _BIG),
            ("max_frontier", 0, _BIG),
            ("query_batch_size", 1, 65536),
        ):
            value = getattr(self, name)
            if not _is_int(value) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        for name in ("seed_keyword_weight", "min_traversal_score", "vector_weight", "graph_weight"):
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
        for name in ("bidirectional", "rescore_reached"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.scoring not in SCORING_MODES:
            raise ValueError(f"scoring must be one of {list(SCORING_MODES)}, got {self.scoring!r}")
        decay = self.hop_decay
        if _is_number(decay):
            if not 0.0 <= decay <= 1.0:
                raise ValueError(f"hop_decay must be a number in [0, 1] (factor d**h), got {decay!r}")
            object.__setattr__(self, "hop_decay", float(decay))
        else:
            if isinstance(decay, str) or not isinstance(decay, Sequence) or not decay:
                raise ValueError(
                    f"hop_decay must be a number in [0, 1] or a non-empty list of numbers in [0, 1], got {decay!r}"
                )
            values = list(decay)
            if any(not _is_number(value) or not 0.0 <= value <= 1.0 for value in values):
                raise ValueError(f"hop_decay values must be numbers in [0, 1], got {values}")
            object.__setattr__(self, "hop_decay", tuple(float(value) for value in values))
        relations = self.relation_filter
        if relations is not None:
            if isinstance(relations, str) or not isinstance(relations, Sequence) or not relations:
                raise ValueError(
                    f"relation_filter must be a non-empty list of relation names or null (all), got {relations!r}"
                )
            names = tuple(relations)
            if any(not isinstance(name, str) or not name for name in names):
                raise ValueError(f"relation_filter must hold non-empty relation names, got {list(names)}")
            object.__setattr__(self, "relation_filter", tuple(sorted(set(names))))

    def hop_factor(self, hop: int) -> float:
        """The decay factor of a document reached at ``hop`` >= 1 (see the module docstring)."""
        if isinstance(self.hop_decay, float):
            return float(self.hop_decay**hop)
        if hop < len(self.hop_decay):
            return self.hop_decay[hop]
        return self.hop_decay[-1] if self.scoring == "propagated" else OASIS_DECAY_PAST_LIST


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
class _Traversal:
    """What a traversal found: the documents it reached (``rows``, ascending) with their bonus
    and hop, the query's stats, and ``path(i)``, which rebuilds the path of ``rows[i]`` and names
    its origin seed (asked only for the documents that make the final list)."""

    rows: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    bonus: FloatArray = field(default_factory=lambda: np.empty(0, dtype=np.float64))
    hops: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    path: Callable[[int], tuple[tuple[EdgeContext, ...], int]] | None = None
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


class GraphRetriever:
    """Seed search plus multi-hop traversal of ``store.edges`` (see the module docstring)."""

    Params = GraphParams

    def __init__(
        self,
        store: ContextStore,
        embedder: Embedder,
        *,
        seed_top_k: int = 10,
        seed_keyword_weight: float = 0.0,
        rrf_k: int = 60,
        max_hops: int = 2,
        bidirectional: bool = False,
        relation_filter: Sequence[str] | None = None,
        min_traversal_score: float = 0.0,
        vector_weight: float = 0.7,
        graph_weight: float = 0.3,
        hop_decay: float | Sequence[float] = (1.0, 0.7, 0.5),
        scoring: str = "propagated",
        graph_top_k: int = 0,
        max_frontier: int = 0,
        rescore_reached: bool = False,
        query_batch_size: int = 256,
    ) -> None:
        self.params = GraphParams(
            seed_top_k=seed_top_k,
            seed_keyword_weight=seed_keyword_weight,
            rrf_k=rrf_k,
            max_hops=max_hops,
            bidirectional=bidirectional,
            # a bare string goes through as it is, for GraphParams to refuse with its message
            relation_filter=relation_filter  # type: ignore[arg-type]
            if relation_filter is None or isinstance(relation_filter, str)
            else tuple(relation_filter),
            min_traversal_score=min_traversal_score,
            vector_weight=vector_weight,
            graph_weight=graph_weight,
            hop_decay=tuple(hop_decay)
            if isinstance(hop_decay, Sequence) and not isinstance(hop_decay, str)
            else hop_decay,
            scoring=scoring,
            graph_top_k=graph_top_k,
            max_frontier=max_frontier,
            rescore_reached=rescore_reached,
            query_batch_size=query_batch_size,
        )
        if embedder.name != store.embedder_name:
            raise ValueError(
                f"embedder {embedder.name!r} is not the one the store was built with ({store.embedder_name!r})"
            )
        self.store = store
        self.embedder = embedder
        edges = store.edges
        self.edges: EdgeSet | None = edges if edges is not None and edges.n_edges > 0 else None
        self._relation_ok: BoolArray | None = None
        if self.edges is not None and self.params.relation_filter is not None:
            known = set(self.edges.relation_names)
            unknown = sorted(set(self.params.relation_filter) - known)
            if unknown:
                raise ValueError(
                    f"relation_filter names relation(s) {unknown} that the store's edges do not have; "
                    f"they have {sorted(known)}"
                )
            self._relation_ok = np.asarray(
                [name in self.params.relation_filter for name in self.edges.relation_names], dtype=bool
            )
        self._decay = [1.0] + [self.params.hop_factor(hop) for hop in range(1, self.params.max_hops + 1)]

    # -- public ---------------------------------------------------------------------------
    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        return self.retrieve_batch([query], top_k)[0]

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        check_top_k(top_k)
        for query in queries:
            check_query(query)
        params = self.params
        results: list[list[RetrievalResult]] = []
        size = params.query_batch_size
        for start in range(0, len(queries), size):
            chunk = list(queries[start : start + size])
            vectors = self.embedder.encode(chunk, kind="query")
            vector_hits = self.store.vectors.search(vectors, params.seed_top_k, mask=self.store.allowed)
            keyword_hits = (
                self.store.bm25.search(chunk, params.seed_top_k, mask=self.store.allowed)
                if params.seed_keyword_weight > 0
                else None
            )
            for index, (scores, rows) in enumerate(vector_hits):
                keyword = None if keyword_hits is None else keyword_hits[index][1]
                seed_rows, seed_scores = self._seeds(np.asarray(rows), np.asarray(scores), keyword)
                results.append(self._rank(seed_rows, seed_scores, np.asarray(vectors[index]), top_k))
        return results

    # -- seeds ----------------------------------------------------------------------------
    def _seeds(
        self, vector_rows: IntArray, vector_scores: npt.NDArray[Any], keyword_rows: IntArray | None
    ) -> tuple[IntArray, FloatArray]:
        """Seed rows and seed scores, best first (score desc, row asc)."""
        rows = vector_rows.astype(np.int64)
        scores = vector_scores.astype(np.float64)
        if keyword_rows is None:
            return rows, scores
        if self.params.scoring == "oasis" and keyword_rows.size == 0:
            return rows, scores  # oasis fuses only when the keyword search found something
        return _weighted_rrf(
            rows, keyword_rows.astype(np.int64), self.params.seed_keyword_weight, self.params.rrf_k
        )

    # -- ranking --------------------------------------------------------------------------
    def _rank(
        self, seed_rows: IntArray, seed_scores: FloatArray, query_vector: npt.NDArray[Any], top_k: int
    ) -> list[RetrievalResult]:
        params = self.params
        if self.edges is None or params.max_hops == 0 or seed_rows.size == 0:
            traversal = _Traversal(stats=_empty_stats(seed_rows.size))
        elif params.scoring == "propagated":
            traversal = self._propagate(seed_rows, seed_scores)
        else:
            traversal = self._oasis(seed_rows)
        seed_order = np.argsort(seed_rows, kind="stable")
        seed_sorted = seed_rows[seed_order]
        rows = np.union1d(seed_sorted, traversal.rows)
        seed_at, is_seed = _positions(seed_sorted, rows)
        found_at, is_found = _positions(traversal.rows, rows)
        similarity = np.zeros(rows.size, dtype=np.float64)
        similarity[is_seed] = seed_scores[seed_order][seed_at[is_seed]]
        if params.rescore_reached and not is_seed.all():
            query = np.asarray(query_vector, dtype=np.float32)
            reached = np.asarray(self.store.embeddings[rows[~is_seed]], dtype=np.float32)
            similarity[~is_seed] = (reached @ query).astype(np.float64)
        bonus = np.zeros(rows.size, dtype=np.float64)
        bonus[is_found] = traversal.bonus[found_at[is_found]]
        scores = params.vector_weight * similarity + params.graph_weight * bonus
        order = np.lexsort((rows, -scores))
        if params.graph_top_k > 0:
            seeds_first = order[is_seed[order]][: max(top_k - params.graph_top_k, 0)]
            graph_first = order[~is_seed[order]][: params.graph_top_k]
            chosen = np.concatenate((seeds_first, graph_first))
            chosen = chosen[np.lexsort((rows[chosen], -scores[chosen]))]
        else:
            chosen = order[:top_k]
        seed_rank_of = {int(row): rank for rank, row in enumerate(seed_rows.tolist(), 1)}
        doc_ids = self.store.doc_ids
        results = []
        for index in chosen.tolist():
            row = int(rows[index])
            provenance: dict[str, Any] = {}
            if is_seed[index]:
                provenance.update(
                    found_by="seed+graph" if is_found[index] else "seed",
                    seed_score=float(similarity[index]),
                    seed_rank=seed_rank_of[row],
                )
            else:
                provenance["found_by"] = "graph"
                if params.rescore_reached:
                    provenance["similarity"] = float(similarity[index])
            if is_found[index] and traversal.path is not None:
                position = int(found_at[index])
                path, origin = traversal.path(position)
                provenance.update(
                    graph_bonus=float(traversal.bonus[position]),
                    hop=int(traversal.hops[position]),
                    origin=doc_ids[origin],
                    path=path,
                )
            provenance["stats"] = traversal.stats
            results.append(
                RetrievalResult(doc_id=doc_ids[row], score=float(scores[index]), provenance=provenance)
            )
        return results

    # -- traversal: shared pieces ----------------------------------------------------------
    def _hop_edges(self, frontier: IntArray) -> tuple[IntArray, IntArray, IntArray, int]:
        """Edges a hop may follow from ``frontier`` (ascending rows): ``(position in frontier,
        edge id, neighbour row)`` for edges passing the relation, weight and scope filters,
        outgoing edges first (by edge id), then incoming ones (by edge id); and how many edges
        were scanned before filtering."""
        edges = self.edges
        assert edges is not None  # only called with edges
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
        if self.store.allowed is not None:
            keep &= self.store.allowed[neighbours]
        return positions[keep], edge_ids[keep], neighbours[keep], scanned

    def _context(self, edge_id: int, from_row: int, to_row: int, hop: int) -> EdgeContext:
        edges = self.edges
        assert edges is not None
        doc_ids = self.store.doc_ids
        return EdgeContext(
            src=doc_ids[from_row],
            dst=doc_ids[to_row],
            relation=edges.relation_names[int(edges.relation[edge_id])],
            weight=float(edges.weight[edge_id]),
            hop=hop,
        )

    # -- traversal: propagated (best path) -------------------------------------------------
    def _propagate(self, seed_rows: IntArray, seed_scores: FloatArray) -> _Traversal:
        edges = self.edges
        assert edges is not None
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
        traversal = _Traversal()
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

            def path(position: int) -> tuple[tuple[EdgeContext, ...], int]:
                return self._walk_back(
                    levels, int(hops[position]), int(indices[position]), int(slots[position])
                )

            traversal = _Traversal(rows=all_nodes[firsts], bonus=all_bonus[firsts], hops=hops, path=path)
        reached = (
            np.unique(np.concatenate([level.nodes for level in levels[1:]])) if len(levels) > 1 else None
        )
        stats = traversal.stats = _empty_stats(seed_rows.size)
        stats.update(
            edges_scanned=scanned,
            edges_followed=followed,
            nodes_reached=0 if reached is None else int(reached.size),
            graph_found=0 if reached is None else int(np.count_nonzero(~np.isin(reached, seed_rows))),
            hops=len(levels) - 1,
        )
        return traversal

    def _walk_back(
        self, levels: list[_Level], hop: int, index: int, slot: int
    ) -> tuple[tuple[EdgeContext, ...], int]:
        steps: list[EdgeContext] = []
        while hop > 0:
            level = levels[hop]
            pred, pred_slot = int(level.pred[index, slot]), int(level.pred_slot[index, slot])
            from_row = int(levels[hop - 1].nodes[pred])
            steps.append(self._context(int(level.edge[index, slot]), from_row, int(level.nodes[index]), hop))
            hop, index, slot = hop - 1, pred, pred_slot
        return tuple(reversed(steps)), int(levels[0].nodes[index])

    # -- traversal: oasis (faithful) --------------------------------------------------------
    def _oasis(self, seed_rows: IntArray) -> _Traversal:
        edges = self.edges
        assert edges is not None
        params = self.params
        visited = np.sort(seed_rows)
        frontier = seed_rows
        parent: dict[int, tuple[int, int, int, float]] = {}  # row -> (from row, edge id, hop, bonus)
        scanned = followed = hops = 0
        for hop in range(1, params.max_hops + 1):
            if frontier.size == 0:
                break
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

        def path(position: int) -> tuple[tuple[EdgeContext, ...], int]:
            steps: list[EdgeContext] = []
            current = int(found_rows[position])
            while current in parent:
                from_row, edge_id, step_hop, _ = parent[current]
                steps.append(self._context(edge_id, from_row, current, step_hop))
                current = from_row
            return tuple(reversed(steps)), current

        stats = _empty_stats(seed_rows.size)
        stats.update(
            edges_scanned=scanned,
            edges_followed=followed,
            nodes_reached=len(parent),
            graph_found=len(parent),
            hops=hops,
        )
        return _Traversal(
            rows=found_rows,
            bonus=np.asarray([parent[row][3] for row in found_rows.tolist()], dtype=np.float64),
            hops=np.asarray([parent[row][2] for row in found_rows.tolist()], dtype=np.int64),
            path=path,
            stats=stats,
        )


def _positions(sorted_rows: IntArray, rows: IntArray) -> tuple[IntArray, BoolArray]:
    """For each of ``rows``: its index in ``sorted_rows`` and whether it is there at all."""
    at = np.searchsorted(sorted_rows, rows)
    present = np.zeros(rows.size, dtype=bool)
    inside = at < sorted_rows.size
    present[inside] = sorted_rows[at[inside]] == rows[inside]
    return at, present


def _empty_stats(n_seeds: int) -> dict[str, Any]:
    return {
        "seeds": int(n_seeds),
        "edges_scanned": 0,
        "edges_followed": 0,
        "nodes_reached": 0,
        "graph_found": 0,
        "hops": 0,
    }


def _weighted_rrf(
    vector_rows: IntArray, keyword_rows: IntArray, keyword_weight: float, rrf_k: int
) -> tuple[IntArray, FloatArray]:
    """oasis's seed fusion: ``(1 - w) / (k + rank_v) + w / (k + rank_k)`` with ranks from 1,
    times ``k + 1`` (a document first in both lists scores 1); ordered by (score desc, row asc).
    Kept private until the hybrid retriever's shared fusion module exists."""
    fused: dict[int, float] = {}
    for weight, rows in ((1.0 - keyword_weight, vector_rows), (keyword_weight, keyword_rows)):
        for rank, row in enumerate(rows.tolist(), 1):
            fused[int(row)] = fused.get(int(row), 0.0) + weight / (rrf_k + rank)
    ordered = sorted(fused.items(), key=lambda item: (-item[1], item[0]))
    rows = np.asarray([row for row, _ in ordered], dtype=np.int64)
    scores = np.asarray([score * (rrf_k + 1) for _, score in ordered], dtype=np.float64)
    return rows, scores
