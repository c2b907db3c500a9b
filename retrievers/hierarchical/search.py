"""HierarchicalSearchRetriever: OpenViking's ``search(query, session)`` as a kernel retriever, so
intent analysis is evaluated (and tuned, gated, exported) like any retrieval algorithm.

Per query, :meth:`candidates` does what :meth:`HierarchicalRetriever.search` does, minus the
buckets: the analyser (``analyzer``, default :class:`RuleBasedAnalyzer`) turns the query and the
session into 0-5 typed queries; each is searched by the tree traversal (over its context type's
roots when ``typed_scope``, as OpenViking does; else over every root); the leaves found are
merged *by document*: a store row keeps its best priority-weighted score
(:func:`retrievers.hierarchical.matches.priority_weight`: ``score * (6 - priority) / 5``,
divided instead for a negative score). The kernel then orders, resolves chunks and cuts top_k.
A plan with no typed query gives no results for that query (OpenViking: nothing to retrieve).

**Where the session comes from.** A retriever is asked with query *text* only (the harness never
hands a retriever query metadata). The session is built once, at construction, from the
retriever's *scope*: with ``session_source: scope`` and a store view (``store.allowed``: the
harness builds one retriever per scope value, e.g. per LoCoMo conversation via
``dataset.scope_key``), the in-scope documents that carry every ``session_order_keys`` field
(LoCoMo: ``session``, ``turn_index``) are the conversation; ordered by those keys, the last
``session_messages`` of them are the session's messages (role ``user``: the conversation is the
memory of the user the agent serves; content: the document's text, ``"<speaker>: <turn>"`` in
LoCoMo), and with ``session_summary`` the abstract of the tree directory holding the last message
(LoCoMo: the latest session's date and release summary) is its summary. A store without a view
(a flat corpus such as SciFact) has no conversation: the session is empty.
This is the conversation *up to the question* for LoCoMo because every LoCoMo question is asked
after the conversation's last session (the benchmark's QA follows the whole dialogue); for a
dataset whose questions are asked mid-conversation this source would show the analyser turns
from after the question, so do not use it there. Nothing else reaches the analyser: no query
metadata (answers, evidence, categories), no qrels, and the same session for every question of
a scope.

``provenance`` of a result: the traversal's (``found_by``, ``directory_path``,
``pre_propagation_score``) plus ``typed_query``, ``context_type``, ``intent``, ``priority`` and
``unweighted_score`` of the typed query that gave its best score; ``stats``: the plan's size
(``typed_queries``), whether the analyser fell back (``plan_fallback``: ``none`` or its reason's
kind) and the traversals' summed work (``nodes_scored``, its fraction of the nodes in scope,
``directories_popped``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from retrievers.hierarchical.intent import IntentAnalyzer, Message, QueryPlan, RuleBasedAnalyzer, Session
from retrievers.hierarchical.matches import priority_weight
from retrievers.hierarchical.params import HierarchicalParams
from retrievers.hierarchical.retriever import HierarchicalRetriever
from retrievers.hierarchical.traversal import Found
from retrievers.kernel import Candidates
from retrievers.params import param

__all__ = ["HierarchicalSearchParams", "HierarchicalSearchRetriever", "scope_session"]


@dataclass(frozen=True)
class HierarchicalSearchParams(HierarchicalParams):
    """The hierarchical retriever's parameters plus the intent analysis and the session source."""

    analyzer: Any = param(
        None, doc="an object with analyze(query, session) -> QueryPlan; null = RuleBasedAnalyzer()"
    )
    typed_scope: bool = param(
        True, doc="search a typed query only under its context type's roots (OpenViking)"
    )
    session_source: Literal["none", "scope"] = param(
        "scope",
        doc="scope: the session is the in-scope conversation (see the module docstring); none: no session",
    )
    session_order_keys: tuple[str, ...] = param(
        ("session", "turn_index"), non_empty=True, doc="metadata keys ordering the conversation's documents"
    )
    session_messages: int = param(
        5, low=0, high=10_000, doc="most recent documents kept as the session's messages"
    )
    session_summary: bool = param(
        True, doc="the session's summary is the abstract of the directory holding the last message"
    )

    def check(self) -> None:
        super().check()
        if self.analyzer is not None and not callable(getattr(self.analyzer, "analyze", None)):
            raise self.fail(
                "analyzer", f"must be null or an object with an analyze() method, got {self.analyzer!r}"
            )


