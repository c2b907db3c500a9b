"""OpenViking's priority-queue descent of the context tree, for one query.

The algorithm (OpenViking's ``HierarchicalRetriever`` as of March 2026, with the fixes its users
asked for; defaults in brackets):

1. Global vector search over the records of ``global_search_levels`` [0, 1], limit
   ``max(top_k, global_search_topk)`` [10]. Directory records (level 0 abstract, level 1
   overview) and leaves (level 2) have separate indexes, so a directory-only search never scores
   a leaf; searching level 2 is exact search over every leaf in scope. With ``leaf_probe`` P > 0
   the directory part is replaced by the leaf probe (:mod:`retrievers.hierarchical.leaf_probe`):
   the best P leaf directories are opened at once as popped start points (their members scored
   and propagated as in step 3, the best ``max(top_k, child_limit)`` into the pool) and count as
   visited; the roots are queued as below.
2. Directory hits become starting points, scored by the reranker in ``thinking`` mode when one is
   configured, else by vector score; the roots of the query's scope are added with no score.
   Leaf hits enter the candidate pool directly (never dropped).
3. Pop the best directory from a max-heap; score its children and keep the best
   ``child_limit`` [max(2*top_k, 20)]: ``final = alpha * child + (1 - alpha) * parent`` [alpha
   0.5], where a parent *without a score* (a root) gives ``final = child``. (OpenViking tests
   ``if parent_score``, which also treats a real score of 0.0 as "no parent".)
4. Keep children whose final score passes ``threshold`` (``>``, or ``>=`` with
   ``threshold_inclusive``; None = no threshold); deduplicate by node keeping the maximum; push
   child directories not yet visited.
5. After every pop (a round): stop when the top-k leaves have stayed the same for
   ``max_convergence_rounds`` [3] consecutive rounds and the pool holds at least top_k leaves;
   with ``stagnation_exit`` [on] also stop when the pool (leaves and directories that passed)
   has not grown for that many rounds; or when the heap is empty. ``None`` = never stop early.

Scores are computed once per node and query (cached), so a leaf found by the global search and
again under its directory has one vector score. The pool (leaves and directories) is the result;
the retriever turns its leaves into store rows and find()/search() into typed matches.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.hierarchical.leaf_probe import Probe
from retrievers.hierarchical.params import HierarchicalParams
from retrievers.hierarchical.scoring import LeafKeywordScores, NodeReranker, NodeScores, Scope, TreeIndex
from retrievers.ranking import top_k_1d
from retrievers.spans import lap
from retrievers.vector_search import search_vectors

__all__ = ["Found", "Traversal", "TraversalStats", "traverse"]


@dataclass
class TraversalStats:
    """What one query's traversal did (``provenance["stats"]`` of its results)."""

    directories_popped: int = 0
    rounds: int = 0
    nodes_scored: int = 0
    nodes_in_scope: int = 0
    global_hits: int = 0
    pool_size: int = 0
    rerank_calls: int = 0
    rerank_fallbacks: int = 0
    stop_reason: str = "exhausted"
    leaf_directories_probed: int | None = None  # None: no leaf probe (leaf_probe: 0)

    def as_dict(self) -> dict[str, Any]:
        fraction = self.nodes_scored / self.nodes_in_scope if self.nodes_in_scope else 0.0
        probed = (
            {}
            if self.leaf_directories_probed is None
            else {"leaf_directories_probed": self.leaf_directories_probed}
        )
        return {
            **probed,
            "directories_popped": self.directories_popped,
            "rounds": self.rounds,
            "nodes_scored": self.nodes_scored,
            "nodes_in_scope": self.nodes_in_scope,
            "nodes_scored_fraction": fraction,
            "global_hits": self.global_hits,
            "pool_size": self.pool_size,
            "rerank_calls": self.rerank_calls,
            "rerank_fallbacks": self.rerank_fallbacks,
            "stop_reason": self.stop_reason,
        }


