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
     (times the number of legs that returned ``d``).
3. Parent-child resolution (chunked stores): each chunk is replaced by its document with the
   chunk's fused score; a document keeps its best chunk. Results are always documents.
4. The kernel's rerank hook (:mod:`retrievers.kernel`): an optional reranker re-scores the best
   ``rerank_depth`` documents (default ``top_k``; full document text). Unlike oasis, which aborts
   the retrieval when its reranker fails, a failing reranker (raises, times out after
   ``rerank_timeout``, returns None, the wrong length, or a non-finite score) leaves the fused
   scores and order in place, and the reason is recorded in every result's provenance.
5. The list is cut to ``top_k`` and documents under ``min_score`` (the final score: fused, or
   reranked when a reranker answered) are dropped, as oasis orders these stages.

Ties are broken by doc id everywhere; scores are finite. ``provenance`` of each result: the
fusion, the fused score, each leg's 0-based rank and raw score for the document's best row, the
chunk that matched (chunked stores), rerank outcome; ``provenance["stats"]`` holds per-query
counts that the harness averages over a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from retrievers.fusion import Normalization, comb_mnz, comb_sum, convex_combination, reciprocal_rank_fusion
from retrievers.kernel import Candidates, Retriever, RetrieverParams
from retrievers.params import param

__all__ = ["FUSIONS", "HybridParams", "HybridRetriever"]

FUSIONS: tuple[str, ...] = ("rrf", "convex", "combsum", "combmnz")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.floating[Any]]
LegHits = tuple[FloatArray, IntArray]
_EMPTY_HITS: LegHits = (np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64))


@dataclass(frozen=True)
class HybridParams(RetrieverParams):
    """Query-time parameters of the hybrid retriever (the kernel's, see RetrieverParams, plus these)."""

    keyword_weight: float = param(
        0.3, low=0.0, high=1.0, doc="BM25's weight; the vector leg gets 1 - keyword_weight (0 or 1: one leg)"
    )
    fusion: Literal["rrf", "convex", "combsum", "combmnz"] = param("rrf")
    rrf_k: int = param(60, low=1, high=1_000_000, doc="RRF's k (Cormack et al. 2009)")
    normalize: bool = param(False, doc="rrf: multiply by rrf_k + 1, so first in both legs scores 1.0")
    normalization: Literal["minmax", "zscore"] = param("minmax", doc="score fusions: per leg")
    overfetch_multiplier: int = param(3, low=1, high=1000, doc="each leg fetches top_k times this many")
    min_score: float | None = param(None, doc="drop final results scoring below this; null = off")
    parallel: bool = param(True, doc="run the two legs in two threads")


class HybridRetriever(Retriever):
    """Dense + BM25 retrieval fused by weighted RRF (default) or score fusion; see the module
    docstring. ``embedder`` must be the one the store was built with (it may be None only when
    ``keyword_weight`` is 1, which runs BM25 alone)."""

    Params = HybridParams
    params: HybridParams

    def setup(self) -> None:
        self.keyword_weight = float(self.params.keyword_weight)
        self.vector_weight = 1.0 - self.keyword_weight
        self._executor: ThreadPoolExecutor | None = None

    def uses_embedder(self) -> bool:
        return bool(self.params.keyword_weight < 1)

    def final_filter(self, scores: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_] | None:
        return None if self.params.min_score is None else scores >= self.params.min_score

    # -- the legs ------------------------------------------------------------------------------

    def _vector_leg(self, vectors: np.ndarray | None, n_queries: int, fetch: int) -> list[LegHits]:
        if self.vector_weight == 0 or vectors is None:
            return [_EMPTY_HITS] * n_queries
        return list(self.store.vectors.search(vectors, fetch, mask=self.mask))

    def _keyword_leg(self, queries: list[str], fetch: int) -> list[LegHits]:
        if self.keyword_weight == 0:
            return [_EMPTY_HITS] * len(queries)
        return list(self.store.bm25.search(queries, fetch, mask=self.mask))

    def _search_legs(
        self, queries: list[str], vectors: np.ndarray | None, fetch: int
    ) -> tuple[list[LegHits], list[LegHits]]:
        if self.params.parallel and 0 < self.keyword_weight < 1:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hybrid-leg")
            keyword = self._executor.submit(self._keyword_leg, queries, fetch)
            vector = self._executor.submit(self._vector_leg, vectors, len(queries), fetch)
            return vector.result(), keyword.result()
        return self._vector_leg(vectors, len(queries), fetch), self._keyword_leg(queries, fetch)

    # -- fusion --------------------------------------------------------------------------------

    def _fuse(self, legs: list[tuple[str, float, LegHits]]) -> dict[int, float]:
        weights = [weight for _, weight, _ in legs]
        rows = [hits[1].tolist() for _, _, hits in legs]
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
        fused = self._fuse(legs)
        rows = np.fromiter(fused.keys(), dtype=np.int64, count=len(fused))
        scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
        leg_ranks = {name: {int(row): rank for rank, row in enumerate(h[1].tolist())} for name, _, h in legs}
        leg_scores = {name: h[0] for name, _, h in legs}
        fusion = self.params.fusion

        def provenance(i: int) -> dict[str, Any]:
            row = int(rows[i])
            return {
                "fusion": fusion,
                "fused_score": float(scores[i]),
                "legs": {
                    name: {"rank": ranks[row], "score": float(leg_scores[name][ranks[row]])}
                    for name, ranks in leg_ranks.items()
                    if row in ranks
                },
            }

        stats = {
            "vector_candidates": len(vector[1]),
            "keyword_candidates": len(keyword[1]),
            "fused_candidates": len(fused),
        }
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
