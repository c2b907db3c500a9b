"""The run's embedder and store: the corpus's content key, the embedder fitted on the corpus
(cached when it can save its fitted state), and the ContextStore loaded from (or built into) the
content-addressed cache the first time a retriever needs it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from retrievers.backends import attach, open_backend
from retrievers.builders import build_store
from retrievers.embedders.tfidf import CorpusFitError
from retrievers.params import ParamError
from retrievers.store import STORE_FORMAT, ContextStore
from retrievers.types import Embedder
from viking_eval.config import Settings
from viking_eval.config.errors import from_library_error
from viking_eval.config.load import without_encode_keys
from viking_eval.config.objects import build_object
from viking_eval.data import BeirDataset, DataError
from viking_eval.files import sha256_file
from viking_eval.progress import library_progress
from viking_eval.run.ann_quality import describe_index
from viking_eval.run.cache import ArtifactCache, content_key, memo_get, memo_put
from viking_eval.run.cached_embedder import CachedEmbedder
from viking_eval.run.ray_encoder import encode_backend


def corpus_key(dataset: BeirDataset) -> str:
    """Content hash of the corpus as it will be indexed (ids, titles, texts, metadata)."""
    parts: list[str] = []
    for doc_id in sorted(dataset.corpus):
        doc = dataset.corpus[doc_id]
        parts += [
            doc.id,
            doc.title,
            doc.text,
            json.dumps(dict(doc.metadata), sort_keys=True, ensure_ascii=False),
        ]
    return content_key(["corpus", *parts])


def prepare_embedder(
    embedder: Embedder, dataset: BeirDataset, cache: ArtifactCache | None = None, config: Any = None
) -> Embedder:
    """Fit an embedder that learns from the corpus (TF-IDF+SVD) on the documents, in id order.

    With a ``cache``, an embedder that can save its fitted state as files (``save_fitted`` /
    ``load_fitted``, no pickle) is fitted once per (embedder settings, corpus) and loaded from the
    content-addressed cache afterwards: a warm run over TF-IDF spends no time refitting it."""
    fit_method = getattr(embedder, "fit", None)
    if not callable(fit_method) or getattr(embedder, "fitted", True):
        return embedder

    def fit(texts: list[str]) -> None:
        try:
            fit_method(texts)
        except CorpusFitError as error:  # the corpus, not the code: one line naming the dataset
            raise DataError(
                f"{dataset.folder}: dataset {dataset.name}: the embedder cannot be fitted on its "
                f"corpus: {error}; give the documents text, or use an embedder that is not fitted "
                "on the corpus (embedder=static or minilm)",
                path=dataset.folder,
            ) from None

    texts = [dataset.corpus[doc_id].full_text for doc_id in sorted(dataset.corpus)]
    save, load = getattr(embedder, "save_fitted", None), getattr(type(embedder), "load_fitted", None)
    if cache is None or not callable(save) or not callable(load):
        fit(texts)
        return embedder
    settings = json.dumps(config, sort_keys=True, default=str) if config is not None else repr(embedder)
    # the class's algorithm version too: a state fitted by an older algorithm is not found (its
    # load_fitted would refuse it), it is fitted again
    version = str(getattr(type(embedder), "VERSION", ""))
    key = content_key(
        ["fitted-embedder", type(embedder).__qualname__, version, settings, corpus_key(dataset)]
    )

    def build(folder: Path) -> None:
        fit(texts)
        save(folder)

    fitted: Embedder = load(cache.get_or_build("fitted", key, build))
    return fitted


class StoreLoader:
    """Loads (building on a cache miss) the run's ContextStore the first time it is needed."""

    def __init__(
        self, settings: Settings, dataset: BeirDataset, embedder: Embedder, cache: ArtifactCache
    ) -> None:
        self.settings = settings
        self.dataset = dataset
        self.embedder = embedder
        self.cache = cache
        self.key = content_key(
            [
                "store",
                f"format:{STORE_FORMAT}",  # a new artifact layout never reuses an old entry
                corpus_key(dataset),
                embedder.name,
                json.dumps(settings.store.to_dict(), sort_keys=True),
                # files a store component reads besides the corpus (e.g. tree summaries); none
                # for most stores, which keeps their keys as they were
                *(
                    f"{path.name}:{sha256_file(path)}"
                    for path in settings.store.input_files(dataset.folder)
                    if path.is_file()
                ),
            ]
        )
        self._store: ContextStore | None = None
        self.info: dict[str, Any] = {"store_key": self.key, "embedder": embedder.name}
        try:  # pre-flight: settings the data cannot hold are refused before anything is embedded
            settings.store.check_against(dataset.corpus.values(), lambda: embedder.dim)
        except ParamError as error:
            raise from_library_error("store", error) from None

    def get(self) -> ContextStore:
        # a store served by a backend is another object than the local one (same content key)
        memo_key = (
            self.key if self.settings.backend.is_local else f"{self.key}:{self.settings.backend.to_dict()}"
        )
        if self._store is None and memo_get(memo_key) is not None:
            # loaded by an earlier job of this process (Hydra's basic launcher runs a sweep in one process)
            self._store = memo_get(memo_key)
            self.info.update(store_built_now=False, store_ready_seconds=0.0, store_from_memory=True)
            self.info["store_build_seconds"] = self._store.build_seconds
        if self._store is None:
            builds_before = self.cache.builds
            start = time.perf_counter()

            def build(folder: Path) -> None:
                build_store(
                    self.dataset.corpus.values(),
                    CachedEmbedder(
                        self.embedder,
                        self.cache,
                        label=f"{self.dataset.name} corpus",
                        show_progress=self.settings.show_progress,
                        backend=encode_backend(self.settings.embedder),  # embedder.backend=ray
                    ),
                    self.settings.store,
                    show_progress=library_progress(self.settings.show_progress),
                    source_folder=self.dataset.folder,
                    folder=folder,  # built into the entry's folder part by part, and saved there
                )

            folder = self.cache.get_or_build("stores", self.key, build)
            self._store = ContextStore.load(folder)
            if not self.settings.backend.is_local:  # searches in the database, the store written there once
                backend = open_backend(
                    self.settings.backend,
                    self._store,
                    content_key=self.key,
                    default_location=self.cache.root / "backends" / self.key[:16],
                )
                self._store = attach(self._store, backend)
                self.info["backend"] = {
                    "kind": backend.kind,
                    "index": backend.index,
                    "name": self.settings.backend.backend_name,
                }
            memo_put(memo_key, self._store)
            self.info.update(
                store_folder=str(folder),
                store_built_now=self.cache.builds > builds_before,
                store_ready_seconds=round(time.perf_counter() - start, 3),
                store_build_seconds=self._store.build_seconds,
            )
        if self._store.has_vectors:  # exact, or a faiss index: kind, settings, knobs (ann_quality.py)
            self.info["vector_index"] = describe_index(self._store)
        if self._store.timestamps is not None:  # parsed/missing/unparseable counts (timeparse.py)
            self.info["timestamps"] = self._store.timestamps.report
        if self._store.edges is not None:  # edges kept per relation, links dropped and why (edges.py)
            self.info["edges"] = self._store.edges.report
        return self._store


def embedder_for(
    settings: Settings,
    dataset: BeirDataset,
    embedder_factory: Callable[[], Embedder] | None,
    cache: ArtifactCache | None = None,
) -> Embedder:
    """The run's embedder, fitted when it learns from the corpus; memoised per process by its
    config and the corpus, so sweep jobs neither refit TF-IDF nor reload a model."""
    if embedder_factory is not None:
        return prepare_embedder(embedder_factory(), dataset)
    own = without_encode_keys(settings.embedder)  # embedder.backend/actors: where, not what
    key = content_key(["embedder", json.dumps(own, sort_keys=True, default=str), corpus_key(dataset)])
    embedder: Embedder | None = memo_get(key)  # an embedder key holds the embedder put below
    if embedder is None:
        built = build_object(own, "embedder", "embedder")  # through the class registry
        embedder = prepare_embedder(built, dataset, cache, own)
        memo_put(key, embedder)
    return embedder
