"""Putting documents into the memory: :func:`grow`, the one place a growth run adds documents.

Incremental stores (``store.add``, issue 29 part 1) are not in this branch, so :func:`grow` is a
FULL REBUILD: the documents the store holds plus the new ones, built into a new store from
scratch (BM25, vectors, tree, edges, timestamps). Once stores can add documents, its body
becomes ``store.add(new_documents)`` (and ``build`` for the first step); nothing else changes.
:data:`INGEST_KIND` names what the recorded ingest cost measures and is written into every step.

Each text is embedded once per run (:class:`MemoEmbedder`): the whole corpus up front through the
content-addressed cache (:func:`embed_up_front`; the same vectors a normal run of the dataset
uses, and a cache hit when one has run), so a rebuild's ``embed`` part is a lookup, and the
up-front time is reported once. Embedding is per document and costs the same whether a store is
rebuilt or added to.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrievers.builders import FullTexts, build_store
from retrievers.store import ContextStore, StoreConfig
from retrievers.types import Document, Embedder, EncodeKind
from viking_eval.run.cached_embedder import CachedEmbedder

__all__ = ["INGEST_KIND", "MemoEmbedder", "StoreRecipe", "embed_up_front", "grow"]

INGEST_KIND = "rebuild"
"""What one ingest is: ``rebuild`` (the whole store built again from the documents so far)."""


class MemoEmbedder:
    """An embedder that encodes each (kind, text) once per run and remembers the vector: later
    calls with texts already seen cost a lookup. Misses go to ``inner`` (the run's embedder, not
    the cache: the evaluation wraps this embedder in the cache for queries, and a cache behind a
    cache would lock the same entry twice) in one call; ``encode_seconds`` adds up their time."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self._vectors: dict[tuple[str, str], np.ndarray] = {}
        self.encode_seconds = 0.0

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def remember(self, texts: Sequence[str], kind: EncodeKind, vectors: np.ndarray) -> None:
        for text, vector in zip(texts, vectors, strict=True):
            self._vectors.setdefault((kind, text), np.array(vector, dtype=np.float32))

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        missing = list(dict.fromkeys(text for text in texts if (kind, text) not in self._vectors))
        if missing:
            start = time.perf_counter()
            vectors = np.asarray(self.inner.encode(missing, kind=kind), dtype=np.float32)
            self.encode_seconds += time.perf_counter() - start
            self.remember(missing, kind, vectors)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[(kind, text)] for text in texts])


def embed_up_front(embedder: MemoEmbedder, cached: CachedEmbedder, documents: Iterable[Document]) -> float:
    """Embed every document once, in the order and calls a normal build of the whole corpus makes
    (id order; a cache hit when a run of this dataset and embedder has embedded it), into
    ``embedder``'s memory; the seconds it took."""
    start = time.perf_counter()
    ordered = sorted(documents, key=lambda doc: doc.id)
    texts = FullTexts(ordered)
    out = np.empty((len(texts), cached.dim), dtype=np.float32)
    cached.encode_into(texts, kind="document", out=out)
    embedder.remember(list(texts), "document", out)
    return time.perf_counter() - start


@dataclass(frozen=True)
class StoreRecipe:
    """What a store is built with: the store settings, the embedder and the dataset folder (where
    a tree finds its summaries file)."""

    config: StoreConfig
    embedder: Embedder
    source_folder: Path | None = None


def grow(store: ContextStore | None, new_documents: Sequence[Document], recipe: StoreRecipe) -> ContextStore:
    """The memory after ``new_documents`` are added to ``store`` (None: an empty memory).

    Today a FULL REBUILD (:data:`INGEST_KIND`): every document ``store`` holds and the new ones,
    built into a new store. With incremental stores this becomes ``store.add(new_documents)``."""
    held = [] if store is None else list(store.parent_documents)
    return build_store(
        [*held, *new_documents], recipe.embedder, recipe.config, source_folder=recipe.source_folder
    )
