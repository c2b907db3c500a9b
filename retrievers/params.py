"""Declared, validated parameters: the one place where a setting's type, range and meaning live.

Every retriever family and every store component describes its settings as a frozen dataclass
that subclasses :class:`Params`; each field is declared with :func:`param`, which records its
allowed range or choices next to its default. ``Params.__post_init__`` checks every field
against its annotation and declaration, so a value is validated exactly once, by the same code,
whether it comes from Python, a Hydra config or a tuned file::

    @dataclass(frozen=True)
    class HybridParams(RetrieverParams):
        keyword_weight: float = param(0.3, low=0.0, high=1.0, doc="BM25's weight")
        fusion: Literal["rrf", "convex"] = param("rrf")

Types understood (from the annotations): ``bool`` (only True/False: the string "no" is refused,
not read as True), ``int`` (not a bool, not 10.5), ``float`` (ints accepted and converted;
finite unless ``finite=False``), ``str``, ``Literal[...]`` (the choices), ``X | None``,
``tuple[X, ...]`` (a list is accepted), ``Mapping[str, X]``, another :class:`Params` class
(a mapping is accepted and validated with its own rules), unions of these, and ``Any``.
Errors are :class:`ParamError` naming the key (with the class's ``SECTION`` prefix), the value
and what is allowed. The harness derives its Hydra schemas from these declarations.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeGuard, TypeVar, Union, overload

import numpy as np

__all__ = [
    "ParamError",
    "ParamSpec",
    "Params",
    "check_choice",
    "check_int",
    "check_number",
    "describe_type",
    "is_int",
    "is_number",
    "param",
    "spec_of",
]

P = TypeVar("P", bound="Params")


class ParamError(ValueError):
    """A parameter outside its declared type or range; ``key`` is its dotted name."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """An integer that is not a bool (numpy integers count)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def is_number(value: object) -> TypeGuard[int | float | np.integer[Any] | np.floating[Any]]:
    """A real number that is not a bool (numpy numbers count)."""
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    left = "(" if low_open else "["
    right = ")" if high_open else "]"
    low_text = "-inf" if low is None else _number_text(low)
    high_text = "inf" if high is None else _number_text(high)
    return f"{left}{low_text}, {high_text}{right}"


def _inside(value: float, low: float | None, high: float | None, low_open: bool, high_open: bool) -> bool:
    if low is not None and (value <= low if low_open else value < low):
        return False
    return not (high is not None and (value >= high if high_open else value > high))


@overload
def check_int(
    name: str,
    value: object,
    low: int | None = None,
    high: int | None = None,
    *,
    nullable: Literal[False] = False,
) -> int: ...


@overload
def check_int(
    name: str, value: object, low: int | None = None, high: int | None = None, *, nullable: bool
) -> int | None: ...


def check_int(
    name: str, value: object, low: int | None = None, high: int | None = None, *, nullable: bool = False
) -> int | None:
    """``value`` as an int in [low, high] (None allowed with ``nullable``), else ParamError."""
    if value is None and nullable:
        return None
    if not is_int(value) or not _inside(int(value), low, high, False, False):
        suffix = " or null" if nullable else ""
        raise ParamError(
            name, f"{name} must be an integer in {_interval(low, high, False, False)}{suffix}, got {value!r}"
        )
    return int(value)


def check_number(
    name: str,
    value: object,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
) -> float:
    """``value`` as a float inside the interval (finite unless ``finite=False``), else ParamError."""
    ok = is_number(value)
    if is_number(value):
        number = float(value)
        ok = (math.isfinite(number) or (not finite and not math.isnan(number))) and _inside(
            number, low, high, low_open, high_open
        )
    if not ok:
        if low is None and high is None:
            raise ParamError(name, f"{name} must be a finite number, got {value!r}")
        raise ParamError(
            name, f"{name} must be a number in {_interval(low, high, low_open, high_open)}, got {value!r}"
        )
    return float(value)  # type: ignore[arg-type]  # checked: a real number


def check_choice(name: str, value: object, choices: Sequence[object]) -> Any:
    """``value`` if it is one of ``choices``, else ParamError listing them."""
    if isinstance(value, bool | np.bool_) and not any(isinstance(c, bool) for c in choices):
        raise ParamError(name, f"{name} must be one of {list(choices)}, got {value!r}")
    if value not in choices:
        raise ParamError(name, f"{name} must be one of {list(choices)}, got {value!r}")
    return value


