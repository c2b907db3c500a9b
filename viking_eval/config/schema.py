"""OmegaConf structured-config schemas derived from parameter dataclasses.

One declaration, two uses. A :class:`retrievers.params.Params` subclass (or any dataclass, such as
a family's ``Params`` not yet ported to it) declares each setting's type once; :func:`schema_of`
turns it into a dataclass OmegaConf understands, so that a value of the wrong type is refused
when the config is composed (``run.top_k=abc``: "could not be converted to Integer"), and the
``Params`` class then checks ranges, choices and rules between fields. :func:`init_schema` does
the same for a class that is configured through its constructor (embedders, rerankers).

Types, as OmegaConf 2.3 supports them::

    bool, int, float, str            -> themselves (a bool field takes true/false, and also the
                                        YAML 1.1 words OmegaConf reads: yes/no, on/off, y/n, 1/0)
    Literal["a", "b"]                -> str (int or bool literals -> int or bool; mixed -> Any);
                                        the choices are the Params class's to check
    X | None                         -> Optional[X]
    tuple[X, ...], Sequence[X], list -> List[X]
    Mapping[K, V], dict              -> Dict[K, V]  (K: str or int, else str; an item that is
                                        itself a list or mapping -> Any: OmegaConf does not
                                        convert inside nested containers)
    a Params class or dataclass      -> its schema, nested
    other unions, Any, other classes -> Any (left to the Params class)

Schemas are plain dataclasses bound in this module under their class name (``<Source>Schema``),
so a composed config that carries one pickles by reference (joblib and submitit launchers send
configs to other processes).
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Dict, List, Literal, Optional, Union  # noqa: UP035 - OmegaConf reads typing's forms

from omegaconf import MISSING

from retrievers.params import describe_type, spec_of

__all__ = ["SCALARS", "describe_field", "init_schema", "is_params_class", "schema_of"]

#: scalar types OmegaConf types natively
SCALARS = (bool, int, float, str)

_SCHEMAS: dict[tuple[type, str], type] = {}
_MODULE = sys.modules[__name__]


def is_params_class(cls: object) -> bool:
    """Whether ``cls`` is a dataclass type (a :class:`retrievers.params.Params` or an old-style
    family ``Params``): the contract a retriever's ``Params`` attribute must meet."""
    return isinstance(cls, type) and dataclasses.is_dataclass(cls)


def type_hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of ``cls``; ``{}`` when one does not resolve (its fields are then Any)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: such fields are typed Any
        return {}


def _schema_type(hint: Any, with_defaults: bool) -> Any:
    """The OmegaConf-compatible type for an annotation (see the module docstring)."""
    if hint in SCALARS:
        return hint
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Literal:
        kinds = {type(choice) for choice in args}
        return kinds.pop() if len(kinds) == 1 and next(iter(kinds), None) in SCALARS else Any
    if origin in (Union, types.UnionType):
        options = [arg for arg in args if arg is not type(None)]
        if len(options) == 1:
            inner = _schema_type(options[0], with_defaults)
            if inner is Any:
                return Any
            return Optional[inner] if type(None) in args else inner  # noqa: UP045
        return Any
    if origin in (tuple, list, set, frozenset, Sequence) or hint in (tuple, list):
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            item = Any  # a fixed-length tuple: items may differ in type
        else:
            item = _item_type(args[0], with_defaults) if args else Any
        return List[item]  # type: ignore[valid-type]  # noqa: UP006
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        key = args[0] if args else str
        value = _item_type(args[1], with_defaults) if len(args) > 1 else Any
        return Dict[key if key in (str, int) else str, value]  # type: ignore[misc]  # noqa: UP006
    if is_params_class(hint):
        return schema_of(hint, with_defaults=with_defaults)
    return Any


def _item_type(hint: Any, with_defaults: bool) -> Any:
    """A container's item type: a container inside a container is Any, because OmegaConf 2.3
    does not convert inside nested containers (an int in a Dict[str, Dict[str, float]] is refused)
    and the Params class checks those items anyway."""
    item = _schema_type(hint, with_defaults)
    inner = item
    if typing.get_origin(item) is Union:  # Optional[X]
        inner = next(arg for arg in typing.get_args(item) if arg is not type(None))
    return Any if typing.get_origin(inner) in (list, dict) else item


