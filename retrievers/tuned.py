"""Load a tuned retriever exported by ``python -m viking_eval.export``, safely.

A tuned file (``experiments/tuned/<name>.yaml``) names a retriever class and its parameters, the
embedder (class, parameters and the name/fingerprint it had when tuned), the store settings and
where the numbers came from. Loading it:

- instantiates only classes of this package's public API (``retrievers.__all__``): a file naming
  ``os.system`` or any other target is refused;
- validates every parameter through the class's own checks;
- refuses an embedder whose fingerprint differs from the tuned one unless told otherwise;
- imports neither hydra nor viking_eval (YAML is read with ``yaml.safe_load``, which builds
  plain data only).

    from retrievers import load_tuned
    retriever = load_tuned("experiments/tuned/hybrid-scifact.yaml", documents=my_docs)
    results = retriever.retrieve("query", top_k=10)
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from retrievers.store import ContextStore, StoreConfig
from retrievers.types import Document, Embedder, Retriever

TUNED_FORMAT = 1
REQUIRED = ("format", "retriever", "embedder", "store")


class TunedFileError(ValueError):
    """A tuned file that cannot be loaded safely; the message names the file and the field."""


def _public_class(name: object, path: Path, field: str) -> type:
    import retrievers  # the package's public API is the allowlist

    if not isinstance(name, str) or name not in retrievers.__all__:
        raise TunedFileError(
            f"{path}: {field} {name!r} is not a class of the retrievers public API; "
            f"allowed: {sorted(n for n in retrievers.__all__ if inspect.isclass(getattr(retrievers, n)))}"
        )
    cls = getattr(retrievers, name)
    if not inspect.isclass(cls):
        raise TunedFileError(f"{path}: {field} {name!r} is not a class")
    return cls


def _instantiate(spec: object, path: Path, field: str, **extra: Any) -> Any:
    if not isinstance(spec, Mapping) or "class" not in spec:
        raise TunedFileError(f"{path}: {field} must be a mapping with 'class' and 'params'")
    cls = _public_class(spec["class"], path, f"{field}.class")
    params = dict(spec.get("params") or {})
    for key, value in list(params.items()):
        if isinstance(value, Mapping) and "class" in value:  # nested object, e.g. a reranker
            params[key] = _instantiate(value, path, f"{field}.params.{key}")
    accepted = set(inspect.signature(cls).parameters) - {"self"}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise TunedFileError(
            f"{path}: {field}.params has unknown key(s) {unknown}; allowed: {sorted(accepted)}"
        )
    try:
        return cls(**extra, **params)
    except (TypeError, ValueError) as error:
        raise TunedFileError(f"{path}: {field}: {error}") from None


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
    retriever = data["retriever"]
    if not isinstance(retriever, Mapping) or "class" not in retriever:
        raise TunedFileError(f"{path}: retriever must be a mapping with 'class' and 'params'")
    cls = _public_class(retriever["class"], path, "retriever.class")
    params_cls = getattr(cls, "Params", None)
    if params_cls is None or not dataclasses.is_dataclass(params_cls):
        raise TunedFileError(f"{path}: retriever.class {retriever['class']!r} is not a retriever")
    return data


def load_tuned(
    path: str | Path,
    *,
    documents: Iterable[Document] | None = None,
    store: ContextStore | None = None,
    embedder: Embedder | None = None,
    allow_embedder_mismatch: bool = False,
) -> Retriever:
    """Build the tuned retriever over ``store``, or over a store built from ``documents`` with
    the tuned store settings. ``embedder`` overrides the tuned one (its name must still match
    unless ``allow_embedder_mismatch``)."""
    path = Path(path)
    data = read_tuned(path)
    if (store is None) == (documents is None):
        raise ValueError("give exactly one of documents= (a store is built) or store= (an existing store)")
    embedder_spec = data["embedder"]
    if embedder is None:
        embedder = _instantiate(embedder_spec, path, "embedder")
    if documents is not None:
        documents = list(documents)
        fit = getattr(embedder, "fit", None)
        if callable(fit) and not getattr(embedder, "fitted", True):
            fit([doc.full_text for doc in sorted(documents, key=lambda doc: doc.id)])
    expected = embedder_spec.get("name") if isinstance(embedder_spec, Mapping) else None
    if expected and embedder.name != expected and not allow_embedder_mismatch:
        raise TunedFileError(
            f"{path}: embedder fingerprint differs: tuned with {expected!r}, got {embedder.name!r} "
            "(other weights or settings); pass allow_embedder_mismatch=True to use it anyway"
        )
    if store is None:
        try:
            config = StoreConfig.from_dict(data["store"])
        except (TypeError, ValueError) as error:
            raise TunedFileError(f"{path}: store: {error}") from None
        store = ContextStore.build(documents or [], embedder, config)
    elif store.embedder_name != embedder.name and not allow_embedder_mismatch:
        raise TunedFileError(
            f"{path}: the store was built with {store.embedder_name!r}, the embedder is {embedder.name!r}"
        )
    retriever: Retriever = _instantiate(data["retriever"], path, "retriever", store=store, embedder=embedder)
    return retriever
