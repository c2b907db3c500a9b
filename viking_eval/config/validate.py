"""Check one config node against the schema of the class it configures, then build that class.

Three steps, the same for every node (the harness settings, the store, each retriever, the
embedder, a reranker):

1. unknown keys, at every level of nested settings, are refused with the allowed keys listed
   (the wording of :meth:`retrievers.params.Params.from_dict`);
2. the values are merged into the class's structured schema (:mod:`viking_eval.config.schema`),
   which refuses a value of the wrong type (``'abc'`` for an integer, ``10.5`` for an integer,
   ``true`` for a number, ``maybe`` for a boolean) and reads the words OmegaConf reads as booleans
   (``no`` is False); only the keys the config gave are kept, so that defaults stay the class's;
3. the class itself checks ranges, choices and rules between fields.

A node composed by Hydra under the root schema was already type-checked at composition; the
same checks here cover configs built by hand or read back from a run folder. Steps 1 and 2 are
remembered per class and values (a sweep's jobs repeat every section but the swept one).
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from viking_eval.config.errors import ConfigError, did_you_mean, from_validation_error
from viking_eval.config.schema import init_schema, is_params_class, schema_of, type_hints

__all__ = ["BM25_STORE_KEYS", "typed_values", "unknown_keys"]

#: BM25 settings that bm25s applies when it builds the index (store.bm25), never per retriever
BM25_STORE_KEYS = ("k1", "b", "method", "stopwords", "stemmer")


def _nested_class(hint: Any) -> type | None:
    options = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
    return next((option for option in options if is_params_class(option)), None)


def unknown_keys(
    cls: type, values: Mapping[str, Any], where: str, path: str = "", *, by_section: bool = False
) -> None:
    """Raise ConfigError for the first key of ``values`` (or of a nested mapping given for a
    nested settings class) that ``cls`` does not have.

    The message names the node ``where`` and, below it, the nested settings by their section
    (``retrievers.hybrid: unknown filters key(s) ['lang']``, ``store: unknown store.bm25 key(s)``);
    with ``by_section`` (the harness's settings) the node is the nested section itself
    (``run.significance: unknown key(s) ['tests']``)."""
    names = [field.name for field in dataclasses.fields(cls) if field.init]
    unknown = sorted(str(key) for key in values if key not in names)
    if unknown:
        node = _join(where, path)
        section = "" if by_section or not path else (getattr(cls, "SECTION", "") or path)
        what = f"{section} key(s)" if section else "key(s)"
        raise ConfigError(
            (node if by_section else where) or "config",
            f"unknown {what} {unknown}; allowed: {names}",
            key=_join(node, unknown[0]),
            detail=f"unknown key{did_you_mean(unknown[0], names)}; {node or 'the top level'} has: {', '.join(names)}",
        )
    hints = type_hints(cls)
    for name, value in values.items():
        nested = _nested_class(hints.get(name))
        if nested is not None and isinstance(value, Mapping):
            unknown_keys(nested, value, where, _join(path, name), by_section=by_section)


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where and key else where or key


def _given(original: Any, converted: Any) -> Any:
    """``converted`` pruned to the keys of ``original``: a string the schema read as a boolean or a
    number takes its typed value; other values stay as given (an int for a float stays an int:
    the class converts it, and run keys hash as before)."""
    if isinstance(original, Mapping) and isinstance(converted, Mapping):
        return {key: _given(value, converted.get(key)) for key, value in original.items()}
    if isinstance(original, list | tuple) and isinstance(converted, list) and len(converted) == len(original):
        return [_given(item, typed) for item, typed in zip(original, converted, strict=True)]
    if isinstance(original, str) and isinstance(converted, bool | int | float):
        return converted
    if isinstance(original, int) and not isinstance(original, bool) and isinstance(converted, bool):
        return converted  # 1/0 for a boolean, as OmegaConf reads it at composition
    return original


def typed_values(
    cls: type, values: Mapping[str, Any], where: str, *, init: bool = False, by_section: bool = False
) -> dict[str, Any]:
    """``values`` checked for unknown keys and types against ``cls``'s schema (its constructor's
    with ``init``), as plain data holding only the keys given."""
    if not isinstance(values, Mapping):
        raise ConfigError(where, f"must be a mapping of settings, got {values!r}")
    spelled = _spelling(values)
    if spelled is None:  # not plain data: checked every time
        return _typed_values(cls, values, where, init=init, by_section=by_section)
    key = (cls, spelled, where, init, by_section)
    if key not in _CHECKED:
        if len(_CHECKED) >= _REMEMBERED:  # a long study's sampled values: start again, never grow
            _CHECKED.clear()
        _CHECKED[key] = _typed_values(cls, values, where, init=init, by_section=by_section)
    return copy.deepcopy(_CHECKED[key])


_CHECKED: dict[tuple[type, str, str, bool, bool], dict[str, Any]] = {}
"""typed_values' results by class, values (:func:`_spelling`), where and flags; a refusal is raised
each time, never kept."""

_REMEMBERED = 4096  #: at most this many results are kept
_PLAIN = (str, int, float, bool, type(None))


def _spelling(values: Any) -> str | None:
    """``repr`` of plain data (dicts, lists, tuples, strings, numbers, booleans, None), which tells
    apart every value the checks could tell apart (``1``, ``1.0``, ``True``, ``'1'``; key order);
    None for anything else."""

    def plain(value: Any) -> bool:
        if type(value) is dict:
            return all(type(key) in _PLAIN and plain(item) for key, item in value.items())
        if type(value) in (list, tuple):
            return all(plain(item) for item in value)
        return type(value) in _PLAIN

    return repr(values) if plain(values) else None


def _typed_values(
    cls: type, values: Mapping[str, Any], where: str, *, init: bool, by_section: bool
) -> dict[str, Any]:
    if init:
        schema = init_schema(cls)
        names = [field.name for field in dataclasses.fields(schema)]
        unknown = sorted(str(key) for key in values if key not in names)
        if unknown:
            raise ConfigError(
                where,
                f"unknown key(s) {unknown}; allowed: {sorted(names)}",
                key=f"{where}.{unknown[0]}",
                detail=f"unknown key{did_you_mean(unknown[0], names)}; {where} ({cls.__name__}) has: "
                + ", ".join(sorted(names)),
            )
    else:
        unknown_keys(cls, values, where, by_section=by_section)
        schema = schema_of(cls, with_defaults=False)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), dict(values))
        converted = OmegaConf.to_container(merged, resolve=False, throw_on_missing=False)
    except OmegaConfBaseException as error:
        raise from_validation_error(where, error, schema if init else cls) from None
    if not isinstance(converted, dict):  # a structured schema merges into a mapping
        raise TypeError(f"{where}: the schema {type(schema).__name__} did not give a mapping")
    given: dict[str, Any] = _given(dict(values), converted)
    return given
