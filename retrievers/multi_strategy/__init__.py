"""The multi-strategy retriever family: query analysis, strategies, fusion."""

from retrievers.multi_strategy.analysis import QueryAnalyzer
from retrievers.multi_strategy.retriever import MultiStrategyParams, MultiStrategyRetriever

__all__ = ["MultiStrategyParams", "MultiStrategyRetriever", "QueryAnalyzer"]
