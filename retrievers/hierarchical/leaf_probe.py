"""The leaf-directory probe (``leaf_probe: P``): a global search of big trees that starts at the
bottom instead of the top.

A *leaf directory* is a directory with at least one leaf (document) among its children. The probe
ranks the leaf directories in scope by their score (the best of their records, as a directory is
scored anywhere in the traversal), takes the best ``P`` (score desc, node asc) and scores every
member leaf of all of them at once: one call of faiss's ``fvec_inner_products_by_idx`` over the
store's embedding rows (the gather and the products in one pass, no copy of the rows). Each
member's final score is propagated from its directory as a popped directory's children are
(``alpha * member + (1 - alpha) * directory``), so the probe's members get the scores popping
those ``P`` directories as start points would give them, in one step instead of ``P`` Python
rounds (the traversal keeps the best ``max(top_k, child_limit)`` of all of them).

Which leaf directories are ranked: all of them (``directory_search: exact``: the records of every
leaf directory in scope scored) or those found among the leaf directories' records by a faiss
inverted file (``directory_search: ivf``, ``directory_nprobe`` lists probed) or an HNSW graph
(``directory_search: hnsw``, efSearch 2P); the records found are rescored exactly, so only which
directories are found can differ.

**The same score in any batch.** BLAS rounds a row's product with the query differently
depending on the other rows of the block (a 32-row directory against a 4,096-row probe), so with
the probe on every vector score of the traversal (leaves and directory records) goes through
:func:`row_dots`, whose value for a row depends on that row and the query only: a member scored
by the probe and the same leaf scored under its popped directory get the same score, bit for
bit. With the probe off nothing changes (the traversal's scores are BLAS's, as before).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.hierarchical.directory_index import DirectoryHNSW, DirectoryIVF
from retrievers.index.faiss_calls import one_faiss_thread, optional_faiss

__all__ = ["LeafDirectories", "Probe", "row_dots"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def row_dots(matrix: npt.NDArray[Any], rows: IntArray, vector: npt.NDArray[np.float32]) -> FloatArray:
    """``matrix[rows] @ vector`` as float64, each value computed from its row and ``vector``
    alone (faiss's SIMD dot product per row over a C-contiguous float32 matrix; numpy's pairwise
    sum per row otherwise), so a row's score does not depend on which other rows are asked."""
    out = np.empty(rows.size, dtype=np.float32)
    if rows.size == 0:
        return out.astype(np.float64)
    query = np.ascontiguousarray(vector, dtype=np.float32)
    faiss = optional_faiss()
    if faiss is not None and matrix.dtype == np.float32 and matrix.flags.c_contiguous:
        labels = np.ascontiguousarray(rows, dtype=np.int64)
        with one_faiss_thread():
            faiss.fvec_inner_products_by_idx(
                faiss.swig_ptr(out),
                faiss.swig_ptr(query),
                faiss.swig_ptr(matrix),
                faiss.swig_ptr(labels),
                query.shape[0],
                1,
                labels.size,
            )
        return out.astype(np.float64)
    products = np.asarray(matrix[rows], dtype=np.float32)
    np.multiply(products, query, out=products)
    sums: npt.NDArray[np.float32] = np.add.reduce(products, axis=1)
    return sums.astype(np.float64)


@dataclass(frozen=True)
class Probe:
    """One query's probe: the leaf directories opened (best first) with their scores, and the
    members scored (``members``: leaf nodes, ``owners``: their directory's position in
    ``directories``, ``vector_scores``: the members' scores before propagation)."""

    directories: IntArray
    directory_scores: FloatArray
    members: IntArray
    owners: IntArray
    vector_scores: FloatArray


