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
4. Documents under ``min_score`` (fused scale) are dropped and the list is cut to ``top_k``.
5. Optional reranker on those documents (full document text). Unlike oasis, which aborts the
   retrieval when its reranker fails, a failing reranker (raises, times out after
   ``rerank_timeout``, returns None, the wrong length, or a non-finite score) leaves the fused
   scores and order in place, and the reason is recorded in every result's provenance.

Ties are broken by doc id everywhere; scores are finite. ``provenance`` of each result: the
fusion, the fused score, each leg's 0-based rank and raw score for the document's best row, the
chunk that matched (chunked stores), rerank outcome; ``provenance["stats"]`` holds per-query
counts that the harness averages over a run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from retrievers.baselines import check_query, check_top_k
from retrievers.chunking import resolve_parents
from retrievers.filters import MetadataFilter, filter_mask
from retrievers.fusion import (
    NORMALIZATIONS,
    Normalization,
    comb_mnz,
    comb_sum,
    convex_combination,
    reciprocal_rank_fusion,
)
from retrievers.rerank import check_timeout, rerank_with_fallback
from retrievers.store import ContextStore
from retrievers.types import Embedder, Reranker, RetrievalResult

__all__ = ["FUSIONS", "HybridParams", "HybridRetriever"]

FUSIONS: tuple[str, ...] = ("rrf", "convex", "combsum", "combmnz")
_MAX_RRF_K = 1_000_000
_MAX_OVERFETCH = 1000

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.floating[Any]]
LegHits = tuple[FloatArray, IntArray]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class HybridParams:
    """Query-time parameters, each validated here with its allowed range.

    ``keyword_weight`` in [0, 1] (BM25's weight; the vector leg gets ``1 - keyword_weight``);
    ``fusion`` one of rrf | convex | combsum | combmnz; ``rrf_k`` (RRF's k) an integer in
    [1, 1000000]; ``normalize`` (RRF scores times ``rrf_k + 1``); ``normalization`` minmax |
    zscore (score fusions); ``overfetch_multiplier`` an integer in [1, 1000] (each leg fetches
    ``top_k`` times this many); ``min_score`` a finite number or None (off), compared with the
    fused score; ``filters`` None or ``{doc_ids, metadata, time_range}`` (a
    :class:`~retrievers.filters.MetadataFilter`); ``reranker`` None or an object with
    ``rerank(query, candidates, texts)``; ``rerank_timeout`` in (0, 3600] seconds or None (no
    limit); ``parallel`` (legs in two threads); ``query_batch_size`` in [1, 65536].
    """

    keyword_weight: float = 0.3
    fusion: str = "rrf"
    rrf_k: int = 60
    normalize: bool = False
    normalization: str = "minmax"
    overfetch_multiplier: int = 3
    min_score: float | None = None
    filters: Any = None
    reranker: Any = None
    rerank_timeout: float | None = None
    parallel: bool = True
    query_batch_size: int = 256

    def __post_init__(self) -> None:
        weight = self.keyword_weight
        if not _is_number(weight) or not (math.isfinite(weight) and 0.0 <= weight <= 1.0):
            raise ValueError(f"keyword_weight must be in [0, 1], got {weight!r}")
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {list(FUSIONS)}, got {self.fusion!r}")
        if not _is_int(self.rrf_k) or not 1 <= self.rrf_k <= _MAX_RRF_K:
            raise ValueError(f"rrf_k must be an integer in [1, {_MAX_RRF_K}] (k > 0), got {self.rrf_k!r}")
        if not isinstance(self.normalize, bool):
            raise ValueError(f"normalize must be true or false, got {self.normalize!r}")
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(
                f"normalization must be one of {list(NORMALIZATIONS)}, got {self.normalization!r}"
            )
        overfetch = self.overfetch_multiplier
        if not _is_int(overfetch) or not 1 <= overfetch <= _MAX_OVERFETCH:
            raise ValueError(
                f"overfetch_multiplier must be an integer in [1, {_MAX_OVERFETCH}], got {overfetch!r}"
            )
        if self.min_score is not None and (
            not _is_number(self.min_score) or not math.isfinite(self.min_score)
        ):
            raise ValueError(f"min_score must be a finite number or null (off), got {self.min_score!r}")
        if isinstance(self.filters, Mapping):
            object.__setattr__(self, "filters", MetadataFilter.from_dict(self.filters))
        elif self.filters is not None and not isinstance(self.filters, MetadataFilter):
            raise ValueError(
                f"filters must be null or a mapping {{doc_ids, metadata, time_range}}, got {self.filters!r}"
            )
        if self.reranker is not None and not callable(getattr(self.reranker, "rerank", None)):
            raise ValueError(
                f"reranker must be null or an object with a rerank() method, got {self.reranker!r}"
            )
        check_timeout(self.rerank_timeout, "rerank_timeout")
        if not isinstance(self.parallel, bool):
            raise ValueError(f"parallel must be true or false, got {self.parallel!r}")
        if not _is_int(self.query_batch_size) or not 1 <= self.query_batch_size <= 65536:
            raise ValueError(f"query_batch_size must be in [1, 65536], got {self.query_batch_size!r}")


