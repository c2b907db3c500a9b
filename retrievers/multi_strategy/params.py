"""The multi-strategy retriever's parameters: the kernel's, the analyser's and its own.

Which strategies a query runs is a table: ``weights[intent]`` names the strategies and their
weights for each intent the analyser can give (:mod:`retrievers.multi_strategy.analysis`); a
strategy the row leaves out still runs with ``evidence_weights[strategy]`` when the query carries
its evidence (:data:`EVIDENCE`), as in the reference design.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, cast

from retrievers.fusion import ContextParams
from retrievers.kernel import RetrieverParams
from retrievers.multi_strategy.analysis import REQUIRED_INTENTS, AnalyzerParams, Intent
from retrievers.params import is_number, param
from retrievers.timeparse.stamps import parse_timestamp

__all__ = [
    "DEFAULT_EVIDENCE_WEIGHTS",
    "DEFAULT_STRUCTURAL_FIELDS",
    "DEFAULT_WEIGHTS",
    "EVIDENCE",
    "STRATEGIES",
    "VECTOR_STRATEGIES",
    "MultiStrategyParams",
]

StrategyName = Literal["semantic", "temporal", "structural", "fulltext"]
EvidenceStrategy = Literal["temporal", "structural"]

STRATEGIES: tuple[str, ...] = typing.get_args(StrategyName)
#: the strategies that read query vectors (dropped together when the embedder fails)
VECTOR_STRATEGIES: tuple[str, ...] = ("semantic", "temporal")

#: The reference design's defaults: semantic 1.0, temporal 0.8, structural 0.9, full-text 0.6;
#: TEMPORAL raises temporal to 1.2; CODE sets structural 1.2 and semantic 0.9; FACTUAL raises
#: full-text to 0.9; PREFERENCE uses semantic + full-text; MIXED uses all that apply. CONVERSATIONAL
#: (Memory-Arc's intent when no pattern matches) has no row here: ``default_intent: CONVERSATIONAL``
#: needs one in ``weights`` (the memory_arc preset gives semantic 1.0 + full-text 0.6).
DEFAULT_WEIGHTS: Mapping[str, Mapping[str, float]] = {
    "FACTUAL": {"semantic": 1.0, "fulltext": 0.9},
    "TEMPORAL": {"semantic": 1.0, "temporal": 1.2},
    "CODE": {"semantic": 0.9, "structural": 1.2},
    "PREFERENCE": {"semantic": 1.0, "fulltext": 0.6},
    "MIXED": {"semantic": 1.0, "temporal": 0.8, "structural": 0.9, "fulltext": 0.6},
}
#: strategy -> the analysis feature that makes it run even when the intent's row leaves it out
EVIDENCE: Mapping[str, str] = {"temporal": "time_expression", "structural": "code_identifier"}
DEFAULT_EVIDENCE_WEIGHTS: Mapping[str, float] = {"temporal": 0.8, "structural": 0.9}
DEFAULT_STRUCTURAL_FIELDS: tuple[str, ...] = ("func_name", "symbol", "path")


def parse_reference_time(value: str | float) -> float | None:
    """``latest`` -> None (the scope's latest document time); an ISO 8601 time or epoch seconds
    -> epoch seconds. A value that does not parse gives None too (:meth:`MultiStrategyParams.check`
    refuses it)."""
    if value == "latest":
        return None
    parsed = parse_timestamp(value) if isinstance(value, str) or is_number(value) else None
    return None if parsed is None else parsed.timestamp()


@dataclass(frozen=True)
class MultiStrategyParams(AnalyzerParams, ContextParams, RetrieverParams):
    """Query-time parameters of :class:`~retrievers.multi_strategy.MultiStrategyRetriever`: the
    kernel's (:class:`~retrievers.kernel.RetrieverParams`: filters, reranker, query_batch_size,
    ...), the analyser's (:class:`~retrievers.multi_strategy.analysis.AnalyzerParams`: rules,
    mixed_ratio, min_intent_score, default_intent) and these."""

    weights: Mapping[Intent, Mapping[StrategyName, float]] = param(
        factory=lambda: {intent: dict(row) for intent, row in DEFAULT_WEIGHTS.items()},
        low=0.0,
        high=100.0,
        doc="intent -> {strategy: weight}: the strategies each intent runs; a row for every intent",
    )
    evidence_weights: Mapping[EvidenceStrategy, float] = param(
        factory=lambda: dict(DEFAULT_EVIDENCE_WEIGHTS),
        low=0.0,
        high=100.0,
        doc="run temporal / structural with this weight when the query has a time expression / code "
        "identifier and the intent's row leaves it out ({} = never)",
    )
    strategies: tuple[StrategyName, ...] = param(
        STRATEGIES, non_empty=True, unique=True, doc="the strategies that may run at all"
    )
    fusion: Literal["consensus", "rrf", "max", "weighted_average"] = param(
        "consensus",
        doc="how the strategies' lists are fused: consensus (mean of normalised, weighted scores + "
        "boost), max (their max + boost: a weak strategy cannot drag a strong one down), rrf, "
        "weighted_average (the Memory-Arc seed as written: raw scores x weights, uncapped singletons)",
    )
    normalization: Literal["minmax", "max"] = param(
        "minmax", doc="consensus, max: per strategy, before weighting"
    )
    consensus_boost: float = param(
        0.1, low=0.0, high=1.0, doc="consensus, max, weighted_average: added per extra strategy"
    )
    rrf_k: int = param(60, low=1, high=10_000, doc="rrf: RRF's k (Cormack et al. 2009)")
    candidate_k: int = param(
        100, low=1, high=10_000, doc="each strategy returns max(depth, candidate_k) candidates"
    )
    decay_days: float = param(
        30.0, low=0.0, high=1e6, low_open=True, doc="temporal: recency = exp(-age_days / decay_days)"
    )
    reference_time: str | float = param(
        "latest", doc="temporal: 'latest' (the scope's latest document time), ISO 8601 or epoch seconds"
    )
    temporal_pool: int = param(100, low=1, high=10_000, doc="temporal: most similar timed documents rescored")
    temporal_scoring: Literal["relevance", "recency", "flat"] = param(
        "relevance",
        doc="temporal: relevance = in_range + max(cos, 0) x recency (ours); recency = "
        "exp(-age_days / decay_days) alone, flat = 0.8 for every candidate (the Memory-Arc seed, "
        "with and without boost_recent)",
    )
    temporal_window_days: float | None = param(
        None,
        low=0.0,
        high=1e6,
        low_open=True,
        doc="temporal recency/flat: without a time range in the query, only documents of the last "
        "this many days before the reference time (Memory-Arc: 30); null = every timed document",
    )
    structural_fields: tuple[str, ...] = param(
        DEFAULT_STRUCTURAL_FIELDS, non_empty=True, doc="structural: metadata keys holding names"
    )
    fulltext_scoring: Literal["bm25", "seed"] = param(
        "bm25", doc="fulltext: the store's BM25, or matches/keywords*0.6 + importance/10*0.4"
    )
    default_importance: float = param(
        0.0,
        low=0.0,
        high=10.0,
        doc="fulltext seed scoring: the importance of a document without a numeric metadata.importance "
        "(Memory-Arc: 5, its Memory default; 0 = such a document gets no importance term)",
    )
    semantic_min_score: float | None = param(
        None,
        low=-1.0,
        high=1.0,
        doc="semantic: drop hits whose cosine is below this (Memory-Arc: 0.5, its min_score); null = keep all",
    )
    timeout_seconds: float = param(
        10.0, low=0.0, high=3600.0, low_open=True, doc="per strategy and query of a block; over it: dropped"
    )

    def check(self) -> None:
        RetrieverParams.check(self)
        AnalyzerParams.check(self)
        required = list(REQUIRED_INTENTS)
        if self.default_intent not in required:
            required.append(self.default_intent)
        missing = [intent for intent in required if intent not in self.weights]
        if missing:
            raise self.fail(
                "weights",
                f"has no row for intent(s) {missing}; every intent of {list(REQUIRED_INTENTS)} needs one, "
                "and so does default_intent",
            )
        for intent, row in self.weights.items():
            if not any(weight > 0 for weight in row.values()):
                raise self.fail(
                    f"weights.{intent}", f"must give at least one strategy a weight > 0, got {row}"
                )
        if self.reference_time != "latest" and parse_reference_time(self.reference_time) is None:
            raise self.fail(
                "reference_time",
                "must be 'latest', an ISO 8601 time ('2023-10-20T12:00:00Z') or epoch seconds, "
                f"got {self.reference_time!r}",
            )

    def strategy_weights(self, intent: str) -> dict[str, float]:
        """``weights[intent]`` as a plain dict (a copy)."""
        return dict(cast(Mapping[str, Mapping[str, float]], self.weights)[intent])

    def evidence_weight(self, strategy: str) -> float | None:
        """``evidence_weights[strategy]``, or None when it has none."""
        return cast(Mapping[str, float], self.evidence_weights).get(strategy)

    @property
    def reference_epoch(self) -> float | None:
        """``reference_time`` in epoch seconds; None for ``latest``."""
        return parse_reference_time(self.reference_time)
