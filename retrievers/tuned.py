"""Load a tuned retriever exported by ``python -m viking_eval.sweep.export``, safely.

A tuned file (``experiments/tuned/<name>.yaml``) names a retriever class and its parameters, the
embedder (class, parameters and the name/fingerprint it had when tuned), the store settings and
where the numbers came from. Loading it:

- instantiates only classes of an explicit registry (:data:`RETRIEVERS`, :data:`EMBEDDERS`,
  :data:`RERANKERS`) with only the parameters listed there: a file naming ``os.system``, a class
  outside the registry, a ``_target_`` anywhere (tuned files name classes only by ``class``) or a
  setting outside its list is refused before anything is imported. Endpoints, API keys, devices and
  anything else with side effects come only from the caller (``reranker=``, ``embedder=``): a
  tuned file can never send an environment variable to a host of its choosing;
- validates every parameter through the class's own checks;
- checks the store: a ``store=`` built with other settings (BM25 k1/b, stemming, chunking, tree,
  edges) is refused, as is an embedder whose fingerprint differs from the tuned one, unless the
  caller says so (``allow_store_mismatch``, ``allow_embedder_mismatch``);
- demands only what the retriever uses: a BM25 retriever needs no embedder (its store is built
  without embeddings);
- raises :class:`TunedFileError` for every failure, with the file and the field;
- imports neither hydra nor viking_eval (YAML is read with ``yaml.safe_load``, which builds
  plain data only).

Production use::

    from retrievers import ContextStore, build_tuned_store, load_tuned
    store = build_tuned_store("experiments/tuned/hybrid-scifact.yaml", documents)  # once
    store.save("/srv/store")
    ...
    store = ContextStore.load(Path("/srv/store"))                                 # each process
    retriever = load_tuned("experiments/tuned/hybrid-scifact.yaml", store=store)
    results = retriever.retrieve("query", top_k=10)

``documents`` are :class:`~retrievers.types.Document` values or BEIR-shaped mappings
(``{"_id", "text", "title"?, "metadata"?}``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from retrievers.backends import BackendConfig, SearchBackend, attach, open_backend
from retrievers.baselines import BM25Retriever, DenseRetriever
from retrievers.embedders import SentenceTransformerEmbedder, StaticEmbedder, TfidfEmbedder
from retrievers.graph import GraphRetriever
from retrievers.hierarchical import HierarchicalRetriever
from retrievers.hybrid import HybridRetriever
from retrievers.multi_strategy import MultiStrategyRetriever
from retrievers.rerank import CrossEncoderReranker, EmbeddingReranker
from retrievers.store import ContextStore, StoreConfig
from retrievers.types import Document, Embedder, Reranker, Retriever

__all__ = ["EMBEDDERS", "RERANKERS", "RETRIEVERS", "TunedFileError", "build_tuned_store", "load_tuned"]

TUNED_FORMAT = 1
REQUIRED = ("format", "retriever", "embedder", "store")

#: retriever classes a tuned file may name; every parameter of their Params except ``reranker``
#: (which must be a registered reranker, or the caller's object) is allowed
RETRIEVERS: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        BM25Retriever,
        DenseRetriever,
        HybridRetriever,
        GraphRetriever,
        HierarchicalRetriever,
        MultiStrategyRetriever,
    )
}
#: embedder classes and the settings a tuned file may give them (the rest, e.g. ``device``, is
#: the caller's: pass ``embedder=``)
EMBEDDERS: dict[str, tuple[type, frozenset[str]]] = {
    "SentenceTransformerEmbedder": (
        SentenceTransformerEmbedder,
        frozenset(
            {
                "model_name",
                "max_seq_length",
                "batch_size",
                "normalize",
                "query_prefix",
                "document_prefix",
                "query_prompt_name",
                "document_prompt_name",
                "revision",
            }
        ),
    ),
    "StaticEmbedder": (StaticEmbedder, frozenset({"model_name", "max_length"})),
    "TfidfEmbedder": (TfidfEmbedder, frozenset({"dim", "seed", "min_df", "max_features"})),
}
# Not registered on purpose: OpenAIEmbedder and HTTPReranker carry an endpoint and read a key from
# the environment; they come only from the caller (embedder=, reranker=).
#: rerankers a tuned file may name, with their settings; an LLM reranker (an endpoint and a key)
#: can only be passed by the caller as ``reranker=``
RERANKERS: dict[str, tuple[Callable[..., Any], frozenset[str]]] = {
    "CrossEncoderReranker": (CrossEncoderReranker, frozenset({"model_name", "max_length", "batch_size"})),
    "EmbeddingReranker": (EmbeddingReranker, frozenset({"embedder", "cache_size"})),
}


class TunedFileError(ValueError):
    """A tuned file (or a call of :func:`load_tuned`) that cannot be used safely; the message
    names the file and the field."""


def _spec(value: object, path: Path, field: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(value, Mapping) or "class" not in value:
        raise TunedFileError(f"{path}: {field} must be a mapping with 'class' and 'params'")
    params = value.get("params") or {}
    if not isinstance(params, Mapping):
        raise TunedFileError(f"{path}: {field}.params must be a mapping, got {params!r}")
    return str(value["class"]), dict(params)


def _embedder_spec(spec: object, path: Path, field: str) -> tuple[type, dict[str, Any]]:
    """The registered embedder class a spec names and its parameters, checked against the registry."""
    name, params = _spec(spec, path, field)
    if name not in EMBEDDERS:
        raise TunedFileError(
            f"{path}: {field}.class {name!r} is not a tunable embedder; allowed: {sorted(EMBEDDERS)}"
        )
    cls, allowed = EMBEDDERS[name]
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise TunedFileError(
            f"{path}: {field}.params {unknown} cannot come from a tuned file; allowed: {sorted(allowed)} "
            "(pass embedder= for anything else)"
        )
    return cls, params


def _embedder(spec: object, path: Path, field: str) -> Embedder:
    cls, params = _embedder_spec(spec, path, field)
    try:
        embedder: Embedder = cls(**params)
    except (TypeError, ValueError) as error:
        raise TunedFileError(f"{path}: {field}: {error}") from None
    return embedder


def _reranker(spec: object, path: Path, field: str) -> Reranker:
    name, params = _spec(spec, path, field)
    if name not in RERANKERS:
        raise TunedFileError(
            f"{path}: {field}.class {name!r} cannot be built from a tuned file; allowed: {sorted(RERANKERS)} "
            "(an LLM reranker's endpoint and key come only from the caller: pass reranker=)"
        )
    factory, allowed = RERANKERS[name]
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise TunedFileError(
            f"{path}: {field}.params has unknown key(s) {unknown}; allowed: {sorted(allowed)}"
        )
    if "embedder" in params:
        params["embedder"] = _embedder(params["embedder"], path, f"{field}.params.embedder")
    try:
        reranker: Reranker = factory(**params)
    except (TypeError, ValueError) as error:
        raise TunedFileError(f"{path}: {field}: {error}") from None
    return reranker


def _refuse_targets(value: object, path: Path, field: str) -> None:
    """A ``_target_`` anywhere in a tuned file is refused before anything is imported: a tuned file
    names its classes only by ``class`` (looked up in the registries above), never by a dotted
    name that would be imported and called."""
    if isinstance(value, Mapping):
        if "_target_" in value:
            raise TunedFileError(
                f"{path}: {field}._target_ {value['_target_']!r} is refused: a tuned file names classes "
                f"only by 'class' from the registry (retrievers {sorted(RETRIEVERS)}, embedders "
                f"{sorted(EMBEDDERS)}, rerankers {sorted(RERANKERS)}); pass any other object yourself"
            )
        for key, item in value.items():
            _refuse_targets(item, path, f"{field}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _refuse_targets(item, path, f"{field}.{index}")


def read_tuned(path: str | Path) -> dict[str, Any]:
    """The tuned file as plain data, with its required fields checked."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise TunedFileError(f"{path}: cannot read tuned file: {error}") from None
    if not isinstance(data, dict):
        raise TunedFileError(f"{path}: a tuned file is a mapping with {list(REQUIRED)}")
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise TunedFileError(f"{path}: missing field(s) {missing}; a tuned file needs {list(REQUIRED)}")
    if data["format"] != TUNED_FORMAT:
        raise TunedFileError(f"{path}: format {data['format']!r} is not supported (expected {TUNED_FORMAT})")
    for field in ("retriever", "embedder", "store"):
        _refuse_targets(data[field], path, field)
    name, _ = _spec(data["retriever"], path, "retriever")
    if name not in RETRIEVERS:
        raise TunedFileError(
            f"{path}: retriever.class {name!r} is not a tunable retriever; allowed: {sorted(RETRIEVERS)}"
        )
    _embedder_spec(data["embedder"], path, "embedder")
    return data


