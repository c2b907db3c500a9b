"""HierarchicalRetriever: OpenViking's directory-recursive retrieval over a store's context tree.

``retrieve``/``retrieve_batch`` go through the kernel (:mod:`retrievers.kernel`): each query's
traversal (:mod:`retrievers.hierarchical.traversal`) hands back the leaves of its pool as store
rows; the kernel orders them (score desc, doc id asc), resolves chunks to their documents and
cuts top_k. ``find``/``search`` (OpenViking's API) return typed matches by context type
(:mod:`retrievers.hierarchical.matches`), after intent analysis for ``search``
(:mod:`retrievers.hierarchical.intent`); they may return directories too (``directories=True``),
which are not store rows and so never results of ``retrieve``.

Abilities: the kernel's mask (a store view such as one LoCoMo conversation, and ``filters``) is
the leaf scope: leaves outside it are never scored or returned, and directories with no allowed
leaf below them are skipped. Chunked stores: the tree's leaves are chunks; results are their
documents (a document scores its best chunk; ``provenance["chunk_id"]``). A ``reranker`` is used
inside the traversal in ``thinking`` mode (start points and children), through the one fallback
policy. Each result's ``provenance``: ``found_by`` (``global_search`` or ``traversal``),
``directory_path`` (the directories that led to it), ``pre_propagation_score`` (its vector
score), with a reranker ``rerank_fallback`` (the reason the call that scored it fell back, or
None) and ``rerank_score``; and the query's traversal ``stats``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.hierarchical.convergence import warn_if_few_rounds
from retrievers.hierarchical.intent import (
    ContextType,
    IntentAnalyzer,
    PassthroughAnalyzer,
    QueryPlan,
    Session,
    TypedQuery,
)
from retrievers.hierarchical.matches import FindResult, MatchedContext, merge_matches
from retrievers.hierarchical.params import HierarchicalParams
from retrievers.hierarchical.scoring import NodeReranker, Scope, TreeIndex
from retrievers.hierarchical.traversal import Found, Traversal, traverse
from retrievers.kernel import Candidates, KernelRetriever, check_query
from retrievers.ranking import check_top_k
from retrievers.spans import span
from retrievers.store.tree import ContextTree

__all__ = ["HierarchicalRetriever"]


class HierarchicalRetriever(KernelRetriever):
    """OpenViking's hierarchical retrieval over ``store.tree`` (see the module docstring)."""

    Params = HierarchicalParams
    params: HierarchicalParams
    # 2: a reranker's bad answer voids the whole call (the one policy), not only that item
    ALGORITHM_VERSION = 2
    reranks_itself = True
    store_requires = ("hierarchy",)

    def index_parts(self) -> tuple[str, ...]:
        return super().index_parts() + (("bm25",) if self.params.leaf_keyword_weight > 0 else ())

    def setup(self) -> None:
        tree = self.store.tree
        if tree is None:
            raise ValueError(
                "the store has no context tree; build it with store.hierarchy set "
                "(e.g. store=kmeans_tree or store=locomo_tree)"
            )
        self.tree: ContextTree = tree
        self.index = TreeIndex(
            self.store,
            tree,
            directory_search=self.params.directory_search,
            leaf_probe=self.params.leaf_probe > 0,
        )
        thinking = self.params.mode == "thinking"
        self.node_reranker = NodeReranker(
            self.index, self.reranker if thinking else None, self.params.rerank_timeout
        )
        self._scopes: dict[ContextType | None, Scope] = {None: self.index.scope(self.mask)}
        if not self.params.leaf_probe:  # the probe finds the leaves; the descent's rounds only add
            warn_if_few_rounds(self.params.max_convergence_rounds, int(self._scopes[None].leaves.size))

    def _scope(self, context_type: ContextType | None) -> Scope:
        """Nodes in scope, narrowed to one context type's roots (None = every root)."""
        scope = self._scopes.get(context_type)
        if scope is None:
            assert context_type is not None
            scope = self._scopes[context_type] = self.index.narrowed(self._scopes[None], context_type.value)
        return scope

    def _traverse(
        self, query: str, vector: npt.NDArray[np.float32], top_k: int, context_type: ContextType | None
    ) -> Traversal:
        with span("traverse"):  # a global lap, then a round lap per popped directory
            return traverse(
                self.index, self.params, self.node_reranker, query, vector, top_k, self._scope(context_type)
            )

    def _provenance(self, found: Found) -> dict[str, Any]:
        provenance: dict[str, Any] = {
            "found_by": found.found_by,
            "directory_path": found.path,
            "pre_propagation_score": found.vector_score,
        }
        if self.node_reranker.active:
            provenance["rerank_fallback"] = found.rerank_fallback
            if found.rerank_score is not None:
                provenance["rerank_score"] = found.rerank_score
        return provenance

    # -- retrieve, through the kernel --------------------------------------------------------------

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        """The kernel's hook: each query's traversal with top_k = ``depth``; its pool's leaves
        as store rows."""
        assert vectors is not None
        return [
            self._from_traversal(self._traverse(query, vector, depth, None))
            for query, vector in zip(queries, vectors, strict=True)
        ]

    def _from_traversal(self, traversal: Traversal) -> Candidates:
        nodes = np.fromiter(traversal.pool.keys(), dtype=np.int64, count=len(traversal.pool))
        leaves = nodes[self.tree.is_leaf[nodes]].tolist()
        found = [traversal.pool[node] for node in leaves]
        rows = self.index.leaf_rows[leaves]
        scores = np.fromiter((entry.score for entry in found), dtype=np.float64, count=len(found))
        uris = self.tree.uris
        return Candidates(
            rows,
            scores,
            lambda i: self._provenance(found[i]),
            traversal.stats.as_dict(),
            uri=lambda i: uris[leaves[i]],
        )

    # -- find / search (OpenViking's API) -----------------------------------------------------------

    def _matches(
        self, typed: TypedQuery, vector: npt.NDArray[np.float32], top_k: int, directories: bool
    ) -> list[MatchedContext]:
        traversal = self._traverse(typed.query, vector, top_k, typed.context_type)
        stats = traversal.stats.as_dict()
        tree = self.tree
        store = self.store
        items = [(node, found) for node, found in traversal.pool.items() if directories or tree.is_leaf[node]]
        items.sort(key=lambda item: (-item[1].score, tree.doc_ids[item[0]] or tree.uris[item[0]]))
        matches = []
        for node, found in items[:top_k]:
            provenance = {**self._provenance(found), "stats": stats}
            doc_id = tree.doc_ids[node]
            if doc_id is not None and store.chunked:
                provenance["chunk_id"] = doc_id
                doc_id = store.parent_ids[int(store.parent_of[store.row_of[doc_id]])]
            matches.append(
                MatchedContext(
                    uri=tree.uris[node],
                    context_type=ContextType(tree.context_types[node]),
                    level=2 if tree.is_leaf[node] else 0,
                    abstract=tree.nodes[node].abstract,
                    score=found.score,
                    doc_id=doc_id,
                    query=typed.query,
                    provenance=provenance,
                )
            )
        return matches

    def _run_plan(
        self, plan: QueryPlan, top_k: int, limit_per_bucket: int | None, directories: bool
    ) -> FindResult:
        top_k = check_top_k(top_k)
        if not plan.queries:
            return FindResult(plan=plan)
        vectors = self.encode([typed.query for typed in plan.queries])
        results = [
            (typed, self._matches(typed, vector, top_k, directories))
            for typed, vector in zip(plan.queries, vectors, strict=True)
        ]
        return merge_matches(results, limit_per_bucket=limit_per_bucket or top_k, plan=plan)

    def find(
        self,
        query: str,
        top_k: int = 10,
        *,
        context_type: ContextType | None = None,
        directories: bool = False,
    ) -> FindResult:
        """One query as given (no intent analysis), over ``context_type``'s roots or all of them.
        ``directories``: directories are matches too (level 0, no doc_id)."""
        check_query(query)
        plan = QueryPlan(queries=(TypedQuery(" ".join(query.split()), context_type, priority=1),))
        return self._run_plan(plan, top_k, None, directories)

    def search(
        self,
        query: str,
        session: Session | None = None,
        *,
        analyzer: IntentAnalyzer | None = None,
        top_k: int = 10,
        limit_per_bucket: int | None = None,
        directories: bool = False,
    ) -> FindResult:
        """OpenViking's ``search(query, session)``: intent analysis (``analyzer``, default
        passthrough) turns the query and session into 0-5 typed queries; each is retrieved and the
        results are merged (dedup by URI, priority-weighted score, at most ``limit_per_bucket``
        (default top_k) per bucket)."""
        check_query(query)
        plan = (analyzer or PassthroughAnalyzer()).analyze(query, session)
        return self._run_plan(plan, top_k, limit_per_bucket, directories)