def _schema_value(value: Any) -> Any:
    """A default as a schema holds it: tuples as lists, dataclass instances as mappings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _schema_value(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, tuple | list):
        return [_schema_value(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _schema_value(item) for key, item in value.items()}
    return value


def _instance(schema: type, values: Mapping[str, Any]) -> Any:
    """An instance of ``schema`` holding ``values``, nested schemas built the same way."""
    kinds = {field.name: field.type for field in dataclasses.fields(schema)}
    built = {}
    for name, value in values.items():
        options = [arg for arg in typing.get_args(kinds.get(name)) if arg is not type(None)]
        nested: Any = options[0] if len(options) == 1 else kinds.get(name)
        built[name] = (
            _instance(nested, value) if is_params_class(nested) and isinstance(value, Mapping) else value
        )
    return schema(**built)


def _default(field: dataclasses.Field[Any], schema_type: Any) -> dataclasses.Field[Any]:
    """The schema field's default: the source field's default, with mutable values behind a
    factory as dataclasses require."""
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return typing.cast(dataclasses.Field[Any], dataclasses.field(default=MISSING))
    value = _schema_value(value)
    if isinstance(value, list | dict):
        options = [arg for arg in typing.get_args(schema_type) if arg is not type(None)] or [schema_type]
        nested = options[0] if len(options) == 1 and is_params_class(options[0]) else None

        def factory(value: Any = value, nested: Any = nested) -> Any:
            if nested is not None and isinstance(value, dict):
                return _instance(nested, value)
            return type(value)(value)

        return typing.cast(dataclasses.Field[Any], dataclasses.field(default_factory=factory))
    return typing.cast(dataclasses.Field[Any], dataclasses.field(default=value))


def _bind(name: str, cls: type) -> type:
    """Make ``cls`` importable as ``viking_eval.config.schema.<name>`` (unique name)."""
    unique, n = name, 2
    while hasattr(_MODULE, unique):
        unique, n = f"{name}{n}", n + 1
    cls.__name__ = cls.__qualname__ = unique
    cls.__module__ = __name__
    setattr(_MODULE, unique, cls)
    return cls


def schema_of(cls: type, *, with_defaults: bool = True) -> type:
    """The structured-config schema of a Params class or dataclass ``cls`` (cached).

    ``with_defaults``: the source's defaults (what Hydra fills in for keys a config leaves out);
    without, every field is MISSING, for checking the keys a config gives and nothing else."""
    kind = "defaults" if with_defaults else "keys"
    cached = _SCHEMAS.get((cls, kind))
    if cached is not None:
        return cached
    hints = type_hints(cls)
    fields = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        schema_type = _schema_type(hints.get(field.name, Any), with_defaults)
        spec = _default(field, schema_type) if with_defaults else dataclasses.field(default=MISSING)
        fields.append((field.name, schema_type, spec))
    suffix = "Schema" if with_defaults else "KeysSchema"
    schema = _bind(f"{cls.__name__}{suffix}", dataclasses.make_dataclass(f"{cls.__name__}{suffix}", fields))
    _SCHEMAS[(cls, kind)] = schema
    return schema


def init_schema(cls: type) -> type:
    """The schema of the keyword arguments of ``cls``'s constructor (every field MISSING): for
    classes configured through ``__init__`` (embedders, rerankers) rather than a Params class."""
    cached = _SCHEMAS.get((cls, "init"))
    if cached is not None:
        return cached
    try:
        hints = typing.get_type_hints(cls.__init__)  # type: ignore[misc]
    except Exception:
        hints = {}
    fields = []
    for name, parameter in inspect.signature(cls).parameters.items():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        fields.append((name, _schema_type(hints.get(name, Any), False), dataclasses.field(default=MISSING)))
    schema = _bind(
        f"{cls.__name__}InitSchema", dataclasses.make_dataclass(f"{cls.__name__}InitSchema", fields)
    )
    _SCHEMAS[(cls, "init")] = schema
    return schema


def describe_field(cls: type, name: str) -> str | None:
    """What field ``name`` of the Params class or dataclass ``cls`` allows, in words (type, range,
    choices), or None when ``cls`` has no such field."""
    field = next((f for f in dataclasses.fields(cls) if f.name == name and f.init), None)
    if field is None:
        return None
    hint = type_hints(cls).get(name, Any)
    spec = spec_of(field)
    text = describe_type(hint, null=False)
    if spec.choices is not None:
        text = f"one of {list(spec.choices)}"
    if spec.low is not None or spec.high is not None:
        left = "(" if spec.low_open else "["
        right = ")" if spec.high_open else "]"
        low = "-inf" if spec.low is None else f"{spec.low:g}"
        high = "inf" if spec.high is None else f"{spec.high:g}"
        text += f" in {left}{low}, {high}{right}"
    if typing.get_origin(hint) in (Union, types.UnionType) and type(None) in typing.get_args(hint):
        text += " or null" if not text.endswith("null") else ""
    return text
