"""How a node of the context tree gets its score, and which nodes a query may reach.

A leaf's vector score is its store row's embedding times the query vector; a directory's is the
best of its records (level 0 abstract or centroid, level 1 overview). In ``thinking`` mode a
reranker's score replaces the vector score of the start points and of each popped directory's
children; the reranker is called through the one fallback policy
(:func:`retrievers.rerank.rerank_with_fallback`: a bad answer voids the whole call, the reason is
kept). Scope: the leaves a retriever may return (its kernel mask: store view and filters) and
the directories with such a leaf below them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from retrievers.hierarchical.directory_index import DirectoryIVF
from retrievers.hierarchical.leaf_probe import LeafDirectories, Probe, row_dots
from retrievers.index import ExactVectorIndex
from retrievers.rerank import rerank_with_fallback
from retrievers.spans import span
from retrievers.store.tree import ContextTree
from retrievers.types import Reranker, RetrievalResult

if TYPE_CHECKING:
    from retrievers.store import ContextStore

__all__ = ["LeafKeywordScores", "NodeReranker", "NodeScores", "Scope", "TreeIndex"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class TreeIndex:
    """The tree of a store, arranged for scoring: the store row of every leaf, the records of
    every directory and an exact index over the record vectors. Built once per retriever."""

    def __init__(
        self,
        store: ContextStore,
        tree: ContextTree,
        *,
        directory_search: str = "exact",
        leaf_probe: bool = False,
    ) -> None:
        if tree.record_vectors is None or tree.dim != store.dim:
            raise ValueError(f"the store's tree has no directory vectors of dimension {store.dim}")
        self.store = store
        self.tree = tree
        n_nodes = len(tree)
        #: store row of every leaf (-1 for directories), and the leaf node of every store row
        self.leaf_rows: IntArray = tree.leaf_rows(store.row_of)
        self.node_of_row: IntArray = np.full(len(store), -1, dtype=np.int64)
        leaves = np.flatnonzero(tree.is_leaf)
        self.node_of_row[self.leaf_rows[leaves]] = leaves
        # Directory records: the level-0 record of every directory, and its level-1 record (or -1).
        self.record0: IntArray = np.full(n_nodes, -1, dtype=np.int64)
        self.record1: IntArray = np.full(n_nodes, -1, dtype=np.int64)
        for level, target in ((0, self.record0), (1, self.record1)):
            records = np.flatnonzero(tree.record_levels == level)
            target[tree.record_nodes[records]] = records
        self.record_vectors = np.asarray(tree.record_vectors)
        self.record_index = ExactVectorIndex(self.record_vectors)
        #: the approximate index over the records (``directory_search: ivf`` without the leaf probe,
        #: which replaces the global search over the records), else None
        self.record_ivf: DirectoryIVF | None = None
        if directory_search == "ivf" and not leaf_probe and self.record_vectors.shape[0]:
            self.record_ivf = DirectoryIVF(self.record_vectors)
        #: position of every directory among the directories (-1 for leaves): a query's
        #: directory scores are an array of that size, its leaf scores a dict (NodeScores)
        directories = np.flatnonzero(~tree.is_leaf)
        self.directory_position: IntArray = np.full(n_nodes, -1, dtype=np.int64)
        self.directory_position[directories] = np.arange(directories.size)
        self.n_directories = int(directories.size)
        #: vector scores computed row by row (:func:`row_dots`: the same in any block), with the probe
        self.rowwise = leaf_probe
        #: the leaf directories and their members (``leaf_probe`` > 0), else None
        self.leaf_directories: LeafDirectories | None = None
        if leaf_probe:
            self.leaf_directories = LeafDirectories(
                tree.is_leaf,
                tree.parents,
                self.leaf_rows,
                self.record0,
                self.record1,
                self.record_vectors,
                search=directory_search,
            )
        self._texts: dict[int, str] = {}
        self._record_masks: dict[tuple[int, tuple[int, ...]], tuple[Scope, BoolArray]] = {}

    def scope(self, rows: BoolArray | None) -> Scope:
        """Nodes a query may reach: leaves whose row is allowed by ``rows`` (None = all) and
        directories with at least one such leaf below them."""
        tree = self.tree
        in_scope = tree.is_leaf.copy()
        if rows is not None:
            leaves = np.flatnonzero(tree.is_leaf)
            in_scope[leaves] = np.asarray(rows, dtype=bool)[self.leaf_rows[leaves]]
        for depth in range(int(tree.depth.max()), 0, -1):  # deepest first: a parent after its children
            below = (tree.depth == depth) & in_scope
            in_scope[tree.parents[below]] = True
        return self._scope(in_scope)

    def record_mask(self, scope: Scope, levels: tuple[int, ...]) -> BoolArray:
        """Records of directories in ``scope`` at ``levels`` (bool per record), kept per scope."""
        key = (id(scope), levels)
        known = self._record_masks.get(key)
        if known is None or known[0] is not scope:
            tree = self.tree
            mask = scope.nodes[tree.record_nodes] & np.isin(tree.record_levels, levels)
            known = self._record_masks[key] = (scope, mask)
        return known[1]

    def narrowed(self, scope: Scope, context_type: str) -> Scope:
        """``scope`` restricted to the nodes of one context type (memory, resource, skill)."""
        kinds = np.asarray([kind == context_type for kind in self.tree.context_types])
        return self._scope(scope.nodes & kinds)

    def _scope(self, nodes: BoolArray) -> Scope:
        tree = self.tree
        leaves = np.flatnonzero(nodes & tree.is_leaf)
        rows = self.leaf_rows[leaves]
        row_mask = None
        if rows.size != len(self.store):
            row_mask = np.zeros(len(self.store), dtype=bool)
            row_mask[rows] = True
        return Scope(
            nodes=nodes,
            size=int(np.count_nonzero(nodes)),
            directories=np.flatnonzero(nodes & ~tree.is_leaf),
            leaves=leaves,
            row_mask=row_mask,
        )

    def fill_directory_scores(
        self, record_scores: npt.NDArray[np.floating[Any]], directories: IntArray, scores: NodeScores
    ) -> None:
        """The scores of ``directories`` from the scores of every record (the best of each
        directory's)."""
        best = record_scores[self.record0[directories]].astype(np.float64)
        second = self.record1[directories]
        has = second >= 0
        best[has] = np.maximum(best[has], record_scores[second[has]])
        scores.set_directories(directories, best)

    def keyword_scores(self, query: str, scope: Scope) -> LeafKeywordScores:
        """Normalised BM25 scores of the leaves for ``query``: a leaf's store row's BM25 score
        divided by the best one among the leaves in ``scope`` (so in [0, 1]); 0 for every leaf
        when no leaf in scope matches a query term."""
        with span("bm25"):
            raw = self.store.bm25.scores(query)
        if scope.row_mask is None:  # every row is a leaf in scope
            best = float(raw.max(initial=0.0))
        else:
            best = float(raw[scope.row_mask].max(initial=0.0))
        return LeafKeywordScores(raw, best, self.leaf_rows)

    def score_missing(
        self,
        vector: npt.NDArray[np.float32],
        nodes: IntArray,
        scores: NodeScores,
        keyword: tuple[LeafKeywordScores, float] | None = None,
    ) -> FloatArray:
        """Score the ``nodes`` not scored yet: a leaf by its document vector (mixed with its
        normalised BM25 score when ``keyword`` = (keyword scores, weight) is given), a directory
        by the best of its records. Returns the scores of all ``nodes``, as ``scores.get(nodes)``
        reads them afterwards (one lookup of the known ones, one of those scored here)."""
        known = scores.get(nodes)
        unscored = np.isnan(known)
        missing = nodes[unscored]
        if missing.size == 0:
            return known
        leaf = self.tree.is_leaf[missing]
        leaves = missing[leaf]
        if leaves.size:
            if self.rowwise:
                values = row_dots(self.store.embeddings, self.leaf_rows[leaves], vector)
            else:
                block = np.asarray(self.store.embeddings[self.leaf_rows[leaves]], dtype=np.float32)
                values = (block @ vector).astype(np.float64)
            if keyword is not None:
                keyword_scores, weight = keyword
                values = (1.0 - weight) * values + weight * keyword_scores.of(leaves)
            scores.set_leaves(leaves, values)
        directories = missing[~leaf]
        if directories.size and self.rowwise:
            scores.set_directories(directories, self.directory_scores(vector, directories))
        elif directories.size:
            best = self.record_vectors[self.record0[directories]] @ vector
            second = self.record1[directories]
            has = second >= 0
            if has.any():
                best[has] = np.maximum(best[has], self.record_vectors[second[has]] @ vector)
            scores.set_directories(directories, best.astype(np.float64))
        known[unscored] = scores.get(missing)
        return known

    def directory_scores(self, vector: npt.NDArray[np.float32], directories: IntArray) -> FloatArray:
        """Scores of ``directories`` row by row (:func:`row_dots`): the best of each one's records."""
        best = row_dots(self.record_vectors, self.record0[directories], vector)
        second = self.record1[directories]
        has = second >= 0
        if has.any():
            best[has] = np.maximum(best[has], row_dots(self.record_vectors, second[has], vector))
        return best

    def probe(self, vector: npt.NDArray[np.float32], scope: Scope, count: int, nprobe: int) -> Probe:
        """The leaf probe of ``vector`` over ``scope`` (:meth:`LeafDirectories.probe`)."""
        assert self.leaf_directories is not None, "built with leaf_probe"
        return self.leaf_directories.probe(
            vector, scope.nodes, count, nprobe, self.store.embeddings, self.directory_scores
        )

    def text(self, node: int) -> str:
        """What a reranker reads: a leaf's row (title and text), a directory's abstract."""
        text = self._texts.get(node)
        if text is None:
            row = int(self.leaf_rows[node])
            text = self.store.documents[row].full_text if row >= 0 else self.tree.nodes[node].abstract
            self._texts[node] = text
        return text


@dataclass(frozen=True)
class Scope:
    """The nodes a query may reach (``nodes``, bool per node), with what every query needs of
    them computed once per retriever: how many, the directories and the leaves among them, and
    the store rows of those leaves as a mask (None when they are every row)."""

    nodes: BoolArray
    size: int
    directories: IntArray
    leaves: IntArray
    row_mask: BoolArray | None


class NodeScores:
    """One query's node scores, allocated for what the query touches, not for the whole tree:
    the directories' in an array (the global search scores all of them anyway), the leaves' in
    a dict (only the leaves found or under a popped directory are scored). Also counts the
    nodes scored: with ``all_leaves`` (a global search over every leaf in scope) every leaf in
    scope counts as scored."""

    def __init__(self, index: TreeIndex, scope: Scope) -> None:
        self._position = index.directory_position
        self._is_leaf = index.tree.is_leaf
        self._scope = scope
        self._directories = np.full(index.n_directories, np.nan, dtype=np.float64)
        self._leaves: dict[int, float] = {}
        self._probed = 0  # leaves scored by the leaf probe (not kept here)
        self.all_leaves = False

    def get(self, nodes: IntArray) -> FloatArray:
        """Scores of ``nodes`` (NaN where not scored)."""
        out = np.empty(nodes.size, dtype=np.float64)
        leaf = self._is_leaf[nodes]
        out[~leaf] = self._directories[self._position[nodes[~leaf]]]
        if leaf.any():
            nan = float("nan")
            out[leaf] = [self._leaves.get(node, nan) for node in nodes[leaf].tolist()]
        return out

    def __getitem__(self, node: int) -> float:
        if self._is_leaf[node]:
            return self._leaves.get(node, float("nan"))
        return float(self._directories[self._position[node]])

    def set_directories(self, directories: IntArray, values: FloatArray) -> None:
        self._directories[self._position[directories]] = values

    def set_leaves(self, leaves: IntArray, values: FloatArray) -> None:
        self._leaves.update(zip(leaves.tolist(), values.tolist(), strict=True))

    def set_leaf(self, leaf: int, value: float) -> None:
        self._leaves[leaf] = value

    def add_scored(self, count: int) -> None:
        """Count ``count`` leaves scored outside this object (the leaf probe's members)."""
        self._probed += count

    @property
    def n_scored(self) -> int:
        """Nodes scored (each once), as a count over the scope."""
        directories = int(np.count_nonzero(~np.isnan(self._directories)))
        leaves = self._scope.leaves.size if self.all_leaves else len(self._leaves) + self._probed
        return directories + leaves


class LeafKeywordScores:
    """A query's normalised BM25 score of every leaf, computed when asked (see
    :meth:`TreeIndex.keyword_scores`)."""

    def __init__(self, raw: npt.NDArray[np.float32], best: float, leaf_rows: IntArray) -> None:
        self._raw = raw
        self._best = best
        self._leaf_rows = leaf_rows

    def of(self, leaves: IntArray) -> FloatArray:
        if self._best <= 0.0:
            return np.zeros(leaves.size, dtype=np.float64)
        return np.asarray(self._raw[self._leaf_rows[leaves]], dtype=np.float64) / self._best


class NodeReranker:
    """Reranker scores for tree nodes through the one fallback policy, or their vector scores
    (``reranker`` None: the retriever does not rerank)."""

    def __init__(self, index: TreeIndex, reranker: Reranker | None, timeout_s: float | None) -> None:
        self.index = index
        self.reranker = reranker
        self.timeout_s = timeout_s

    @property
    def active(self) -> bool:
        return self.reranker is not None

    def __call__(
        self, query: str, nodes: Sequence[int], vector_scores: Sequence[float]
    ) -> tuple[list[float], str | None]:
        """``(scores, None)`` with the reranker's scores of ``nodes``; ``(vector scores, reason)``
        when it fell back; ``(vector scores, None)`` when there is nothing to rerank."""
        scores = [float(score) for score in vector_scores]
        if self.reranker is None or not nodes:
            return scores, None
        tree = self.index.tree
        candidates = [
            RetrievalResult(doc_id=tree.doc_ids[node] or tree.uris[node], score=score, uri=tree.uris[node])
            for node, score in zip(nodes, scores, strict=True)
        ]
        texts = [self.index.text(node) for node in nodes]
        return rerank_with_fallback(self.reranker, query, candidates, texts, timeout_s=self.timeout_s)
