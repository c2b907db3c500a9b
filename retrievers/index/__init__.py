"""Search indexes over a store's rows: exact vectors (``vectors``), faiss ANN indexes (``ann``)
and BM25 (``bm25``)."""

from retrievers.index.ann import ANN_KINDS, FaissVectorIndex, VectorIndexError
from retrievers.index.bm25 import BM25_METHODS, BM25Index
from retrievers.index.vectors import ExactVectorIndex

__all__ = [
    "ANN_KINDS",
    "BM25_METHODS",
    "BM25Index",
    "ExactVectorIndex",
    "FaissVectorIndex",
    "VectorIndexError",
]
