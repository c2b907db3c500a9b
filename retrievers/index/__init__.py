"""Search indexes over a store's rows: exact vectors (``vectors``) and BM25 (``bm25``)."""

from retrievers.index.bm25 import BM25_METHODS, BM25Index
from retrievers.index.vectors import ExactVectorIndex

__all__ = ["BM25_METHODS", "BM25Index", "ExactVectorIndex"]
