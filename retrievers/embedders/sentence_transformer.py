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

Several processes or devices: ``processes=N`` (N workers on ``device``, or on the CPU) or
``devices=["cuda:0", "cuda:1"]`` (one worker per entry) encode through sentence-transformers'
multi-process pool (``start_multi_process_pool`` / ``encode(pool=...)``), started on the first
encode and stopped by :meth:`SentenceTransformerEmbedder.close` (or at exit). The pool hands
each worker consecutive pieces of the input; a worker encodes its piece exactly as a
single-process ``encode(piece)`` would (sorted by length, then batched), so
:meth:`~SentenceTransformerEmbedder.encode_chunked` returns the same vectors with one process
or several (on CPU, bit for bit: tested). The harness's cache calls it with its own pieces, so a
corpus cached with ``processes=2`` holds the vectors ``processes=1`` gives. A plain
:meth:`~SentenceTransformerEmbedder.encode` of a whole list sorts the whole list by length
first, so its batches differ from the pieces' and its vectors may differ in the last bits.
Each worker loads its own copy of the model and of torch (spawned processes); on a CPU with
``c`` cores each worker runs ``c / processes`` torch threads.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

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
_PROCESS_LIMIT = 256
Pool = dict[Literal["input", "output", "processes"], Any]  # sentence-transformers' pool


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
        processes: int = 1,
        devices: Sequence[str] | None = None,
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
        check_int("processes", processes, 1, _PROCESS_LIMIT)
        if devices is not None:
            if isinstance(devices, str) or not isinstance(devices, Sequence) or not devices:
                raise ParamError(
                    "devices",
                    f"devices must be a non-empty list of device names (cuda:0, cpu, ...), got {devices!r}",
                )
            for position, name in enumerate(devices):
                check_string(f"devices[{position}]", name, hint="cpu, cuda:0, cuda:1, mps, npu:0")
            if processes != 1:
                raise ParamError(
                    "processes",
                    f"processes={processes} and devices={list(devices)} are both set; devices starts one worker "
                    "per entry, so leave processes at 1",
                )

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
        self.processes = processes
        self.devices: tuple[str, ...] | None = None if devices is None else tuple(devices)
        self._pool: Pool | None = None
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
        without loading the model. Device, batch size, processes and devices are left out: they
        do not change the vectors beyond float rounding.
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

    def encode(self, texts: Sequence[str], *, kind: EncodeKind, chunk_size: int | None = None) -> FloatMatrix:
        """Embed ``texts`` as ``kind``: float32 ``(len(texts), dim)``, unit rows when ``normalize``.

        The prefix (or the model's prompt) for ``kind`` goes before every text. Empty input gives
        shape ``(0, dim)``. A progress bar shows when ``show_progress`` is True, or when it is
        None, stderr is a terminal and there are more than 1,000 texts. With several workers
        the texts go to the pool in pieces of ``chunk_size`` (None: sentence-transformers'
        choice, ``min(ceil(n / workers / 10), 5000)``).
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

        pool = self._start_pool() if self.workers > 1 else None
        with torch.inference_mode():
            vectors = model.encode(
                items,
                prompt_name=prompt_name,
                batch_size=self.batch_size,
                show_progress_bar=self._progress(len(items)),
                convert_to_numpy=True,
                normalize_embeddings=self.normalize,
                pool=pool,
                chunk_size=None if pool is None else chunk_size,
            )
        out = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        if out.shape != (len(items), self.dim):
            raise RuntimeError(f"model returned shape {out.shape}, expected ({len(items)}, {self.dim})")
        return out

    # -- several processes ------------------------------------------------------------------------

    @property
    def workers(self) -> int:
        """Processes encoding (1: this one; more: a pool, see the module docstring)."""
        return len(self.devices) if self.devices is not None else self.processes

    def encode_chunked(self, texts: Sequence[str], kind: EncodeKind, chunk_size: int) -> FloatMatrix:
        """``encode`` of each run of ``chunk_size`` texts, stacked: the same vectors as
        ``np.concatenate([encode(texts[i : i + chunk_size]) for i in ...])``, computed on the
        pool's workers (a piece each at a time) when there are several."""
        check_int("chunk_size", chunk_size, 1, _BATCH_LIMIT)
        if self.workers == 1:
            items = list(texts)
            if not items:
                return self.encode(items, kind=kind)
            return np.concatenate(
                [self.encode(items[i : i + chunk_size], kind=kind) for i in range(0, len(items), chunk_size)]
            )
        return self.encode(texts, kind=kind, chunk_size=chunk_size)

    def _start_pool(self) -> Pool:
        if self._pool is None:
            model = self._load()
            devices = (
                list(self.devices) if self.devices is not None else [self.device or "cpu"] * self.processes
            )
            # torch in each spawned worker reads OMP_NUM_THREADS when it starts: share the cores
            cpu_workers = sum(1 for name in devices if name.startswith("cpu"))
            threads = max(1, (os.cpu_count() or 1) // max(1, cpu_workers))
            before = os.environ.get("OMP_NUM_THREADS")
            os.environ["OMP_NUM_THREADS"] = str(threads)
            try:
                self._pool = model.start_multi_process_pool(devices)
            finally:
                if before is None:
                    os.environ.pop("OMP_NUM_THREADS", None)
                else:
                    os.environ["OMP_NUM_THREADS"] = before
            atexit.register(self.close)
        return self._pool

    def close(self) -> None:
        """Stop the worker processes, if any were started (a later encode starts them again)."""
        if self._pool is not None:
            from sentence_transformers import SentenceTransformer

            pool, self._pool = self._pool, None
            SentenceTransformer.stop_multi_process_pool(pool)

    def __repr__(self) -> str:
        return (
            f"SentenceTransformerEmbedder(model_name={self.model_name!r}, max_seq_length={self.max_seq_length}, "
            f"batch_size={self.batch_size}, normalize={self.normalize}, device={self.device!r}"
            + (f", processes={self.processes}" if self.processes != 1 else "")
            + (f", devices={list(self.devices)!r}" if self.devices is not None else "")
            + ")"
        )
