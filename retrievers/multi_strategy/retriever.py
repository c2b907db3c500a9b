"""MultiStrategyRetriever: plan the strategies per query, run them concurrently, fuse their lists.

For each block of queries (the kernel's ``query_batch_size``):

1. Encoding (:meth:`MultiStrategyRetriever.encode_block`): once per block when a vector strategy
   (semantic, temporal) is enabled. An embedder that fails drops only the vector strategies, for
   the queries that planned them, with the reason; the others still answer.
2. Analysis and plan (:meth:`MultiStrategyRetriever.plan`): the analyser's intent picks the row
   of ``weights``; evidence adds temporal / structural (``evidence_weights``); a strategy that is
   not enabled or cannot apply to the query (no timestamps in scope, no names in metadata,
   nothing to match) is skipped, and why goes into every result's ``skipped``.
3. Running (:func:`retrievers.timeouts.run_concurrently`): every planned strategy searches its
   queries of the block in its own thread, ``max(depth, candidate_k)`` candidates each, with one
   deadline per strategy and block: ``timeout_seconds`` x the number of its queries. One that
   raises, times out, or returns non-finite scores is dropped for those queries (``dropped``).
4. Fusion (:mod:`retrievers.fusion`), ``fusion: consensus`` (the seed design, its scale defects
   fixed): each strategy's raw scores are normalised to [0, 1] (``normalize_scores``, ``minmax``
   or ``max``), multiplied by ``weight / max weight of the query's strategies`` (so a weight above
   1 cannot push a score above 1), and for a row found by ``n`` strategies::

       fused = min(mean(weighted scores) + consensus_boost * (n - 1), 1.0)

   e.g. 0.85, 0.72 and 0.68 from three strategies of equal weight give
   ``min(0.75 + 0.1 * 2, 1) = 0.95``. ``fusion: max``: the same with the max instead of the mean
   (:func:`~retrievers.fusion.max_consensus_fuse`), so a strategy that ranks a document low
   cannot pull it below what the best strategy gave it. ``fusion: rrf``: weighted reciprocal rank
   fusion, ``sum_s weight_s / (rrf_k + rank_s)`` with ranks from 1 (Cormack et al., SIGIR 2009).
   ``fusion: weighted_average``: the seed as written (:func:`~retrievers.fusion.weighted_average_fusion`:
   raw scores times raw weights, no normalisation, a single strategy's score not capped).
   ``context_weight`` > 0 then adds that times the best neighbour's fused score over the store's
   edges of ``context_relations`` (:func:`~retrievers.fusion.context_fusion`; our addition).
5. The kernel (:mod:`retrievers.kernel`) does the rest: chunk rows to documents, the ranking order
   (score desc, doc id asc), the rerank hook, top_k.

Provenance of each result: the query's ``intent``, ``fusion``, per strategy that found the row
its ``rank`` (from 1), raw ``score``, ``normalized`` score and ``weight`` (``strategies``),
``n_strategies``, and the query's ``skipped`` and ``dropped`` strategies with the reason;
``stats`` (the intent, strategies run / skipped / dropped, fused candidates) are summarised by
the harness over a run.

``retrieve_batch`` equals ``[retrieve(q) for q in queries]`` exactly whenever the embedder is
batch-invariant and no strategy fails or times out. A timed-out strategy's thread cannot be
killed: it finishes in the background and its answer is ignored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from retrievers.fusion import (
    consensus_fuse,
    context_fusion,
    context_graph,
    max_consensus_fuse,
    normalize_scores,
    reciprocal_rank_fusion,
    weighted_average_fusion,
)
from retrievers.kernel import Candidates, KernelRetriever
from retrievers.multi_strategy.analysis import QueryAnalysis, QueryAnalyzer
from retrievers.multi_strategy.params import EVIDENCE, STRATEGIES, VECTOR_STRATEGIES, MultiStrategyParams
from retrievers.multi_strategy.strategies import (
    FullTextStrategy,
    Hits,
    QueryContext,
    SemanticStrategy,
    Strategy,
    StructuralStrategy,
    TemporalStrategy,
)
from retrievers.spans import span
from retrievers.timeouts import run_concurrently

__all__ = ["MultiStrategyRetriever", "Plan"]

#: per strategy: query index in the block -> its hits, or the reason it was dropped
Outcomes = dict[str, dict[int, Hits | str]]


@dataclass(frozen=True)
class Plan:
    """One query's plan: the strategies to run (in STRATEGIES order) with their weights, and the
    strategies its intent or evidence asked for that are skipped, with the reason."""

    weights: dict[str, float]
    skipped: dict[str, str]


def _in_span(name: str, search: Callable[[], list[Hits]]) -> list[Hits]:
    """One strategy's search, recorded as a ``strategy`` span named ``name``."""
    with span("strategy", name):
        return search()


