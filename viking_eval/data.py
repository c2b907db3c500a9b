"""Loading and validating datasets in BEIR layout.

A BEIR folder holds ``corpus.jsonl`` (or ``corpus.jsonl.gz``), ``queries.jsonl`` (or ``.gz``) and
``qrels/<split>.tsv``. Everything the harness measures rests on these files, so this module is
strict about their shape: every problem that would silently change a score (a malformed line, a
duplicate id, a judgment naming a document that does not exist) is either an error naming the
file and line, or a counted, reported :class:`DataIssues` entry with a :class:`DataWarning`.

Datasets are found by name through ``VIKING_EVAL_DATA`` (a ``:``-separated list of folders), then
the repository's ``datasets/`` folder; a directory path is used as is.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import warnings
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from retrievers.types import Document

__all__ = [
    "DATA_ENV",
    "BeirDataset",
    "DataError",
    "DataIssues",
    "DataWarning",
    "Query",
    "data_search_path",
    "load_beir",
    "load_corpus",
    "load_dataset",
    "load_qrels",
    "load_queries",
    "read_jsonl",
    "resolve_dataset",
]

DATA_ENV = "VIKING_EVAL_DATA"
"""Environment variable: folders (``os.pathsep``-separated) searched for datasets by name."""

_REPO_DATASETS = Path(__file__).resolve().parents[1] / "datasets"
_QRELS_HEADER_NAMES = frozenset({"query-id", "query_id", "queryid", "qid", "query"})
_INT_RE = re.compile(r"[+-]?[0-9]+")
_EXAMPLES = 3  # ids quoted in warnings and errors about dropped judgments


class DataError(ValueError):
    """Bad input data. The message names the file and line (or key) and says what is expected."""


class DataWarning(UserWarning):
    """A non-fatal data problem (dropped judgments); the counts are also in :class:`DataIssues`."""


@dataclass(frozen=True)
class Query:
    """One query. ``metadata`` is kept for reports and query scoping; retrievers only ever
    receive ``text``, so nothing in the metadata (answers, evidence) can leak into a run."""

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DataIssues:
    """Problems that are not fatal in non-strict mode, counted so reports can state them.

    ``qrels_unknown_docs`` and ``qrels_unknown_queries`` count judgments (rows), not ids; a row
    naming both an unknown query and an unknown document counts as an unknown query only.
    ``unjudged_queries`` counts queries of ``queries.jsonl`` without a usable judgment in this
    split (including queries whose every judged document is unknown); they are not evaluated.
    """

    qrels_unknown_docs: int = 0
    qrels_unknown_queries: int = 0
    empty_documents: int = 0
    unjudged_queries: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain dict, for JSON reports."""
        return {key: int(value) for key, value in asdict(self).items()}


@dataclass(frozen=True)
class BeirDataset:
    """A loaded, validated split of a BEIR dataset.

    ``queries`` holds only the queries judged in ``split`` (in ``queries.jsonl`` order) and
    ``qrels`` only judgments whose query and document exist, so every query evaluated has at
    least one judgment and every judged document can be retrieved. ``files`` maps each file read
    (relative to ``folder``) to the sha256 of its bytes, for provenance and cache keys.
    """

    name: str
    split: str
    folder: Path
    corpus: dict[str, Document]
    queries: dict[str, Query]
    qrels: dict[str, dict[str, int]]
    issues: DataIssues
    files: dict[str, str]

    @property
    def num_judgments(self) -> int:
        """Number of (query, document) judgments kept."""
        return sum(len(docs) for docs in self.qrels.values())


# --------------------------------------------------------------------------- locating datasets


def data_search_path(repo_datasets: Path | None = None) -> list[Path]:
    """Folders searched for datasets by name, in order: each entry of ``VIKING_EVAL_DATA``
    (empty entries ignored, ``~`` expanded), then the repository's ``datasets/`` folder.
    Duplicates are kept only at their first position."""
    folders: list[Path] = []
    for entry in os.environ.get(DATA_ENV, "").split(os.pathsep):
        if entry.strip():
            folders.append(Path(entry.strip()).expanduser())
    folders.append(repo_datasets if repo_datasets is not None else _REPO_DATASETS)
    unique: list[Path] = []
    for folder in folders:
        if folder not in unique:
            unique.append(folder)
    return unique


def _find_corpus_file(folder: Path) -> Path | None:
    """``corpus.jsonl`` or ``corpus.jsonl.gz`` in ``folder``; both present is ambiguous."""
    plain, gz = folder / "corpus.jsonl", folder / "corpus.jsonl.gz"
    return _one_of(plain, gz)


