"""The four strategies of the multi-strategy retriever, one per module, and what they share."""

from retrievers.multi_strategy.strategies.base import Hits, QueryContext, SharedIndexes, Strategy
from retrievers.multi_strategy.strategies.fulltext import FullTextStrategy
from retrievers.multi_strategy.strategies.semantic import SemanticStrategy
from retrievers.multi_strategy.strategies.structural import StructuralStrategy
from retrievers.multi_strategy.strategies.temporal import TemporalStrategy

__all__ = [
    "FullTextStrategy",
    "Hits",
    "QueryContext",
    "SemanticStrategy",
    "SharedIndexes",
    "Strategy",
    "StructuralStrategy",
    "TemporalStrategy",
]