@dataclass(frozen=True)
class ParamSpec:
    """What :func:`param` records about a field: its range or choices and a one-line meaning."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] | None = None
    finite: bool = True
    non_empty: bool = False
    unique: bool = False
    doc: str = ""


def param(
    default: Any = dataclasses.MISSING,
    *,
    factory: Any = dataclasses.MISSING,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    choices: Sequence[Any] | None = None,
    finite: bool = True,
    non_empty: bool = False,
    unique: bool = False,
    doc: str = "",
) -> Any:
    """A dataclass field with its allowed values: ``low``/``high`` bound numbers (and, for
    strings and sequences, nothing); ``choices`` lists allowed values (``Literal`` annotations
    give them too); ``non_empty``/``unique`` apply to strings and sequences; ``doc`` says what
    the field means."""
    spec = ParamSpec(
        low=low,
        high=high,
        low_open=low_open,
        high_open=high_open,
        choices=None if choices is None else tuple(choices),
        finite=finite,
        non_empty=non_empty,
        unique=unique,
        doc=doc,
    )
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata={"param": spec})
    return dataclasses.field(default=default, metadata={"param": spec})


def spec_of(field: dataclasses.Field[Any]) -> ParamSpec:
    """The :class:`ParamSpec` of a field (an empty one for fields declared without :func:`param`)."""
    spec = field.metadata.get("param")
    return spec if isinstance(spec, ParamSpec) else ParamSpec()


_HINTS: dict[type, dict[str, Any]] = {}


def type_hints(cls: type) -> dict[str, Any]:
    """Resolved annotations of a Params class (cached)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = hints
    return hints


def describe_type(hint: Any, *, null: bool = True) -> str:
    """What an error message says a value of type ``hint`` may be ("a number", "one of ['rrf',
    'convex']", "a list", "a mapping of StoreConfig settings", "true or false or null").

    The one description of an allowed value: :class:`ParamError` messages and the harness's
    config errors (``viking_eval.config.schema.describe_field``) both use it. ``null=False``
    leaves ``None`` out of a union (the caller says "or null" itself, after a range)."""
    if hint is bool:
        return "true or false"
    if hint is int:
        return "an integer"
    if hint is float:
        return "a number"
    if hint is str:
        return "a string"
    origin = typing.get_origin(hint)
    if origin is Literal:
        return f"one of {list(typing.get_args(hint))}"
    if origin in (Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if null or arg is not type(None)]
        return " or ".join("null" if arg is type(None) else describe_type(arg, null=null) for arg in options)
    if origin in (tuple, list, Sequence) or hint in (tuple, list):
        return "a list"
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return "a mapping"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return f"a mapping of {hint.__name__} settings"
    return "a value"


def _shape_fits(hint: Any, value: Any) -> bool:
    """Whether ``value`` has the shape of ``hint`` (number, string, list, mapping), its content
    aside: used to pick the most telling error among a union's options."""
    origin = typing.get_origin(hint)
    if hint in (int, float):
        return is_number(value)
    if hint is bool:
        return isinstance(value, bool | np.bool_)
    if hint is str or origin is Literal:
        return isinstance(value, str)
    if origin in (tuple, Sequence, list):
        return isinstance(value, Sequence | np.ndarray) and not isinstance(value, str | bytes)
    if origin in (Mapping, dict) or (isinstance(hint, type) and issubclass(hint, Params)):
        return isinstance(value, Mapping)
    return False


