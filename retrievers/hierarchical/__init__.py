"""The hierarchical (OpenViking) family: retriever.py (HierarchicalRetriever) and intent.py
(typed queries, sessions, intent analysers and the merge of find()/search() matches)."""

from retrievers.hierarchical.intent import (
    ContextType,
    FindResult,
    IntentAnalyzer,
    LLMIntentAnalyzer,
    MatchedContext,
    Message,
    PassthroughAnalyzer,
    QueryPlan,
    RuleBasedAnalyzer,
    Session,
    TypedQuery,
    merge_matches,
)
from retrievers.hierarchical.retriever import HierarchicalParams, HierarchicalRetriever, TraversalStats

__all__ = [
    "ContextType",
    "FindResult",
    "HierarchicalParams",
    "HierarchicalRetriever",
    "IntentAnalyzer",
    "LLMIntentAnalyzer",
    "MatchedContext",
    "Message",
    "PassthroughAnalyzer",
    "QueryPlan",
    "RuleBasedAnalyzer",
    "Session",
    "TraversalStats",
    "TypedQuery",
    "merge_matches",
]
