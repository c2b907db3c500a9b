"""Loading and validating datasets in BEIR layout.

A BEIR folder holds ``corpus.jsonl`` (or ``corpus.jsonl.gz``), ``queries.jsonl`` (or ``.gz``) and
``qrels/<split>.tsv``. Everything the harness measures rests on these files, so this module is
strict about their shape: every problem that would silently change a score (a malformed line, a
duplicate id, a judgment naming a document that does not exist) is either an error naming the
file and line, or a counted, reported :class:`DataIssues` entry with a :class:`DataWarning`.

Every :class:`DataError` is one line, ``<file>:<line>: <what>`` (``<file>: <what>`` where no line
applies: a missing file or split, an empty file, a damaged gzip header, a checksum), with the
same location in its ``path`` and ``line`` attributes. A dataset name that is not found is a
:class:`DatasetNotFound`: the name, the folders searched and how to get that dataset (download,
converter or ``VIKING_EVAL_DATA``), on one line.

Rules beyond JSON well-formedness, and why:

- **Ids** (``_id`` of documents and queries, both id columns of the qrels) must be non-empty and
  hold no whitespace or control character: TREC run and qrels lines are whitespace-separated, so
  such an id would give trec_eval and ir_measures a line with the wrong number of fields.
- **Query text** must not be empty or blank: a query without words cannot be answered, would score
  0 in every mean and skew it, and makes some retrievers fail deep inside. It is refused at load
  (``<file>:<line>: query '<id>' has empty text``) rather than skipped with a warning, because a
  skipped query changes the denominator of every mean as silently. None of the shared datasets has
  such a query. Empty *documents* are legal (they are counted in :class:`DataIssues`): a corpus
  may hold them and they simply never match.
- **Checksums**: a folder written by ``python -m viking_eval.download`` holds ``CHECKSUMS.json``
  (the sha256 of every file as downloaded: trust on first use where the registry publishes none).
  :func:`load_beir` re-verifies every file listed there and refuses a file that changed. A folder
  without ``CHECKSUMS.json`` has nothing to verify.

Datasets are found by name through ``VIKING_EVAL_DATA`` (a ``:``-separated list of folders), then
the repository's ``datasets/`` folder, then the data folder (:func:`data_home`); a directory path
is used as is. Fetching a missing dataset is :func:`viking_eval.download.find_or_download`'s job.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import stat
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrievers.types import Document
from viking_eval.io import sha256_file
from viking_eval.judgments import (
    DataIssues,
    DataWarning,
    data_issues,
    strict_mode_problems,
    unknown_judgments,
    warn_dropped_judgments,
)

__all__ = [
    "CHECKSUMS_FILE",
    "DATA_ENV",
    "BeirDataset",
    "DataError",
    "DataIssues",
    "DataWarning",
    "DatasetNotFound",
    "Query",
    "data_home",
    "data_search_path",
    "id_problem",
    "load_beir",
    "load_corpus",
    "load_dataset",
    "load_qrels",
    "load_queries",
    "read_checksums",
    "read_jsonl",
    "record_checksums",
    "resolve_dataset",
]

DATA_ENV = "VIKING_EVAL_DATA"
"""Environment variable: folders (``os.pathsep``-separated) searched for datasets by name."""

CHECKSUMS_FILE = "CHECKSUMS.json"
"""Written into a downloaded dataset folder: the sha256 of each file, re-verified on every load."""

_REPO_DATASETS = Path(__file__).resolve().parents[1] / "datasets"
_QRELS_HEADER_NAMES = frozenset({"query-id", "query_id", "queryid", "qid", "query"})
_INT_RE = re.compile(r"[+-]?[0-9]+")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
# str-pattern \s is Unicode whitespace (exactly str.isspace); C0 and C1 controls besides
_BAD_ID_CHAR = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")
_CHUNK = 1 << 20


class DataError(ValueError):
    """Bad input data: one line ``<file>:<line>: <what>`` (or ``<file>: <what>``) saying what is
    wrong and what is expected. ``path`` and ``line`` give the location to code; either is
    ``None`` when it does not apply (``path`` is ``None`` only for errors about no file, such as
    an empty dataset name)."""

    def __init__(
        self, message: str, *, path: str | os.PathLike[str] | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.path = Path(path) if path is not None else None
        self.line = line


def _error(path: Path, what: str, line: int | None = None) -> DataError:
    """A :class:`DataError` ``<path>:<line>: <what>`` (or ``<path>: <what>``) with its location."""
    where = f"{path}:{line}" if line is not None else str(path)
    return DataError(f"{where}: {what}", path=path, line=line)


class DatasetNotFound(DataError):
    """A dataset name found in none of the folders searched (``folders``, in order). The message
    is one line: the name, the folders, the datasets they hold and how to get this one. Made by
    :meth:`searched`; pickles like any :class:`DataError` (Hydra launchers send errors between
    processes)."""

    name: str = ""
    folders: tuple[Path, ...] = ()

    @classmethod
    def searched(cls, name: str, folders: list[Path]) -> DatasetNotFound:
        where = ", ".join(
            f"{folder}{'' if _quietly(_is_dir, folder) else ' (does not exist)'}" for folder in folders
        )
        found = sorted({found for folder in folders for found in _dataset_names(folder)})
        error = cls(
            f"{name}: dataset not found in {len(folders)} folder(s) searched: {where} (datasets there: "
            f"{', '.join(found) if found else 'none'}); {_how_to_get(name)}",
            path=Path(name),
        )
        error.name, error.folders = name, tuple(folders)
        return error


def _how_to_get(name: str) -> str:
    """What to do about a missing dataset: its download or converter command, else a folder."""
    try:
        from viking_eval.download import how_to_get
    except ImportError:  # a partial installation: the generic advice still holds
        how_to_get = None
    if how_to_get is not None:
        return how_to_get(name)
    return f"set {DATA_ENV} to a folder holding {name}/, or give a folder path"


@dataclass(frozen=True)
class Query:
    """One query. ``metadata`` is kept for reports and query scoping; retrievers only ever
    receive ``text``, so nothing in the metadata (answers, evidence) can leak into a run."""

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BeirDataset:
    """A loaded, validated split of a BEIR dataset.

    ``queries`` holds only the queries judged in ``split`` (in ``queries.jsonl`` order) and
    ``qrels`` only judgments whose query and document exist, so every query evaluated has at
    least one judgment and every judged document can be retrieved. ``files`` maps each file read
    (relative to ``folder``: the corpus, the queries and this split's qrels, i.e. every file that
    can change a number) to the sha256 of its bytes. ``subset`` names a selection of the split's
    queries made after loading (``""``: all of them; see ``splits.take_half``).
    ``checksums_verified`` lists the files checked against ``CHECKSUMS.json`` at load.
    """

    name: str
    split: str
    folder: Path
    corpus: dict[str, Document]
    queries: dict[str, Query]
    qrels: dict[str, dict[str, int]]
    issues: DataIssues
    files: dict[str, str]
    subset: str = ""
    checksums_verified: tuple[str, ...] = ()

    @property
    def num_judgments(self) -> int:
        """Number of (query, document) judgments kept."""
        return sum(len(docs) for docs in self.qrels.values())

    @property
    def fingerprint(self) -> str:
        """sha256 over the sorted file map, the split and the subset: equal fingerprints mean the
        same documents, queries and judgments, so a finished result keyed on it may be reused.
        The folder and name are left out (moving a dataset does not change a number)."""
        payload = {"files": sorted(self.files.items()), "split": self.split, "subset": self.subset}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- locating datasets


def data_home() -> Path:
    """The user's data folder, where downloads and converters write by default and the last
    place searched by name: ``$XDG_DATA_HOME/viking_eval/datasets`` (``~/.local/share/...``
    when ``XDG_DATA_HOME`` is unset), as the XDG base-directory convention places user data."""
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "viking_eval" / "datasets"


def data_search_path(repo_datasets: Path | None = None) -> list[Path]:
    """Folders searched for datasets by name, in order: each entry of ``VIKING_EVAL_DATA``
    (empty entries ignored, ``~`` expanded), the repository's ``datasets/`` folder, then
    :func:`data_home`. Duplicates are kept only at their first position."""
    folders: list[Path] = []
    for entry in os.environ.get(DATA_ENV, "").split(os.pathsep):
        if entry.strip():
            folders.append(Path(entry.strip()).expanduser())
    folders.append(repo_datasets if repo_datasets is not None else _REPO_DATASETS)
    folders.append(data_home())
    unique: list[Path] = []
    for folder in folders:
        if folder not in unique:
            unique.append(folder)
    return unique


def _is_dir(path: Path) -> bool:
    """``path.is_dir()``, but a path the system cannot look at (permission denied, a name too
    long) is a :class:`DataError` naming it instead of a traceback."""
    try:
        return stat.S_ISDIR(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise _error(path, f"cannot read: {exc.strerror or exc}") from None


def _is_file(path: Path) -> bool:
    """``path.is_file()``, with the same errors as :func:`_is_dir`."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise _error(path, f"cannot read: {exc.strerror or exc}") from None