def _store_config(data: Mapping[str, Any], path: Path) -> StoreConfig:
    try:
        config = StoreConfig.from_dict(data["store"] or {})
    except (TypeError, ValueError) as error:
        raise TunedFileError(f"{path}: store: {error}") from None
    if config.edges is not None and config.edges.llm is not None:
        raise TunedFileError(
            f"{path}: store.edges.llm calls an LLM endpoint while building; a tuned file cannot start "
            "that: build the store yourself (retrievers.builders.build_store) and pass store="
        )
    return config


def _documents(documents: Iterable[object], path: Path) -> list[Document]:
    out: list[Document] = []
    for i, item in enumerate(documents):
        if isinstance(item, Document):
            out.append(item)
            continue
        if (
            not isinstance(item, Mapping)
            or not isinstance(item.get("_id"), str)
            or not isinstance(item.get("text"), str)
        ):
            raise TunedFileError(
                f"{path}: documents[{i}] must be a retrievers.Document or a mapping with string '_id' "
                f"and 'text' (and optional 'title', 'metadata') as in BEIR's corpus.jsonl; got {item!r:.120}"
            )
        try:
            out.append(
                Document(
                    id=item["_id"],
                    text=item["text"],
                    title=str(item.get("title") or ""),
                    metadata=dict(item.get("metadata") or {}),
                )
            )
        except (TypeError, ValueError) as error:
            raise TunedFileError(f"{path}: documents[{i}]: {error}") from None
    if not out:
        raise TunedFileError(f"{path}: documents is empty; give the corpus to index")
    return out


