"""ir_datasets records as the harness's documents, queries and judgments (for
:func:`viking_eval.data.irds.load_irds`).

**Field mapping.** ir_datasets records are namedtuples whose fields differ by collection:

- document ``title``: the first of :data:`TITLE_FIELDS` the record has as a string, else ``""``;
- document ``text``: the first of :data:`TEXT_FIELDS` the record has as a string. A record with
  none of them (ClueWeb's raw ``body`` bytes, args.me, highwire spans, ...) takes ir_datasets' own
  ``default_text()``, which already holds the title, so the title is then left empty;
- query ``text``: the first of :data:`QUERY_FIELDS` (``text``, then ``title``: a TREC topic's
  keyword query, then ``query``), else the query's ``default_text()``;
- every other field goes to ``metadata`` as JSON (namedtuples become objects, tuples lists, dates
  ISO strings); ``bytes`` fields (raw HTML, images) are left out; ``None`` is kept as null, except
  that a ``None`` title or text is ``""``;
- qrels: ``query_id``, ``doc_id`` and ``relevance`` (an int, or a string holding one); other qrels
  fields (``iteration``, subtopics, ...) are not used. A pair judged twice with different
  relevance is an error, as in BEIR qrels.

``title_field``, ``text_field`` and ``query_field`` name a field explicitly instead (from Python).
Query metadata never reaches a retriever (only ``text`` does), so narratives and answers are safe.

**Checksums.** There are no local files to hash, so ``files`` holds one sha256 per part
(``irds:<id>#docs``, ``#queries``, ``#qrels``) over the records exactly as the harness sees them
after mapping, each prefixed with the id and the ir_datasets version: any change of data, mapping
or library version changes :attr:`BeirDataset.fingerprint` and so the resume keys.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from retrievers.types import Document
from viking_eval.data.dataset import Query
from viking_eval.data.errors import DataError
from viking_eval.data.records import id_problem

__all__ = ["QUERY_FIELDS", "TEXT_FIELDS", "TITLE_FIELDS", "Digest", "Mapper", "canonical"]

TITLE_FIELDS = ("title", "headline", "page_title", "document_title")
"""Document fields tried, in order, for a document's title."""

TEXT_FIELDS = ("text", "body", "abstract", "contents", "passage", "code")
"""Document fields tried, in order, for a document's text (a string field; raw ``bytes`` bodies are not)."""

QUERY_FIELDS = ("text", "title", "query")
"""Query fields tried, in order, for a query's text."""

_DROP = object()  # a metadata value left out (bytes)