class HybridRetriever:
    """Dense + BM25 retrieval fused by weighted RRF (default) or score fusion; see the module
    docstring for the algorithm. ``embedder`` must be the one the store was built with (it may
    be None only when ``keyword_weight`` is 1, which runs BM25 alone)."""

    Params = HybridParams

    def __init__(
        self,
        store: ContextStore,
        embedder: Embedder | None = None,
        *,
        keyword_weight: float = 0.3,
        fusion: str = "rrf",
        rrf_k: int = 60,
        normalize: bool = False,
        normalization: str = "minmax",
        overfetch_multiplier: int = 3,
        min_score: float | None = None,
        filters: Mapping[str, Any] | MetadataFilter | None = None,
        reranker: Reranker | None = None,
        rerank_timeout: float | None = None,
        parallel: bool = True,
        query_batch_size: int = 256,
    ) -> None:
        self.params = HybridParams(
            keyword_weight=keyword_weight,
            fusion=fusion,
            rrf_k=rrf_k,
            normalize=normalize,
            normalization=normalization,
            overfetch_multiplier=overfetch_multiplier,
            min_score=min_score,
            filters=filters,
            reranker=reranker,
            rerank_timeout=rerank_timeout,
            parallel=parallel,
            query_batch_size=query_batch_size,
        )
        self.store = store
        self.keyword_weight = float(keyword_weight)
        self.vector_weight = 1.0 - self.keyword_weight
        if self.vector_weight > 0:
            if embedder is None:
                raise ValueError("an embedder is needed unless keyword_weight is 1 (BM25 alone)")
            if embedder.name != store.embedder_name:
                raise ValueError(
                    f"embedder {embedder.name!r} is not the one the store was built with ({store.embedder_name!r})"
                )
        self.embedder = embedder
        self.reranker: Reranker | None = self.params.reranker
        chosen: MetadataFilter | None = self.params.filters
        # the rows a leg may return: the store's own scope, narrowed by the filters (computed
        # once; a filter that cannot match warns here, at construction)
        self.mask: npt.NDArray[np.bool_] | None = (
            store.allowed if chosen is None or chosen.is_empty else filter_mask(store, chosen)
        )
        self._pool: ThreadPoolExecutor | None = None

    # -- the legs ------------------------------------------------------------------------------

    def _vector_leg(self, queries: list[str], fetch: int) -> list[LegHits]:
        if self.vector_weight == 0 or self.embedder is None:
            return [_EMPTY_HITS] * len(queries)
        vectors = self.embedder.encode(queries, kind="query")
        return list(self.store.vectors.search(vectors, fetch, mask=self.mask))

    def _keyword_leg(self, queries: list[str], fetch: int) -> list[LegHits]:
        if self.keyword_weight == 0:
            return [_EMPTY_HITS] * len(queries)
        return list(self.store.bm25.search(queries, fetch, mask=self.mask))

    def _search_legs(self, queries: list[str], fetch: int) -> tuple[list[LegHits], list[LegHits]]:
        if self.params.parallel and 0 < self.keyword_weight < 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hybrid-leg")
            keyword = self._pool.submit(self._keyword_leg, queries, fetch)
            vector = self._pool.submit(self._vector_leg, queries, fetch)
            return vector.result(), keyword.result()
        return self._vector_leg(queries, fetch), self._keyword_leg(queries, fetch)

    # -- fusion and the rest of one query -------------------------------------------------------

    def _fuse(self, legs: list[tuple[str, float, LegHits]]) -> dict[int, float]:
        weights = [weight for _, weight, _ in legs]
        rows = [hits[1].tolist() for _, _, hits in legs]
        if self.params.fusion == "rrf":
            return reciprocal_rank_fusion(rows, weights, k=self.params.rrf_k, normalize=self.params.normalize)
        runs = [
            dict(zip(row_list, hits[0].tolist(), strict=True))
            for row_list, (_, _, hits) in zip(rows, legs, strict=True)
        ]
        normalization = cast(Normalization, self.params.normalization)  # validated by HybridParams
        if self.params.fusion == "convex":
            return convex_combination(runs, weights, normalization=normalization)
        if self.params.fusion == "combsum":
            return comb_sum(runs, weights, normalization=normalization)
        return comb_mnz(runs, weights, normalization=normalization)

    def _finish(self, query: str, vector: LegHits, keyword: LegHits, top_k: int) -> list[RetrievalResult]:
        legs = [
            (name, weight, hits)
            for name, weight, hits in (
                ("vector", self.vector_weight, vector),
                ("keyword", self.keyword_weight, keyword),
            )
            if weight > 0
        ]
        fused = self._fuse(legs)
        if not fused:
            return []
        fused_rows = np.fromiter(fused.keys(), dtype=np.int64, count=len(fused))
        fused_scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
        hits = resolve_parents(self.store.parent_of, fused_rows, fused_scores)
        keep = len(hits)
        if self.params.min_score is not None:
            keep = int(np.count_nonzero(hits.scores >= self.params.min_score))
        hits = hits.head(min(keep, top_k))
        if not len(hits):
            return []
        store = self.store
        parent_ids = [store.parent_ids[parent] for parent in hits.parents.tolist()]
        scores = hits.scores.tolist()
        leg_ranks = {name: {int(row): rank for rank, row in enumerate(h[1].tolist())} for name, _, h in legs}
        leg_scores = {name: h[0] for name, _, h in legs}

        fallback: str | None = None
        final = scores
        if self.reranker is not None:
            candidates = [
                RetrievalResult(doc_id=doc_id, score=score)
                for doc_id, score in zip(parent_ids, scores, strict=True)
            ]
            texts = [store.parent_documents[parent].full_text for parent in hits.parents.tolist()]
            final, fallback = rerank_with_fallback(
                self.reranker, query, candidates, texts, timeout_s=self.params.rerank_timeout
            )
        stats = {
            "vector_candidates": len(vector[1]),
            "keyword_candidates": len(keyword[1]),
            "fused_candidates": len(fused),
            "documents": len(hits),
            "rerank_fallback": int(fallback is not None),
        }
        results = []
        for i, (doc_id, row) in enumerate(zip(parent_ids, hits.rows.tolist(), strict=True)):
            found = {
                name: {"rank": ranks[row], "score": float(leg_scores[name][ranks[row]])}
                for name, ranks in leg_ranks.items()
                if row in ranks
            }
            provenance: dict[str, Any] = {
                "fusion": self.params.fusion,
                "fused_score": scores[i],
                "legs": found,
                "stats": stats,
            }
            if store.chunked:
                provenance["chunk_id"] = store.doc_ids[row]
            if self.reranker is not None:
                provenance["pre_rerank_score"] = scores[i]
                provenance["rerank_fallback"] = fallback
            results.append(RetrievalResult(doc_id=doc_id, score=float(final[i]), provenance=provenance))
        results.sort(key=lambda result: (-result.score, result.doc_id))
        return results

    # -- public API ----------------------------------------------------------------------------

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        return self.retrieve_batch([query], top_k)[0]

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        """``[self.retrieve(q, top_k) for q in queries]``, faster: queries are encoded and both
        legs searched a block of ``query_batch_size`` at a time."""
        check_top_k(top_k)
        for query in queries:
            check_query(query)
        fetch = top_k * self.params.overfetch_multiplier
        results: list[list[RetrievalResult]] = []
        size = self.params.query_batch_size
        for start in range(0, len(queries), size):
            block = list(queries[start : start + size])
            vector, keyword = self._search_legs(block, fetch)
            results += [
                self._finish(query, v_hits, k_hits, top_k)
                for query, v_hits, k_hits in zip(block, vector, keyword, strict=True)
            ]
        return results

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)


_EMPTY_HITS: LegHits = (np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64))