def _one_of(plain: Path, gz: Path) -> Path | None:
    if plain.is_file() and gz.is_file():
        raise DataError(
            f"{plain.parent}: both {plain.name} and {gz.name} exist; keep one so it is clear which is read"
        )
    if plain.is_file():
        return plain
    if gz.is_file():
        return gz
    return None


def _dataset_names(folder: Path) -> list[str]:
    """Sub-folders of ``folder`` that hold a corpus file (i.e. look like BEIR datasets)."""
    if not folder.is_dir():
        return []
    names = []
    for child in folder.iterdir():
        if child.is_dir() and ((child / "corpus.jsonl").is_file() or (child / "corpus.jsonl.gz").is_file()):
            names.append(child.name)
    return sorted(names)


def resolve_dataset(name_or_path: str, repo_datasets: Path | None = None) -> Path:
    """The folder of a dataset: ``name_or_path`` itself if it is an existing directory, else the
    first ``<folder>/<name>`` directory along :func:`data_search_path`."""
    if not name_or_path or not name_or_path.strip():
        raise DataError("dataset name is empty; give a dataset name (e.g. 'scifact') or a folder path")
    as_path = Path(name_or_path).expanduser()
    if as_path.is_dir():
        return as_path
    folders = data_search_path(repo_datasets)
    for folder in folders:
        candidate = folder / name_or_path
        if candidate.is_dir():
            return candidate
    searched = "\n".join(f"  {folder}{'' if folder.is_dir() else '  (does not exist)'}" for folder in folders)
    found = sorted({name for folder in folders for name in _dataset_names(folder)})
    raise DataError(
        f"dataset {name_or_path!r} not found. Folders searched, in order:\n{searched}\n"
        f"datasets found there: {', '.join(found) if found else '(none)'}.\n"
        f"Set {DATA_ENV} to a folder holding {name_or_path}/ (several folders separated by "
        f"{os.pathsep!r}), pass a folder path, or download a public dataset with "
        f"`python -m viking_eval.download NAME`."
    )


# --------------------------------------------------------------------------- reading files


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc}") from exc


def _decompress(path: Path, data: bytes) -> bytes:
    """The file's content, gunzipped when the name ends in ``.gz``."""
    if path.suffix != ".gz":
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: not a valid gzip file: {exc}") from exc


def _iter_lines(path: Path, data: bytes) -> Iterator[tuple[int, str]]:
    """Decoded lines (1-based numbers) of ``data``; a UTF-8 BOM at the start is dropped.
    Decoding line by line lets a bad byte be reported with its line number."""
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{path}:{number}: not valid UTF-8 (byte {raw[exc.start : exc.start + 1]!r} at column "
                f"{exc.start + 1}); files must be UTF-8 encoded"
            ) from None
        if number == 1 and line.startswith("\ufeff"):
            line = line[1:]
        yield number, line


