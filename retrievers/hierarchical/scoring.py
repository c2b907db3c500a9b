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
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from retrievers.index import ExactVectorIndex
from retrievers.rerank import rerank_with_fallback
from retrievers.store.tree import ContextTree
from retrievers.types import Reranker, RetrievalResult

if TYPE_CHECKING:
    from retrievers.store import ContextStore

__all__ = ["NodeReranker", "TreeIndex"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class TreeIndex:
    """The tree of a store, arranged for scoring: the store row of every leaf, the records of
    every directory and an exact index over the record vectors. Built once per retriever."""

    def __init__(self, store: ContextStore, tree: ContextTree) -> None:
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
        self._texts: dict[int, str] = {}

    def scope(self, rows: BoolArray | None) -> BoolArray:
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
        return in_scope

    def fill_directory_scores(
        self, record_scores: npt.NDArray[np.floating[Any]], directories: IntArray, scores: FloatArray
    ) -> None:
        """``scores[directories]`` from the scores of every record (the best of each directory's)."""
        best = record_scores[self.record0[directories]].astype(np.float64)
        second = self.record1[directories]
        has = second >= 0
        best[has] = np.maximum(best[has], record_scores[second[has]])
        scores[directories] = best

    def keyword_scores(self, query: str, scope: BoolArray) -> FloatArray:
        """Every node's normalised BM25 score for ``query``: a leaf's store row's BM25 score
        divided by the best one among the leaves in ``scope`` (so in [0, 1]); 0 for directories,
        leaves out of scope, and every node when no leaf in scope matches a query term."""
        tree = self.tree
        out = np.zeros(len(tree), dtype=np.float64)
        leaves = np.flatnonzero(scope & tree.is_leaf)
        if leaves.size:
            raw = np.asarray(self.store.bm25.scores(query), dtype=np.float64)[self.leaf_rows[leaves]]
            best = float(raw.max(initial=0.0))
            if best > 0.0:
                out[leaves] = raw / best
        return out

    def score_missing(
        self,
        vector: npt.NDArray[np.float32],
        nodes: IntArray,
        scores: FloatArray,
        keyword: tuple[FloatArray, float] | None = None,
    ) -> None:
        """Fill ``scores`` for ``nodes`` not scored yet (NaN): a leaf by its document vector
        (mixed with its normalised BM25 score when ``keyword`` = (keyword_scores, weight) is
        given), a directory by the best of its records."""
        missing = nodes[np.isnan(scores[nodes])]
        if missing.size == 0:
            return
        leaf = self.tree.is_leaf[missing]
        leaves = missing[leaf]
        if leaves.size:
            block = np.asarray(self.store.embeddings[self.leaf_rows[leaves]], dtype=np.float32)
            scores[leaves] = block @ vector
            if keyword is not None:
                keyword_scores, weight = keyword
                scores[leaves] = (1.0 - weight) * scores[leaves] + weight * keyword_scores[leaves]
        directories = missing[~leaf]
        if directories.size:
            best = self.record_vectors[self.record0[directories]] @ vector
            second = self.record1[directories]
            has = second >= 0
            if has.any():
                best[has] = np.maximum(best[has], self.record_vectors[second[has]] @ vector)
            scores[directories] = best

    def text(self, node: int) -> str:
        """What a reranker reads: a leaf's row (title and text), a directory's abstract."""
        text = self._texts.get(node)
        if text is None:
            row = int(self.leaf_rows[node])
            text = self.store.documents[row].full_text if row >= 0 else self.tree.nodes[node].abstract
            self._texts[node] = text
        return text


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
