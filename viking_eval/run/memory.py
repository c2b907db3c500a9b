"""A retriever's own memory: the bytes of the indexes it reads, and how much the process's
resident set grew while its latency queries ran (the process peak mixes every retriever, the
dataset and the embedder into one number).

Index bytes are counted per store part the retriever names (:meth:`KernelRetriever.index_parts`:
``vectors``, ``bm25``, ``edges``, ``hierarchy``, ``timestamps``) plus ``own``: the arrays the
retriever built for itself at construction (a hierarchical retriever's record vectors, a graph
walker's CSR copies). A part's bytes are the sizes of the numpy arrays (and scipy sparse
matrices' arrays) reachable from it, each buffer once, memory-mapped ones included; a faiss index
counts its codes (``ntotal * code_size``) and an HNSW index its graph's neighbour lists too
(IVF centroids are not counted). A retriever
that is not a kernel retriever is one ``own`` part: everything reachable from it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import psutil

from retrievers.kernel import KernelRetriever
from retrievers.store import ContextStore

#: store part -> the store attribute holding it
STORE_PARTS = {
    "vectors": "vectors",
    "bm25": "bm25",
    "edges": "edges",
    "hierarchy": "tree",
    "timestamps": "timestamps",
}
_SKIPPED_ATTRIBUTES = frozenset({"store", "embedder", "reranker", "params", "_executor"})
_MAX_DEPTH = 8


def rss_bytes() -> int:
    """This process's resident set now."""
    return int(psutil.Process().memory_info().rss)


class _Counter:
    def __init__(self) -> None:
        self.seen_objects: set[int] = set()
        self.seen_buffers: set[tuple[int, int]] = set()

    def array(self, array: np.ndarray) -> int:
        low, high = np.lib.array_utils.byte_bounds(array)
        if (low, high) in self.seen_buffers:
            return 0
        self.seen_buffers.add((low, high))
        return int(array.nbytes)

    def walk(self, value: Any, depth: int = 0, skip_store: bool = False) -> int:
        if isinstance(value, np.ndarray):
            return self.array(value)
        if depth > _MAX_DEPTH or id(value) in self.seen_objects:
            return 0
        if value is None or isinstance(value, str | bytes | int | float | bool | type | ModuleType):
            return 0  # a module's attributes are never a retriever's own index
        if skip_store and isinstance(value, ContextStore):
            return 0
        self.seen_objects.add(id(value))
        # the module first: getattr on an arbitrary object can run code (ctypes' library loader
        # loads a library named after the attribute)
        if "faiss" in type(value).__module__ and isinstance(getattr(value, "ntotal", None), int):
            return faiss_bytes(value)
        if isinstance(value, dict):
            items = list(value.values())
            if items and not isinstance(items[0], np.ndarray) and len(items) > 1000:
                return 0  # a vocabulary or a row index: Python objects, not arrays
            return sum(self.walk(item, depth + 1, skip_store) for item in items)
        if isinstance(value, list | tuple):
            if len(value) > 1000 and not isinstance(value[0], np.ndarray):
                return 0
            return sum(self.walk(item, depth + 1, skip_store) for item in value)
        fields = getattr(value, "__dict__", None)
        if not isinstance(fields, dict):
            return 0
        return sum(
            self.walk(item, depth + 1, skip_store)
            for name, item in fields.items()
            if not (skip_store and name in _SKIPPED_ATTRIBUTES)
        )


def faiss_bytes(index: Any) -> int:
    """A faiss index's codes (``ntotal * code_size``; an HNSW index: its storage's codes and its
    graph's neighbour lists and offsets)."""
    import faiss  # present whenever a faiss index is

    size = 0
    code_size = getattr(index, "code_size", None)
    storage = getattr(index, "storage", None)
    if storage is not None:
        size += faiss_bytes(faiss.downcast_index(storage))
    elif isinstance(code_size, int):
        size += int(index.ntotal) * code_size
    hnsw = getattr(index, "hnsw", None)
    if hnsw is not None:
        size += hnsw.neighbors.size() * 4 + hnsw.offsets.size() * 8 + hnsw.levels.size() * 4
    return size


def index_bytes(retriever: object) -> dict[str, int]:
    """Bytes per index part the retriever reads, plus ``own`` and ``total`` (see the module
    docstring); a part the store does not hold counts 0."""
    counter = _Counter()
    found: dict[str, int] = {}
    if isinstance(retriever, KernelRetriever):
        store = retriever.store
        for part in retriever.index_parts():
            attribute = STORE_PARTS.get(part)
            value = getattr(store, attribute, None) if attribute is not None else None
            found[part] = counter.walk(value)
        found["own"] = counter.walk(retriever, skip_store=True)
    else:
        found["own"] = counter.walk(retriever)
    found["total"] = sum(found.values())
    return found