def _iter_jsonl(path: Path, data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in _iter_lines(path, _decompress(path, data)):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: malformed JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{number}: expected a JSON object per line, got {type(obj).__name__}")
        yield number, obj


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a ``.jsonl`` or ``.jsonl.gz``
    file. Every line must be a UTF-8 JSON object; anything else is a :class:`DataError` naming
    the file and line."""
    path = Path(path)
    yield from _iter_jsonl(path, _read_bytes(path))


def _record_id(path: Path, number: int, obj: Mapping[str, Any]) -> str:
    if "_id" not in obj:
        raise DataError(f"{path}:{number}: missing '_id' (every record needs a string or integer '_id')")
    raw = obj["_id"]
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise DataError(f"{path}:{number}: '_id' must be a string or integer, got {type(raw).__name__}")
    value = str(raw)
    if not value.strip():
        raise DataError(f"{path}:{number}: '_id' is empty")
    return value


def _record_str(path: Path, number: int, obj: Mapping[str, Any], key: str, *, required: bool) -> str:
    if key not in obj or (obj[key] is None and not required):
        if required:
            raise DataError(f"{path}:{number}: missing {key!r} (a string, may be empty)")
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise DataError(f"{path}:{number}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _record_metadata(
    path: Path, number: int, obj: Mapping[str, Any], known: frozenset[str]
) -> dict[str, Any]:
    """``metadata`` (a JSON object) plus any extra top-level keys, so no field of the file is
    silently lost. An extra key that also appears inside ``metadata`` is ambiguous: an error."""
    raw = obj.get("metadata")
    if raw is None:
        metadata: dict[str, Any] = {}
    elif isinstance(raw, dict):
        metadata = dict(raw)
    else:
        raise DataError(f"{path}:{number}: 'metadata' must be a JSON object, got {type(raw).__name__}")
    for key, value in obj.items():
        if key in known or key == "metadata":
            continue
        if key in metadata:
            raise DataError(
                f"{path}:{number}: key {key!r} appears both at top level and inside 'metadata'; keep one"
            )
        metadata[key] = value
    return metadata


def _check_unique(path: Path, number: int, record_id: str, first_line: dict[str, int]) -> None:
    if record_id in first_line:
        raise DataError(
            f"{path}:{number}: duplicate _id {record_id!r} (first seen at line {first_line[record_id]})"
        )
    first_line[record_id] = number


_CORPUS_KEYS = frozenset({"_id", "title", "text"})
_QUERY_KEYS = frozenset({"_id", "text"})


def _parse_corpus(path: Path, data: bytes) -> dict[str, Document]:
    corpus: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    for number, obj in _iter_jsonl(path, data):
        doc_id = _record_id(path, number, obj)
        _check_unique(path, number, doc_id, first_line)
        corpus[doc_id] = Document(
            id=doc_id,
            text=_record_str(path, number, obj, "text", required=True),
            title=_record_str(path, number, obj, "title", required=False),
            metadata=_record_metadata(path, number, obj, _CORPUS_KEYS),
        )
    if not corpus:
        raise DataError(f"{path}: the corpus is empty (no JSON lines)")
    return corpus


def _parse_queries(path: Path, data: bytes) -> dict[str, Query]:
    queries: dict[str, Query] = {}
    first_line: dict[str, int] = {}
    for number, obj in _iter_jsonl(path, data):
        query_id = _record_id(path, number, obj)
        _check_unique(path, number, query_id, first_line)
        queries[query_id] = Query(
            id=query_id,
            text=_record_str(path, number, obj, "text", required=True),
            metadata=_record_metadata(path, number, obj, _QUERY_KEYS),
        )
    if not queries:
        raise DataError(f"{path}: the query file is empty (no JSON lines)")
    return queries


def _parse_qrels(path: Path, data: bytes) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int]]:
    """Judgments and the line each came from (for error messages)."""
    qrels: dict[str, dict[str, int]] = {}
    lines: dict[tuple[str, str], int] = {}
    seen_content = False
    for number, line in _iter_lines(path, data):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        fields = [part.strip() for part in line.split("\t")]
        first_row = not seen_content
        seen_content = True
        if first_row and len(fields) == 3 and fields[0].lower() in _QRELS_HEADER_NAMES:
            continue  # header row
        if len(fields) != 3:
            hint = " (a space-separated TREC qrels file?)" if "\t" not in line else ""
            raise DataError(
                f"{path}:{number}: expected 3 tab-separated fields 'query-id<TAB>corpus-id<TAB>score', "
                f"got {len(fields)}{hint}: {line[:80]!r}"
            )
        query_id, doc_id, score = fields
        if not query_id or not doc_id:
            raise DataError(f"{path}:{number}: empty query-id or corpus-id: {line[:80]!r}")
        if not _INT_RE.fullmatch(score):
            raise DataError(f"{path}:{number}: score must be an integer, got {score!r}")
        relevance = int(score)
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged and judged[doc_id] != relevance:
            raise DataError(
                f"{path}:{number}: judgment ({query_id!r}, {doc_id!r}) = {relevance} contradicts "
                f"line {lines[(query_id, doc_id)]} (= {judged[doc_id]})"
            )
        judged[doc_id] = relevance
        lines.setdefault((query_id, doc_id), number)
    if not qrels:
        raise DataError(f"{path}: no judgments (the file is empty or holds only a header)")
    return qrels, lines


def load_corpus(path: Path) -> dict[str, Document]:
    """Documents of a ``corpus.jsonl[.gz]`` in file order. Each line needs ``_id`` (string or
    integer, kept as a string) and ``text`` (may be empty); ``title`` is optional; ``metadata``
    must be an object; other top-level keys are kept in ``metadata``."""
    path = Path(path)
    return _parse_corpus(path, _read_bytes(path))


def load_queries(path: Path) -> dict[str, Query]:
    """Queries of a ``queries.jsonl[.gz]`` in file order, under the same rules as the corpus."""
    path = Path(path)
    return _parse_queries(path, _read_bytes(path))


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Judgments ``{query_id: {doc_id: relevance}}`` of a BEIR qrels TSV. The header row
    ``query-id<TAB>corpus-id<TAB>score`` is optional; CRLF line ends are fine; scores must be
    integers. A pair judged twice with different scores is an error."""
    path = Path(path)
    return _parse_qrels(path, _read_bytes(path))[0]


# --------------------------------------------------------------------------- whole datasets


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _examples(items: list[str]) -> str:
    shown = ", ".join(repr(item) for item in items[:_EXAMPLES])
    return shown + (", ..." if len(items) > _EXAMPLES else "")


def load_beir(
    folder: Path, split: str = "test", *, name: str | None = None, strict: bool = False
) -> BeirDataset:
    """Load and cross-check one split of a BEIR folder.

    Judgments naming an unknown query or document are dropped, counted in ``issues`` and
    reported with a :class:`DataWarning`; with ``strict=True`` they raise :class:`DataError`.
    Only queries with at least one kept judgment are returned, since a query without judgments
    cannot be scored (it would count as zero for some tools and be skipped by others).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(
            f"{folder}: not a directory (expected a BEIR folder with corpus.jsonl, queries.jsonl, qrels/)"
        )
    if not split or "/" in split or "\\" in split or split in (".", ".."):
        raise DataError(f"{folder}: invalid split name {split!r} (expected the stem of a qrels/*.tsv file)")

    corpus_path = _find_corpus_file(folder)
    if corpus_path is None:
        raise DataError(f"{folder}: no corpus.jsonl or corpus.jsonl.gz")
    queries_path = _one_of(folder / "queries.jsonl", folder / "queries.jsonl.gz")
    if queries_path is None:
        raise DataError(f"{folder}: no queries.jsonl or queries.jsonl.gz")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        available = (
            sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        )
        raise DataError(
            f"{folder}: no qrels for split {split!r} ({qrels_path} does not exist); "
            f"splits available: {', '.join(available) if available else '(none: no qrels/*.tsv)'}"
        )

    files: dict[str, str] = {}
    raw: dict[Path, bytes] = {}
    for path in (corpus_path, queries_path, qrels_path):
        raw[path] = _read_bytes(path)
        files[path.relative_to(folder).as_posix()] = _sha256(raw[path])
    corpus = _parse_corpus(corpus_path, raw[corpus_path])
    all_queries = _parse_queries(queries_path, raw[queries_path])
    judged, lines = _parse_qrels(qrels_path, raw[qrels_path])

    unknown_query_rows = [(q, d) for q, docs in judged.items() if q not in all_queries for d in docs]
    unknown_doc_rows = [
        (q, d) for q, docs in judged.items() if q in all_queries for d in docs if d not in corpus
    ]
    if strict and (unknown_query_rows or unknown_doc_rows):
        problems = []
        if unknown_query_rows:
            q, d = unknown_query_rows[0]
            problems.append(
                f"{len(unknown_query_rows)} judgment(s) name query ids not in {queries_path.name} "
                f"(first: {qrels_path}:{lines[(q, d)]}, query {q!r})"
            )
        if unknown_doc_rows:
            q, d = unknown_doc_rows[0]
            problems.append(
                f"{len(unknown_doc_rows)} judgment(s) name doc ids not in {corpus_path.name} "
                f"(first: {qrels_path}:{lines[(q, d)]}, doc {d!r})"
            )
        raise DataError(f"{folder}: strict mode: " + "; ".join(problems))

    qrels: dict[str, dict[str, int]] = {}
    for query_id in all_queries:
        kept = {d: rel for d, rel in judged.get(query_id, {}).items() if d in corpus}
        if kept:
            qrels[query_id] = kept
    queries = {query_id: all_queries[query_id] for query_id in qrels}

    if unknown_query_rows or unknown_doc_rows:
        parts = []
        if unknown_doc_rows:
            parts.append(
                f"{len(unknown_doc_rows)} naming unknown documents "
                f"({_examples(sorted({d for _, d in unknown_doc_rows}))})"
            )
        if unknown_query_rows:
            parts.append(
                f"{len(unknown_query_rows)} naming unknown queries "
                f"({_examples(sorted({q for q, _ in unknown_query_rows}))})"
            )
        warnings.warn(
            f"{qrels_path}: dropped judgments: {'; '.join(parts)}. Use strict=True to make this an error.",
            DataWarning,
            stacklevel=2,
        )

    issues = DataIssues(
        qrels_unknown_docs=len(unknown_doc_rows),
        qrels_unknown_queries=len(unknown_query_rows),
        empty_documents=sum(1 for doc in corpus.values() if not doc.title.strip() and not doc.text.strip()),
        unjudged_queries=len(all_queries) - len(queries),
    )
    return BeirDataset(
        name=name if name is not None else folder.resolve().name,
        split=split,
        folder=folder,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        issues=issues,
        files=files,
    )


def load_dataset(
    name_or_path: str,
    split: str = "test",
    *,
    strict: bool = False,
    repo_datasets: Path | None = None,
) -> BeirDataset:
    """Resolve ``name_or_path`` (see :func:`resolve_dataset`) and load ``split`` of it."""
    folder = resolve_dataset(name_or_path, repo_datasets)
    return load_beir(folder, split, strict=strict)