class LeafDirectories:
    """The leaf directories of a tree with their member leaves (in CSR form) and records, and,
    with ``ivf``, an inverted file over those records. Built once per retriever from the tree's
    arrays (``is_leaf``, ``parents``; ``leaf_rows``: the store row of every leaf; ``record0``,
    ``record1``: every directory's level-0 and level-1 record or -1; ``record_vectors``)."""

    def __init__(
        self,
        is_leaf: BoolArray,
        parents: IntArray,
        leaf_rows: IntArray,
        record0: IntArray,
        record1: IntArray,
        record_vectors: npt.NDArray[Any],
        *,
        search: str,
    ) -> None:
        leaves = np.flatnonzero(is_leaf)
        parents = np.asarray(parents)[leaves]  # every leaf has a directory parent (ContextTree)
        order = np.lexsort((leaves, parents))
        leaves, parents = leaves[order], parents[order]
        #: the leaf directories (ascending node), and each one's members: members[offsets[i]:offsets[i + 1]]
        self.nodes: IntArray = np.unique(parents).astype(np.int64)
        counts = np.bincount(np.searchsorted(self.nodes, parents), minlength=self.nodes.size)
        self.offsets: IntArray = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.members: IntArray = leaves.astype(np.int64)
        self.member_rows: IntArray = leaf_rows[self.members]
        # the records of the leaf directories (level 0, and level 1 where there is one)
        record0, record1 = record0[self.nodes], record1[self.nodes]
        has1 = record1 >= 0
        #: record ids, and the position (in ``nodes``) of the directory each belongs to
        self.records: IntArray = np.concatenate((record0, record1[has1])).astype(np.int64)
        self.record_owner: IntArray = np.concatenate(
            (np.arange(self.nodes.size), np.flatnonzero(has1))
        ).astype(np.int64)
        #: the approximate index over those records (``search`` ivf or hnsw), else None (exact)
        self.approximate: DirectoryIVF | DirectoryHNSW | None = None
        if search == "ivf" and self.records.size:
            self.approximate = DirectoryIVF(record_vectors[self.records])
        elif search == "hnsw" and self.records.size:
            self.approximate = DirectoryHNSW(record_vectors[self.records])
        self._scope_masks: dict[int, tuple[BoolArray, BoolArray]] = {}

    def _in_scope(self, in_scope: BoolArray) -> BoolArray:
        """Leaf directories among the nodes ``in_scope`` (bool per leaf directory), kept per scope."""
        known = self._scope_masks.get(id(in_scope))
        if known is None or known[0] is not in_scope:
            known = self._scope_masks[id(in_scope)] = (in_scope, in_scope[self.nodes])
        return known[1]

    def probe(
        self,
        vector: npt.NDArray[np.float32],
        in_scope: BoolArray,
        count: int,
        nprobe: int,
        embeddings: npt.NDArray[Any],
        directory_scores: Callable[[npt.NDArray[np.float32], IntArray], FloatArray],
    ) -> Probe:
        """The best ``count`` leaf directories among the nodes ``in_scope`` (bool per node) by
        ``directory_scores(vector, directories)``, and their members in scope scored against
        ``embeddings`` (the store's, a row per leaf row)."""
        allowed = self._in_scope(in_scope)
        if self.approximate is not None:  # candidates (a record per directory at least), rescored below
            fetch = 2 * count if allowed.all() else max(8 * count, 256)
            found = self.approximate.candidates(vector, fetch, nprobe)
            owners = self.record_owner[found]
            positions = np.unique(owners[allowed[owners]])
        else:
            positions = np.flatnonzero(allowed)
        scores = directory_scores(vector, self.nodes[positions])
        order = np.lexsort((positions, -scores))[:count]  # node order is position order
        positions, scores = positions[order], scores[order]
        starts, stops = self.offsets[positions], self.offsets[positions + 1]
        lengths = stops - starts
        total = int(lengths.sum())
        owners = np.repeat(np.arange(positions.size, dtype=np.int64), lengths)
        picks = np.arange(total, dtype=np.int64) + np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        members = self.members[picks]
        keep = in_scope[members]
        if not keep.all():
            members, owners, picks = members[keep], owners[keep], picks[keep]
        vector_scores = row_dots(embeddings, self.member_rows[picks], vector)
        return Probe(self.nodes[positions], scores, members, owners, vector_scores)
