"""ConfigError: a configuration that cannot run, as one line that names the key.

``str(error)`` is ``<where>: <message>`` (``retrievers.hybrid: keyword_weight must be a number in
[0, 1], got 1.2``; ``where`` is the config node). :meth:`ConfigError.line` is the form the CLI
prints after ``error:``, with the full dotted key first: ``retrievers.hybrid.keyword_weight: must
be a number in [0, 1], got 1.2``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from typing import Any

from omegaconf.errors import OmegaConfBaseException

from retrievers.params import ParamError
from viking_eval.config.schema import describe_field, is_params_class

__all__ = ["ConfigError", "field_path", "from_library_error", "from_validation_error"]


class ConfigError(ValueError):
    """A configuration that cannot run; the message says where and what is allowed.

    ``where``: the config node (``run``, ``store``, ``retrievers.bm25``); ``message``: what is
    wrong there; ``key``: the full dotted key when known (else ``where``); ``detail``: the
    message without the key's own name at its start."""

    def __init__(
        self, where: str, message: str, *, key: str | None = None, detail: str | None = None
    ) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message
        self.key = key or where
        self.detail = detail if detail is not None else message

    def line(self) -> str:
        """``<key>: <what is wrong; what is allowed>`` (what the CLI prints after ``error:``)."""
        return f"{self.key}: {self.detail}" if self.key else self.detail


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where and key else where or key


def from_library_error(where: str, error: Exception, cls: type | None = None) -> ConfigError:
    """A ParamError or ValueError from a Params class (or a constructor) checking node ``where``.

    A ParamError's key is joined to ``where`` unless it already starts there (sections such as
    ``store.bm25``); a plain ValueError whose message starts with a field name of ``cls`` (the
    old-style family Params) gets that field as its key."""
    message = str(error)
    if isinstance(error, ParamError) and error.key:
        root = where.split(".", 1)[0]
        key = error.key if error.key == root or error.key.startswith(f"{root}.") else _join(where, error.key)
        rest = message[len(error.key) :]
        # "k1 must be ..." -> "must be ..."; "nprobe=5 applies to ..." is kept whole
        detail = (
            rest.lstrip(" :") if message.startswith(error.key) and rest[:1] in ("", " ", ":") else message
        )
        if where and message.startswith(f"{where}."):  # a section's own prefix: say it once
            message = message[len(where) + 1 :]
        return ConfigError(where, message, key=key, detail=detail)
    if cls is not None and is_params_class(cls):
        head = message.split(" ", 1)[0].rstrip(":")
        name = head.rsplit(".", 1)[-1]  # "significance.alpha must be ..." names field alpha
        if name in {field.name for field in dataclasses.fields(cls)}:
            return ConfigError(
                where, message, key=_join(where, name), detail=message[len(head) :].lstrip(" :")
            )
    return ConfigError(where, message)


def field_path(cls: type, dotted: str) -> tuple[type | None, str]:
    """The Params class or dataclass holding the last part of ``dotted`` (a key relative to
    ``cls``) and that part's name; ``(None, name)`` when the path leaves typed fields."""
    import typing

    from viking_eval.config.schema import type_hints

    parts = [part for part in dotted.split(".") if part]
    holder: Any = cls
    for part in parts[:-1]:
        if not is_params_class(holder):
            return None, parts[-1] if parts else ""
        hint = type_hints(holder).get(part)
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)] or [hint]
        holder = next((option for option in options if is_params_class(option)), None)
    return (holder if is_params_class(holder) else None), (parts[-1] if parts else "")


def from_validation_error(where: str, error: OmegaConfBaseException, cls: type | None) -> ConfigError:
    """An OmegaConf type error met while checking node ``where`` against the schema of ``cls``:
    ``<key>: <value> is not <what the field allows>``."""
    relative = str(error.full_key or error.key or "")
    key = _join(where, relative)
    value = getattr(error, "value", None)
    holder, name = field_path(cls, relative) if cls is not None else (None, relative)
    allowed = describe_field(holder, name) if holder is not None else None
    got = f"got {value!r}" if value is not None else (error.msg.splitlines()[0] if error.msg else "bad value")
    detail = f"must be {allowed}, {got}" if allowed else (error.msg or str(error)).splitlines()[0]
    return ConfigError(where, f"{relative}: {detail}" if relative else detail, key=key, detail=detail)


def did_you_mean(given: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'k1'?)`` naming the choices closest to ``given`` (difflib's ratio, as
    argparse and git suggest), or "" when none is close."""
    close = difflib.get_close_matches(given, list(choices), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(choice) for choice in close) + "?)"
