"""A sentence-transformers bi-encoder (all-MiniLM-L6-v2 by default) behind the ``Embedder`` protocol.

The embedder used for real runs. torch and sentence-transformers are imported when the model
loads, so building the object, reading its ``name`` (the embedding cache key) and validating its
settings cost no torch import.

Models expect different things of their input; three settings cover the conventions in use:

* ``query_prefix`` / ``document_prefix``: text prepended to every query / document (E5:
  ``"query: "`` / ``"passage: "``; BGE v1.5: ``"Represent this sentence for searching relevant
  passages: "`` on queries only; MiniLM and mpnet: none).
* ``query_prompt_name`` / ``document_prompt_name``: the name of a prompt the model itself declares
  (``prompts`` in its ``config_sentence_transformers.json``, e.g. ``"query"``), passed to
  ``SentenceTransformer.encode(prompt_name=...)``. A prompt is the model author's own prefix, so
  configs need not copy its text; and for models whose pooling is configured with
  ``include_prompt: false`` (INSTRUCTOR-style) the prompt's tokens are left out of the mean,
  which a plain prefix cannot do. A prefix and a prompt for the same kind are refused (which one
  would come first is not obvious, and no model expects both).
* ``device``: ``cpu``, ``cuda``, ``cuda:1``, ``mps``, ... or None to let sentence-transformers
  pick (CUDA, then MPS, then CPU).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from retrievers.embedders.base import (
    EncodeKind,
    FloatMatrix,
    check_flag,
    check_kind,
    check_string,
    check_texts,
)
from retrievers.embedders.models import CANONICAL_MODEL_IDS, model_fingerprint, resolve_model_path
from retrievers.params import ParamError, check_int, is_int

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["SentenceTransformerEmbedder"]

_MAX_SEQ_LENGTH_LIMIT = 8192
_BATCH_LIMIT = 1_000_000


class SentenceTransformerEmbedder:
    """A sentence-transformers bi-encoder behind the ``Embedder`` protocol.

    The model loads on the first :meth:`encode` or the first read of :attr:`dim`, not in
    ``__init__``: building embedders (e.g. to look up a cache by :attr:`name`) must stay cheap.
    ``query_prefix``/``document_prefix`` are prepended to texts of that kind;
    ``query_prompt_name``/``document_prompt_name`` select one of the model's own prompts (see the
    module docstring). ``max_seq_length=None`` keeps the model's own limit (256 for MiniLM);
    longer texts are truncated. Encoding runs in ``torch.inference_mode`` with the model in eval
    mode; sentence-transformers already sorts texts by length for batching and restores the
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
        device: str | None = "cpu",
        query_prefix: str = "",
        document_prefix: str = "",
        query_prompt_name: str | None = None,
        document_prompt_name: str | None = None,
        show_progress: bool | None = None,
        revision: str | None = None,
    ) -> None:
        check_string("model_name", model_name)
        check_int("max_seq_length", max_seq_length, 1, _MAX_SEQ_LENGTH_LIMIT, nullable=True)
        check_int("batch_size", batch_size, 1, _BATCH_LIMIT)
        check_flag("normalize", normalize)
        check_string("device", device, nullable=True, hint="cpu, cuda, cuda:1, mps; null picks one")
        for kind in ("query", "document"):
            prefix = query_prefix if kind == "query" else document_prefix
            prompt_name = query_prompt_name if kind == "query" else document_prompt_name
            check_string(f"{kind}_prefix", prefix, non_empty=False)
            check_string(f"{kind}_prompt_name", prompt_name, nullable=True)
            if prefix and prompt_name is not None:
                raise ParamError(
                    f"{kind}_prompt_name",
                    f"{kind}_prefix and {kind}_prompt_name are both set ({prefix!r}, {prompt_name!r}); "
                    "a prompt is the model's own prefix: set one of them",
                )
        check_flag("show_progress", show_progress, nullable=True)
        check_string("revision", revision, nullable=True)

        self.model_name = model_name
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.normalize = normalize
        self.device = device
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self.query_prompt_name = query_prompt_name
        self.document_prompt_name = document_prompt_name
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
        ``sentence-transformers/all-MiniLM-L6-v2`` give the same name). Prompt names, when set,
        follow as ``|query_prompt_name=..`` / ``|document_prompt_name=..`` (the prompt texts are in
        the model's files, which the version covers); without them the name is what it was
        before prompts existed, so cache entries and tuned files stay valid. Computed once,
        without loading the model. Device and batch size are left out: they do not change the
        vectors beyond float rounding.
        """
        if self._name is None:
            path = resolve_model_path(self.model_name)
            version = model_fingerprint(path) if Path(path).is_dir() else (self.revision or "main")
            model_id = CANONICAL_MODEL_IDS.get(self.model_name, self.model_name)
            seq = "default" if self.max_seq_length is None else str(self.max_seq_length)
            name = (
                f"st:{model_id}@{version}"
                f"|max_seq_length={seq}"
                f"|normalize={int(self.normalize)}"
                f"|query_prefix={json.dumps(self.query_prefix)}"
                f"|document_prefix={json.dumps(self.document_prefix)}"
            )
            if self.query_prompt_name is not None:
                name += f"|query_prompt_name={json.dumps(self.query_prompt_name)}"
            if self.document_prompt_name is not None:
                name += f"|document_prompt_name={json.dumps(self.document_prompt_name)}"
            self._name = name
        return self._name

    @property
    def dim(self) -> int:
        """Embedding width, from ``model.get_embedding_dimension()`` (loads the model)."""
        if self._dim is None:
            self._load()
        if self._dim is None:  # _load sets it or raises; this only narrows the type
            raise RuntimeError(f"model {self.model_name!r} did not report its embedding dimension")
        return self._dim

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
        prompts: dict[str, str] = dict(getattr(model, "prompts", None) or {})
        for kind, prompt_name in (("query", self.query_prompt_name), ("document", self.document_prompt_name)):
            if prompt_name is not None and prompt_name not in prompts:
                raise ValueError(
                    f"{kind}_prompt_name={prompt_name!r} is not a prompt of model {self.model_name!r}; "
                    f"its prompts: {sorted(prompts) or 'none'} (use {kind}_prefix for a text of your own)"
                )
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

        The prefix (or the model's prompt) for ``kind`` goes before every text. Empty input gives
        shape ``(0, dim)``. A progress bar shows when ``show_progress`` is True, or when it is
        None, stderr is a terminal and there are more than 1,000 texts.
        """
        check_kind(kind)
        items = check_texts(texts, "SentenceTransformerEmbedder.encode")
        model = self._load()
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        prompt_name = self.query_prompt_name if kind == "query" else self.document_prompt_name
        if prefix:
            items = [prefix + text for text in items]

        import torch

        with torch.inference_mode():
            vectors = model.encode(
                items,
                prompt_name=prompt_name,
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
