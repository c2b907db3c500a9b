"""Rerankers and the one policy every retriever calls them with.

* :func:`rerank_with_fallback` (``policy.py``): the fallback policy; :func:`fallback_summary`
  the one line a run prints when a reranker fell back.
* :class:`EmbeddingReranker` (``embedding.py``): a bi-encoder reranker over full texts.
* :class:`CrossEncoderReranker` (``cross_encoder.py``): a sentence-transformers cross-encoder.
* :class:`LLMReranker` (``llm.py``): grades from an OpenAI-compatible chat endpoint.
* :class:`HTTPReranker` (``http.py``): scores from a ``/rerank`` endpoint (Cohere, Jina, vLLM, TEI).
"""

from retrievers.rerank.cross_encoder import CrossEncoderReranker
from retrievers.rerank.embedding import EmbeddingReranker
from retrievers.rerank.http import HTTPReranker
from retrievers.rerank.llm import LLMReranker
from retrievers.rerank.policy import RerankError, fallback_summary, rerank_with_fallback

__all__ = [
    "CrossEncoderReranker",
    "EmbeddingReranker",
    "HTTPReranker",
    "LLMReranker",
    "RerankError",
    "fallback_summary",
    "rerank_with_fallback",
]
