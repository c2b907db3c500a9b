"""OpenViking's URIs for context trees: the roots, the context type a URI gets from its root, how
a value becomes one URI path segment, and :class:`TreeError` (a tree or its settings that cannot be
used)."""

from __future__ import annotations

import re
from urllib.parse import quote

__all__ = ["CONTEXT_ROOTS", "CONTEXT_TYPES", "TreeError", "context_type_of", "uri_segment"]

#: OpenViking's roots and the context type of everything below them.
CONTEXT_ROOTS: dict[str, str] = {
    "viking://resources": "resource",
    "viking://user/memories": "memory",
    "viking://agent/memories": "memory",
    "viking://agent/skills": "skill",
}
CONTEXT_TYPES: tuple[str, ...] = ("memory", "resource", "skill")

# Characters kept unescaped in a URI path segment (RFC 3986 pchar minus "/").
_SAFE_SEGMENT = "-_.~:@!$&'()*+,;="
# A segment made only of characters ``quote`` keeps (ASCII letters and digits, "_.-~" and the
# safe ones above) is returned as it is: the common case, without quote's encode and decode.
_KEPT_AS_IS = re.compile(r"[A-Za-z0-9_.\-~:@!$&'()*+,;=]+")


class TreeError(ValueError):
    """A context tree (or its settings) that cannot be used; the message names the node or key."""


def context_type_of(uri: str) -> str:
    """``memory``, ``resource`` or ``skill``: the type of the OpenViking root ``uri`` lies under."""
    for root, kind in CONTEXT_ROOTS.items():
        if uri == root or uri.startswith(root + "/"):
            return kind
    raise TreeError(f"URI {uri!r} is not under an OpenViking root; allowed roots: {sorted(CONTEXT_ROOTS)}")


def uri_segment(value: object) -> str:
    """``value`` as one percent-escaped URI path segment (never empty)."""
    text = str(value)
    if not text:
        raise TreeError("a URI path segment cannot be empty")
    if _KEPT_AS_IS.fullmatch(text):
        return text
    return quote(text, safe=_SAFE_SEGMENT)
