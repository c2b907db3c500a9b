"""``run.redundancy: k``: each retriever's ``redundancy@k``, the mean over queries of the mean
pairwise cosine similarity of its top-k documents' vectors (:func:`retrievers.diversity.redundancy`),
among its metrics in metrics.json (not in the printed table or metrics.csv, which list
``run.metrics``). A document's vector is its row
of the retriever's store (over a chunked store, the chunk it matched with: ``provenance
["chunk_id"]``, else the document's first chunk). Queries with fewer than two results add 0. A
retriever without a store with vectors (BM25 over a store built without an embedder, an object
built outside the harness) gets no value, and a warning says so.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from retrievers.diversity import redundancy
from retrievers.types import RetrievalResult

__all__ = ["PREFIX", "Redundancy"]

log = logging.getLogger(__name__)
PREFIX = "redundancy@"


class Redundancy:
    """Collects one retriever's per-query redundancy (``k`` None: off)."""

    def __init__(self, name: str, k: int | None) -> None:
        self.name = name
        self.k = k
        self.values: list[float] = []
        self.missing = False

    def _row(self, store: Any, result: RetrievalResult) -> int | None:
        if store.chunked:
            chunk = result.provenance.get("chunk_id") if result.provenance else None
            if isinstance(chunk, str):
                found = store.row_of.get(chunk)
                if found is not None:
                    return int(found)
            parent = store.parent_row_of.get(result.doc_id)
            if parent is None:
                return None
            rows = np.flatnonzero(np.asarray(store.parent_of) == int(parent))
            return int(rows[0]) if rows.size else None
        found = store.row_of.get(result.doc_id)
        return None if found is None else int(found)

    def add(self, retriever: Any, results: Sequence[RetrievalResult]) -> None:
        if self.k is None or self.missing:
            return
        store = getattr(retriever, "store", None)
        if store is None or not getattr(store, "has_vectors", False):
            self.missing = True
            log.warning(
                "%s%d of %s: it has no store with document vectors; not reported", PREFIX, self.k, self.name
            )
            return
        rows = [row for row in (self._row(store, r) for r in results[: self.k]) if row is not None]
        self.values.append(redundancy(store.embeddings[rows]) if len(rows) >= 2 else 0.0)

    def metrics(self) -> dict[str, float]:
        if self.k is None or self.missing or not self.values:
            return {}
        return {f"{PREFIX}{self.k}": math.fsum(self.values) / len(self.values)}
