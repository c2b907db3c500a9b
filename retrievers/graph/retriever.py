"""GraphRetriever: seed search, then multi-hop traversal of the store's edges with hop decay.

The algorithm is the ``GraphRetriever`` of the Go framework oasis (nevindra/oasis, ``rag``
package), with its scoring problems fixed; its exact behaviour stays available as
``scoring: oasis`` so the difference can be measured. Defaults in brackets.

1. **Seeds**: exact vector search for ``seed_top_k`` [10] rows; with ``seed_keyword_weight``
   w > 0 [0 = off] also BM25 for ``seed_top_k``, and the two lists are fused by weighted
   reciprocal rank fusion (:func:`retrievers.fusion.reciprocal_rank_fusion` with weights
   ``1 - w, w`` and ``k = rrf_k`` [60], normalised: times ``rrf_k + 1``, so that a row first in
   both lists scores 1, as oasis does). A seed's ``seed_score`` is its cosine, or that fused
   score. In oasis's mode the lists are fused only when BM25 found something.
2. **Traversal** (:mod:`retrievers.graph.traversal`), breadth-first for up to ``max_hops`` [2]
   hops over outgoing edges, or over edges in both directions with ``bidirectional`` [false];
   only relations in ``relation_filter`` [all] and edges with weight >= ``min_traversal_score``
   [0] are followed; ``max_frontier`` [0 = no limit] keeps only the best that many of a hop's
   new rows for the next hop.
3. **Score** ``vector_weight * seed_score + graph_weight * bonus`` [0.7, 0.3], ``seed_score`` =
   0 for a row that is not a seed; the hop factor is :meth:`GraphParams.hop_factor`.

   ``scoring: propagated`` [default]: ``bonus(v)`` is the best path to v, the maximum over walks
   ``s = v0 -> v1 -> ... -> vh = v`` (1 <= h <= max_hops) from a seed ``s`` other than v of
   ``hop_factor(h) * w1 * ... * wh * max(seed_score(s), 0)``: the walk carries the relevance of
   the row it came from, each edge scales it by its weight, and the hop factor applies once, by
   depth. A seed reached from another seed gains its bonus; a seed never gains one from a walk
   that started at itself (cycles give nothing).

   ``scoring: oasis`` keeps oasis's behaviour exactly: ``bonus = hop_factor(h) * w`` (the
   relevance of the source is ignored); seeds are marked visited before the walk, so they never
   gain a bonus; each row is scored once, through the *first* edge that reaches it in storage
   order (outgoing edges of the hop's rows by edge id, then, when bidirectional, incoming ones),
   not the best.
4. **Selection**: the best ``depth`` documents by (score desc, doc id asc), ``depth`` being
   what the kernel asks for (``top_k``, or the rerank pool). ``graph_top_k`` n > 0 [0 = off] is
   oasis's fix for seeds crowding out graph-found documents: n of those slots are reserved for
   documents the traversal found (the best n of them) and at most ``depth - n`` go to seeds. The
   kernel then orders the selection, reranks it when a ``reranker`` is set, and cuts it to
   ``top_k`` (so with a reranker the reservation holds in the pool the reranker sees).

Departures from oasis, on by default since ``ALGORITHM_VERSION`` 2 (oasis's list is the seeds and
what the walk found, graph-found rows scored by their bonus alone; on CISI's dense citation graph
that list recalled far less than vector search: R@100 0.303 against 0.472):

* ``rescore_reached`` [true]: a graph-found row that is not a seed also gets
  ``vector_weight * cosine(query, row)`` (one dot product each), so rows reached along equally
  good paths are ordered by their own similarity instead of by doc id.
* ``vector_fill`` [true]: the seed search goes on to the list's depth (``max(seed_top_k,
  depth)``; exact search, so its first ``seed_top_k`` rows are the seeds); the rows past the seeds
  are candidates too, scored ``vector_weight * cosine`` plus the graph bonus when the walk also
  reached them. A document vector search ranks within the list is always a candidate, so the
  expansion adds graph-found documents to the seed search's own list instead of replacing it;
  they displace one only by scoring higher. ``graph_top_k`` reserves its slots for rows only
  the walk found (neither seeds nor fill).

With both off (``conf/retriever/oasis_graph.yaml`` also sets ``scoring: oasis``) the retriever
is oasis's.

The kernel's abilities: metadata ``filters`` and a scoped view give :attr:`mask`, which restricts
the seed searches and every hop (a row outside it is never seeded nor reached, so a walk does not
pass through it either). In a chunked store the rows are chunks and the edges join chunks; the
results are documents, each scored by its best chunk, which also decides whether it counts as a
seed or as graph-found for ``graph_top_k``; ``chunk_id`` names that chunk and the path, origin
and seed rank are the chunk's.

Without edges (``store.edges`` None or empty) the retriever is vector search over the
``seed_top_k`` seeds (and the fill), scored ``vector_weight * cosine``: no error. Provenance of a
result: ``found_by`` ("seed", "seed+graph", "vector" (fill), "vector+graph" or "graph");
``similarity`` for fill rows; for seeds ``seed_score`` and ``seed_rank``
(from 1); for graph-found rows ``graph_bonus``, ``hop``, ``origin`` (the seed the path starts
at) and ``path`` (a tuple of :class:`EdgeContext`, seed first; from/to follow the walk, so an
incoming edge traversed backwards appears reversed); ``similarity`` with ``rescore_reached``;
``stats``: the query's traversal cost (seeds, edges scanned and followed, rows reached, hops).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.fusion import ranked, reciprocal_rank_fusion
from retrievers.graph.params import GraphParams
from retrievers.graph.traversal import Traversal, Walker, WalkPath, empty_stats
from retrievers.index.vectors import Hits
from retrievers.kernel import Candidates, KernelRetriever
from retrievers.parents import resolve_parents
from retrievers.ranking import order_rows
from retrievers.spans import span

__all__ = ["GraphRetriever"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def _positions(sorted_rows: IntArray, rows: IntArray) -> tuple[IntArray, BoolArray]:
    """For each of ``rows``: its index in ``sorted_rows`` and whether it is there at all."""
    at = np.searchsorted(sorted_rows, rows)
    present = np.zeros(rows.size, dtype=bool)
    inside = at < sorted_rows.size
    present[inside] = sorted_rows[at[inside]] == rows[inside]
    return at, present


class GraphRetriever(KernelRetriever):
    """Seed search plus multi-hop traversal of ``store.edges`` (see the module docstring)."""

    Params = GraphParams
    params: GraphParams
    # 2: defaults rescore_reached and vector_fill on (graph R@100 no longer below dense's);
    # the oasis preset (conf/retriever/oasis_graph.yaml) turns both off
    ALGORITHM_VERSION = 2

    def index_parts(self) -> tuple[str, ...]:
        keyword = ("bm25",) if self.params.seed_keyword_weight > 0 else ()
        return (*super().index_parts(), "edges", *keyword)

    def setup(self) -> None:
        edges = self.store.edges
        self.walker: Walker | None = None
        if edges is not None and edges.n_edges > 0:
            self.walker = Walker(edges, self.params, self.mask, self.store.doc_ids)

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        assert vectors is not None
        params = self.params
        seeds = params.seed_top_k
        # with vector_fill the same exact search goes on to depth: its first seed_top_k rows are
        # the seeds (the ranking is exact, so they are what a seed_top_k search returns)
        fetch = max(seeds, depth) if params.vector_fill else seeds
        vector_hits = self.vector_search(vectors, fetch)
        keyword_hits: Hits | None = None
        if params.seed_keyword_weight > 0:
            with span("bm25"):
                keyword_hits = self.store.bm25.search(list(queries), seeds, mask=self.mask)
        found = []
        for index, (scores, rows) in enumerate(vector_hits):
            keyword = None if keyword_hits is None else np.asarray(keyword_hits[index][1], dtype=np.int64)
            rows, scores = np.asarray(rows), np.asarray(scores)
            seed_rows, seed_scores = self._seeds(rows[:seeds], scores[:seeds], keyword)
            fill = (rows[seeds:].astype(np.int64), scores[seeds:].astype(np.float64))
            found.append(self._candidates(seed_rows, seed_scores, np.asarray(vectors[index]), depth, fill))
        return found

    # -- seeds ----------------------------------------------------------------------------------

    def _seeds(
        self, vector_rows: npt.NDArray[Any], vector_scores: npt.NDArray[Any], keyword_rows: IntArray | None
    ) -> tuple[IntArray, FloatArray]:
        """Seed rows and seed scores, best first (score desc, row asc)."""
        rows = vector_rows.astype(np.int64)
        scores = vector_scores.astype(np.float64)
        if keyword_rows is None:
            return rows, scores
        if self.params.scoring == "oasis" and keyword_rows.size == 0:
            return rows, scores  # oasis fuses only when the keyword search found something
        weight = self.params.seed_keyword_weight
        with span("seeds"):
            fused = ranked(
                reciprocal_rank_fusion(
                    [rows.tolist(), keyword_rows.tolist()],
                    [1.0 - weight, weight],
                    k=self.params.rrf_k,
                    normalize=True,
                )
            )
        return (
            np.asarray([row for row, _ in fused], dtype=np.int64),
            np.asarray([score for _, score in fused], dtype=np.float64),
        )

    # -- scores, selection, provenance ----------------------------------------------------------

    def _select(self, rows: IntArray, scores: FloatArray, graph_only: BoolArray, depth: int) -> IntArray:
        """Indices of the candidates handed to the kernel: the best ``depth`` documents (one
        candidate each, its best row), ``graph_top_k`` of them reserved for documents only the
        traversal found (neither seeds nor vector fill)."""
        if self.store.chunked:  # a document is its best chunk, as the kernel will resolve it
            order = np.searchsorted(rows, resolve_parents(self.store.parent_of, rows, scores).rows)
        else:
            order = order_rows(rows, scores)
        reserved = min(self.params.graph_top_k, depth)
        if reserved == 0:
            return order[:depth]
        others_first = order[~graph_only[order]][: depth - reserved]
        graph_first = order[graph_only[order]][:reserved]
        return np.concatenate((others_first, graph_first))

    def _candidates(
        self,
        seed_rows: IntArray,
        seed_scores: FloatArray,
        query_vector: npt.NDArray[Any],
        depth: int,
        fill: tuple[IntArray, FloatArray],
    ) -> Candidates:
        params = self.params
        traversal = (
            self.walker.walk(seed_rows, seed_scores)
            if self.walker is not None
            else Traversal(stats=empty_stats(seed_rows.size))
        )
        seed_order = np.argsort(seed_rows, kind="stable")
        seed_sorted = seed_rows[seed_order]
        fill_rows, fill_scores = fill
        fill_order = np.argsort(fill_rows, kind="stable")
        fill_sorted = fill_rows[fill_order]
        rows = np.union1d(np.union1d(seed_sorted, traversal.rows), fill_sorted)
        seed_at, is_seed = _positions(seed_sorted, rows)
        found_at, is_found = _positions(traversal.rows, rows)
        fill_at, is_fill = _positions(fill_sorted, rows)
        is_fill &= ~is_seed  # a keyword-fused seed list may hold a row past the vector seeds
        similarity = np.zeros(rows.size, dtype=np.float64)
        similarity[is_seed] = seed_scores[seed_order][seed_at[is_seed]]
        seed_rank = np.zeros(rows.size, dtype=np.int64)
        seed_rank[is_seed] = seed_order[seed_at[is_seed]] + 1
        # vector fill: the search's own score; other reached rows: their cosine with rescore_reached
        similarity[is_fill] = fill_scores[fill_order][fill_at[is_fill]]
        rescore = ~is_seed & ~is_fill
        if params.rescore_reached and rescore.any():
            query = np.asarray(query_vector, dtype=np.float32)
            reached = np.asarray(self.store.embeddings[rows[rescore]], dtype=np.float32)
            similarity[rescore] = (reached @ query).astype(np.float64)
        bonus = np.zeros(rows.size, dtype=np.float64)
        bonus[is_found] = traversal.bonus[found_at[is_found]]
        scores = params.vector_weight * similarity + params.graph_weight * bonus
        chosen = self._select(rows, scores, is_found & ~is_seed & ~is_fill, depth)
        doc_ids = self.store.doc_ids
        found_paths: dict[int, WalkPath] = {}  # by position in traversal.rows

        def provenance(i: int) -> dict[str, Any]:
            index = int(chosen[i])
            out: dict[str, Any] = {}
            if is_seed[index]:
                out.update(
                    found_by="seed+graph" if is_found[index] else "seed",
                    seed_score=float(similarity[index]),
                    seed_rank=int(seed_rank[index]),
                )
            elif is_fill[index]:
                out.update(
                    found_by="vector+graph" if is_found[index] else "vector",
                    similarity=float(similarity[index]),
                )
            else:
                out["found_by"] = "graph"
                if params.rescore_reached:
                    out["similarity"] = float(similarity[index])
            if is_found[index] and traversal.paths is not None:
                position = int(found_at[index])
                if not found_paths:  # the paths of every chosen document the walk found, at once
                    wanted = found_at[chosen][is_found[chosen]]
                    found_paths.update(zip(wanted.tolist(), traversal.paths(wanted), strict=True))
                path, origin = found_paths[position]
                out.update(
                    graph_bonus=float(traversal.bonus[position]),
                    hop=int(traversal.hops[position]),
                    origin=doc_ids[origin],
                    path=path,
                )
            return out

        return Candidates(rows[chosen], scores[chosen], provenance, traversal.stats)
