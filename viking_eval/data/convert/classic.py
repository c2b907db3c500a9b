"""Converters for the four Glasgow classic test collections (ADI, CISI, Cranfield, Medline).

Each collection is a gzip-compressed tar of SMART-format files: documents and queries are
records that start with ``.I <id>`` and hold fields ``.T`` (title), ``.A`` (authors), ``.B``
(bibliographic note), ``.W`` (text), ``.X`` (CISI's cross-references), ``.K``/``.C`` (one CISI
record's keywords and categories). A field's value is all its lines (from every occurrence of
the marker in the record, in order) joined with ``\\n`` and stripped; nothing else is changed.
Empty fields are left out of ``metadata``. Judgments come in a different plain format per
collection, so each dataset names its member files and its judgment parser.

The tarball is read in memory with :mod:`tarfile`, never extracted: only regular members are
read, names that could escape a folder are refused, and each member's size is capped.
"""

from __future__ import annotations

import re
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from viking_eval.data.convert._common import decode_text, write_jsonl, write_qrels
from viking_eval.data.errors import DataError

__all__ = ["MEMBERS", "SmartRecord", "convert_classic", "parse_smart", "read_tar_members"]

MAX_MEMBER_BYTES = 64 << 20  # the largest real member (CISI.ALL) is 2.2 MB
MAX_MEMBERS = 1000
_MARKER_RE = re.compile(r"\.([A-Z])(?:[ \t]+(.*?))?[ \t]*")
_FIELDS = frozenset("ITABWXKC")
_DOC_METADATA = (("A", "authors"), ("B", "bib"), ("K", "keywords"), ("C", "categories"))
_QUERY_METADATA = (("T", "title"), ("A", "authors"), ("B", "bib"))
_CRAN_CODES = frozenset({-1, 1, 2, 3, 4})


@dataclass(frozen=True)
class SmartRecord:
    """One ``.I`` record: its id label as written, the line it starts on and its fields."""

    label: str
    line: int
    fields: dict[str, str]
    field_lines: dict[str, int]  # first line of each field's content (for error messages)


# --------------------------------------------------------------------------- tar


def read_tar_members(archive: Path, wanted: tuple[str, ...]) -> dict[str, bytes]:
    """The bytes of the regular members named ``wanted`` (by base name) in a ``.tar.gz``.

    Refuses links, devices, absolute or ``..`` names, duplicate names, oversized members and
    archives with too many members; a wanted member that is missing is an error naming it.
    """
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise DataError(f"{archive}: more than {MAX_MEMBERS} members; not a classic collection")
                name = member.name
                parts = [part for part in name.split("/") if part not in ("", ".")]
                if name.startswith("/") or ".." in parts or "\\" in name or "\x00" in name:
                    raise DataError(f"{archive}!{name}: unsafe member name (absolute or '..'); refusing")
                if member.isdir():
                    continue
                if not member.isreg():
                    raise DataError(f"{archive}!{name}: not a regular file (link or device); refusing")
                base = parts[-1] if parts else name
                if base not in wanted:
                    continue
                if base in found:
                    raise DataError(f"{archive}!{name}: member {base} appears twice")
                if member.size > MAX_MEMBER_BYTES:
                    raise DataError(
                        f"{archive}!{name}: {member.size} bytes, over the {MAX_MEMBER_BYTES} byte cap"
                    )
                handle = tar.extractfile(member)
                if handle is None:
                    raise DataError(f"{archive}!{name}: cannot read member")
                data = handle.read(MAX_MEMBER_BYTES + 1)
                if len(data) != member.size:
                    raise DataError(
                        f"{archive}!{name}: truncated member ({len(data)} of {member.size} bytes)"
                    )
                found[base] = data
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise DataError(f"{archive}: not a readable .tar.gz archive: {exc}") from None
    missing = [name for name in wanted if name not in found]
    if missing:
        raise DataError(f"{archive}: missing tar member {missing[0]} (needs {', '.join(wanted)})")
    return found


# --------------------------------------------------------------------------- SMART records


