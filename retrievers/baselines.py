"""Flat baselines over a ContextStore: BM25 and dense retrieval (exact, or through the store's
ANN index when ``store.vector_index`` is a faiss kind).

Both are exact top-k searches (``exact_depth``): over a chunked store the kernel reads their chunk
lists as deep as needed so that each document scores its best chunk exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retrievers.kernel import Candidates, KernelRetriever, RetrieverParams
from retrievers.spans import span

__all__ = ["BM25Params", "BM25Retriever", "DenseParams", "DenseRetriever"]


@dataclass(frozen=True)
class BM25Params(RetrieverParams):
    """BM25 has no query-time parameters of its own: k1, b and the tokenizer are store settings
    (``store.bm25``), shared by every retriever that reads the index."""


class BM25Retriever(KernelRetriever):
    """Lexical retrieval with the store's BM25 index (OR semantics over query terms; documents
    matching no query term are not returned)."""

    Params = BM25Params
    exact_depth = True

    def uses_embedder(self) -> bool:
        return False

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        with span("bm25"):
            found = self.store.bm25.search(list(queries), depth, mask=self.mask)
        return [Candidates.of(scores, rows) for scores, rows in found]

    def index_parts(self) -> tuple[str, ...]:
        return ("bm25",)


@dataclass(frozen=True)
class DenseParams(RetrieverParams):
    """Dense search has no parameters beyond the kernel's (``ef_search``/``nprobe``/``refine_factor``
    for an ANN store among them)."""


class DenseRetriever(KernelRetriever):
    """Inner-product search over the store's L2-normalised document embeddings (cosine), through
    the store's vector index: exact by default, approximate over an ANN store (its candidates
    are scored and ordered the same way).

    The search is batch-invariant, so ``retrieve_batch`` equals ``retrieve`` bit for bit
    whenever the embedder is (TF-IDF, static models). A transformer pads a batch to its longest
    query, which moves vectors by ~1e-7; rankings then agree except for documents whose scores
    differ by less than that."""

    Params = DenseParams
    exact_depth = True

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        assert vectors is not None
        return [Candidates.of(scores, rows) for scores, rows in self.vector_search(vectors, depth)]