def _jsonable(value: Any) -> Any:
    """A JSON value for ``value`` (metadata), or ``_DROP`` for bytes."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return _DROP
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        inner = _jsonable(value.value)
        return value.name if inner is _DROP else inner
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return _jsonable(value._asdict())  # type: ignore[attr-defined]  # a namedtuple
    if isinstance(value, Mapping):
        out = {str(key): _jsonable(item) for key, item in value.items()}
        return {key: item for key, item in out.items() if item is not _DROP}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [item for item in map(_jsonable, items) if item is not _DROP]
    return str(value)


def _pick(record: Any, candidates: Iterable[str]) -> str | None:
    """The first of ``candidates`` that ``record`` has as a string (or None) field."""
    for name in candidates:
        if name in record._fields and isinstance(getattr(record, name), str | None):
            return name
    return None


@dataclasses.dataclass
class Mapper:
    """Turns one kind of ir_datasets record (docs, queries or qrels) into the harness's values
    under the field mapping of this module's docstring; its errors name the id and the record."""

    where: str  # "irds:<id>"
    kind: str  # "docs" | "queries" | "qrels"
    title_field: str | None = None
    text_field: str | None = None

    def fail(self, number: int, what: str, record_id: str | None = None) -> DataError:
        label = {"docs": "doc_id", "queries": "query_id"}.get(self.kind)
        who = f" ({label} {record_id!r})" if label and record_id is not None else ""
        return DataError(
            f"{self.where}: {self.kind} record {number}{who}: {what}", path=Path(self.where), line=number
        )

    def record_id(self, number: int, record: Any, field: str) -> str:
        if field not in record._fields:
            raise self.fail(number, f"has no {field!r} field (fields: {', '.join(record._fields)})")
        raw = getattr(record, field)
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            raise self.fail(number, f"{field} must be a string, got {type(raw).__name__}")
        value = str(raw)
        if not value:
            raise self.fail(number, f"{field} is empty")
        problem = id_problem(value)
        if problem is not None:
            raise self.fail(
                number,
                f"{field} {value!r} {problem}; TREC run and qrels lines are whitespace-separated, so "
                "trec_eval and ir_measures cannot read it",
                value if self.kind != "qrels" else None,
            )
        return value

    def explicit(self, number: int, record: Any, field: str, record_id: str, option: str) -> str:
        if field not in record._fields:
            raise self.fail(
                number, f"{option}={field!r} is not a field (fields: {', '.join(record._fields)})", record_id
            )
        value = getattr(record, field)
        if value is not None and not isinstance(value, str):
            raise self.fail(number, f"{option}={field!r} is not a string ({type(value).__name__})", record_id)
        return value or ""

    def default_text(
        self, number: int, record: Any, record_id: str, option: str, tried: tuple[str, ...]
    ) -> str:
        method = getattr(record, "default_text", None)
        if not callable(method):
            raise self.fail(
                number,
                f"no text field: none of {', '.join(tried)} is a string field and the record has no "
                f"default_text() (fields: {', '.join(record._fields)}); name one with {option}=...",
                record_id,
            )
        value = method()
        if not isinstance(value, str):
            raise self.fail(number, f"default_text() gave {type(value).__name__}, not a string", record_id)
        return value

    def metadata(self, record: Any, used: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in record._fields:
            if name in used:
                continue
            value = _jsonable(getattr(record, name))
            if value is not _DROP:
                out[name] = value
        return out

    def document(self, number: int, record: Any) -> Document:
        doc_id = self.record_id(number, record, "doc_id")
        used = {"doc_id"}
        if self.text_field is not None:
            text = self.explicit(number, record, self.text_field, doc_id, "text_field")
            used.add(self.text_field)
            titles = [name for name in TITLE_FIELDS if name != self.text_field]
            title_name = self.title_field or _pick(record, titles)
        else:
            text_name = _pick(record, TEXT_FIELDS)
            if text_name is not None:
                text = getattr(record, text_name) or ""
                used.add(text_name)
                title_name = self.title_field or _pick(record, TITLE_FIELDS)
            else:
                # ir_datasets' own text of the record; it holds the title already
                text = self.default_text(number, record, doc_id, "text_field", TEXT_FIELDS)
                title_name = self.title_field
        title = ""
        if title_name is not None:
            title = self.explicit(number, record, title_name, doc_id, "title_field")
            used.add(title_name)
        return Document(id=doc_id, text=text, title=title, metadata=self.metadata(record, used))

    def query(self, number: int, record: Any) -> Query:
        query_id = self.record_id(number, record, "query_id")
        if self.text_field is not None:
            text = self.explicit(number, record, self.text_field, query_id, "query_field")
            used = {"query_id", self.text_field}
        else:
            name = _pick(record, QUERY_FIELDS)
            if name is not None:
                text = getattr(record, name) or ""
                used = {"query_id", name}
            else:
                text = self.default_text(number, record, query_id, "query_field", QUERY_FIELDS)
                used = {"query_id"}
        return Query(id=query_id, text=text, metadata=self.metadata(record, used))

    def judgment(self, number: int, record: Any) -> tuple[str, str, int]:
        query_id = self.record_id(number, record, "query_id")
        doc_id = self.record_id(number, record, "doc_id")
        if "relevance" not in record._fields:
            raise self.fail(number, f"has no 'relevance' field (fields: {', '.join(record._fields)})")
        raw = record.relevance
        if isinstance(raw, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", raw):
            raw = int(raw)
        if isinstance(raw, float) and raw.is_integer():
            raw = int(raw)
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.fail(
                number,
                f"relevance of ({query_id!r}, {doc_id!r}) must be an integer, got {record.relevance!r}",
            )
        return query_id, doc_id, raw


def canonical(payload: Any) -> bytes:
    return (json.dumps(payload, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


class Digest:
    """sha256 over what one part of the dataset gave, prefixed with the id and library version."""

    def __init__(self, where: str, version: str, kind: str) -> None:
        self._hash = hashlib.sha256(f"{where}\nir_datasets {version}\n{kind}\n".encode())

    def add(self, data: bytes) -> None:
        self._hash.update(data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
