"""Reading the records of a dataset file: bytes, gzip, UTF-8 lines, JSON lines, ids and record
fields, each problem a one-line :class:`~viking_eval.data.errors.DataError` naming the file and line.

**Ids** (``_id`` of documents and queries, both id columns of the qrels) must be non-empty and
hold no whitespace or control character: TREC run and qrels lines are whitespace-separated, so
such an id would give trec_eval and ir_measures a line with the wrong number of fields
(:func:`id_problem`).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from viking_eval.data.errors import DataError, located

__all__ = [
    "check_unique",
    "decompress",
    "id_error",
    "id_problem",
    "iter_jsonl",
    "iter_lines",
    "read_bytes",
    "read_jsonl",
    "record_id",
    "record_metadata",
    "record_str",
]

# str-pattern \s is Unicode whitespace (exactly str.isspace); C0 and C1 controls besides
_BAD_ID_CHAR = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")
_CHUNK = 1 << 20


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise located(path, "file not found") from None
    except OSError as exc:
        raise located(path, f"cannot read: {exc.strerror or exc}") from exc


def _gzip_prefix(data: bytes) -> bytes:
    """What a damaged gzip stream yields before the damage (every member up to it), so the
    error can say after which line the file breaks."""
    out = bytearray()
    offset = 0
    while offset < len(data):
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        position = offset
        try:
            while position < len(data) and not stream.eof:
                block = data[position : position + _CHUNK]
                position += len(block)
                out += stream.decompress(block)
        except zlib.error:
            break
        if not stream.eof:
            break
        offset = position - len(stream.unused_data)
    return bytes(out)


def decompress(path: Path, data: bytes) -> bytes:
    """The file's content, gunzipped when the name ends in ``.gz``."""
    if path.suffix != ".gz":
        return data
    if not data.startswith(b"\x1f\x8b"):
        raise located(
            path, "not a valid gzip file (no gzip header); if it is plain text, drop the .gz suffix"
        )
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        complete = _gzip_prefix(data).count(b"\n")
        raise located(
            path,
            f"not a valid gzip file: the compressed data is damaged or truncated after {complete} "
            f"complete line(s) ({exc}); download or compress it again",
            complete + 1,
        ) from None


def iter_lines(path: Path, data: bytes) -> Iterator[tuple[int, str]]:
    """Decoded lines (1-based numbers) of ``data``; a UTF-8 BOM at the start is dropped.
    Decoding line by line lets a bad byte be reported with its line number."""
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise located(
                path,
                f"not valid UTF-8 (byte {raw[exc.start : exc.start + 1]!r} at column {exc.start + 1}); "
                "files must be UTF-8 encoded",
                number,
            ) from None
        if number == 1 and line.startswith("\ufeff"):
            line = line[1:]
        yield number, line


def iter_jsonl(path: Path, data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in iter_lines(path, decompress(path, data)):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise located(path, f"malformed JSON: {exc.msg} (column {exc.colno})", number) from None
        if not isinstance(obj, dict):
            raise located(path, f"expected a JSON object per line, got {type(obj).__name__}", number)
        yield number, obj


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a ``.jsonl`` or ``.jsonl.gz``
    file. Every line must be a UTF-8 JSON object; anything else is a :class:`DataError` naming
    the file and line."""
    path = Path(path)
    yield from iter_jsonl(path, read_bytes(path))


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id in a TREC run or qrels line (whitespace or a control
    character, which would split the line into the wrong number of fields), or ``None``."""
    match = _BAD_ID_CHAR.search(value)
    if match is None:
        return None
    char = match.group()
    kind = "whitespace" if char.isspace() else "a control character"
    return f"contains {kind} ({char!r} at position {match.start() + 1})"


def id_error(path: Path, number: int, label: str, value: str, problem: str) -> DataError:
    return located(
        path,
        f"{label} {value!r} {problem}; TREC run and qrels lines are whitespace-separated, so "
        "trec_eval and ir_measures cannot read it: rename the id (e.g. replace the character with '_')",
        number,
    )


def record_id(path: Path, number: int, obj: Mapping[str, Any], label: str) -> str:
    if "_id" not in obj:
        raise located(path, "missing '_id' (every record needs a string or integer '_id')", number)
    raw = obj["_id"]
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise located(path, f"'_id' must be a string or integer, got {type(raw).__name__}", number)
    value = str(raw)
    if not value:
        raise located(path, "'_id' is empty", number)
    problem = id_problem(value)
    if problem is not None:
        raise id_error(path, number, label, value, problem)
    return value


def record_str(path: Path, number: int, obj: Mapping[str, Any], key: str, *, required: bool) -> str:
    if key not in obj or (obj[key] is None and not required):
        if required:
            raise located(path, f"missing {key!r} (a string, may be empty)", number)
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise located(path, f"{key!r} must be a string, got {type(value).__name__}", number)
    return value


def record_metadata(path: Path, number: int, obj: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """``metadata`` (a JSON object) plus any extra top-level keys, so no field of the file is
    silently lost. An extra key that also appears inside ``metadata`` is ambiguous: an error."""
    raw = obj.get("metadata")
    if raw is None:
        metadata: dict[str, Any] = {}
    elif isinstance(raw, dict):
        metadata = dict(raw)
    else:
        raise located(path, f"'metadata' must be a JSON object, got {type(raw).__name__}", number)
    for key, value in obj.items():
        if key in known or key == "metadata":
            continue
        if key in metadata:
            raise located(
                path, f"key {key!r} appears both at top level and inside 'metadata'; keep one", number
            )
        metadata[key] = value
    return metadata


def check_unique(path: Path, number: int, record_id: str, first_line: dict[str, int]) -> None:
    if record_id in first_line:
        raise located(
            path, f"duplicate _id {record_id!r} (first seen at line {first_line[record_id]})", number
        )
    first_line[record_id] = number
