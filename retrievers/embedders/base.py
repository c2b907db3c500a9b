"""What every embedder in this package shares: argument checks and row normalisation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from retrievers.params import ParamError

__all__ = [
    "EncodeKind",
    "FloatMatrix",
    "check_flag",
    "check_kind",
    "check_string",
    "check_texts",
    "unit_rows",
]

EncodeKind = Literal["query", "document"]
FloatMatrix = npt.NDArray[np.float32]
_KINDS: tuple[str, ...] = ("query", "document")


def check_texts(texts: Sequence[str], who: str) -> list[str]:
    """Reject a bare string (a ``Sequence[str]`` too, but almost always a mistake) and non-strings."""
    if isinstance(texts, str | bytes):
        raise TypeError(f"{who} takes a sequence of texts, not a single string; wrap it in a list")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(f"{who}: texts[{i}] is {type(text).__name__}, expected str")
    return out


def check_kind(kind: str) -> None:
    if kind not in _KINDS:
        raise ValueError(f"kind must be 'query' or 'document', got {kind!r}")


def check_string(
    name: str, value: object, *, non_empty: bool = True, nullable: bool = False, hint: str = ""
) -> str | None:
    """``value`` as a string (non-blank unless ``non_empty=False``; None allowed with
    ``nullable``), else :class:`ParamError` in the :mod:`retrievers.params` wording; ``hint``
    is appended to the message (an example of a valid value)."""
    if value is None and nullable:
        return None
    if not isinstance(value, str) or (non_empty and not value.strip()):
        what = "a non-empty string" if non_empty else "a string (may be empty)"
        suffix = " or null" if nullable else ""
        extra = f" ({hint})" if hint else ""
        raise ParamError(name, f"{name} must be {what}{suffix}{extra}, got {value!r}")
    return value


def check_flag(name: str, value: object, *, nullable: bool = False) -> bool | None:
    """``value`` if it is True or False (None too with ``nullable``: "decide for me"), else
    :class:`ParamError`; 1, 0 and strings such as "no" are refused, not read as flags."""
    if value is None and nullable:
        return None
    if not isinstance(value, bool):
        suffix = " or null" if nullable else ""
        raise ParamError(name, f"{name} must be true or false{suffix}, got {value!r}")
    return value


def unit_rows(matrix: npt.ArrayLike) -> FloatMatrix:
    """Rows scaled to unit L2 norm as C-contiguous float32; an all-zero row (nothing to embed)
    stays all-zero: cosine 0 with everything, never NaN."""
    rows = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    safe = np.where(norms > 1e-12, norms, 1.0)
    unit = np.where(norms > 1e-12, rows / safe, 0.0)
    return np.ascontiguousarray(unit, dtype=np.float32)