def parse_smart(where: str, data: bytes) -> list[SmartRecord]:
    """The records of a SMART file, in file order. Text before the first ``.I``, an ``.I``
    whose label is not an integer, a duplicate id, a record without fields, an unknown marker
    and text on a field marker's line are errors naming ``where`` and the line."""
    records: list[SmartRecord] = []
    seen: dict[int, int] = {}
    lines: dict[str, list[str]] = {}
    field_lines: dict[str, int] = {}
    label, start, current = "", 0, ""

    def finish() -> None:
        if start and not lines:
            raise DataError(f"{where}:{start}: record .I {label} has no fields (truncated?)")
        if start:
            fields = {key: "\n".join(value).strip() for key, value in lines.items()}
            records.append(SmartRecord(label, start, fields, dict(field_lines)))

    for number, line in enumerate(decode_text(where, data), start=1):
        match = _MARKER_RE.fullmatch(line)
        if match is None:
            if not start:
                if line.strip():
                    raise DataError(f"{where}:{number}: text before the first .I record: {line[:60]!r}")
                continue
            if not current:
                raise DataError(f"{where}:{number}: text before any field marker of record .I {label}")
            lines[current].append(line)
            continue
        letter, rest = match.group(1), match.group(2) or ""
        if letter not in _FIELDS:
            raise DataError(f"{where}:{number}: unknown field marker .{letter}")
        if letter == "I":
            if not re.fullmatch(r"[0-9]+", rest):
                raise DataError(f"{where}:{number}: .I needs an integer id, got {rest!r}")
            doc = int(rest)
            if doc in seen:
                raise DataError(f"{where}:{number}: duplicate id .I {rest} (first at line {seen[doc]})")
            seen[doc] = number
            finish()
            label, start, current = rest, number, ""
            lines, field_lines = {}, {}
            continue
        if not start:
            raise DataError(f"{where}:{number}: .{letter} before any .I record")
        if rest:
            raise DataError(f"{where}:{number}: unexpected text after .{letter}: {rest[:60]!r}")
        current = letter
        lines.setdefault(letter, [])
        field_lines.setdefault(letter, number + 1)
    finish()
    if not records:
        raise DataError(f"{where}:1: no .I records; not a SMART file")
    return records


def _xrefs(where: str, record: SmartRecord) -> list[list[int]]:
    """CISI ``.X`` lines ``doc<TAB>count<TAB>doc`` as integer triples, in file order."""
    triples: list[list[int]] = []
    for offset, line in enumerate(record.fields["X"].split("\n")):
        parts = line.split()
        if len(parts) != 3 or not all(part.isdigit() for part in parts):
            line_no = record.field_lines["X"] + offset
            raise DataError(f"{where}:{line_no}: .X line must be three integers, got {line[:60]!r}")
        triples.append([int(part) for part in parts])
    return triples


def _documents(where: str, records: list[SmartRecord]) -> Iterator[dict[str, Any]]:
    for record in records:
        metadata: dict[str, Any] = {}
        for letter, key in _DOC_METADATA:
            if record.fields.get(letter):
                metadata[key] = record.fields[letter]
        if record.fields.get("X"):
            metadata["xrefs"] = _xrefs(where, record)
        yield {
            "_id": str(int(record.label)),
            "title": record.fields.get("T", ""),
            "text": record.fields.get("W", ""),
            "metadata": metadata,
        }


def _queries(records: list[SmartRecord], *, ordinal_ids: bool) -> Iterator[dict[str, Any]]:
    """Queries; with ``ordinal_ids`` (Cranfield) the id is the position in the file, 1-based,
    and the ``.I`` label is kept in ``metadata.qry_I``."""
    for position, record in enumerate(records, start=1):
        metadata: dict[str, Any] = {}
        if ordinal_ids:
            metadata["qry_I"] = record.label
        for letter, key in _QUERY_METADATA:
            if record.fields.get(letter):
                metadata[key] = record.fields[letter]
        query_id = str(position) if ordinal_ids else str(int(record.label))
        yield {"_id": query_id, "text": record.fields.get("W", ""), "metadata": metadata}


# --------------------------------------------------------------------------- judgments

Judgment = tuple[str, str, int, int]  # query id, doc id, raw code, line