def _uses_embedder(data: Mapping[str, Any], path: Path) -> bool:
    """Whether the tuned retriever searches vectors (BM25 alone does not)."""
    name, params = _spec(data["retriever"], path, "retriever")
    if name == "BM25Retriever":
        return False
    return not (name == "HybridRetriever" and params.get("keyword_weight") == 1)


def _fit(embedder: Embedder, texts: list[str]) -> None:
    fit = getattr(embedder, "fit", None)
    if callable(fit) and not getattr(embedder, "fitted", True):
        fit(texts)


def _check_embedder(embedder: Embedder, data: Mapping[str, Any], path: Path, allow: bool) -> None:
    spec = data["embedder"]
    expected = spec.get("name") if isinstance(spec, Mapping) else None
    if expected and embedder.name != expected and not allow:
        raise TunedFileError(
            f"{path}: embedder fingerprint differs: tuned with {expected!r}, got {embedder.name!r} "
            "(other weights or settings); pass allow_embedder_mismatch=True to use it anyway"
        )


def _build(
    path: Path,
    data: Mapping[str, Any],
    documents: Iterable[Document | Mapping[str, Any]],
    embedder: Embedder | None,
    allow_embedder_mismatch: bool,
    source_folder: str | Path | None = None,
) -> tuple[ContextStore, Embedder | None]:
    docs = _documents(documents, path)
    config = _store_config(data, path)
    uses = _uses_embedder(data, path)
    chosen: Embedder | None = None
    if (
        uses
        or config.hierarchy is not None
        or (config.edges is not None and config.edges.similar_to is not None)
    ):
        chosen = embedder if embedder is not None else _embedder(data["embedder"], path, "embedder")
        _fit(chosen, [doc.full_text for doc in sorted(docs, key=lambda doc: doc.id)])
        if uses:
            _check_embedder(chosen, data, path, allow_embedder_mismatch)
    # imported here, not at the top: serving from a saved store (store=) never loads a builder
    from retrievers.builders import build_store

    try:
        folder = None if source_folder is None else Path(source_folder)
        return build_store(docs, chosen, config, source_folder=folder), chosen
    except ValueError as error:
        raise TunedFileError(f"{path}: cannot build the store: {error}") from None