@dataclass
class Found:
    """A node in the pool: its final score, its vector score, the directories that led to it,
    how it was found, and (when reranking) the reranker's score or why the call fell back."""

    score: float
    vector_score: float
    path: tuple[str, ...]
    found_by: str
    rerank_fallback: str | None = None
    rerank_score: float | None = None


@dataclass
class Traversal:
    """One query's pool (node -> :class:`Found`) and stats."""

    pool: dict[int, Found]
    stats: TraversalStats


@dataclass(order=True)
class _Queued:
    priority: float  # negated score: heapq pops the smallest
    node: int
    sequence: int
    score: float | None = field(compare=False)  # None: a root, which has no score
    path: tuple[str, ...] = field(compare=False)


class _TopLeaves:
    """The best ``k`` leaves of the pool by (score desc, node asc), kept up to date as leaves
    enter or improve, so the convergence test costs O(k) per round instead of O(pool)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.keys: list[tuple[float, int]] = []  # (-score, node), ascending = best first
        self.members: set[int] = set()
        self.n_leaves = 0

    def offer(self, node: int, score: float, *, new: bool) -> None:
        self.n_leaves += new
        key = (-score, node)
        if node in self.members:
            self.keys = [entry for entry in self.keys if entry[1] != node]
            bisect.insort(self.keys, key)
        elif len(self.keys) < self.k:
            bisect.insort(self.keys, key)
            self.members.add(node)
        elif key < self.keys[-1]:
            self.members.discard(self.keys.pop()[1])
            bisect.insort(self.keys, key)
            self.members.add(node)


def _passes(params: HierarchicalParams, score: float) -> bool:
    threshold = params.threshold
    if threshold is None:
        return True
    return score >= threshold if params.threshold_inclusive else score > threshold


def _found(
    score: float,
    vector_score: float,
    path: tuple[str, ...],
    found_by: str,
    rerank_score: float,
    fallback: str | None,
    rerank: NodeReranker,
) -> Found:
    """A pool entry; the rerank outcome only when the retriever reranks."""
    if not rerank.active:
        return Found(score, vector_score, path, found_by)
    return Found(score, vector_score, path, found_by, fallback, rerank_score if fallback is None else None)


def _open_probe(
    probe: Probe,
    index: TreeIndex,
    params: HierarchicalParams,
    scores: NodeScores,
    keyword: tuple[LeafKeywordScores, float] | None,
    leaf_hits: list[int],
    keep: int,
    pool: dict[int, Found],
    top: _TopLeaves,
) -> None:
    """The probed leaf directories as popped start points, all at once: each member's final
    score propagated from its directory's (as in step 3), the best ``keep`` members that pass
    the threshold into the pool (``found_by`` ``leaf_probe``)."""
    members, vector_scores = probe.members, probe.vector_scores
    if keyword is not None:
        vector_scores = (1.0 - keyword[1]) * vector_scores + keyword[1] * keyword[0].of(members)
    if leaf_hits:  # a leaf the global leaf search scored keeps that score, as under a popped directory
        known = np.isin(members, np.asarray(leaf_hits, dtype=np.int64))
        vector_scores = vector_scores.copy()
        vector_scores[known] = scores.get(members[known])
    scores.add_scored(members.size)
    alpha = float(params.alpha)
    final = alpha * vector_scores + (1.0 - alpha) * probe.directory_scores[probe.owners]
    if params.threshold is not None:
        passes = final >= params.threshold if params.threshold_inclusive else final > params.threshold
        members, vector_scores, final = members[passes], vector_scores[passes], final[passes]
        owners = probe.owners[passes]
    else:
        owners = probe.owners
    if final.size > keep:  # the best keep (ties at the cut kept, then ordered by node)
        cut = final.size - keep
        chosen = np.flatnonzero(final >= np.partition(final, cut)[cut])
    else:
        chosen = np.arange(final.size)
    order = chosen[np.lexsort((members[chosen], -final[chosen]))][:keep]
    uris = index.tree.uris
    for position in order.tolist():
        node, score = int(members[position]), float(final[position])
        known_entry = pool.get(node)
        if known_entry is None or score > known_entry.score:
            top.offer(node, score, new=known_entry is None)
            path = (uris[int(probe.directories[owners[position]])],)
            pool[node] = Found(score, float(vector_scores[position]), path, "leaf_probe")


def traverse(
    index: TreeIndex,
    params: HierarchicalParams,
    rerank: NodeReranker,
    query: str,
    vector: npt.NDArray[np.float32],
    top_k: int,
    scope: Scope,
) -> Traversal:
    """The descent for one query over the nodes in ``scope`` (see the module docstring).

    Its memory and time do not grow with the tree beyond the global search: the directory
    scores are one array over the directories (which the global search scores anyway), the
    leaf scores and the visited directories are a dict and a set of what the query touched."""
    tree = index.tree
    in_scope = scope.nodes
    stats = TraversalStats(nodes_in_scope=scope.size)
    scores = NodeScores(index, scope)
    pool: dict[int, Found] = {}
    limit = max(top_k, params.global_search_topk)
    directory_levels = [level for level in params.global_search_levels if level < 2]
    weight = float(params.leaf_keyword_weight)
    # hybrid leaf scores: BM25 (an inverted-index lookup, not a vector score) mixed into each
    # leaf's cosine as it is scored; None keeps the vector scores exactly
    keyword = (index.keyword_scores(query, scope), weight) if weight > 0.0 else None

    def reranked(
        nodes: list[int], vector_scores: list[float] | None = None
    ) -> tuple[list[float], str | None]:
        """The rerank outcome of ``nodes``; ``vector_scores``: theirs when the caller has them."""
        if rerank.active and nodes:
            stats.rerank_calls += 1
        if vector_scores is None:
            vector_scores = scores.get(np.asarray(nodes, dtype=np.int64)).tolist()
        values, reason = rerank(query, nodes, vector_scores)
        stats.rerank_fallbacks += reason is not None
        return values, reason

    # 1. Global search.
    lap("global")
    start_nodes: list[int] = []
    probe: Probe | None = None
    if params.leaf_probe and index.leaf_directories is not None:  # replaces the directory search
        probe = index.probe(vector, scope, params.leaf_probe, params.directory_nprobe)
        scores.set_directories(probe.directories, probe.directory_scores)
    elif directory_levels and index.record_ivf is not None:  # directory_search: ivf
        mask = index.record_mask(scope, tuple(directory_levels))
        _, records = index.record_ivf.top(vector, limit, params.directory_nprobe, mask)
        for record in records.tolist():
            node = int(tree.record_nodes[record])
            if node not in start_nodes:
                start_nodes.append(node)
        # their scores as under exact search (the best of each one's records); the directories
        # not found are scored when reached as children
        index.score_missing(vector, np.asarray(start_nodes, dtype=np.int64), scores)
    elif directory_levels:
        record_scores = index.record_index.scores(vector)
        index.fill_directory_scores(record_scores, scope.directories, scores)
        mask = in_scope[tree.record_nodes] & np.isin(tree.record_levels, directory_levels)
        if mask.any():
            _, records = top_k_1d(record_scores, limit, mask=mask)
            for record in records.tolist():
                node = int(tree.record_nodes[record])
                if node not in start_nodes:
                    start_nodes.append(node)
    leaf_hits: list[int] = []
    if 2 in params.global_search_levels:
        scores.all_leaves = True  # exact search scores every leaf in scope
        if scope.leaves.size:
            found = search_vectors(index.store, vector[None, :], limit, mask=scope.row_mask, params=params)
            hit_scores, hit_rows = found[0]
            for score, row in zip(hit_scores.tolist(), hit_rows.tolist(), strict=True):
                node = int(index.node_of_row[row])
                if keyword is not None:
                    score = (1.0 - weight) * score + weight * float(keyword[0].of(np.asarray([node]))[0])
                scores.set_leaf(node, score)
                leaf_hits.append(node)
    stats.global_hits = len(start_nodes) + len(leaf_hits)

    # 2. Starting points and leaf hits. Start points are directories: they reach results only
    # through their children, so their rerank outcome is counted in the stats only.
    start_scores, _ = reranked(start_nodes)
    heap: list[_Queued] = []
    sequence = 0
    for node, score in zip(start_nodes, start_scores, strict=True):
        heapq.heappush(heap, _Queued(-score, node, sequence, score, ()))
        sequence += 1
    for root in tree.roots.tolist():
        if in_scope[root] and root not in start_nodes:
            heapq.heappush(heap, _Queued(-0.0, root, sequence, None, ()))
            sequence += 1
    top = _TopLeaves(top_k)
    hit_scores_final, hit_fallback = reranked(leaf_hits)
    for node, score in zip(leaf_hits, hit_scores_final, strict=True):
        if _passes(params, score):
            top.offer(node, score, new=True)
            pool[node] = _found(score, float(scores[node]), (), "global_search", score, hit_fallback, rerank)

    # 3-5. Best-first traversal with convergence.
    alpha = float(params.alpha)
    child_limit = max(2 * top_k, 20) if params.child_limit is None else params.child_limit
    visited: set[int] = set()
    if probe is not None:
        stats.leaf_directories_probed = int(probe.directories.size)
        visited.update(probe.directories.tolist())
        _open_probe(probe, index, params, scores, keyword, leaf_hits, max(top_k, child_limit), pool, top)
    max_rounds = params.max_convergence_rounds
    threshold, inclusive = params.threshold, params.threshold_inclusive
    previous_top: frozenset[int] | None = None
    previous_size = len(pool)
    unchanged = 0
    stagnant = 0
    while heap:
        item = heapq.heappop(heap)
        if item.node in visited:
            continue
        lap("round")
        visited.add(item.node)
        stats.directories_popped += 1
        children = tree.children(item.node)
        children = children[in_scope[children]]
        if children.size:
            raw = index.score_missing(vector, children, scores, keyword)
            order = np.lexsort((children, -raw))[:child_limit]
            picked = children[order]
            kids = picked.tolist()
            kid_vector_scores = raw[order].tolist()
            kid_scores, kid_fallback = reranked(kids, kid_vector_scores)
            path = (*item.path, tree.uris[item.node])
            parent = item.score
            # per child: its vector score (as scored just above) and whether it is a leaf
            kid_rows = zip(kids, kid_scores, kid_vector_scores, tree.is_leaf[picked].tolist(), strict=True)
            for node, child_score, vector_score, is_leaf in kid_rows:
                # "No parent score" is a root, tested as such; a real 0.0 still propagates.
                final = child_score if parent is None else alpha * child_score + (1.0 - alpha) * parent
                if threshold is not None and not (final >= threshold if inclusive else final > threshold):
                    continue  # fails the threshold (as _passes)
                known = pool.get(node)
                if known is None or final > known.score:
                    if is_leaf:
                        top.offer(node, final, new=known is None)
                    pool[node] = _found(
                        final, vector_score, path, "traversal", child_score, kid_fallback, rerank
                    )
                if not is_leaf and node not in visited:
                    heapq.heappush(heap, _Queued(-final, node, sequence, final, path))
                    sequence += 1
        stats.rounds += 1
        if max_rounds is None:
            continue
        members = frozenset(top.members)
        unchanged = unchanged + 1 if members == previous_top and top.n_leaves >= top_k else 0
        stagnant = stagnant + 1 if len(pool) <= previous_size else 0
        previous_top, previous_size = members, len(pool)
        if unchanged >= max_rounds:
            stats.stop_reason = "converged"
            break
        if params.stagnation_exit and stagnant >= max_rounds:
            stats.stop_reason = "stagnated"
            break
    stats.nodes_scored = scores.n_scored
    stats.pool_size = len(pool)
    return Traversal(pool=pool, stats=stats)
