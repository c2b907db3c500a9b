"""The hierarchical (OpenViking) family: priority-queue descent of the store's context tree.

* ``params.py``: :class:`HierarchicalParams`, the query-time parameters.
* ``scoring.py``: how a tree node is scored (vectors, records, the reranker) and which nodes are
  in scope.
* ``leaf_probe.py``: the leaf-directory probe (``leaf_probe``), a global search of big trees
  that opens the best leaf directories at once, and ``row_dots`` (batch-invariant scores).
* ``traversal.py``: the descent for one query (global search, propagation, convergence), its
  :class:`TraversalStats`.
* ``intent.py``: typed queries, sessions and the intent analysers of ``search()``.
* ``matches.py``: what ``find()``/``search()`` return and how typed queries' matches merge.
* ``retriever.py``: :class:`HierarchicalRetriever` (``retrieve`` through the kernel, ``find``,
  ``search``).
* ``search.py``: :class:`HierarchicalSearchRetriever`, ``search()`` (intent analysis, typed
  queries, a session from the retriever's scope) through the kernel, so it is evaluated like any
  retriever.
"""

from retrievers.hierarchical.intent import (
    ContextType,
    IntentAnalyzer,
    LLMIntentAnalyzer,
    Message,
    PassthroughAnalyzer,
    QueryPlan,
    RuleBasedAnalyzer,
    Session,
    TypedQuery,
)
from retrievers.hierarchical.matches import FindResult, MatchedContext, merge_matches
from retrievers.hierarchical.params import HierarchicalParams
from retrievers.hierarchical.retriever import HierarchicalRetriever
from retrievers.hierarchical.search import HierarchicalSearchParams, HierarchicalSearchRetriever
from retrievers.hierarchical.traversal import TraversalStats

__all__ = [
    "ContextType",
    "FindResult",
    "HierarchicalParams",
    "HierarchicalRetriever",
    "HierarchicalSearchParams",
    "HierarchicalSearchRetriever",
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