def _order_value(value: Any) -> tuple[int, float | str]:
    """Sort key of a metadata value: numbers (and numeric strings) by value, before other strings."""
    if isinstance(value, bool):
        return (1, str(value))
    if isinstance(value, int | float):
        return (0, float(value))
    text = str(value)
    try:
        return (0, float(text))
    except ValueError:
        return (1, text)


def scope_session(retriever: HierarchicalRetriever, params: HierarchicalSearchParams) -> Session:
    """The session ``params.session_source`` gives ``retriever`` (see the module docstring)."""
    store = retriever.store
    if params.session_source == "none" or store.allowed is None or params.session_messages == 0:
        return Session()
    keys = params.session_order_keys
    turns: list[tuple[tuple[tuple[int, float | str], ...], str, int]] = []
    for row in np.flatnonzero(retriever.scope).tolist():
        document = store.documents[row]
        if all(key in document.metadata for key in keys):
            order = tuple(_order_value(document.metadata[key]) for key in keys)
            turns.append((order, document.id, row))
    turns.sort()
    recent = turns[-params.session_messages :]
    messages = tuple(Message("user", store.documents[row].full_text) for _, _, row in recent)
    summary = ""
    if params.session_summary and recent:
        leaf = int(retriever.index.node_of_row[recent[-1][2]])
        if leaf >= 0:
            parent = int(retriever.tree.parents[leaf])
            if parent >= 0:
                summary = retriever.tree.nodes[parent].abstract
    return Session(messages=messages, summary=summary)


class HierarchicalSearchRetriever(HierarchicalRetriever):
    """``search(query, session)`` through the kernel (see the module docstring)."""

    Params = HierarchicalSearchParams
    params: HierarchicalSearchParams

    def setup(self) -> None:
        super().setup()
        self.analyzer: IntentAnalyzer = self.params.analyzer or RuleBasedAnalyzer()
        self.session = scope_session(self, self.params)

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        assert vectors is not None
        return [
            self._plan_candidates(query, vector, depth)
            for query, vector in zip(queries, vectors, strict=True)
        ]

    def _plan_candidates(self, query: str, vector: np.ndarray, depth: int) -> Candidates:
        plan: QueryPlan = self.analyzer.analyze(query, self.session)
        fallback = "none" if plan.fallback is None else plan.fallback.split(":", 1)[0]
        stats: dict[str, Any] = {"typed_queries": len(plan.queries), "plan_fallback": fallback}
        if not plan.queries:
            return Candidates.empty({**stats, "nodes_scored": 0, "nodes_scored_fraction": 0.0})
        same = " ".join(query.split())
        texts = [typed.query for typed in plan.queries]
        encoded = {same: vector}
        missing = sorted({text for text in texts if text not in encoded})
        if missing:
            encoded.update(zip(missing, self.encode(missing), strict=True))
        best: dict[int, tuple[float, Found, int, int]] = {}  # row -> (weighted, found, query index, leaf)
        nodes_scored = popped = 0
        nodes_in_scope = 0
        for position, typed in enumerate(plan.queries):
            context_type = typed.context_type if self.params.typed_scope else None
            traversal = self._traverse(typed.query, encoded[typed.query], depth, context_type)
            nodes_scored += traversal.stats.nodes_scored
            popped += traversal.stats.directories_popped
            nodes_in_scope = max(nodes_in_scope, traversal.stats.nodes_in_scope)
            weight = priority_weight(typed.priority)
            for node, found in traversal.pool.items():
                if not self.tree.is_leaf[node]:
                    continue
                row = int(self.index.leaf_rows[node])
                weighted = found.score * weight if found.score >= 0 else found.score / weight
                known = best.get(row)
                if known is None or weighted > known[0]:
                    best[row] = (weighted, found, position, node)
        scope_nodes = self._scope(None).size
        stats.update(
            nodes_scored=nodes_scored,
            nodes_scored_fraction=nodes_scored / scope_nodes if scope_nodes else 0.0,
            directories_popped=popped,
        )
        rows = sorted(best)
        entries = [best[row] for row in rows]
        uris = self.tree.uris

        def provenance(i: int) -> dict[str, Any]:
            _, found, position, _ = entries[i]
            typed = plan.queries[position]
            return {
                **self._provenance(found),
                "typed_query": typed.query,
                "context_type": None if typed.context_type is None else typed.context_type.value,
                "intent": typed.intent,
                "priority": typed.priority,
                "unweighted_score": found.score,
            }

        return Candidates(
            np.asarray(rows, dtype=np.int64),
            np.asarray([entry[0] for entry in entries], dtype=np.float64),
            provenance,
            stats,
            uri=lambda i: uris[entries[i][3]],
        )