def _quietly(check: Callable[[Path], bool], path: Path) -> bool:
    """``check(path)``, False where the path cannot be looked at (for searching by name: one
    unreadable folder must not hide the others)."""
    try:
        return check(path)
    except (DataError, OSError):
        return False


def _find_corpus_file(folder: Path) -> Path | None:
    """``corpus.jsonl`` or ``corpus.jsonl.gz`` in ``folder``; both present is ambiguous."""
    plain, gz = folder / "corpus.jsonl", folder / "corpus.jsonl.gz"
    return _one_of(plain, gz)


def _one_of(plain: Path, gz: Path) -> Path | None:
    has_plain, has_gz = _is_file(plain), _is_file(gz)
    if has_plain and has_gz:
        raise _error(gz, f"both {plain.name} and {gz.name} exist; keep one so it is clear which is read")
    if has_plain:
        return plain
    if has_gz:
        return gz
    return None


def _dataset_names(folder: Path) -> list[str]:
    """Sub-folders of ``folder`` that hold a corpus file (i.e. look like BEIR datasets)."""
    if not _quietly(_is_dir, folder):
        return []
    names = []
    try:
        children = list(folder.iterdir())
    except OSError:
        return []
    for child in children:
        if _quietly(_is_file, child / "corpus.jsonl") or _quietly(_is_file, child / "corpus.jsonl.gz"):
            names.append(child.name)
    return sorted(names)


