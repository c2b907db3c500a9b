"""Putting documents into the memory: :func:`ingest` (and :func:`grow`), the one place a growth
run adds documents.

The first step builds the store. Every later step, with ``growth.ingest=add`` (the default),
adds its documents with :meth:`ContextStore.add <retrievers.store.ContextStore.add>`
(docs/incremental.md): BM25 and exact vector search then hold exactly what a rebuild of the same
documents holds; the tree is inserted into (or built again past the change's rebuild threshold)
and the edges updated, which differ from a rebuild's by design. A store ``add`` cannot change
(chunked stores, ``llm`` edges) is built again, and ``growth.ingest=rebuild`` builds it again
at every step. Each step records which path made its store (:class:`Ingested`: ``kind`` =
``build``, ``add`` or ``rebuild``, the tree's ``inserted`` / ``rebuilt``, the store's version
history).

Each text is embedded once per run (:class:`MemoEmbedder`): the whole corpus up front through the
content-addressed cache (:func:`embed_up_front`; the same vectors a normal run of the dataset
uses, and a cache hit when one has run), so a rebuild's ``embed`` part is a lookup, and the
up-front time is reported once. Embedding is per document and costs the same whether a store is
rebuilt or added to.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.builders import FullTexts, build_store
from retrievers.store import ChangeSettings, ContextStore, StoreConfig
from retrievers.types import Document, Embedder, EncodeKind
from viking_eval.run.cached_embedder import CachedEmbedder

__all__ = ["Ingested", "MemoEmbedder", "StoreRecipe", "add_refusal", "embed_up_front", "grow", "ingest"]


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
    """What a store is built with: the store settings, the embedder, the dataset folder (where
    a tree finds its summaries file) and how later steps enter it (``growth.ingest``)."""

    config: StoreConfig
    embedder: Embedder
    source_folder: Path | None = None
    ingest: str = "add"


@dataclass(frozen=True)
class Ingested:
    """A store after an ingest and how it was made: ``kind`` is ``build`` (the first step),
    ``add`` (:meth:`ContextStore.add`) or ``rebuild``; ``parts`` the seconds per store part
    (the build's or the change's), ``tree`` ``inserted`` / ``rebuilt`` for an add of a store with
    a tree, ``reason`` why a ``rebuild`` was not an ``add``."""

    store: ContextStore
    kind: str
    parts: dict[str, float] = field(default_factory=dict)
    tree: str | None = None
    reason: str | None = None

    def record(self) -> dict[str, Any]:
        """The step record's part of it (beside the ingest seconds)."""
        return {
            "kind": self.kind,
            "parts": dict(self.parts),
            "tree": self.tree,
            "reason": self.reason,
            "history": [version.to_dict() for version in self.store.history],
        }


def add_refusal(store: ContextStore) -> str | None:
    """Why ``store`` cannot take documents with :meth:`ContextStore.add` (None: it can)."""
    if store.chunked:
        return "a chunked store (store.chunking) cannot be added to"
    edges = store.config.edges
    if edges is not None and edges.llm is not None:
        return "llm edges would ask the LLM again at every change"
    return None


def ingest(store: ContextStore | None, new_documents: Sequence[Document], recipe: StoreRecipe) -> Ingested:
    """The memory after ``new_documents`` are added to ``store`` (None: an empty memory), and how
    it was made (module docstring)."""
    refusal = None if store is None else add_refusal(store)
    if store is not None and recipe.ingest == "add" and refusal is None:
        changed = store.add(
            new_documents,
            recipe.embedder,
            settings=ChangeSettings(
                source_folder=None if recipe.source_folder is None else str(recipe.source_folder)
            ),
        )
        parts = dict(changed.change_seconds)
        tree = next((key[len("tree_") :] for key in parts if key.startswith("tree_")), None)
        return Ingested(changed, "add", {k: v for k, v in parts.items() if not k.startswith("tree_")}, tree)
    held = [] if store is None else list(store.parent_documents)
    built = build_store(
        [*held, *new_documents], recipe.embedder, recipe.config, source_folder=recipe.source_folder
    )
    kind = "build" if store is None else "rebuild"
    return Ingested(
        built, kind, dict(built.build_seconds), reason=refusal if recipe.ingest == "add" else None
    )


def grow(store: ContextStore | None, new_documents: Sequence[Document], recipe: StoreRecipe) -> ContextStore:
    """The memory after ``new_documents`` are added to ``store`` (:func:`ingest`'s store)."""
    return ingest(store, new_documents, recipe).store
