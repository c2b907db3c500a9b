"""Loading and validating datasets in BEIR layout.

A BEIR folder holds ``corpus.jsonl`` (or ``corpus.jsonl.gz``), ``queries.jsonl`` (or ``.gz``) and
``qrels/<split>.tsv``. Everything the harness measures rests on these files, so this module is
strict about their shape: every problem that would silently change a score (a malformed line, a
duplicate id, a judgment naming a document that does not exist) is either an error naming the
file and line, or a counted, reported :class:`DataIssues` entry with a :class:`DataWarning`.

Every :class:`DataError` is one line, ``<file>:<line>: <what>`` (``<file>: <what>`` where no line
applies: a missing file or split, an empty file, a damaged gzip header, a checksum), with the
same location in its ``path`` and ``line`` attributes (``viking_eval/data/errors.py``). Finding a
dataset by name is ``viking_eval/data/resolve.py``'s job.

Rules beyond JSON well-formedness, and why:

- **Ids** (``_id`` of documents and queries, both id columns of the qrels) must be non-empty and
  hold no whitespace or control character: TREC run and qrels lines are whitespace-separated, so
  such an id would give trec_eval and ir_measures a line with the wrong number of fields
  (``viking_eval/data/records.py``).
- **Query text** must not be empty or blank: a query without words cannot be answered, would score
  0 in every mean and skew it, and makes some retrievers fail deep inside. It is refused at load
  (``<file>:<line>: query '<id>' has empty text``) rather than skipped with a warning, because a
  skipped query changes the denominator of every mean as silently. None of the shared datasets has
  such a query. Empty *documents* are legal (they are counted in :class:`DataIssues`): a corpus
  may hold them and they simply never match.
- **Checksums**: a folder written by ``python -m viking_eval.data.download`` holds ``CHECKSUMS.json``
  (the sha256 of every file as downloaded: trust on first use where the registry publishes none).
  :func:`load_beir` re-verifies every file listed there and refuses a file that changed. A folder
  without ``CHECKSUMS.json`` has nothing to verify (``viking_eval/data/checksums.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

from retrievers.types import Document
from viking_eval.data.checksums import sha256_bytes, verify_checksums
from viking_eval.data.dataset import BeirDataset, Query, assemble
from viking_eval.data.errors import located
from viking_eval.data.locations import is_dir, is_file, one_of
from viking_eval.data.records import (
    check_unique,
    id_error,
    id_problem,
    iter_jsonl,
    iter_lines,
    read_bytes,
    record_id,
    record_metadata,
    record_str,
)

__all__ = ["load_beir", "load_corpus", "load_qrels", "load_queries"]

_QRELS_HEADER_NAMES = frozenset({"query-id", "query_id", "queryid", "qid", "query"})
_INT_RE = re.compile(r"[+-]?[0-9]+")

_CORPUS_KEYS = frozenset({"_id", "title", "text"})
_QUERY_KEYS = frozenset({"_id", "text"})


def _parse_corpus(path: Path, data: bytes) -> dict[str, Document]:
    corpus: dict[str, Document] = {}
    first_line: dict[str, int] = {}
    for number, obj in iter_jsonl(path, data):
        doc_id = record_id(path, number, obj, "doc id")
        check_unique(path, number, doc_id, first_line)
        corpus[doc_id] = Document(
            id=doc_id,
            text=record_str(path, number, obj, "text", required=True),
            title=record_str(path, number, obj, "title", required=False),
            metadata=record_metadata(path, number, obj, _CORPUS_KEYS),
        )
    if not corpus:
        raise located(path, "the corpus is empty (no JSON lines)")
    return corpus


def _parse_queries(path: Path, data: bytes) -> dict[str, Query]:
    queries: dict[str, Query] = {}
    first_line: dict[str, int] = {}
    for number, obj in iter_jsonl(path, data):
        query_id = record_id(path, number, obj, "query id")
        check_unique(path, number, query_id, first_line)
        text = record_str(path, number, obj, "text", required=True)
        if not text.strip():
            raise located(
                path,
                f"query {query_id!r} has empty text; a query without words would score 0 and skew "
                "every mean: give it text or remove it (and its judgments)",
                number,
            )
        queries[query_id] = Query(
            id=query_id, text=text, metadata=record_metadata(path, number, obj, _QUERY_KEYS)
        )
    if not queries:
        raise located(path, "the query file is empty (no JSON lines)")
    return queries


def _parse_qrels(path: Path, data: bytes) -> tuple[dict[str, dict[str, int]], dict[tuple[str, str], int]]:
    """Judgments and the line each came from (for error messages)."""
    qrels: dict[str, dict[str, int]] = {}
    lines: dict[tuple[str, str], int] = {}
    seen_content = False
    for number, line in iter_lines(path, data):
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
            raise located(
                path,
                "expected 3 tab-separated fields 'query-id<TAB>corpus-id<TAB>score', "
                f"got {len(fields)}{hint}: {line[:80]!r}",
                number,
            )
        query_id, doc_id, score = fields
        if not query_id or not doc_id:
            raise located(path, f"empty query-id or corpus-id: {line[:80]!r}", number)
        for label, value in (("query-id", query_id), ("corpus-id", doc_id)):
            problem = id_problem(value)
            if problem is not None:
                raise id_error(path, number, label, value, problem)
        if not _INT_RE.fullmatch(score):
            raise located(path, f"score must be an integer, got {score!r}", number)
        relevance = int(score)
        judged = qrels.setdefault(query_id, {})
        if doc_id in judged and judged[doc_id] != relevance:
            raise located(
                path,
                f"judgment ({query_id!r}, {doc_id!r}) = {relevance} contradicts "
                f"line {lines[(query_id, doc_id)]} (= {judged[doc_id]})",
                number,
            )
        judged[doc_id] = relevance
        lines.setdefault((query_id, doc_id), number)
    if not qrels:
        raise located(path, "no judgments (the file is empty or holds only a header)")
    return qrels, lines


def load_corpus(path: Path) -> dict[str, Document]:
    """Documents of a ``corpus.jsonl[.gz]`` in file order. Each line needs ``_id`` (string or
    integer, kept as a string; no whitespace or control characters) and ``text`` (may be
    empty); ``title`` is optional; ``metadata`` must be an object; other top-level keys are kept
    in ``metadata``."""
    path = Path(path)
    return _parse_corpus(path, read_bytes(path))


def load_queries(path: Path) -> dict[str, Query]:
    """Queries of a ``queries.jsonl[.gz]`` in file order, under the same rules as the corpus,
    except that ``text`` must not be empty or blank."""
    path = Path(path)
    return _parse_queries(path, read_bytes(path))


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Judgments ``{query_id: {doc_id: relevance}}`` of a BEIR qrels TSV. The header row
    ``query-id<TAB>corpus-id<TAB>score`` is optional; CRLF line ends are fine; scores must be
    integers; ids follow the corpus rules. A pair judged twice with different scores is an error."""
    path = Path(path)
    return _parse_qrels(path, read_bytes(path))[0]


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
    if not is_dir(folder):
        raise located(
            folder, "not a directory (expected a BEIR folder with corpus.jsonl, queries.jsonl, qrels/)"
        )
    if not split or "/" in split or "\\" in split or split in (".", ".."):
        raise located(folder, f"invalid split name {split!r} (expected the stem of a qrels/*.tsv file)")

    corpus_path = one_of(folder / "corpus.jsonl", folder / "corpus.jsonl.gz")
    if corpus_path is None:
        raise located(folder, "no corpus.jsonl or corpus.jsonl.gz")
    queries_path = one_of(folder / "queries.jsonl", folder / "queries.jsonl.gz")
    if queries_path is None:
        raise located(folder, "no queries.jsonl or queries.jsonl.gz")
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not is_file(qrels_path):
        available = (
            sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if is_dir(folder / "qrels") else []
        )
        raise located(
            qrels_path,
            f"no qrels for split {split!r} (file not found); "
            f"splits available: {', '.join(available) if available else '(none: no qrels/*.tsv)'}",
        )

    files: dict[str, str] = {}
    raw: dict[Path, bytes] = {}
    for path in (corpus_path, queries_path, qrels_path):
        raw[path] = read_bytes(path)
        files[path.relative_to(folder).as_posix()] = sha256_bytes(raw[path])
    verified = verify_checksums(folder, files)
    corpus = _parse_corpus(corpus_path, raw[corpus_path])
    all_queries = _parse_queries(queries_path, raw[queries_path])
    judged, lines = _parse_qrels(qrels_path, raw[qrels_path])

    return assemble(
        name=name if name is not None else folder.resolve().name,
        split=split,
        folder=folder,
        corpus=corpus,
        all_queries=all_queries,
        judged=judged,
        files=files,
        strict=strict,
        position=lines,
        unit="line",
        names=(queries_path.name, corpus_path.name),
        strict_error=lambda what, first: located(qrels_path, "strict mode: " + what, first),
        dropped_where=str(qrels_path),
        checksums_verified=verified,
    )
