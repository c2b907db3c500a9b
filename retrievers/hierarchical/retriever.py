"""HierarchicalRetriever: OpenViking's directory-recursive retrieval over a store's context tree.

The algorithm (OpenViking's ``HierarchicalRetriever`` as of March 2026, with the fixes its users
asked for; defaults in brackets):

1. Embed the query once. Global vector search over the records of ``global_search_levels``
   [0, 1], limit ``max(top_k, global_search_topk)`` [10]. Directory records (level 0 abstract,
   level 1 overview) and leaves (level 2) have separate indexes, so a directory-only search never
   scores a leaf; searching level 2 is exact search over every leaf in scope.
2. Directory hits become starting points, scored by the reranker in ``thinking`` mode when one is
   configured, else by vector score; the roots of the query's context type are added with no
   score. Leaf hits enter the candidate pool directly (never dropped).
3. Pop the best directory from a max-heap; score its children and keep the best
   ``child_limit`` [max(2*top_k, 20)]: ``final = alpha * child + (1 - alpha) * parent`` [alpha
   0.5], where a parent *without a score* (a root) gives ``final = child``. (OpenViking tests
   ``if parent_score``, which also treats a real score of 0.0 as "no parent".)
4. Keep children whose final score passes ``threshold`` (``>``, or ``>=`` with
   ``threshold_inclusive``; None = no threshold); deduplicate by URI keeping the maximum; push
   child directories not yet visited.
5. After every pop (a round): stop when the top-k leaf URIs have stayed the same for
   ``max_convergence_rounds`` [3] consecutive rounds and the pool holds at least top_k leaves;
   with ``stagnation_exit`` [on] also stop when the pool (leaves and directories that passed)
   has not grown for that many rounds; or when the heap is empty. ``None`` = never stop early.
6. Return leaves (``return_directories`` [off] adds directories, whose doc_id is their URI),
   ordered by (score desc, doc_id asc).

Scores are computed once per node and query (cached), so a leaf found by the global search and
again under its directory has one vector score. Scoping: when the store is a restricted view
(``store.allowed``), leaves outside it are never scored or returned and directories with no
allowed leaf below them are skipped. Each result's ``provenance`` holds the directory path that
led to it, its pre-propagation score, whether a rerank fallback touched it, and the query's
traversal ``stats``.
"""

from __future__ import annotations

import bisect
import heapq
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.hierarchical.intent import (
    ContextType,
    FindResult,
    IntentAnalyzer,
    MatchedContext,
    PassthroughAnalyzer,
    QueryPlan,
    Session,
    TypedQuery,
    merge_matches,
)
from retrievers.index import ExactVectorIndex
from retrievers.kernel import check_query
from retrievers.ranking import check_top_k, top_k_1d
from retrievers.store import ContextStore
from retrievers.store.tree import ContextTree
from retrievers.types import Embedder, Reranker, RetrievalResult

__all__ = ["HierarchicalParams", "HierarchicalRetriever", "TraversalStats"]

