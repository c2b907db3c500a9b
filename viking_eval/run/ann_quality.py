"""ANN quality in every report: how much of exact search an approximate vector index finds.

When the store's vector index is approximate (``store.vector_index.kind`` flat, hnsw, ivf_flat,
ivf_pq; :mod:`retrievers.index.ann`), every retriever that encodes queries (dense, hybrid with a
vector leg, graph, multi-strategy with the semantic strategy, hierarchical) gets::

    ann_recall@c = mean over queries of |ANN[:c] ∩ exact[:c]| / |exact[:c]|     c = 10 and run.top_k

ANN is the store's index searched the way the retriever searches it, at the depth the harness
asks retrievers for (``run.top_k``): with the retriever's own ``ef_search`` / ``nprobe`` / ``refine_factor``, scope
and filters (:meth:`Retriever.vector_search`). exact is :class:`~retrievers.index.ExactVectorIndex`
over the same embeddings and mask, at the same depth. Both use the query vectors the retriever
searched with (the embedding cache holds them, so nothing is encoded twice). Queries with
nothing in scope are left out. The depth matters: faiss's HNSW offers every node its walk
scores to a depth-k result list and IVF rescores ``2k`` candidates, so the top 10 of a depth-100
search (what nDCG@10 is computed from) is better than a depth-10 search's. It measures the vector search a dense retriever runs (depth =
top_k without a reranker); other families search at their own depths (a hybrid's leg fetches
``top_k x overfetch_multiplier``, a graph ``seed_top_k``), so for them it is the index's recall
at the run's depth. It is not the recall of the final ranking: nDCG beside it says what the
misses cost.

The values go into the retriever's metrics (``metrics.json``, ``metrics.csv``, the summary
table, ``sweep.csv``: a sweep over ``ef_search``, ``nprobe`` or ``refine_factor`` then plots ann_recall@10 against
latency);
``vector_search`` of the result says which index and knobs produced it, and the report's Store
section says the search was approximate. Nothing is added for an exact store.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from retrievers.backends import SearchBackend
from retrievers.index import FaissVectorIndex
from retrievers.kernel import KernelRetriever
from retrievers.store import ContextStore

__all__ = [
    "ANN_RECALL_K",
    "METRIC",
    "PREFIX",
    "AnnQuality",
    "describe_index",
    "metric_names",
    "store_lines",
    "table_note",
]

#: the cutoff of ann_recall (the field's convention, ann-benchmarks' recall@10); run.top_k too
ANN_RECALL_K = 10
METRIC = f"ann_recall@{ANN_RECALL_K}"
PREFIX = "ann_recall@"


def describe_index(store: ContextStore) -> dict[str, Any]:
    """The store's vector index for ``environment.json``: kind, whether it is approximate, and
    for a faiss index its build settings, default knobs and whether it is memory-mapped."""
    if not store.has_vectors:
        return {"kind": None, "approximate": False}
    if isinstance(store.backend, SearchBackend):  # searched in a database (retrievers/backends/)
        return store.backend.describe()
    index = store.vectors
    if isinstance(index, FaissVectorIndex):
        return index.describe()
    return {"kind": "exact", "approximate": False}


class AnnQuality:
    """Accumulates one retriever's ``ann_recall@10`` (and ``@depth``) over the query blocks of a
    run; ``depth`` is how deep both searches go (the run's ``top_k``)."""

    def __init__(self, depth: int = ANN_RECALL_K) -> None:
        self.depth = depth
        self.cutoffs = sorted({min(ANN_RECALL_K, depth), depth})
        self.recalls: dict[int, list[float]] = {cutoff: [] for cutoff in self.cutoffs}
        self.knobs: dict[str, int] = {}
        self.kind: str | None = None
        #: time spent measuring (the runner leaves it out of the retrieval time)
        self.seconds = 0.0

    @staticmethod
    def applies(retriever: object) -> bool:
        """Whether ``retriever`` searches an approximate vector index (a kernel retriever that
        encodes queries, over a store whose index is a faiss one)."""
        return isinstance(retriever, KernelRetriever) and retriever.approximate_vectors

    def add(self, retriever: object, texts: Sequence[str]) -> None:
        """Measure ``texts`` (queries the retriever just answered) when :meth:`applies`; encoded
        in the kernel's blocks of ``query_batch_size``, so the cached vectors are reused."""
        if not isinstance(retriever, KernelRetriever) or not self.applies(retriever):
            return
        started = time.perf_counter()
        backend = retriever.store.backend
        index = retriever.store.vectors
        if isinstance(backend, SearchBackend):  # a database's ANN index (retrievers/backends/)
            self.kind, defaults = f"{backend.kind} {backend.index}", backend.default_knobs()
        elif isinstance(index, FaissVectorIndex):  # what applies() checked (approximate_vectors)
            self.kind, defaults = index.kind, index.default_knobs()
        else:
            raise TypeError(f"ann quality: the store's index is {type(index).__name__}, not a faiss index")
        params = retriever.params
        self.knobs = {
            name: value if (value := getattr(params, name)) is not None else default
            for name, default in defaults.items()
        }
        size = params.query_batch_size
        for start in range(0, len(texts), size):
            vectors = retriever.encode_block(list(texts[start : start + size]))
            if vectors is None:
                continue
            found = retriever.vector_search(vectors, self.depth)
            exact = retriever.store.exact_vectors.search(vectors, self.depth, mask=retriever.mask)
            for (_, ann_rows), (_, exact_rows) in zip(found, exact, strict=True):
                if not exact_rows.size:
                    continue
                for cutoff in self.cutoffs:
                    truth = exact_rows[:cutoff]
                    shared = np.intersect1d(ann_rows[:cutoff], truth, assume_unique=True).size
                    self.recalls[cutoff].append(shared / truth.size)
        self.seconds += time.perf_counter() - started

    @property
    def n_queries(self) -> int:
        return len(self.recalls[self.cutoffs[0]])

    def metrics(self) -> dict[str, float]:
        """``{"ann_recall@10": mean, "ann_recall@<depth>": mean}``, or nothing when no query
        was measured."""
        if not self.n_queries:
            return {}
        return {
            f"{PREFIX}{cutoff}": math.fsum(values) / len(values) for cutoff, values in self.recalls.items()
        }

    def info(self) -> dict[str, Any]:
        """What the result's ``vector_search`` entry says: the index, the knobs the retriever
        searched with (its own or the index's defaults), the depth, and the queries measured."""
        if not self.n_queries:
            return {}
        return {
            "index": self.kind,
            "approximate": True,
            "knobs": self.knobs,
            "depth": self.depth,
            "n_queries": self.n_queries,
            **self.metrics(),
        }


def metric_names(results: Sequence[Any]) -> list[str]:
    """The ANN metrics some result carries, by cutoff (for tables beside the run's metrics)."""
    names = {name for result in results for name in result.metrics if name.startswith(PREFIX)}
    return sorted(names, key=lambda name: int(name.removeprefix(PREFIX)))


def table_note(environment: dict[str, Any]) -> list[str]:
    """A line under the summary table when vector search was approximate (else nothing)."""
    index = environment.get("vector_index") or {}
    if not index.get("approximate"):
        return []
    return [
        f"Vector search was **approximate** ({index.get('engine', 'faiss')} {index.get('kind')}, knobs and settings under Store); "
        "`ann_recall@c` = recall of the top c of each retriever's vector search against exact search.",
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
        f"- vector index: {index.get('engine', 'faiss')} {index.get('kind')}, **approximate** ({settings}; "
        f"{'in the database' if 'engine' in index else 'memory-mapped' if index.get('mmap') else 'in memory'}); "
        "`ann_recall@c` is the recall of "
        "the top c of each retriever's vector search (at the run's depth) against exact search on the "
        "same query vectors"
    ]
    for result in results:
        search = getattr(result, "vector_search", None) or {}
        if search:
            knobs = ", ".join(f"{key} {value}" for key, value in search.get("knobs", {}).items()) or "no knob"
            recalls = ", ".join(f"{name} {search[name]:.4f}" for name in metric_names([result]))
            lines.append(
                f"  - {result.name}: {knobs}, depth {search['depth']}; {recalls} over {search['n_queries']} queries"
            )
    return lines