def _parse_rel(
    where: str, data: bytes, columns: int, pick: Callable[[list[str]], tuple[str, str, str]]
) -> list[Judgment]:
    """Whitespace-separated judgment lines with ``columns`` fields; ``pick`` chooses (query,
    doc, code) from them. Query and document ids must be integers."""
    rows: list[Judgment] = []
    seen: dict[tuple[str, str], int] = {}
    for number, line in enumerate(decode_text(where, data), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != columns:
            raise DataError(
                f"{where}:{number}: expected {columns} fields, got {len(parts)}: {line.strip()[:60]!r}"
            )
        query, doc, code = pick(parts)
        if not (query.isdigit() and doc.isdigit()):
            raise DataError(
                f"{where}:{number}: query and document ids must be integers: {line.strip()[:60]!r}"
            )
        if not re.fullmatch(r"-?[0-9]+(?:\.[0-9]+)?", code):
            raise DataError(f"{where}:{number}: relevance {code!r} is not a number")
        pair = (str(int(query)), str(int(doc)))
        if pair in seen:
            raise DataError(f"{where}:{number}: duplicate judgment {pair} (first at line {seen[pair]})")
        seen[pair] = number
        rows.append((pair[0], pair[1], int(float(code)), number))
    return rows


def _smart_rel(where: str, data: bytes) -> list[Judgment]:
    """ADI/CISI: ``qid docid 0 0.000000`` (every listed pair is relevant)."""
    return _parse_rel(where, data, 4, lambda p: (p[0], p[1], "1"))


def _trec_rel(where: str, data: bytes) -> list[Judgment]:
    """Medline ``MED.REL``: TREC format ``qid 0 docid 1``."""
    return _parse_rel(where, data, 4, lambda p: (p[0], p[2], p[3]))


def _cran_rel(where: str, data: bytes) -> list[Judgment]:
    """``cranqrel``: ``qid docid code`` with Cleverdon's codes 1 (best) to 4, and -1."""
    rows = _parse_rel(where, data, 3, lambda p: (p[0], p[1], p[2]))
    for query, doc, code, number in rows:
        if code not in _CRAN_CODES:
            raise DataError(f"{where}:{number}: relevance code {code} for ({query}, {doc}) is not -1 or 1-4")
    return rows


# --------------------------------------------------------------------------- datasets


@dataclass(frozen=True)
class _Collection:
    docs: str
    queries: str
    rels: str
    parse_rel: Callable[[str, bytes], list[Judgment]]
    ordinal_queries: bool = False


MEMBERS: dict[str, _Collection] = {
    "adi": _Collection("ADI.ALL", "ADI.QRY", "ADI.REL", _smart_rel),
    "cisi": _Collection("CISI.ALL", "CISI.QRY", "CISI.REL", _smart_rel),
    "cranfield": _Collection("cran.all.1400", "cran.qry", "cranqrel", _cran_rel, ordinal_queries=True),
    "medline": _Collection("MED.ALL", "MED.QRY", "MED.REL", _trec_rel),
}
"""The tar members each classic dataset reads (other members, e.g. ``*.BLN``, are ignored)."""


def convert_classic(name: str, archive: Path, out: Path) -> list[str]:
    """Convert the Glasgow tarball ``archive`` of dataset ``name`` into BEIR files in ``out``;
    return the relative paths written."""
    spec = MEMBERS[name]
    members = read_tar_members(archive, (spec.docs, spec.queries, spec.rels))
    where = {member: f"{archive}!{member}" for member in members}
    documents = list(_documents(where[spec.docs], parse_smart(where[spec.docs], members[spec.docs])))
    queries = list(
        _queries(parse_smart(where[spec.queries], members[spec.queries]), ordinal_ids=spec.ordinal_queries)
    )
    judgments = spec.parse_rel(where[spec.rels], members[spec.rels])
    doc_ids = {doc["_id"] for doc in documents}
    query_ids = {query["_id"] for query in queries}
    for query, doc, _code, number in judgments:
        if query not in query_ids:
            raise DataError(f"{where[spec.rels]}:{number}: query {query} is not in {spec.queries}")
        if doc not in doc_ids:
            raise DataError(f"{where[spec.rels]}:{number}: document {doc} is not in {spec.docs}")

    write_jsonl(out / "corpus.jsonl", documents)
    write_jsonl(out / "queries.jsonl", queries)
    written = ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"]
    if name == "cranfield":
        graded = [(q, d, 5 - code) for q, d, code, _ in judgments if code != -1]
        write_qrels(out / "qrels/test.tsv", graded)
        raw = [(q, d, code) for q, d, code, _ in judgments]
        write_qrels(out / "qrels/test_raw_codes.tsv", raw, ("query-id", "corpus-id", "raw-code"))
        written.append("qrels/test_raw_codes.tsv")
    else:
        write_qrels(out / "qrels/test.tsv", [(q, d, 1) for q, d, _code, _ in judgments])
    return written
