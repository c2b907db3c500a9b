"""HybridRetriever: dense and BM25 legs fused by weighted RRF (or score fusion), parent-child
resolution, optional reranking with a recorded fallback, minimum score.

Reproduces the hybrid retriever of the Go framework oasis and changes what it gets wrong.
For each query (``retrieve_batch`` does each step for a block of queries at once):

1. Both legs search in parallel threads, each fetching ``n = top_k * overfetch_multiplier``
   candidates: the vector leg (exact inner product of the query embedding with the store's
   document or chunk embeddings) and the keyword leg (the store's BM25 index: bag of words, OR
   semantics, so ``"what's NOT (p53)?"`` searches ``what`` OR ``p53``; oasis's SQLite FTS5 leg
   parses such text as query syntax and silently finds nothing). Metadata filters
   (:mod:`retrievers.filters`) restrict both searches, before their top ``n`` is taken. A leg
   whose weight is 0 is not run.
2. Fusion, with ``w`` = ``keyword_weight`` and ``1 - w`` for the vector leg
   (:mod:`retrievers.fusion` gives each formula and its source):

   * ``rrf`` (default): ``score(d) = (1 - w) / (k + rank_v(d) + 1) + w / (k + rank_k(d) + 1)``,
     ranks 0-based, a leg that did not return ``d`` adds nothing; ``normalize`` multiplies by
     ``k + 1`` so that a document first in both legs scores 1.0;
   * ``convex``: ``(1 - w) * n_v(d) + w * n_k(d)`` over min-max or z-score normalised scores;
   * ``combsum`` / ``combmnz``: weighted CombSUM (= ``convex`` with these weights) and CombMNZ
     (times the number of legs that returned ``d``);
   * ``fusion_method`` (null by default) names any unsupervised method of
     :data:`retrievers.fusion.METHODS` (ranx's: isr, bordafuse, condorcet, rbc, mnz, ...) after the
     normalisation ``fusion_norm``; it replaces ``fusion``. Weighted methods get the legs' weights
     above, rrf gets ``rrf_k``; the others ignore the weights (a leg of weight 0 is still not run).
3. Parent-child resolution (chunked stores): each chunk is replaced by its document with the
   chunk's fused score; a document keeps its best chunk. Results are always documents.
4. The kernel's rerank hook (:mod:`retrievers.kernel`): an optional reranker re-scores the best
   ``rerank_depth`` documents (default ``top_k``; full document text). Unlike oasis, which aborts
   the retrieval when its reranker fails, a failing reranker (raises, times out after
   ``rerank_timeout``, returns None, the wrong length, or a non-finite score) leaves the fused
   scores and order in place, and the reason is recorded in every result's provenance.
5. The list is cut to ``top_k`` and documents under ``min_score`` (the final score: fused, or
   reranked when a reranker answered) are dropped, as oasis orders these stages.

Context (``context_weight`` > 0, off by default; our addition, not oasis's): after fusion each
candidate gets ``context_weight`` times the fused score of its best neighbour in the store's edges
of ``context_relations`` (both directions; e.g. ``sequence`` edges join a dialogue turn to the
turns before and after it), and neighbours of candidates join the candidates
(:func:`retrievers.fusion.context_fusion`). The answer to a question is often the turn after the
one that matches it: on LoCoMo this lifts R@10 far more than the choice of fusion does.

Legs that are retrievers (``vector_leg``, ``keyword_leg``): either leg may be any retriever
instead of the store's own search, e.g. a :class:`~retrievers.run_file.RunFileRetriever` holding
another system's run, or another family. Its ``retrieve_batch(queries, n)`` list is the leg
(documents it returns that this store does not hold, or that the scope or ``filters`` exclude,
are dropped: give the leg its own ``filters`` for a filtered top ``n``), and the same fusion, with
the same weights, combines the two legs; fusion stays in one place. Over a chunked store, a
retriever leg answers with documents, so both legs are first read as documents (each document at
its best chunk's rank) and fused per document. With both legs null (the default) nothing changes.

Ties are broken by doc id everywhere; scores are finite. ``provenance`` of each result: the
fusion, the fused score, each leg's 0-based rank and raw score for the document's best row, the
chunk that matched (chunked stores), rerank outcome; ``provenance["stats"]`` holds per-query
counts that the harness averages over a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from retrievers.fusion import (
    METHODS,
    NORMS,
    ContextParams,
    Normalization,
    comb_mnz,
    comb_sum,
    context_fusion,
    context_graph,
    convex_combination,
    fuse_legs,
    reciprocal_rank_fusion,
)
from retrievers.kernel import Candidates, KernelRetriever, RetrieverParams
from retrievers.params import param
from retrievers.parents import resolve_parents
from retrievers.spans import carry, span
from retrievers.types import RetrievalResult

__all__ = ["FUSIONS", "LEG_PARAMS", "HybridParams", "HybridRetriever"]

FUSIONS: tuple[str, ...] = ("rrf", "convex", "combsum", "combmnz")
#: the parameters that may hold a retriever standing in for a leg
LEG_PARAMS: tuple[str, ...] = ("vector_leg", "keyword_leg")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.floating[Any]]
LegHits = tuple[FloatArray, IntArray]
_EMPTY_HITS: LegHits = (np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64))


@dataclass(frozen=True)
class HybridParams(ContextParams, RetrieverParams):
    """Query-time parameters of the hybrid retriever (the kernel's, see RetrieverParams, plus these)."""

    keyword_weight: float = param(
        0.3, low=0.0, high=1.0, doc="BM25's weight; the vector leg gets 1 - keyword_weight (0 or 1: one leg)"
    )
    fusion: Literal["rrf", "convex", "combsum", "combmnz"] = param("rrf")
    rrf_k: int = param(60, low=1, high=1_000_000, doc="RRF's k (Cormack et al. 2009)")
    normalize: bool = param(False, doc="rrf: multiply by rrf_k + 1, so first in both legs scores 1.0")
    normalization: Literal["minmax", "zscore"] = param("minmax", doc="score fusions: per leg")
    fusion_method: str | None = param(
        None,
        choices=tuple(name for name, method in METHODS.items() if not method.supervised),
        doc="a fusion method of retrievers.fusion.METHODS replacing fusion (docs/fusion.md); null = fusion",
    )
    fusion_norm: str = param("min-max", choices=NORMS, doc="fusion_method: each leg's normalisation")
    overfetch_multiplier: int = param(3, low=1, high=1000, doc="each leg fetches top_k times this many")
    min_score: float | None = param(None, doc="drop final results scoring below this; null = off")
    parallel: bool = param(True, doc="run the two legs in two threads")
    vector_leg: Any = param(
        None,
        doc="null = exact search over the store's vectors; or a retriever (an object with "
        "retrieve_batch(queries, top_k)) whose results are this leg",
    )
    keyword_leg: Any = param(
        None, doc="null = the store's BM25 index; or a retriever whose results are this leg"
    )

    def check(self) -> None:
        super().check()
        for name in LEG_PARAMS:
            leg = getattr(self, name)
            if leg is None or callable(getattr(leg, "retrieve_batch", None)):
                continue
            if isinstance(leg, Mapping) and "_target_" in leg:
                continue  # a config of one: built over the store before the hybrid (viking_eval does)
            raise self.fail(
                name,
                f"must be null or a retriever (an object with retrieve_batch(queries, top_k)), got {leg!r}",
            )


class HybridRetriever(KernelRetriever):
    """Dense + BM25 retrieval fused by weighted RRF (default) or score fusion; see the module
    docstring. ``embedder`` must be the one the store was built with (it may be None only when
    ``keyword_weight`` is 1, which runs BM25 alone)."""

    Params = HybridParams
    params: HybridParams

    def setup(self) -> None:
        self.keyword_weight = float(self.params.keyword_weight)
        self.vector_weight = 1.0 - self.keyword_weight
        self._executor: ThreadPoolExecutor | None = None
        for name in LEG_PARAMS:
            if isinstance(getattr(self.params, name), Mapping):
                raise ValueError(
                    f"{name} is a retriever config; build that retriever over the store first and pass "
                    "the object (viking_eval builds configured legs)"
                )
        retriever_legs = self.params.vector_leg is not None or self.params.keyword_leg is not None
        # a retriever leg answers with documents: over a chunked store both legs are then read as
        # documents (fusion items are parent indices, each standing for itself by its first chunk)
        self._by_document = retriever_legs and self.store.chunked
        if self._by_document:
            first_chunk = np.full(len(self.store.parent_ids), -1, dtype=np.int64)
            for row in range(len(self.store) - 1, -1, -1):
                first_chunk[int(self.store.parent_of[row])] = row
            self._first_chunk = first_chunk
        if self.params.context_weight > 0 and self._by_document:
            raise ValueError(
                "context_weight > 0 works on the store's own legs over chunks; a retriever leg over "
                "a chunked store answers with documents"
            )
        self._context = context_graph(self.store.edges, self.params)

    def uses_embedder(self) -> bool:
        return bool(self.params.keyword_weight < 1) and self.params.vector_leg is None

    def final_filter(self, scores: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_] | None:
        return None if self.params.min_score is None else scores >= self.params.min_score

    def index_parts(self) -> tuple[str, ...]:
        keyword = self.keyword_weight > 0 and self.params.keyword_leg is None
        return super().index_parts() + (("bm25",) if keyword else ())

    # -- the legs ------------------------------------------------------------------------------

    def _vector_leg(self, queries: list[str], vectors: np.ndarray | None, fetch: int) -> list[LegHits]:
        if self.vector_weight > 0 and self.params.vector_leg is not None:
            return self._retriever_leg(self.params.vector_leg, queries, fetch)
        if self.vector_weight == 0 or vectors is None:
            return [_EMPTY_HITS] * len(queries)
        hits = list(self.vector_search(vectors, fetch))
        return [self._as_documents(h) for h in hits] if self._by_document else hits

    def _keyword_leg(self, queries: list[str], fetch: int) -> list[LegHits]:
        if self.keyword_weight > 0 and self.params.keyword_leg is not None:
            return self._retriever_leg(self.params.keyword_leg, queries, fetch)
        if self.keyword_weight == 0:
            return [_EMPTY_HITS] * len(queries)
        with span("bm25"):
            hits = list(self.store.bm25.search(queries, fetch, mask=self.mask))
        return [self._as_documents(h) for h in hits] if self._by_document else hits

    def _as_documents(self, hits: LegHits) -> LegHits:
        """A leg's chunk hits as documents (parent indices), each at its best chunk's score and rank."""
        parents = resolve_parents(self.store.parent_of, hits[1], hits[0])
        return parents.scores, parents.parents

    def _retriever_leg(self, leg: Any, queries: list[str], fetch: int) -> list[LegHits]:
        """A retriever's results as a leg: items are store rows (parent indices over a chunked
        store), in the ranking order; documents the store does not hold, or the scope and
        filters exclude, are dropped."""
        store = self.store
        index_of = store.parent_row_of if store.chunked else store.row_of
        allowed = None if self.mask is None else np.asarray(self.mask, dtype=np.bool_)
        legs: list[LegHits] = []
        for results in leg.retrieve_batch(queries, fetch):
            items: list[int] = []
            scores: list[float] = []
            seen: set[int] = set()
            ordered: list[RetrievalResult] = sorted(results, key=lambda r: (-r.score, r.doc_id))
            for result in ordered:
                item = index_of.get(result.doc_id)
                if item is None or item in seen:
                    continue
                row = int(self._first_chunk[item]) if self._by_document else item
                if allowed is not None and not allowed[row]:
                    continue
                seen.add(item)
                items.append(item)
                scores.append(float(result.score))
            legs.append((np.asarray(scores, dtype=np.float64), np.asarray(items, dtype=np.int64)))
        return legs

    def _search_legs(
        self, queries: list[str], vectors: np.ndarray | None, fetch: int
    ) -> tuple[list[LegHits], list[LegHits]]:
        if self.params.parallel and 0 < self.keyword_weight < 1:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hybrid-leg")
            with span("legs"):
                keyword = self._executor.submit(carry(self._keyword_leg), queries, fetch)
                vector = self._executor.submit(carry(self._vector_leg), queries, vectors, fetch)
                return vector.result(), keyword.result()
        return self._vector_leg(queries, vectors, fetch), self._keyword_leg(queries, fetch)

    # -- fusion --------------------------------------------------------------------------------

    def _fuse(self, legs: list[tuple[str, float, LegHits]]) -> dict[int, float]:
        weights = [weight for _, weight, _ in legs]
        rows = [hits[1].tolist() for _, _, hits in legs]
        method = self.params.fusion_method
        if method is not None:
            pairs = [
                list(zip(r, hits[0].tolist(), strict=True))
                for r, (_, _, hits) in zip(rows, legs, strict=True)
            ]
            return fuse_legs(
                pairs,
                method,
                norm=self.params.fusion_norm,
                weights=weights if METHODS[method].weighted else None,
                params={"k": self.params.rrf_k} if method == "rrf" else None,
            )
        if self.params.fusion == "rrf":
            return reciprocal_rank_fusion(rows, weights, k=self.params.rrf_k, normalize=self.params.normalize)
        runs = [
            dict(zip(row_list, hits[0].tolist(), strict=True))
            for row_list, (_, _, hits) in zip(rows, legs, strict=True)
        ]
        normalization = cast(Normalization, self.params.normalization)
        if self.params.fusion == "convex":
            return convex_combination(runs, weights, normalization=normalization)
        if self.params.fusion == "combsum":
            return comb_sum(runs, weights, normalization=normalization)
        return comb_mnz(runs, weights, normalization=normalization)

    def _candidates(self, vector: LegHits, keyword: LegHits) -> Candidates:
        legs = [
            (name, weight, hits)
            for name, weight, hits in (
                ("vector", self.vector_weight, vector),
                ("keyword", self.keyword_weight, keyword),
            )
            if weight > 0
        ]
        with span("fusion"):
            fused = self._fuse(legs)
        own: dict[int, float] = {}
        boosts: dict[int, float] = {}
        if self._context is not None:
            own = fused
            with span("fusion", "context"):
                fused, boosts = context_fusion(
                    own, self._context, weight=self.params.context_weight, allowed=self.mask
                )
        items = np.fromiter(fused.keys(), dtype=np.int64, count=len(fused))
        # fusion items are store rows, or parent indices when legs were read as documents
        rows = self._first_chunk[items] if self._by_document else items
        scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
        leg_ranks = {name: {int(row): rank for rank, row in enumerate(h[1].tolist())} for name, _, h in legs}
        leg_scores = {name: h[0] for name, _, h in legs}
        fusion = self.params.fusion_method or self.params.fusion

        def provenance(i: int) -> dict[str, Any]:
            row = int(items[i])
            found = {
                "fusion": fusion,
                "fused_score": float(scores[i]),
                "legs": {
                    name: {"rank": ranks[row], "score": float(leg_scores[name][ranks[row]])}
                    for name, ranks in leg_ranks.items()
                    if row in ranks
                },
            }
            if boosts:  # context: the fused score of the legs, and what the best neighbour added
                found.update(own_score=own.get(row, 0.0), context_boost=boosts[row])
            return found

        stats = {
            "vector_candidates": len(vector[1]),
            "keyword_candidates": len(keyword[1]),
            "fused_candidates": len(own) if boosts else len(fused),
        }
        if boosts:
            stats["context_candidates"] = len(fused) - len(own)
        return Candidates(rows, scores, provenance, stats)

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        """Both legs fetch ``depth * overfetch_multiplier`` rows; the fused pool is the candidates."""
        fetch = depth * self.params.overfetch_multiplier
        vector, keyword = self._search_legs(list(queries), vectors, fetch)
        return [self._candidates(v, k) for v, k in zip(vector, keyword, strict=True)]

    def __del__(self) -> None:
        pool = getattr(self, "_executor", None)
        if pool is not None:
            pool.shutdown(wait=False)