class MultiStrategyRetriever(KernelRetriever):
    """Query analysis, concurrent strategies with time limits, consensus (or RRF) fusion; see
    the module docstring. ``embedder`` must be the store's when semantic or temporal is enabled
    (``strategies``); ``self.strategies`` maps each enabled strategy's name to the object that
    runs it (replaceable, e.g. in tests)."""

    Params = MultiStrategyParams
    params: MultiStrategyParams

    def uses_embedder(self) -> bool:
        return any(name in self.params.strategies for name in VECTOR_STRATEGIES)

    def index_parts(self) -> tuple[str, ...]:
        chosen = self.params.strategies
        keyword = "fulltext" in chosen and self.params.fulltext_scoring == "bm25"
        return (
            super().index_parts()
            + (("bm25",) if keyword else ())
            + (("timestamps",) if "temporal" in chosen else ())
        )

    def setup(self) -> None:
        params = self.params
        store, mask, scope = self.store, self.mask, self.scope
        self.analyzer = QueryAnalyzer(params)
        build: dict[str, Callable[[], Strategy]] = {
            "semantic": lambda: SemanticStrategy(store, mask, params, params.semantic_min_score),
            "temporal": lambda: TemporalStrategy(
                store,
                mask,
                decay_days=params.decay_days,
                reference_epoch=params.reference_epoch,
                pool=params.temporal_pool,
                scoring=params.temporal_scoring,
                window_days=params.temporal_window_days,
            ),
            "structural": lambda: StructuralStrategy(store, scope, params.structural_fields),
            "fulltext": lambda: FullTextStrategy(
                store, mask, scope, params.fulltext_scoring, params.default_importance
            ),
        }
        self.strategies: dict[str, Strategy] = {name: build[name]() for name in params.strategies}
        self._context = context_graph(store.edges, params)
        # why the last encode_block of this thread gave no vectors (read by the search after it)
        self._encoding = threading.local()

    # -- step 1: encoding ----------------------------------------------------------------------

    def encode_block(self, queries: Sequence[str]) -> np.ndarray | None:
        """The block's query vectors; None when no vector strategy is enabled, or when the
        embedder fails (the reason is kept for this thread's next :meth:`search`)."""
        self._encoding.failure = None
        if not self.uses_embedder():
            return None
        try:
            vectors = self.encode(queries)
            if not np.isfinite(vectors).all():
                raise ValueError("the embedder returned non-finite values")
        except Exception as error:  # the strategies that need vectors are dropped, not the query
            self._encoding.failure = f"embedder failed: {type(error).__name__}: {error}"
            return None
        return vectors

    # -- step 2: the plan ----------------------------------------------------------------------

    def plan(self, analysis: QueryAnalysis) -> Plan:
        """Which strategies run for this query, with which weights, and which are skipped (why)."""
        row = self.params.strategy_weights(analysis.intent)
        features = {
            "time_expression": bool(analysis.time_expressions),
            "code_identifier": bool(analysis.identifiers),
        }
        for name, feature in EVIDENCE.items():
            evidence_weight = self.params.evidence_weight(name)
            if name not in row and features[feature] and evidence_weight is not None:
                row[name] = evidence_weight
        weights: dict[str, float] = {}
        skipped: dict[str, str] = {}
        for name in STRATEGIES:
            weight = row.get(name, 0.0)
            if weight <= 0:
                continue
            strategy = self.strategies.get(name)
            if strategy is None:
                skipped[name] = "not enabled (strategies)"
                continue
            reason = strategy.unavailable(analysis)
            if reason is not None:
                skipped[name] = reason
                continue
            weights[name] = weight
        return Plan(weights=weights, skipped=skipped)

    # -- step 3: running -----------------------------------------------------------------------

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        failure: str | None = getattr(self._encoding, "failure", None) if vectors is None else None
        with span("analysis"):
            analyses = [self.analyzer.analyze(query) for query in queries]
            plans = [self.plan(analysis) for analysis in analyses]
        contexts = [
            QueryContext(analysis=analysis, vector=None if vectors is None else vectors[i])
            for i, analysis in enumerate(analyses)
        ]
        with span("strategies"):  # a strategy span per strategy run, in its own thread
            outcomes = self._run(plans, contexts, max(depth, self.params.candidate_k), failure)
        with span("fusion"):
            return [
                self._fuse(analysis, plan, {name: found[i] for name, found in outcomes.items() if i in found})
                for i, (analysis, plan) in enumerate(zip(analyses, plans, strict=True))
            ]

    def _run(
        self, plans: list[Plan], contexts: list[QueryContext], depth: int, encode_failure: str | None
    ) -> Outcomes:
        """Each planned strategy over its queries of the block, concurrently, one deadline each."""
        members = {name: [i for i, plan in enumerate(plans) if name in plan.weights] for name in STRATEGIES}
        outcomes: Outcomes = {}
        calls: dict[str, Callable[[], list[Hits]]] = {}
        for name, indices in members.items():
            if not indices:
                continue
            if encode_failure is not None and name in VECTOR_STRATEGIES:
                outcomes[name] = dict.fromkeys(indices, encode_failure)
                continue
            search = partial(self.strategies[name].search, [contexts[i] for i in indices], depth)
            calls[name] = partial(_in_span, name, search)
        limits = {name: self.params.timeout_seconds * len(members[name]) for name in calls}
        for name, (found, failure) in run_concurrently(calls, limits).items():
            indices = members[name]
            if failure is None and len(found) != len(indices):
                failure = f"returned {len(found)} result lists for {len(indices)} queries"
            if failure is not None:
                outcomes[name] = dict.fromkeys(indices, failure)
            else:
                outcomes[name] = dict(zip(indices, found, strict=True))
        return outcomes

    # -- step 4: fusion ------------------------------------------------------------------------

    def _fuse(self, analysis: QueryAnalysis, plan: Plan, found: Mapping[str, Hits | str]) -> Candidates:
        params = self.params
        dropped = {name: outcome for name, outcome in found.items() if isinstance(outcome, str)}
        lists: dict[str, Hits] = {}
        for name in STRATEGIES:
            outcome = found.get(name)
            if outcome is None or isinstance(outcome, str):
                continue
            if not np.isfinite(outcome[0]).all():
                dropped[name] = "returned non-finite scores"
                continue
            lists[name] = outcome
        max_weight = max(plan.weights.values(), default=1.0)
        per_row: dict[int, dict[str, dict[str, Any]]] = {}
        for name, (raw, rows) in lists.items():
            normalized = normalize_scores(raw, params.normalization)
            weight = plan.weights[name]
            for rank, (row, score, norm) in enumerate(
                zip(rows.tolist(), raw.tolist(), normalized.tolist(), strict=True), 1
            ):
                per_row.setdefault(row, {})[name] = {
                    "rank": rank,
                    "score": score,
                    "normalized": norm,
                    "weight": weight,
                }
        if params.fusion in ("consensus", "max"):
            combine = consensus_fuse if params.fusion == "consensus" else max_consensus_fuse
            fused = {
                row: combine(
                    [entry["weight"] / max_weight * entry["normalized"] for entry in by_strategy.values()],
                    params.consensus_boost,
                )
                for row, by_strategy in per_row.items()
            }
        elif params.fusion == "weighted_average":
            fused = weighted_average_fusion(
                [dict(zip(rows.tolist(), raw.tolist(), strict=True)) for raw, rows in lists.values()],
                [plan.weights[name] for name in lists],
                consensus_boost=params.consensus_boost,
            )
        else:
            fused = reciprocal_rank_fusion(
                [rows.tolist() for _, rows in lists.values()],
                [plan.weights[name] for name in lists],
                k=params.rrf_k,
            )
        own: dict[int, float] = {}
        boosts: dict[int, float] = {}
        if self._context is not None:
            own = fused
            fused, boosts = context_fusion(
                own, self._context, weight=params.context_weight, allowed=self.mask
            )
        rows = np.fromiter(fused.keys(), dtype=np.int64, count=len(fused))
        scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))

        def provenance(i: int) -> dict[str, Any]:
            row = int(rows[i])
            by_strategy = per_row.get(row, {})
            found = {
                "intent": analysis.intent,
                "fusion": params.fusion,
                "strategies": by_strategy,
                "n_strategies": len(by_strategy),
                "skipped": plan.skipped,
                "dropped": dropped,
            }
            if boosts:  # context: the strategies' fused score, and what the best neighbour added
                found.update(own_score=own.get(row, 0.0), context_boost=boosts[row])
            return found

        stats = {
            "intent": analysis.intent,
            "strategies_run": len(lists),
            "strategies_skipped": len(plan.skipped),
            "strategies_dropped": len(dropped),
            "fused_candidates": len(own) if boosts else len(fused),
        }
        if boosts:
            stats["context_candidates"] = len(fused) - len(own)
        return Candidates(rows, scores, provenance, stats)
