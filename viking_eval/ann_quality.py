"""ANN quality in every report: how much of exact search an approximate vector index finds.

When the store's vector index is approximate (``store.vector_index.kind`` flat, hnsw, ivf_flat,
ivf_pq; :mod:`retrievers.index.ann`), every retriever that encodes queries (dense, hybrid with a
vector leg, graph, multi-strategy with the semantic strategy, hierarchical) gets::

    ann_recall@10 = mean over queries of |ANN top-10 ∩ exact top-10| / |exact top-10|

ANN top-10 is the store's index searched the way the retriever searches it: with its own
``ef_search`` / ``nprobe`` and its scope and filters (:meth:`Retriever.vector_search`); exact
top-10 is :class:`~retrievers.index.ExactVectorIndex` over the same embeddings and mask. Both
use the query vectors the retriever searched with (the embedding cache holds them, so nothing
is encoded twice). Queries with nothing in scope are left out. It measures the vector search a
retriever runs, not its final ranking: nDCG beside it says what the misses cost.

The value goes into the retriever's metrics (``metrics.json``, ``metrics.csv``, the summary
table, ``sweep.csv``: a sweep over ``ef_search`` or ``nprobe`` then plots it against latency);
``vector_search`` of the result says which index and knobs produced it, and the report's Store
section says the search was approximate. Nothing is added for an exact store.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from retrievers.index import FaissVectorIndex
from retrievers.kernel import Retriever
from retrievers.store import ContextStore

__all__ = [
    "ANN_RECALL_K",
    "METRIC",
    "AnnQuality",
    "describe_index",
    "metric_names",
    "store_lines",
    "table_note",
]

#: the cutoff of ann_recall (the field's convention, ann-benchmarks' recall@10)
ANN_RECALL_K = 10
METRIC = f"ann_recall@{ANN_RECALL_K}"


def describe_index(store: ContextStore) -> dict[str, Any]:
    """The store's vector index for ``environment.json``: kind, whether it is approximate, and
    for a faiss index its build settings, default knobs and whether it is memory-mapped."""
    if not store.has_vectors:
        return {"kind": None, "approximate": False}
    index = store.vectors
    if isinstance(index, FaissVectorIndex):
        return index.describe()
    return {"kind": "exact", "approximate": False}


class AnnQuality:
    """Accumulates one retriever's ``ann_recall@10`` over the query blocks of a run."""

    def __init__(self) -> None:
        self.recalls: list[float] = []
        self.knobs: dict[str, int] = {}
        self.kind: str | None = None
        #: time spent measuring (the runner leaves it out of the retrieval time)
        self.seconds = 0.0

    @staticmethod
    def applies(retriever: object) -> bool:
        """Whether ``retriever`` searches an approximate vector index (a kernel retriever that
        encodes queries, over a store whose index is a faiss one)."""
        return isinstance(retriever, Retriever) and retriever.approximate_vectors

    def add(self, retriever: object, texts: Sequence[str]) -> None:
        """Measure ``texts`` (queries the retriever just answered) when :meth:`applies`; encoded
        in the kernel's blocks of ``query_batch_size``, so the cached vectors are reused."""
        if not self.applies(retriever):
            return
        assert isinstance(retriever, Retriever)
        started = time.perf_counter()
        index = retriever.store.vectors
        assert isinstance(index, FaissVectorIndex)
        self.kind = index.kind
        params = retriever.params
        self.knobs = {
            name: value if (value := getattr(params, name)) is not None else default
            for name, default in index.default_knobs().items()
        }
        size = params.query_batch_size
        for start in range(0, len(texts), size):
            vectors = retriever.encode_block(list(texts[start : start + size]))
            if vectors is None:
                continue
            found = retriever.vector_search(vectors, ANN_RECALL_K)
            exact = retriever.store.exact_vectors.search(vectors, ANN_RECALL_K, mask=retriever.mask)
            for (_, ann_rows), (_, exact_rows) in zip(found, exact, strict=True):
                if exact_rows.size:
                    shared = np.intersect1d(ann_rows, exact_rows, assume_unique=True).size
                    self.recalls.append(shared / exact_rows.size)
        self.seconds += time.perf_counter() - started

    def metrics(self) -> dict[str, float]:
        """``{"ann_recall@10": mean}``, or nothing when no query was measured."""
        if not self.recalls:
            return {}
        return {METRIC: math.fsum(self.recalls) / len(self.recalls)}

    def info(self) -> dict[str, Any]:
        """What the result's ``vector_search`` entry says: the index, the knobs the retriever
        searched with (its own or the index's defaults), k, and the queries measured."""
        if not self.recalls:
            return {}
        return {
            "index": self.kind,
            "approximate": True,
            "knobs": self.knobs,
            "k": ANN_RECALL_K,
            "n_queries": len(self.recalls),
            **self.metrics(),
        }


def metric_names(results: Sequence[Any]) -> list[str]:
    """The ANN metrics some result carries (for tables beside the run's metrics)."""
    return [METRIC] if any(METRIC in result.metrics for result in results) else []


def table_note(environment: dict[str, Any]) -> list[str]:
    """A line under the summary table when vector search was approximate (else nothing)."""
    index = environment.get("vector_index") or {}
    if not index.get("approximate"):
        return []
    return [
        f"Vector search was **approximate** (faiss {index.get('kind')}, knobs and settings under Store); "
        f"`{METRIC}` = recall of each retriever's vector search against exact search.",
        "",
    ]


def store_lines(results: Sequence[Any], environment: dict[str, Any]) -> list[str]:
    """report.md's lines about the vector index: exact, or approximate with its kind, settings
    and each retriever's knobs and ann_recall@10."""
    index = environment.get("vector_index") or {}
    if not index.get("approximate"):
        return [f"- vector index: {index.get('kind') or 'exact'} (exact search)"] if index else []
    settings = ", ".join(
        f"{key} {value}" for key, value in (index.get("settings") or {}).items() if key != "kind"
    )
    lines = [
        f"- vector index: faiss {index.get('kind')}, **approximate** ({settings}; "
        f"{'memory-mapped' if index.get('mmap') else 'in memory'}); `{METRIC}` is the recall of each "
        "retriever's vector search against exact search on the same query vectors"
    ]
    for result in results:
        search = getattr(result, "vector_search", None) or {}
        if search:
            knobs = ", ".join(f"{key} {value}" for key, value in search.get("knobs", {}).items()) or "no knob"
            lines.append(
                f"  - {result.name}: {knobs}; {METRIC} {search[METRIC]:.4f} over {search['n_queries']} queries"
            )
    return lines
