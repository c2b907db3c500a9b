"""Helpers shared by the converters: exact output serialisation, raw-file reading, error lines.

The shared datasets were written with one serialisation, and a converter is only useful if it
reproduces those files byte for byte (so checksums, caches and published numbers stay valid).
That serialisation lives here, once: JSON lines are ``json.dumps(record, ensure_ascii=False)``
(default ``", "``/``": "`` separators, keys in insertion order) plus ``"\\n"``, UTF-8 encoded;
qrels are a tab-separated header row and one ``query<TAB>doc<TAB>score`` row per judgment.

Raw input is untrusted: every problem becomes a :class:`~viking_eval.data.errors.DataError` whose
message is one line ``<file>:<line>: <what is wrong>``. JSON sources are parsed once with the C
decoder; only when a converter finds a problem is the text walked again along the offending
value's path (keys and indexes) to learn its line (:class:`JsonSource`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from viking_eval.data.errors import DataError

__all__ = [
    "JsonSource",
    "decode_text",
    "write_jsonl",
    "write_qrels",
]

QRELS_HEADER = ("query-id", "corpus-id", "score")


# --------------------------------------------------------------------------- writing


def write_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> int:
    """Write one JSON object per line, exactly as the shared datasets were written; return the
    number of records."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "wb") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
            count += 1
    return count


def write_qrels(
    path: Path, rows: Iterable[tuple[str, str, int]], header: Sequence[str] = QRELS_HEADER
) -> int:
    """Write a BEIR qrels TSV: the header row, then ``query<TAB>doc<TAB>score`` rows in the order
    given; return the number of rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(path, "wb") as handle:
        handle.write(("\t".join(header) + "\n").encode("utf-8"))
        for query_id, doc_id, score in rows:
            handle.write(f"{query_id}\t{doc_id}\t{score}\n".encode())
            count += 1
    return count


# --------------------------------------------------------------------------- reading


def decode_text(where: str, data: bytes) -> list[str]:
    """The lines of ``data`` (UTF-8; a ``\\r`` before each ``\\n`` dropped, as the CRLF files of
    the classic collections need); a byte that is not UTF-8 is an error naming its line."""
    lines: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{where}:{number}: not valid UTF-8 (byte {raw[exc.start : exc.start + 1]!r} at column "
                f"{exc.start + 1})"
            ) from None
        lines.append(line[:-1] if line.endswith("\r") else line)
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start another
    return lines


_WS = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match is not None else pos


def _member_offset(decoder: json.JSONDecoder, text: str, pos: int, key: Any) -> int | None:
    """Where the value of member ``key`` (an object key or an array index) of the container
    starting at ``pos`` starts, or ``None``. ``text`` is known to be valid JSON; other members
    are skipped with the C decoder. For a repeated key the last one counts, as in ``json.loads``."""
    opener = text[pos : pos + 1]
    if opener not in ("{", "["):
        return None
    closer = "}" if opener == "{" else "]"
    found: int | None = None
    pos = _skip_ws(text, pos + 1)
    index = 0
    while not text.startswith(closer, pos):
        if opener == "{":
            name, pos = decoder.raw_decode(text, pos)
            pos = _skip_ws(text, _skip_ws(text, pos) + 1)  # past the ':'
            hit = name == key
        else:
            hit = isinstance(key, int) and index == key
        if hit:
            found = pos
        _value, pos = decoder.raw_decode(text, pos)
        pos = _skip_ws(text, pos)
        if text.startswith(",", pos):
            pos = _skip_ws(text, pos + 1)
        index += 1
    return found


class JsonSource:
    """A parsed JSON file that can say on which line any of its values starts.

    ``error(path, message)`` builds the one-line :class:`DataError` for the value at ``path``
    (a sequence of keys and indexes from the root), naming the line of the deepest part of the
    path that exists (so a missing key is reported at the object that lacks it).
    """

    def __init__(self, where: str, data: bytes) -> None:
        self.where = where
        try:
            self.text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise DataError(f"{where}:{line}: not valid UTF-8 (byte offset {exc.start})") from None
        try:
            self.value: Any = json.loads(self.text)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{where}:{exc.lineno}: not a JSON file: {exc.msg} (column {exc.colno})"
            ) from None

    def line_of(self, path: Sequence[Any]) -> int:
        """The 1-based line where the deepest existing value along ``path`` starts."""
        decoder = json.JSONDecoder()
        pos = _skip_ws(self.text, 0)
        for key in path:
            member = _member_offset(decoder, self.text, pos, key)
            if member is None:
                break
            pos = member
        return self.text.count("\n", 0, pos) + 1

    def error(self, path: Sequence[Any], message: str) -> DataError:
        """A :class:`DataError` ``<file>:<line>: <message>`` for the value at ``path``."""
        return DataError(f"{self.where}:{self.line_of(path)}: {message}")