MODES = ("quick", "thinking")
_BIG = 10_000_000


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class HierarchicalParams:
    """Query-time parameters (the tree itself is a store setting, ``store.hierarchy``).

    ``alpha`` in [0, 1]; ``global_search_levels`` a non-empty subset of {0, 1, 2};
    ``global_search_topk`` in [1, 10000000]; ``child_limit`` in [1, 10000000] or None
    (= max(2*top_k, 20)); ``threshold`` a finite number or None (off); ``threshold_inclusive``;
    ``max_convergence_rounds`` in [1, 1000] or None (never stop early); ``stagnation_exit``;
    ``return_directories``; ``mode`` quick | thinking (rerank only in thinking); ``reranker``
    None or an object with ``rerank(query, candidates, texts)``; ``rerank_timeout`` in (0, 3600]
    seconds or None (no limit); ``query_batch_size`` in [1, 65536].
    """

    alpha: float = 0.5
    global_search_levels: tuple[int, ...] = (0, 1)
    global_search_topk: int = 10
    child_limit: int | None = None
    threshold: float | None = None
    threshold_inclusive: bool = False
    max_convergence_rounds: int | None = 3
    stagnation_exit: bool = True
    return_directories: bool = False
    mode: str = "thinking"
    reranker: Any = None
    rerank_timeout: float | None = None
    query_batch_size: int = 256

    def __post_init__(self) -> None:
        if not _is_number(self.alpha) or not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha!r}")
        levels = self.global_search_levels
        if isinstance(levels, str) or not isinstance(levels, Sequence):
            raise ValueError(
                f"global_search_levels must be a list of levels from {{0, 1, 2}}, got {levels!r}"
            )
        levels = tuple(levels)
        if not levels or any(not _is_int(level) or level not in (0, 1, 2) for level in levels):
            raise ValueError(
                f"global_search_levels must be a non-empty subset of {{0, 1, 2}}, got {list(levels)}"
            )
        if len(set(levels)) != len(levels):
            raise ValueError(f"global_search_levels has repeats: {list(levels)}")
        object.__setattr__(self, "global_search_levels", tuple(sorted(levels)))
        if not _is_int(self.global_search_topk) or not 1 <= self.global_search_topk <= _BIG:
            raise ValueError(
                f"global_search_topk must be an integer in [1, {_BIG}], got {self.global_search_topk!r}"
            )
        if self.child_limit is not None and (
            not _is_int(self.child_limit) or not 1 <= self.child_limit <= _BIG
        ):
            raise ValueError(
                f"child_limit must be an integer in [1, {_BIG}] or null (= max(2*top_k, 20)), got {self.child_limit!r}"
            )
        if self.threshold is not None and (
            not _is_number(self.threshold) or not math.isfinite(self.threshold)
        ):
            raise ValueError(f"threshold must be a finite number or null (off), got {self.threshold!r}")
        for name in ("threshold_inclusive", "stagnation_exit", "return_directories"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        rounds = self.max_convergence_rounds
        if rounds is not None and (not _is_int(rounds) or not 1 <= rounds <= 1000):
            raise ValueError(
                f"max_convergence_rounds must be an integer in [1, 1000] or null (unlimited), got {rounds!r}"
            )
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {self.mode!r}")
        if self.reranker is not None and not callable(getattr(self.reranker, "rerank", None)):
            raise ValueError(
                f"reranker must be null or an object with a rerank() method, got {self.reranker!r}"
            )
        timeout = self.rerank_timeout
        if timeout is not None and (not _is_number(timeout) or not 0 < timeout <= 3600):
            raise ValueError(
                f"rerank_timeout must be in (0, 3600] seconds or null (no limit), got {timeout!r}"
            )
        if not _is_int(self.query_batch_size) or not 1 <= self.query_batch_size <= 65536:
            raise ValueError(f"query_batch_size must be in [1, 65536], got {self.query_batch_size!r}")


def _call_with_timeout(call: Callable[[], Any], timeout: float | None) -> Any:
    """``call()``, or None when it raises or (with a ``timeout``) takes longer than ``timeout``
    seconds. A timed-out call runs on in a daemon thread; its answer is ignored."""
    if timeout is None:
        try:
            return call()
        except Exception:  # any failure of a reranker means: keep the vector scores
            return None
    box: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append(call())
        except Exception:
            box.append(None)
        finally:
            done.set()

    threading.Thread(target=run, name="rerank", daemon=True).start()
    return box[0] if done.wait(timeout) else None


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

    def as_dict(self) -> dict[str, Any]:
        fraction = self.nodes_scored / self.nodes_in_scope if self.nodes_in_scope else 0.0
        return {
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
class _Candidate:
    score: float
    vector_score: float
    path: tuple[str, ...]
    found_by: str
    rerank_fallback: bool = False
    rerank_score: float | None = None


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


@dataclass
class _Traversal:
    pool: dict[int, _Candidate]
    stats: TraversalStats


class HierarchicalRetriever:
    """OpenViking's hierarchical retrieval over ``store.tree`` (see the module docstring)."""

    Params = HierarchicalParams

    def __init__(
        self,
        store: ContextStore,
        embedder: Embedder,
        *,
        alpha: float = 0.5,
        global_search_levels: Sequence[int] = (0, 1),
        global_search_topk: int = 10,
        child_limit: int | None = None,
        threshold: float | None = None,
        threshold_inclusive: bool = False,
        max_convergence_rounds: int | None = 3,
        stagnation_exit: bool = True,
        return_directories: bool = False,
        mode: str = "thinking",
        reranker: Reranker | None = None,
        rerank_timeout: float | None = None,
        query_batch_size: int = 256,
    ) -> None:
        self.params = HierarchicalParams(
            alpha=alpha,
            global_search_levels=tuple(global_search_levels)
            if isinstance(global_search_levels, Sequence)
            else global_search_levels,
            global_search_topk=global_search_topk,
            child_limit=child_limit,
            threshold=threshold,
            threshold_inclusive=threshold_inclusive,
            max_convergence_rounds=max_convergence_rounds,
            stagnation_exit=stagnation_exit,
            return_directories=return_directories,
            mode=mode,
            reranker=reranker,
            rerank_timeout=rerank_timeout,
            query_batch_size=query_batch_size,
        )
        if embedder.name != store.embedder_name:
            raise ValueError(
                f"embedder {embedder.name!r} is not the one the store was built with ({store.embedder_name!r})"
            )
        tree = store.tree
        if tree is None:
            raise ValueError(
                "the store has no context tree; build it with store.hierarchy set "
                "(e.g. store=kmeans_tree or store=locomo_tree)"
            )
        if tree.record_vectors is None or tree.dim != store.dim:
            raise ValueError(f"the store's tree has no directory vectors of dimension {store.dim}")
        self.store = store
        self.embedder = embedder
        self.tree: ContextTree = tree
        self.reranker: Reranker | None = self.params.reranker
        n_nodes = len(tree)
        self._leaf_rows = tree.leaf_rows(store.row_of)
        self._node_of_row = np.full(len(store), -1, dtype=np.int64)
        leaves = np.flatnonzero(tree.is_leaf)
        self._node_of_row[self._leaf_rows[leaves]] = leaves
        # Directory records: the level-0 record of every directory, and its level-1 record (or -1).
        self._record0 = np.full(n_nodes, -1, dtype=np.int64)
        self._record1 = np.full(n_nodes, -1, dtype=np.int64)
        for level, target in ((0, self._record0), (1, self._record1)):
            records = np.flatnonzero(tree.record_levels == level)
            target[tree.record_nodes[records]] = records
        self._record_vectors = np.asarray(tree.record_vectors)
        self._record_index = ExactVectorIndex(self._record_vectors)
        # Scope: leaves the store view allows, and directories with such a leaf below them.
        in_scope = tree.is_leaf.copy()
        if store.allowed is not None:
            in_scope[leaves] = np.asarray(store.allowed, dtype=bool)[self._leaf_rows[leaves]]
        for depth in range(int(tree.depth.max()), 0, -1):  # deepest first: a parent after its children
            below = (tree.depth == depth) & in_scope
            in_scope[tree.parents[below]] = True
        self._in_scope = in_scope
        self._scopes: dict[ContextType | None, npt.NDArray[np.bool_]] = {None: in_scope}
        self._texts: dict[int, str] = {}

    # -- scope helpers -------------------------------------------------------------------------

    def _scope(self, context_type: ContextType | None) -> npt.NDArray[np.bool_]:
        scope = self._scopes.get(context_type)
        if scope is None and context_type is not None:
            kinds = np.asarray([kind == context_type.value for kind in self.tree.context_types])
            scope = self._scopes[context_type] = self._in_scope & kinds
        return self._in_scope if scope is None else scope

    def _child_limit(self, top_k: int) -> int:
        limit = self.params.child_limit
        return max(2 * top_k, 20) if limit is None else limit

    def _passes(self, score: float) -> bool:
        threshold = self.params.threshold
        if threshold is None:
            return True
        return score >= threshold if self.params.threshold_inclusive else score > threshold

    def _text(self, node: int) -> str:
        """What a reranker reads: a leaf's document (title and text), a directory's abstract."""
        if node not in self._texts:
            row = int(self._leaf_rows[node])
            self._texts[node] = (
                self.store.documents[row].full_text if row >= 0 else self.tree.nodes[node].abstract
            )
        return self._texts[node]

    # -- scoring -------------------------------------------------------------------------------

    def _score_missing(
        self, vector: npt.NDArray[np.float32], nodes: npt.NDArray[np.int64], scores: npt.NDArray[np.float64]
    ) -> None:
        """Fill ``scores`` for ``nodes`` not scored yet: a leaf by its document vector, a directory
        by the best of its records."""
        missing = nodes[np.isnan(scores[nodes])]
        if missing.size == 0:
            return
        leaf = self.tree.is_leaf[missing]
        leaves = missing[leaf]
        if leaves.size:
            block = np.asarray(self.store.embeddings[self._leaf_rows[leaves]], dtype=np.float32)
            scores[leaves] = block @ vector
        directories = missing[~leaf]
        if directories.size:
            best = self._record_vectors[self._record0[directories]] @ vector
            second = self._record1[directories]
            has = second >= 0
            if has.any():
                best[has] = np.maximum(best[has], self._record_vectors[second[has]] @ vector)
            scores[directories] = best

    def _rerank(
        self,
        query: str,
        nodes: Sequence[int],
        vector_scores: Sequence[float],
        stats: TraversalStats,
    ) -> tuple[list[float], list[bool]]:
        """Reranker scores for ``nodes`` (in thinking mode with a reranker), else the vector scores.

        Nodes with an empty text are not sent and keep their vector score. The whole call falls
        back to vector scores when the reranker raises or returns None or a list of the wrong
        length; a single non-finite value falls back for that item only. Returns the scores and,
        per node, whether it fell back."""
        scores = [float(score) for score in vector_scores]
        flags = [False] * len(scores)
        if self.reranker is None or self.params.mode != "thinking" or not nodes:
            return scores, flags
        sent = [i for i, node in enumerate(nodes) if self._text(node).strip()]
        if not sent:
            return scores, flags
        candidates = [
            RetrievalResult(
                doc_id=self.tree.doc_ids[nodes[i]] or self.tree.uris[nodes[i]],
                score=scores[i],
                uri=self.tree.uris[nodes[i]],
            )
            for i in sent
        ]
        stats.rerank_calls += 1
        reranker = self.reranker
        texts = [self._text(nodes[i]) for i in sent]
        answer = _call_with_timeout(
            lambda: reranker.rerank(query, candidates, texts), self.params.rerank_timeout
        )
        if not isinstance(answer, Sequence) or isinstance(answer, str) or len(answer) != len(sent):
            stats.rerank_fallbacks += 1
            for i in sent:
                flags[i] = True
            return scores, flags
        any_bad = False
        for i, value in zip(sent, answer, strict=True):
            number = float(value) if _is_number(value) else math.nan
            if math.isfinite(number):
                scores[i] = number
            else:
                flags[i] = True
                any_bad = True
        if any_bad:
            stats.rerank_fallbacks += 1
        return scores, flags

    # -- the traversal -------------------------------------------------------------------------

    def _traverse(
        self, query: str, vector: npt.NDArray[np.float32], top_k: int, context_type: ContextType | None
    ) -> _Traversal:
        params = self.params
        tree = self.tree
        scope = self._scope(context_type)
        stats = TraversalStats(nodes_in_scope=int(np.count_nonzero(scope)))
        scores = np.full(len(tree), np.nan, dtype=np.float64)
        scored = np.zeros(len(tree), dtype=bool)
        pool: dict[int, _Candidate] = {}
        limit = max(top_k, params.global_search_topk)
        directory_levels = [level for level in params.global_search_levels if level < 2]

        # 1. Global search.
        start_nodes: list[int] = []
        if directory_levels:
            record_scores = self._record_index.scores(vector)
            directories = np.flatnonzero(scope & ~tree.is_leaf)
            self._fill_directory_scores(record_scores, directories, scores)
            scored[directories] = True
            mask = scope[tree.record_nodes] & np.isin(tree.record_levels, directory_levels)
            if mask.any():
                _, records = top_k_1d(record_scores, limit, mask=mask)
                for record in records.tolist():
                    node = int(tree.record_nodes[record])
                    if node not in start_nodes:
                        start_nodes.append(node)
        leaf_hits: list[int] = []
        if 2 in params.global_search_levels:
            leaves = np.flatnonzero(scope & tree.is_leaf)
            scored[leaves] = True
            if leaves.size:
                rows = self._leaf_rows[leaves]
                mask_rows = None
                if rows.size != len(self.store):
                    mask_rows = np.zeros(len(self.store), dtype=bool)
                    mask_rows[rows] = True
                hit_scores, hit_rows = self.store.vectors.search(vector[None, :], limit, mask=mask_rows)[0]
                for score, row in zip(hit_scores.tolist(), hit_rows.tolist(), strict=True):
                    node = int(self._node_of_row[row])
                    scores[node] = score
                    leaf_hits.append(node)
        stats.global_hits = len(start_nodes) + len(leaf_hits)

        # 2. Starting points and leaf hits.
        start_scores, start_fallbacks = self._rerank(query, start_nodes, scores[start_nodes].tolist(), stats)
        heap: list[_Queued] = []
        sequence = 0
        for node, score in zip(start_nodes, start_scores, strict=True):
            heapq.heappush(heap, _Queued(-score, node, sequence, score, ()))
            sequence += 1
        for root in tree.roots.tolist():
            if scope[root] and root not in start_nodes:
                heapq.heappush(heap, _Queued(-0.0, root, sequence, None, ()))
                sequence += 1
        del start_fallbacks  # start points are directories: they reach results only through their children
        top = _TopLeaves(top_k)
        hit_scores_final, hit_fallbacks = self._rerank(query, leaf_hits, scores[leaf_hits].tolist(), stats)
        for node, score, fell_back in zip(leaf_hits, hit_scores_final, hit_fallbacks, strict=True):
            if self._passes(score):
                top.offer(node, score, new=True)
                pool[node] = _Candidate(
                    score=score,
                    vector_score=float(scores[node]),
                    path=(),
                    found_by="global_search",
                    rerank_fallback=fell_back,
                    rerank_score=score if self._reranked() and not fell_back else None,
                )

        # 3-5. Best-first traversal with convergence.
        alpha = float(params.alpha)
        child_limit = self._child_limit(top_k)
        visited = np.zeros(len(tree), dtype=bool)
        max_rounds = params.max_convergence_rounds
        previous_top: frozenset[int] | None = None
        previous_size = len(pool)
        unchanged = 0
        stagnant = 0
        while heap:
            item = heapq.heappop(heap)
            if visited[item.node]:
                continue
            visited[item.node] = True
            stats.directories_popped += 1
            children = tree.children(item.node)
            children = children[scope[children]]
            if children.size:
                self._score_missing(vector, children, scores)
                scored[children] = True
                raw = scores[children]
                order = np.lexsort((children, -raw))[:child_limit]
                kids = children[order].tolist()
                kid_scores, kid_fallbacks = self._rerank(query, kids, raw[order].tolist(), stats)
                path = (*item.path, tree.uris[item.node])
                for node, child_score, fell_back in zip(kids, kid_scores, kid_fallbacks, strict=True):
                    # "No parent score" is a root, tested as such; a real 0.0 still propagates.
                    final = (
                        child_score
                        if item.score is None
                        else alpha * child_score + (1.0 - alpha) * item.score
                    )
                    if not self._passes(final):
                        continue
                    known = pool.get(node)
                    if known is None or final > known.score:
                        if tree.is_leaf[node]:
                            top.offer(node, final, new=known is None)
                        pool[node] = _Candidate(
                            score=final,
                            vector_score=float(scores[node]),
                            path=path,
                            found_by="traversal",
                            rerank_fallback=fell_back,
                            rerank_score=child_score if self._reranked() and not fell_back else None,
                        )
                    if not tree.is_leaf[node] and not visited[node]:
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
        stats.nodes_scored = int(np.count_nonzero(scored))
        stats.pool_size = len(pool)
        return _Traversal(pool=pool, stats=stats)

    def _reranked(self) -> bool:
        return self.reranker is not None and self.params.mode == "thinking"

    def _fill_directory_scores(
        self,
        record_scores: npt.NDArray[np.floating[Any]],
        directories: npt.NDArray[np.int64],
        scores: npt.NDArray[np.float64],
    ) -> None:
        best = record_scores[self._record0[directories]].astype(np.float64)
        second = self._record1[directories]
        has = second >= 0
        best[has] = np.maximum(best[has], record_scores[second[has]])
        scores[directories] = best

    def _ranked(self, traversal: _Traversal, top_k: int) -> list[tuple[int, _Candidate]]:
        tree = self.tree
        items = [
            (node, candidate)
            for node, candidate in traversal.pool.items()
            if tree.is_leaf[node] or self.params.return_directories
        ]
        items.sort(key=lambda item: (-item[1].score, tree.doc_ids[item[0]] or tree.uris[item[0]]))
        return items[:top_k]

    def _results(self, traversal: _Traversal, top_k: int) -> list[RetrievalResult]:
        stats = traversal.stats.as_dict()
        out = []
        for node, candidate in self._ranked(traversal, top_k):
            uri = self.tree.uris[node]
            provenance: dict[str, Any] = {
                "strategy": "hierarchical",
                "found_by": candidate.found_by,
                "directory_path": candidate.path,
                "pre_propagation_score": candidate.vector_score,
                "rerank_fallback": candidate.rerank_fallback,
                "stats": stats,
            }
            if candidate.rerank_score is not None:
                provenance["rerank_score"] = candidate.rerank_score
            out.append(
                RetrievalResult(
                    doc_id=self.tree.doc_ids[node] or uri,
                    score=candidate.score,
                    uri=uri,
                    provenance=provenance,
                )
            )
        return out

    # -- public API ----------------------------------------------------------------------------

    def _encode(self, queries: Sequence[str]) -> npt.NDArray[np.float32]:
        vectors = np.asarray(self.embedder.encode(list(queries), kind="query"), dtype=np.float32)
        if vectors.shape != (len(queries), self.store.dim):
            raise ValueError(
                f"embedder returned shape {vectors.shape}, expected ({len(queries)}, {self.store.dim})"
            )
        return vectors

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        return self.retrieve_batch([query], top_k)[0]

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        """``[retrieve(q, top_k) for q in queries]``, with queries encoded in batches. The
        traversal runs per query on the same code path, so the results are identical whenever
        the embedder is batch-invariant."""
        check_top_k(top_k)
        for query in queries:
            check_query(query)
        results: list[list[RetrievalResult]] = []
        size = self.params.query_batch_size
        for start in range(0, len(queries), size):
            chunk = list(queries[start : start + size])
            for query, vector in zip(chunk, self._encode(chunk), strict=True):
                results.append(self._results(self._traverse(query, vector, top_k, None), top_k))
        return results

    def _matches(
        self, typed: TypedQuery, vector: npt.NDArray[np.float32], top_k: int
    ) -> list[MatchedContext]:
        traversal = self._traverse(typed.query, vector, top_k, typed.context_type)
        stats = traversal.stats.as_dict()
        matches = []
        for node, candidate in self._ranked(traversal, top_k):
            tree_node = self.tree.nodes[node]
            matches.append(
                MatchedContext(
                    uri=tree_node.uri,
                    context_type=ContextType(self.tree.context_types[node]),
                    level=2 if self.tree.is_leaf[node] else 0,
                    abstract=tree_node.abstract,
                    score=candidate.score,
                    doc_id=tree_node.doc_id,
                    query=typed.query,
                    provenance={
                        "found_by": candidate.found_by,
                        "directory_path": candidate.path,
                        "pre_propagation_score": candidate.vector_score,
                        "rerank_fallback": candidate.rerank_fallback,
                        "stats": stats,
                    },
                )
            )
        return matches

    def _run_plan(self, plan: QueryPlan, top_k: int, limit_per_bucket: int | None) -> FindResult:
        check_top_k(top_k)
        if not plan.queries:
            return FindResult(plan=plan)
        vectors = self._encode([typed.query for typed in plan.queries])
        results = [
            (typed, self._matches(typed, vector, top_k))
            for typed, vector in zip(plan.queries, vectors, strict=True)
        ]
        return merge_matches(results, limit_per_bucket=limit_per_bucket or top_k, plan=plan)

    def find(self, query: str, top_k: int = 10, *, context_type: ContextType | None = None) -> FindResult:
        """One query as given (no intent analysis), over ``context_type``'s roots or all of them."""
        check_query(query)
        plan = QueryPlan(queries=(TypedQuery(" ".join(query.split()), context_type, priority=1),))
        return self._run_plan(plan, top_k, None)

    def search(
        self,
        query: str,
        session: Session | None = None,
        *,
        analyzer: IntentAnalyzer | None = None,
        top_k: int = 10,
        limit_per_bucket: int | None = None,
    ) -> FindResult:
        """Intent analysis (``analyzer``, default passthrough) turns the query and session into 0-5
        typed queries; each is retrieved and the results are merged (dedup by URI, priority-weighted
        score, at most ``limit_per_bucket`` (default top_k) per bucket)."""
        check_query(query)
        plan = (analyzer or PassthroughAnalyzer()).analyze(query, session)
        return self._run_plan(plan, top_k, limit_per_bucket)