def resolve_dataset(name_or_path: str, repo_datasets: Path | None = None) -> Path:
    """The folder of a dataset: ``name_or_path`` itself if it is an existing directory, else the
    first ``<folder>/<name>`` directory along :func:`data_search_path`."""
    if not name_or_path or not name_or_path.strip():
        raise DataError("dataset name is empty; give a dataset name (e.g. 'scifact') or a folder path")
    if name_or_path.startswith("irds:"):  # an ir_datasets id: viking_eval/irds.py
        from viking_eval.irds import irds_folder

        return irds_folder(name_or_path)
    as_path = Path(name_or_path).expanduser()
    if _quietly(_is_dir, as_path):
        return as_path
    folders = data_search_path(repo_datasets)
    for folder in folders:
        candidate = folder / name_or_path
        if _quietly(_is_dir, candidate):
            return candidate
    raise DatasetNotFound.searched(name_or_path, folders)


# --------------------------------------------------------------------------- reading files


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise _error(path, "file not found") from None
    except OSError as exc:
        raise _error(path, f"cannot read: {exc.strerror or exc}") from exc


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


def _decompress(path: Path, data: bytes) -> bytes:
    """The file's content, gunzipped when the name ends in ``.gz``."""
    if path.suffix != ".gz":
        return data
    if not data.startswith(b"\x1f\x8b"):
        raise _error(path, "not a valid gzip file (no gzip header); if it is plain text, drop the .gz suffix")
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        complete = _gzip_prefix(data).count(b"\n")
        raise _error(
            path,
            f"not a valid gzip file: the compressed data is damaged or truncated after {complete} "
            f"complete line(s) ({exc}); download or compress it again",
            complete + 1,
        ) from None


