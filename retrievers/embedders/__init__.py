"""Text embedders that satisfy the :class:`retrievers.types.Embedder` protocol (a package: one
embedder per module)."""

from retrievers.embedders.sentence_transformer import (
    KNOWN_PACKAGED_MODELS,
    NotFittedError,
    SentenceTransformerEmbedder,
    TfidfEmbedder,
    model_fingerprint,
    resolve_model_path,
)

__all__ = [
    "KNOWN_PACKAGED_MODELS",
    "NotFittedError",
    "SentenceTransformerEmbedder",
    "TfidfEmbedder",
    "model_fingerprint",
    "resolve_model_path",
]
