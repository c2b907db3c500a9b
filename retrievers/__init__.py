"""retrievers: the production retrieval library behind viking_eval.

Import what a service needs from here; nothing in this package imports hydra, omegaconf, pandas
or viking_eval (a test enforces it), and sentence-transformers/torch load only when a model does.
"""

from retrievers.baselines import BM25Retriever, DenseRetriever
from retrievers.embedders import OpenAIEmbedder, SentenceTransformerEmbedder, StaticEmbedder, TfidfEmbedder
from retrievers.filters import MetadataFilter
from retrievers.graph import GraphRetriever
from retrievers.hierarchical import (
    FindResult,
    HierarchicalRetriever,
    LLMIntentAnalyzer,
    RuleBasedAnalyzer,
    Session,
    TypedQuery,
)
from retrievers.hybrid import HybridRetriever
from retrievers.index import BM25Index, ExactVectorIndex
from retrievers.multi_strategy import MultiStrategyRetriever, QueryAnalyzer
from retrievers.rerank import CrossEncoderReranker, EmbeddingReranker, HTTPReranker, LLMReranker
from retrievers.store import (
    BM25Config,
    ChunkingConfig,
    ContextStore,
    ContextTree,
    EdgeConfig,
    EdgeSet,
    HierarchyConfig,
    StoreConfig,
)
from retrievers.timeparse.document_times import TimestampConfig
from retrievers.tuned import TunedFileError, build_tuned_store, load_tuned
from retrievers.types import (
    ContextNode,
    Document,
    Edge,
    EdgeContext,
    Embedder,
    Reranker,
    RetrievalResult,
    Retriever,
)

__all__ = [
    "BM25Config",
    "BM25Index",
    "BM25Retriever",
    "ChunkingConfig",
    "ContextNode",
    "ContextStore",
    "ContextTree",
    "CrossEncoderReranker",
    "DenseRetriever",
    "Document",
    "Edge",
    "EdgeConfig",
    "EdgeContext",
    "EdgeSet",
    "Embedder",
    "EmbeddingReranker",
    "ExactVectorIndex",
    "FindResult",
    "GraphRetriever",
    "HTTPReranker",
    "HierarchicalRetriever",
    "HierarchyConfig",
    "HybridRetriever",
    "LLMIntentAnalyzer",
    "LLMReranker",
    "MetadataFilter",
    "MultiStrategyRetriever",
    "OpenAIEmbedder",
    "QueryAnalyzer",
    "Reranker",
    "RetrievalResult",
    "Retriever",
    "RuleBasedAnalyzer",
    "SentenceTransformerEmbedder",
    "Session",
    "StaticEmbedder",
    "StoreConfig",
    "TfidfEmbedder",
    "TimestampConfig",
    "TunedFileError",
    "TypedQuery",
    "build_tuned_store",
    "load_tuned",
]
