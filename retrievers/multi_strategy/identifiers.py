"""Code identifiers in text: find them in a query, split them into word parts.

The query analyser (:mod:`retrievers.multi_strategy.analysis`) collects identifiers of every
kind in :data:`IDENTIFIER_PATTERNS` (file names, paths, calls, dotted names, snake_case,
camelCase, PascalCase); the structural strategy matches their parts against names in document
metadata. Parts are lowercased, split at case changes and non-alphanumerics, and stemmed with the
project's stemmer (:func:`retrievers.text.stem`); adjacent parts are also joined, so ``readonly``
in a query meets ``is_read_only`` in a name.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from retrievers.text import stem

__all__ = ["IDENTIFIER_PATTERNS", "find_identifiers", "identifier_parts", "split_identifier"]

#: (kind, pattern) for code identifiers; all kinds are collected, duplicates dropped.
IDENTIFIER_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "file",
        r"(?<![\w/.-])[\w.-]*\w\.(?:py|pyi|ipynb|js|jsx|ts|tsx|java|go|rs|c|cc|cpp|h|hpp|rb|php|cs|kt|swift|scala|sh|md|json|ya?ml|toml|ini|cfg|txt|sql|html|css)\b",
    ),
    ("path", r"(?<![\w/])(?:[\w.-]+/)+[\w.-]*\w"),
    ("call", r"\b[A-Za-z_]\w*(?=\s*\()"),
    ("dotted", r"\b[A-Za-z_]\w+(?:\.[A-Za-z_]\w+)+\b"),
    ("snake", r"\b_*[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b|\b_+[A-Za-z]\w*\b"),
    ("camel", r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b"),
    ("pascal", r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b"),
)
_IDENTIFIER_RES = tuple((kind, re.compile(pattern)) for kind, pattern in IDENTIFIER_PATTERNS)

_CAMEL_SPLIT_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_PART_RE = re.compile(r"[A-Za-z0-9]+")


def find_identifiers(text: str) -> tuple[str, ...]:
    """Code identifiers in ``text`` (in order of appearance, each once)."""
    found: list[tuple[int, str]] = []
    seen: set[str] = set()
    for _kind, pattern in _IDENTIFIER_RES:
        for match in pattern.finditer(text):
            identifier = match.group(0)
            if identifier not in seen:
                seen.add(identifier)
                found.append((match.start(), identifier))
    # a name inside a longer one found at the same place (``utils`` in ``utils.py``) adds nothing
    found.sort(key=lambda item: (item[0], -len(item[1])))
    kept: list[tuple[int, str]] = []
    for start, identifier in found:
        if any(start >= s and start + len(identifier) <= s + len(t) for s, t in kept):
            continue
        kept.append((start, identifier))
    return tuple(identifier for _, identifier in kept)


def split_identifier(identifier: str) -> list[str]:
    """Lowercase word parts of an identifier: ``parseHTTPResponse_v2`` -> parse, http, response, v2;
    ``os.path.join`` -> os, path, join; ``src/io_utils.py`` -> src, io, utils, py."""
    parts: list[str] = []
    for chunk in _PART_RE.findall(identifier):
        parts += [piece.lower() for piece in _CAMEL_SPLIT_RE.split(chunk) if piece]
    return parts


def identifier_parts(words: Sequence[str]) -> frozenset[str]:
    """Stemmed parts of ``words`` plus every adjacent pair joined (``read``, ``only`` ->
    ``readonly``), so that ``readonly`` in a query meets ``is_read_only`` in a name."""
    parts = [stem(word) for word in words if word]
    joined = [stem(a + b) for a, b in itertools.pairwise(words)]
    return frozenset(parts + joined)
