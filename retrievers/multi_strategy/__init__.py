"""The multi-strategy retriever family: query analysis picks strategies by intent, they run
concurrently with time limits, and their lists are fused.

A query is analysed (:mod:`~retrievers.multi_strategy.analysis`: intent by a rule table, time
expressions, code identifiers, keywords); the intent's row of the weight table
(:mod:`~retrievers.multi_strategy.params`) says which strategies run and with what weight; the
strategies (:mod:`~retrievers.multi_strategy.strategies`: semantic, temporal, structural,
full-text, one per module) run concurrently, each with a time limit; their lists are normalised,
weighted and fused by consensus or RRF (:mod:`~retrievers.multi_strategy.retriever`). Chunked
stores, metadata filters and a reranker are handled by the kernel (:mod:`retrievers.kernel`).

Files: ``identifiers.py`` (code identifiers: find, split, stem), ``analysis.py`` (rules and the
analyser), ``params.py`` (the parameters and default tables), ``strategies/`` (one strategy per
module and their shared interface), ``retriever.py`` (plan, run, fuse).
"""

from retrievers.multi_strategy.analysis import (
    DEFAULT_RULES,
    INTENTS,
    AnalyzerParams,
    IntentRule,
    QueryAnalysis,
    QueryAnalyzer,
)
from retrievers.multi_strategy.params import (
    DEFAULT_EVIDENCE_WEIGHTS,
    DEFAULT_WEIGHTS,
    EVIDENCE,
    STRATEGIES,
    MultiStrategyParams,
)
from retrievers.multi_strategy.retriever import MultiStrategyRetriever, Plan
from retrievers.multi_strategy.strategies import (
    FullTextStrategy,
    QueryContext,
    SemanticStrategy,
    Strategy,
    StructuralStrategy,
    TemporalStrategy,
)

__all__ = [
    "DEFAULT_EVIDENCE_WEIGHTS",
    "DEFAULT_RULES",
    "DEFAULT_WEIGHTS",
    "EVIDENCE",
    "INTENTS",
    "STRATEGIES",
    "AnalyzerParams",
    "FullTextStrategy",
    "IntentRule",
    "MultiStrategyParams",
    "MultiStrategyRetriever",
    "Plan",
    "QueryAnalysis",
    "QueryAnalyzer",
    "QueryContext",
    "SemanticStrategy",
    "Strategy",
    "StructuralStrategy",
    "TemporalStrategy",
]
