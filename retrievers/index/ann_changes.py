"""A faiss index after a store change: added vectors, removed rows, shifted rows.

A faiss index's labels are store rows, and a store's rows are its documents sorted by id, so a
change can shift every row after an inserted or deleted one. What each kind supports:

========== ==================================================================================
kind       after a change
========== ==================================================================================
flat       rebuilt: a flat index is a copy of the vectors (no training, no graph)
hnsw       appended (``add``) when nothing is removed and every new row comes after the old
           ones (new ids sort after every stored id, as memories added in time order do);
           otherwise rebuilt: faiss's HNSW can neither remove a node nor relabel one
ivf_flat,  the trained coarse quantizer (and PQ codebooks) kept; removed rows dropped
ivf_pq     (``remove_ids``), the kept rows' labels rewritten in every inverted list (rows
           shift), the new vectors assigned to their lists (``add_with_ids``). The lists drift
           from the centroids as documents change; rebuild the store to retrain
========== ==================================================================================

The old index is never changed (it may be memory-mapped from another version's folder): it is
copied first (``clone_index``; an index memory-mapped from disk, which faiss cannot clone, by
``serialize_index`` / ``deserialize_index``). Labels are rewritten only when rows shift. Whatever the
kind, searches keep :class:`~retrievers.index.ann.FaissVectorIndex`'s contract: candidates are
rescored exactly, so the scores of what is found are exact; only recall is approximate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from retrievers.index.ann import FaissVectorIndex, _faiss
from retrievers.index.vectors import ExactVectorIndex

if TYPE_CHECKING:
    from retrievers.store.vector_index_config import VectorIndexConfig

__all__ = ["ChangeKind", "changed_index"]

ChangeKind = Literal["appended", "relabelled", "rebuilt"]


def _copy(index: Any) -> Any:
    """An independent in-memory copy of a faiss index: ``clone_index`` (one copy of its arrays),
    or, for what it cannot clone (inverted lists memory-mapped from disk), a round trip through
    ``serialize_index``."""
    faiss = _faiss()
    try:
        return faiss.clone_index(index)
    except RuntimeError:
        return faiss.deserialize_index(faiss.serialize_index(index))


def changed_index(
    index: FaissVectorIndex,
    exact: ExactVectorIndex,
    config: VectorIndexConfig,
    *,
    old_to_new: npt.NDArray[np.int64],
    new_rows: npt.NDArray[np.int64],
) -> tuple[FaissVectorIndex, ChangeKind]:
    """The index over ``exact`` (the changed store's vectors) made from ``index`` (the old
    store's): ``old_to_new[r]`` is old row r's new row (-1 when removed), ``new_rows`` the rows
    of the added vectors (ascending). Returns the index and how it was made (module docstring)."""
    kind = index.kind
    removed = old_to_new < 0
    n_old = int(old_to_new.size)
    if kind == "hnsw" and not removed.any() and np.array_equal(new_rows, np.arange(n_old, exact.size)):
        raw = _copy(index._index)
        vectors = np.ascontiguousarray(exact.vectors[n_old:], dtype=np.float32)
        if vectors.shape[0]:
            raw.add(vectors)
        return FaissVectorIndex(raw, kind, exact, settings=index.settings), "appended"
    if kind in ("ivf_flat", "ivf_pq"):
        faiss = _faiss()
        raw = _copy(index._index)
        if removed.any():
            raw.remove_ids(faiss.IDSelectorBatch(np.flatnonzero(removed).astype(np.int64)))
        lists = raw.invlists
        shifted = removed.any() or not np.array_equal(old_to_new, np.arange(n_old))
        for list_no in range(int(raw.nlist) if shifted else 0):  # labels are rows: renumber
            size = int(lists.list_size(list_no))
            if size:
                labels = faiss.rev_swig_ptr(lists.get_ids(list_no), size)
                labels[:] = old_to_new[labels]
        if new_rows.size:
            vectors = np.ascontiguousarray(exact.vectors[new_rows], dtype=np.float32)
            raw.add_with_ids(vectors, np.ascontiguousarray(new_rows, dtype=np.int64))
        return FaissVectorIndex(raw, kind, exact, settings=index.settings), "relabelled"
    return FaissVectorIndex.build(exact, config), "rebuilt"