def build_tuned_store(
    path: str | Path,
    documents: Iterable[Document | Mapping[str, Any]],
    *,
    embedder: Embedder | None = None,
    allow_embedder_mismatch: bool = False,
    source_folder: str | Path | None = None,
) -> ContextStore:
    """The store a tuned retriever needs, built from ``documents`` with the tuned store settings
    (and the tuned embedder, unless nothing in it uses vectors). ``source_folder``: the folder
    of the files the store settings name besides the documents (a tree's ``summaries_file``,
    e.g. LoCoMo's sessions.jsonl). Save it with :meth:`ContextStore.save` and load it in serving
    processes with :meth:`ContextStore.load`."""
    path = Path(path)
    return _build(path, read_tuned(path), documents, embedder, allow_embedder_mismatch, source_folder)[0]


def load_tuned(
    path: str | Path,
    *,
    documents: Iterable[Document | Mapping[str, Any]] | None = None,
    store: ContextStore | None = None,
    embedder: Embedder | None = None,
    reranker: Reranker | None = None,
    allow_embedder_mismatch: bool = False,
    allow_store_mismatch: bool = False,
    source_folder: str | Path | None = None,
    backend: BackendConfig | Mapping[str, Any] | SearchBackend | None = None,
) -> Retriever:
    """Build the tuned retriever over ``store``, or over a store built from ``documents`` with
    the tuned store settings (:func:`build_tuned_store`). ``embedder`` overrides the tuned one
    (its fingerprint must still match unless ``allow_embedder_mismatch``); ``reranker`` is the
    caller's reranker object (an LLM reranker, say), used instead of any the file names;
    ``source_folder`` is the folder of files the store settings name (see build_tuned_store).
    ``backend`` serves it from a database (:mod:`retrievers.backends`): its settings
    (``{"backend": "postgres", "backend_url": ...}``, a :class:`BackendConfig`) or an open backend
    holding this store; the store is written there once and reused (docs/production.md).
    Connections come from the caller, never from the tuned file."""
    path = Path(path)
    data = read_tuned(path)
    if (store is None) == (documents is None):
        raise TunedFileError(
            f"{path}: give exactly one of documents= (a store is built) or store= (an existing store)"
        )
    if store is None:
        assert documents is not None
        store, embedder = _build(path, data, documents, embedder, allow_embedder_mismatch, source_folder)
    else:
        config = _store_config(data, path)
        if store.config != config and not allow_store_mismatch:
            tuned, given = config.to_dict(), store.config.to_dict()
            differing = sorted(key for key in tuned if tuned[key] != given.get(key))
            raise TunedFileError(
                f"{path}: the store was built with other settings than the tuned ones "
                f"(differing: {', '.join(f'store.{key}' for key in differing)}); rebuild it with "
                "build_tuned_store or pass allow_store_mismatch=True"
            )
    uses = _uses_embedder(data, path)
    if uses and (embedder is None or embedder.name != store.embedder_name):
        if embedder is None:
            embedder = _embedder(data["embedder"], path, "embedder")
            # an embedder fitted on the corpus (TF-IDF) is fitted again on the store's documents,
            # in the order the harness fits it (documents sorted by id)
            _fit(embedder, [doc.full_text for doc in store.parent_documents])
        _check_embedder(embedder, data, path, allow_embedder_mismatch)
        if store.embedder_name != embedder.name and not allow_embedder_mismatch:
            raise TunedFileError(
                f"{path}: the store was built with {store.embedder_name!r}, the embedder is {embedder.name!r}"
            )
    name, params = _spec(data["retriever"], path, "retriever")
    cls = RETRIEVERS[name]
    if reranker is not None:
        params["reranker"] = reranker
    elif params.get("reranker") is not None:
        params["reranker"] = _reranker(params["reranker"], path, "retriever.params.reranker")
    if backend is not None:
        if not isinstance(backend, SearchBackend):
            chosen = backend if isinstance(backend, BackendConfig) else BackendConfig.from_dict(backend)
            backend = None if chosen.is_local else open_backend(chosen, store)
        if backend is not None:
            store = attach(store, backend)
    try:
        retriever: Retriever = cls(store, embedder if uses else None, **params)
    except (TypeError, ValueError) as error:
        raise TunedFileError(f"{path}: retriever: {error}") from None
    return retriever
