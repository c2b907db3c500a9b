"""An approximate index over the directory records, for the global search of big trees.

``directory_search: ivf`` (a :class:`~retrievers.hierarchical.params.HierarchicalParams` key)
replaces the global search's exact scoring of every directory record (one mat-vec over all of
them: 4.5 ms for the ~140k records of a 1M-document tree) by a faiss inverted file: the records
are split into ``round(sqrt(n))`` lists by faiss k-means (seeded, trained on at most 64 records
per list, one thread, so the same tree gives the same index), and a query probes the
``directory_nprobe`` lists whose centres are most similar. The records found are rescored exactly
(the record vector times the query), so a record's score is the same as under exact search; only
which records are found can differ (records in lists not probed are missed). The directories not
found are scored when the traversal reaches them, as children.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.index.faiss_calls import one_faiss_thread, search_parameters

__all__ = ["DirectoryHNSW", "DirectoryIVF"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_TRAIN_PER_LIST = 64


_SEED = 1234


class DirectoryIVF:
    """An inverted file over ``vectors`` (the tree's record vectors, unit float32 rows)."""

    def __init__(self, vectors: npt.ArrayLike) -> None:
        import faiss

        self.vectors = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        n, dim = self.vectors.shape
        self.nlist = max(1, round(math.sqrt(n)))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = _SEED
        index.cp.max_points_per_centroid = _TRAIN_PER_LIST
        index.cp.min_points_per_centroid = 1
        index.cp.spherical = True
        with one_faiss_thread():
            index.train(self.vectors)
            index.add(self.vectors)
        self._index: Any = index
        self._quantizer = quantizer  # kept alive with the index

    def candidates(self, vector: npt.NDArray[np.float32], fetch: int, nprobe: int) -> IntArray:
        """The ``fetch`` records faiss finds best in the ``nprobe`` nearest lists (best first by
        faiss's float32 scores, which only choose: callers rescore them), -1s dropped."""
        import faiss

        params = faiss.SearchParametersIVF()
        params.nprobe = min(nprobe, self.nlist)
        query = np.ascontiguousarray(vector[None, :], dtype=np.float32)
        with one_faiss_thread():
            _, found = self._index.search(query, min(self.vectors.shape[0], fetch), params=params)
        records: IntArray = found[0][found[0] >= 0].astype(np.int64)
        return records

    def top(
        self, vector: npt.NDArray[np.float32], limit: int, nprobe: int, allowed: npt.NDArray[np.bool_]
    ) -> tuple[FloatArray, IntArray]:
        """The best ``limit`` records among those found in the ``nprobe`` nearest lists and
        ``allowed`` (bool per record), by exact score desc then record asc."""
        records = self.candidates(vector, max(4 * limit, 64), nprobe)
        records = records[allowed[records]]
        if records.size == 0:
            return np.zeros(0, dtype=np.float64), records
        exact = (self.vectors[records] @ np.asarray(vector, dtype=np.float32)).astype(np.float64)
        order = np.lexsort((records, -exact))[:limit]
        return exact[order], records[order]


#: links per node and insertion candidates of the graph over the leaf directories' records
_HNSW_M = 32
_HNSW_EF_CONSTRUCTION = 64


class DirectoryHNSW:
    """An HNSW graph over ``vectors`` (the leaf directories' records of the leaf probe,
    ``directory_search: hnsw``): M 32, efConstruction 64, built on one thread (faiss's seeded
    levels, one insertion order: the same records give the same graph). A query walks it with
    efSearch = the records wanted (at least 64); the records found are rescored by the caller."""

    def __init__(self, vectors: npt.ArrayLike) -> None:
        import faiss

        self.vectors = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        index = faiss.IndexHNSWFlat(self.vectors.shape[1], _HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = _HNSW_EF_CONSTRUCTION
        with one_faiss_thread():
            index.add(self.vectors)
        self._index: Any = index

    def candidates(self, vector: npt.NDArray[np.float32], fetch: int, nprobe: int) -> IntArray:
        """The ``fetch`` records the walk finds best (``nprobe`` is the inverted file's knob and
        does not apply), -1s dropped."""
        import faiss

        fetch = min(self.vectors.shape[0], fetch)
        params = search_parameters(faiss, "hnsw", self.vectors.shape[0], None, max(fetch, 64), None)
        query = np.ascontiguousarray(vector[None, :], dtype=np.float32)
        with one_faiss_thread():
            _, found = self._index.search(query, fetch, params=params)
        records: IntArray = found[0][found[0] >= 0].astype(np.int64)
        return records
