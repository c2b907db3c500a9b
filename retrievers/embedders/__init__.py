"""Text embedders that satisfy the :class:`retrievers.types.Embedder` protocol, one per module.

* :class:`SentenceTransformerEmbedder` (``sentence_transformer.py``): a sentence-transformers
  model (all-MiniLM-L6-v2 by default), with query/document prefixes or the model's own prompts
  and a device. The embedder for real runs.
* :class:`StaticEmbedder` (``static.py``): a Model2Vec-style static model (the 64-d one shipped by
  the ``tokenlearn-static-model`` package by default); no torch, thousands of texts per second.
* :class:`TfidfEmbedder` (``tfidf.py``): scikit-learn TF-IDF + truncated SVD; for unit tests and
  quick sweeps, not for quality.
* :class:`OpenAIEmbedder` (``http.py``): an OpenAI-compatible ``POST {base_url}/embeddings``.
* ``models.py``: where weights come from (:func:`resolve_model_path`) and what identifies them
  (:func:`model_fingerprint`).

All return float32 rows with unit L2 norm (or all-zero rows where a text has no usable signal,
see each class), so a dot product is a cosine similarity; ``name`` is the embedding cache key.
Heavy dependencies (torch, sentence-transformers, scikit-learn, tokenizers) are imported inside
functions so that ``import retrievers`` stays light.
"""

from retrievers.embedders.http import OpenAIEmbedder
from retrievers.embedders.models import KNOWN_PACKAGED_MODELS, model_fingerprint, resolve_model_path
from retrievers.embedders.sentence_transformer import SentenceTransformerEmbedder
from retrievers.embedders.static import StaticEmbedder
from retrievers.embedders.tfidf import CorpusFitError, NotFittedError, TfidfEmbedder

__all__ = [
    "KNOWN_PACKAGED_MODELS",
    "CorpusFitError",
    "NotFittedError",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "StaticEmbedder",
    "TfidfEmbedder",
    "model_fingerprint",
    "resolve_model_path",
]