def _convert(name: str, hint: Any, value: Any, spec: ParamSpec) -> Any:
    """``value`` checked against ``hint`` and ``spec``; the canonical value (tuples for lists,
    floats for numbers, Params for nested mappings) or ParamError."""
    origin = typing.get_origin(hint)
    if hint is Any or hint is object:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None:
            if type(None) in options:
                return None
            raise ParamError(name, f"{name} must be {describe_type(hint)}, got None")
        errors: list[ParamError] = []
        tried: list[Any] = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(name, option, value, spec)
            except ParamError as error:
                errors.append(error)
                tried.append(option)
        shaped = [error for option, error in zip(tried, errors, strict=True) if _shape_fits(option, value)]
        if len(errors) > 1 and len(shaped) == 1:
            errors = shaped  # the option the value looks like says best what is wrong with it
        if len(errors) == 1:
            if type(None) not in options or errors[0].key != name:
                raise errors[0]
            message = str(errors[0])
            at = message.rfind(", got ")
            if at >= 0 and not message[:at].endswith("or null"):
                message = message[:at] + " or null" + message[at:]
            raise ParamError(name, message)
        raise ParamError(name, f"{name} must be {describe_type(hint)}, got {value!r}")
    if hint is bool:
        if not isinstance(value, bool | np.bool_):
            raise ParamError(name, f"{name} must be true or false, got {value!r}")
        return bool(value)
    if hint is int:
        if spec.choices is not None:
            return check_choice(name, value if not is_int(value) else int(value), spec.choices)
        low = None if spec.low is None else int(spec.low)
        high = None if spec.high is None else int(spec.high)
        return check_int(name, value, low, high)
    if hint is float:
        return check_number(
            name,
            value,
            spec.low,
            spec.high,
            low_open=spec.low_open,
            high_open=spec.high_open,
            finite=spec.finite,
        )
    if hint is str:
        if not isinstance(value, str):
            raise ParamError(name, f"{name} must be a string, got {value!r}")
        if spec.choices is not None:
            check_choice(name, value, spec.choices)
        if spec.non_empty and not value.strip():
            raise ParamError(name, f"{name} must be a non-empty string, got {value!r}")
        return value
    if origin is Literal:
        return check_choice(name, value, typing.get_args(hint))
    if origin in (tuple, Sequence, list):
        args = typing.get_args(hint)
        item_hint = args[0] if args else Any
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence | np.ndarray):
            raise ParamError(name, f"{name} must be a list, got {value!r}")
        items = tuple(
            _convert(
                f"{name}[{i}]", item_hint, item, ParamSpec(choices=spec.choices, non_empty=spec.non_empty)
            )
            for i, item in enumerate(value)
        )
        if spec.non_empty and not items:
            raise ParamError(name, f"{name} must not be empty")
        if spec.unique and len(set(items)) != len(items):
            raise ParamError(name, f"{name} has repeats: {list(items)}")
        if spec.low is not None or spec.high is not None:
            for i, item in enumerate(items):
                if is_number(item) and not _inside(
                    float(item), spec.low, spec.high, spec.low_open, spec.high_open
                ):
                    interval = _interval(spec.low, spec.high, spec.low_open, spec.high_open)
                    raise ParamError(name, f"{name}[{i}] must be in {interval}, got {item!r}")
        return items
    if origin in (Mapping, dict):
        key_hint, value_hint = typing.get_args(hint) or (Any, Any)
        if not isinstance(value, Mapping):
            raise ParamError(name, f"{name} must be a mapping, got {value!r}")
        out: dict[Any, Any] = {}
        for key, item in value.items():
            checked_key = _convert(f"{name} key", key_hint, key, ParamSpec())
            inner = ParamSpec(low=spec.low, high=spec.high, low_open=spec.low_open, high_open=spec.high_open)
            out[checked_key] = _convert(f"{name}.{key}", value_hint, item, inner)
        if spec.non_empty and not out:
            raise ParamError(name, f"{name} must not be empty")
        return out
    if isinstance(hint, type) and issubclass(hint, Params):
        if isinstance(value, hint):
            return value
        if isinstance(value, Mapping):
            return hint.from_dict(value, where=name)
        raise ParamError(name, f"{name} must be {describe_type(hint)}, got {value!r}")
    if isinstance(hint, type):
        if not isinstance(value, hint):
            raise ParamError(name, f"{name} must be a {hint.__name__}, got {value!r}")
        return value
    return value


@dataclass(frozen=True)
class Params:
    """Base of every parameter dataclass; see the module docstring.

    Subclasses are frozen dataclasses whose fields are declared with :func:`param`. Override
    :meth:`check` for rules between fields (raise :class:`ParamError` via :meth:`fail`).
    ``SECTION`` prefixes keys in messages (e.g. ``store.bm25``)."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = type_hints(type(self))
        for field in dataclasses.fields(self):
            if not field.init:
                continue
            value = getattr(self, field.name)
            checked = _convert(self.key(field.name), hints[field.name], value, spec_of(field))
            if checked is not value:
                object.__setattr__(self, field.name, checked)
        self.check()

    def check(self) -> None:
        """Rules between fields; the default has none."""

    @classmethod
    def key(cls, name: str) -> str:
        """The dotted name of field ``name`` as messages give it."""
        return f"{cls.SECTION}.{name}" if cls.SECTION else name

    @classmethod
    def fail(cls, name: str, message: str) -> ParamError:
        """A ParamError for field ``name`` whose message starts with its dotted name."""
        return ParamError(cls.key(name), f"{cls.key(name)} {message}")

    @classmethod
    def names(cls) -> list[str]:
        return [field.name for field in dataclasses.fields(cls) if field.init]

    @classmethod
    def from_dict(cls: type[P], values: Mapping[str, Any] | None, *, where: str | None = None) -> P:
        """An instance from plain data; unknown keys are refused with the allowed ones listed."""
        section = where if where is not None else cls.SECTION
        if values is None:
            values = {}
        if not isinstance(values, Mapping):
            raise ParamError(section, f"{section or cls.__name__} must be a mapping, got {values!r}")
        allowed = cls.names()
        unknown = sorted(str(key) for key in values if key not in allowed)
        if unknown:
            what = f"{section} key(s)" if section else "key(s)"
            raise ParamError(
                f"{section}.{unknown[0]}" if section else unknown[0],
                f"unknown {what} {unknown}; allowed: {allowed}",
            )
        return cls(**dict(values))

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-able data (tuples as lists, nested Params as mappings)."""
        return {
            field.name: _plain(getattr(self, field.name)) for field in dataclasses.fields(self) if field.init
        }

    def replace(self: P, **changes: Any) -> P:
        return dataclasses.replace(self, **changes)


def _plain(value: Any) -> Any:
    if isinstance(value, Params):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value
