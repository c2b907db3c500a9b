"""Objects a config describes with ``_target_`` (a reranker, an embedder, nested parts): the
class from the registry of classes a config may name, its keys checked against its constructor,
then built; and whether a node is a retriever config (built later, over the store)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from viking_eval.config.errors import ConfigError, from_library_error
from viking_eval.config.registry import KINDS, SLOT_KINDS, is_allowed, resolve
from viking_eval.config.schema import init_schema
from viking_eval.config.validate import typed_values


def target_class(values: Mapping[str, Any], where: str, kind: str, example: str) -> tuple[str, type]:
    """The class of node ``where``'s ``_target_``, looked up in the registry of classes a config may
    name (viking_eval/config/registry.py) before anything is imported."""
    target = values.get("_target_")
    if not target or not isinstance(target, str):
        raise ConfigError(where, f"missing _target_ (a class such as {example})", key=f"{where}._target_")
    return target, resolve(target, f"{where}._target_", kind)


def is_retriever_config(value: Any) -> bool:
    """A mapping whose ``_target_`` names a retriever class (one with ``retrieve_batch``): a
    retriever inside a retriever's parameters (e.g. a hybrid's ``keyword_leg``), built over the
    same store when the run builds the retriever that holds it (viking_eval/run/inputs.py).
    A name outside the registry is not looked at (nothing is imported): :func:`load_settings`
    refuses it before this is asked."""
    if not isinstance(value, Mapping) or not is_allowed(value.get("_target_")):
        return False
    try:
        cls = resolve(value["_target_"], "_target_")
    except ConfigError:  # whoever reads it next says so
        return False
    return callable(getattr(cls, "retrieve_batch", None))


def instantiate_objects(values: Mapping[str, Any], where: str = "retrievers") -> dict[str, Any]:
    """Retriever parameters with object-valued entries built: a mapping with a ``_target_``
    (e.g. ``reranker: {_target_: retrievers.rerank.EmbeddingReranker, ...}`` composed from
    conf/reranker/) becomes the built object, after its class is found in the registry and its
    keys are checked against the class's constructor; ``_target_: null`` (conf/reranker/none.yaml)
    becomes None. Every other value passes through, for the retriever's Params to validate."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if is_retriever_config(value):  # built over the store with the retriever holding it
            out[key] = value
        elif isinstance(value, Mapping) and "_target_" in value:
            out[key] = None if value["_target_"] is None else build_object(value, f"{where}.{key}")
        else:
            out[key] = value
    return out


def build_object(values: Mapping[str, Any], where: str, kind: str | None = None) -> Any:
    """The object a ``_target_`` mapping at ``where`` describes: the class from the registry (of
    ``kind``; None = the kind ``where``'s last key implies, e.g. ``reranker``), its keys checked
    against the constructor, nested ``_target_`` mappings built the same way first."""
    slot = kind if kind is not None else SLOT_KINDS.get(where.rsplit(".", 1)[-1])
    example = "retrievers.rerank.EmbeddingReranker"
    _, cls = target_class(values, where, slot or "", example) if slot else _target_any(values, where)
    if slot is not None and not callable(getattr(cls, KINDS[slot], None)):
        detail = f"{cls.__module__}.{cls.__qualname__} is not a {slot}: it has no {KINDS[slot]}() method"
        raise ConfigError(where, f"_target_ {detail}", key=f"{where}._target_", detail=detail)
    rest = {name: item for name, item in values.items() if name != "_target_"}
    typed = typed_values(cls, rest, where, init=True)
    arguments = {name: _built(item, f"{where}.{name}") for name, item in typed.items()}
    try:
        return cls(**arguments)
    except Exception as error:  # a constructor refusing its arguments
        raise from_library_error(where, _exception(error), init_schema(cls)) from None


def _target_any(values: Mapping[str, Any], where: str) -> tuple[str, type]:
    target = values.get("_target_")
    if not target or not isinstance(target, str):
        raise ConfigError(where, "missing _target_", key=f"{where}._target_")
    return target, resolve(target, f"{where}._target_")


def _built(value: Any, where: str) -> Any:
    if isinstance(value, Mapping) and "_target_" in value:
        return None if value["_target_"] is None else build_object(value, where)
    if isinstance(value, Mapping):
        return {key: _built(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_built(item, f"{where}.{index}") for index, item in enumerate(value)]
    return value


def _exception(error: BaseException) -> Exception:
    return error if isinstance(error, Exception) else RuntimeError(str(error))