def _iter_lines(path: Path, data: bytes) -> Iterator[tuple[int, str]]:
    """Decoded lines (1-based numbers) of ``data``; a UTF-8 BOM at the start is dropped.
    Decoding line by line lets a bad byte be reported with its line number."""
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _error(
                path,
                f"not valid UTF-8 (byte {raw[exc.start : exc.start + 1]!r} at column {exc.start + 1}); "
                "files must be UTF-8 encoded",
                number,
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
            raise _error(path, f"malformed JSON: {exc.msg} (column {exc.colno})", number) from None
        if not isinstance(obj, dict):
            raise _error(path, f"expected a JSON object per line, got {type(obj).__name__}", number)
        yield number, obj


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a ``.jsonl`` or ``.jsonl.gz``
    file. Every line must be a UTF-8 JSON object; anything else is a :class:`DataError` naming
    the file and line."""
    path = Path(path)
    yield from _iter_jsonl(path, _read_bytes(path))


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id in a TREC run or qrels line (whitespace or a control
    character, which would split the line into the wrong number of fields), or ``None``."""
    match = _BAD_ID_CHAR.search(value)
    if match is None:
        return None
    char = match.group()
    kind = "whitespace" if char.isspace() else "a control character"
    return f"contains {kind} ({char!r} at position {match.start() + 1})"


def _id_error(path: Path, number: int, label: str, value: str, problem: str) -> DataError:
    return _error(
        path,
        f"{label} {value!r} {problem}; TREC run and qrels lines are whitespace-separated, so "
        "trec_eval and ir_measures cannot read it: rename the id (e.g. replace the character with '_')",
        number,
    )


def _record_id(path: Path, number: int, obj: Mapping[str, Any], label: str) -> str:
    if "_id" not in obj:
        raise _error(path, "missing '_id' (every record needs a string or integer '_id')", number)
    raw = obj["_id"]
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise _error(path, f"'_id' must be a string or integer, got {type(raw).__name__}", number)
    value = str(raw)
    if not value:
        raise _error(path, "'_id' is empty", number)
    problem = id_problem(value)
    if problem is not None:
        raise _id_error(path, number, label, value, problem)
    return value


def _record_str(path: Path, number: int, obj: Mapping[str, Any], key: str, *, required: bool) -> str:
    if key not in obj or (obj[key] is None and not required):
        if required:
            raise _error(path, f"missing {key!r} (a string, may be empty)", number)
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise _error(path, f"{key!r} must be a string, got {type(value).__name__}", number)
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
        raise _error(path, f"'metadata' must be a JSON object, got {type(raw).__name__}", number)
    for key, value in obj.items():
        if key in known or key == "metadata":
            continue
        if key in metadata:
            raise _error(
                path, f"key {key!r} appears both at top level and inside 'metadata'; keep one", number
            )
        metadata[key] = value
    return metadata


def _check_unique(path: Path, number: int, record_id: str, first_line: dict[str, int]) -> None:
    if record_id in first_line:
        raise _error(
            path, f"duplicate _id {record_id!r} (first seen at line {first_line[record_id]})", number
        )
    first_line[record_id] = number


_CORPUS_KEYS = frozenset({"_id", "title", "text"})
_QUERY_KEYS = frozenset({"_id", "text"})


def _parse_corpus(path: Path, data: bytes) -> dict[str, Document]:
    corpus: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    for number, obj in _iter_jsonl(path, data):
        doc_id = _record_id(path, number, obj, "doc id")
        _check_unique(path, number, doc_id, first_line)
        corpus[doc_id] = Document(
            id=doc_id,
            text=_record_str(path, number, obj, "text", required=True),
            title=_record_str(path, number, obj, "title", required=False),
            metadata=_record_metadata(path, number, obj, _CORPUS_KEYS),
        )
    if not corpus:
        raise _error(path, "the corpus is empty (no JSON lines)")
    return corpus


def _parse_queries(path: Path, data: bytes) -> dict[str, Query]:
    queries: dict[str, Query] = {}
    first_line: dict[str, int] = {}
    for number, obj in _iter_jsonl(path, data):
        query_id = _record_id(path, number, obj, "query id")
        _check_unique(path, number, query_id, first_line)
        text = _record_str(path, number, obj, "text", required=True)
        if not text.strip():
            raise _error(
                path,
                f"query {query_id!r} has empty text; a query without words would score 0 and skew "
                "every mean: give it text or remove it (and its judgments)",
                number,
            )
        queries[query_id] = Query(
            id=query_id, text=text, metadata=_record_metadata(path, number, obj, _QUERY_KEYS)
        )
    if not queries:
        raise _error(path, "the query file is empty (no JSON lines)")
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
            raise _error(
                path,
                "expected 3 tab-separated fields 'query-id<TAB>corpus-id<TAB>score', "
                f"got {len(fields)}{hint}: {line[:80]!r}",
                number,
            )
        query_id, doc_id, score = fields
        if not query_id or not doc_id:
            raise _error(path, f"empty query-id or corpus-id: {line[:80]!r}", number)
        for label, value in (("query-id", query_id), ("corpus-id", doc_id)):
            problem = id_problem(value)
            if problem is not None:
                raise _id_error(path, number, label, value, problem)
        if not _INT_RE.fullmatch(score):
            raise _error(path, f"score must be an integer, got {score!r}", number)
        relevance = int(score)
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged and judged[doc_id] != relevance:
            raise _error(
                path,
                f"judgment ({query_id!r}, {doc_id!r}) = {relevance} contradicts "
                f"line {lines[(query_id, doc_id)]} (= {judged[doc_id]})",
                number,
            )
        judged[doc_id] = relevance
        lines.setdefault((query_id, doc_id), number)
    if not qrels:
        raise _error(path, "no judgments (the file is empty or holds only a header)")
    return qrels, lines


def load_corpus(path: Path) -> dict[str, Document]:
    """Documents of a ``corpus.jsonl[.gz]`` in file order. Each line needs ``_id`` (string or
    integer, kept as a string; no whitespace or control characters) and ``text`` (may be
    empty); ``title`` is optional; ``metadata`` must be an object; other top-level keys are kept
    in ``metadata``."""
    path = Path(path)
    return _parse_corpus(path, _read_bytes(path))


def load_queries(path: Path) -> dict[str, Query]:
    """Queries of a ``queries.jsonl[.gz]`` in file order, under the same rules as the corpus,
    except that ``text`` must not be empty or blank."""
    path = Path(path)
    return _parse_queries(path, _read_bytes(path))


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Judgments ``{query_id: {doc_id: relevance}}`` of a BEIR qrels TSV. The header row
    ``query-id<TAB>corpus-id<TAB>score`` is optional; CRLF line ends are fine; scores must be
    integers; ids follow the corpus rules. A pair judged twice with different scores is an error."""
    path = Path(path)
    return _parse_qrels(path, _read_bytes(path))[0]


# --------------------------------------------------------------------------- checksums


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_checksums(folder: Path) -> dict[str, str] | None:
    """The ``files`` map (relative path -> sha256) of ``folder/CHECKSUMS.json``, or ``None`` when
    the folder has none. A file that is not valid, or names a path outside the folder, is a
    :class:`DataError`."""
    path = Path(folder) / CHECKSUMS_FILE
    if not _is_file(path):
        return None
    try:
        raw = json.loads(_read_bytes(path).decode("utf-8"))
    except UnicodeDecodeError:
        raise _error(path, "not valid UTF-8") from None
    except json.JSONDecodeError as exc:
        raise _error(path, f"malformed JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    files = raw.get("files") if isinstance(raw, dict) else None
    if not isinstance(files, dict):
        raise _error(path, "expected a JSON object with a 'files' object (relative path -> sha256)")
    for rel, digest in files.items():
        if not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest):
            raise _error(path, f"files.{rel}: expected 64 lowercase hex digits, got {digest!r}")
        parts = rel.split("/")
        if not rel or rel.startswith("/") or "\\" in rel or ".." in parts or "" in parts:
            raise _error(path, f"files.{rel}: paths must be relative and stay inside the dataset folder")
    return dict(files)


def record_checksums(folder: Path, **info: Any) -> dict[str, str]:
    """Write ``folder/CHECKSUMS.json``: the sha256 of every file under ``folder`` (relative
    posix paths) plus ``info`` (source URL, archive checksum, ...); return the file map. The
    file is written next to the data and renamed into place, so it is never half-written."""
    folder = Path(folder)
    files = {
        path.relative_to(folder).as_posix(): sha256_file(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.relative_to(folder).as_posix() != CHECKSUMS_FILE
    }
    record = {
        "format": 1,
        **info,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "note": f"sha256 of every file as downloaded; viking_eval.data re-verifies them on load "
        f"(delete {CHECKSUMS_FILE} to accept an intended change)",
        "files": files,
    }
    staging = folder / f".{CHECKSUMS_FILE}.part"
    staging.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(staging, folder / CHECKSUMS_FILE)
    return files


def _verify_checksums(folder: Path, read: Mapping[str, str]) -> tuple[str, ...]:
    """Check every file listed in ``CHECKSUMS.json`` (``read``: hashes already computed, by
    relative path); return the files verified (none without a ``CHECKSUMS.json``)."""
    recorded = read_checksums(folder)
    if recorded is None:
        return ()
    checksums = folder / CHECKSUMS_FILE
    for rel, expected in sorted(recorded.items()):
        path = folder / rel
        actual = read.get(rel)
        if actual is None:
            if not _is_file(path):
                raise _error(
                    path,
                    f"listed in {checksums} but missing; download the dataset again "
                    f"(or delete {CHECKSUMS_FILE} if the removal is intended)",
                )
            actual = sha256_file(path)
        if actual != expected:
            raise _error(
                path,
                f"sha256 {actual} differs from {expected} recorded in {checksums} at download: the "
                f"file changed; download the dataset again, or delete {CHECKSUMS_FILE} if the change "
                "is intended",
            )
    return tuple(sorted(recorded))


# --------------------------------------------------------------------------- whole datasets


def load_beir(
    folder: Path, split: str = "test", *, name: str | None = None, strict: bool = False
) -> BeirDataset:
    """Load and cross-check one split of a BEIR folder.

    Judgments naming an unknown query or document are dropped, counted in ``issues`` and
    reported with a :class:`DataWarning`; with ``strict=True`` they raise :class:`DataError`.
    Only queries with at least one kept judgment are returned, since a query without judgments
    cannot be scored (it would count as zero for some tools and be skipped by others). Files
    listed in the folder's ``CHECKSUMS.json`` are verified before anything is parsed.
    """
    folder = Path(folder)
    if not _is_dir(folder):
        raise _error(
            folder, "not a directory (expected a BEIR folder with corpus.jsonl, queries.jsonl, qrels/)"
        )
    if not split or "/" in split or "\\" in split or split in (".", ".."):
        raise _error(folder, f"invalid split name {split!r} (expected the stem of a qrels/*.tsv file)")

    corpus_path = _find_corpus_file(folder)
    if corpus_path is None:
        raise _error(folder, "no corpus.jsonl or corpus.jsonl.gz")
    queries_path = _one_of(folder / "queries.jsonl", folder / "queries.jsonl.gz")
    if queries_path is None:
        raise _error(folder, "no queries.jsonl or queries.jsonl.gz")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not _is_file(qrels_path):
        available = (
            sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if _is_dir(folder / "qrels") else []
        )
        raise _error(
            qrels_path,
            f"no qrels for split {split!r} (file not found); "
            f"splits available: {', '.join(available) if available else '(none: no qrels/*.tsv)'}",
        )

    files: dict[str, str] = {}
    raw: dict[Path, bytes] = {}
    for path in (corpus_path, queries_path, qrels_path):
        raw[path] = _read_bytes(path)
        files[path.relative_to(folder).as_posix()] = _sha256(raw[path])
    verified = _verify_checksums(folder, files)
    corpus = _parse_corpus(corpus_path, raw[corpus_path])
    all_queries = _parse_queries(queries_path, raw[queries_path])
    judged, lines = _parse_qrels(qrels_path, raw[qrels_path])

    unknown_query_rows, unknown_doc_rows = unknown_judgments(judged, all_queries, corpus)
    if strict and (unknown_query_rows or unknown_doc_rows):
        what, first = strict_mode_problems(
            unknown_query_rows, unknown_doc_rows, lines, "line", queries_path.name, corpus_path.name
        )
        raise _error(qrels_path, "strict mode: " + what, first)

    qrels: dict[str, dict[str, int]] = {}
    for query_id in all_queries:
        kept = {d: rel for d, rel in judged.get(query_id, {}).items() if d in corpus}
        if kept:
            qrels[query_id] = kept
    queries = {query_id: all_queries[query_id] for query_id in qrels}

    warn_dropped_judgments(str(qrels_path), unknown_query_rows, unknown_doc_rows)
    issues = data_issues(corpus, len(all_queries), len(queries), unknown_query_rows, unknown_doc_rows)
    return BeirDataset(
        name=name if name is not None else folder.resolve().name,
        split=split,
        folder=folder,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        issues=issues,
        files=files,
        checksums_verified=verified,
    )


def load_dataset(
    name_or_path: str,
    split: str = "test",
    *,
    strict: bool = False,
    repo_datasets: Path | None = None,
) -> BeirDataset:
    """Resolve ``name_or_path`` (see :func:`resolve_dataset`) and load ``split`` of it."""
    if name_or_path.startswith("irds:"):  # an ir_datasets id: viking_eval/irds.py
        from viking_eval.irds import load_irds

        return load_irds(name_or_path, split, strict=strict)
    folder = resolve_dataset(name_or_path, repo_datasets)
    return load_beir(folder, split, strict=strict)
