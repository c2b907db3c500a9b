"""RunFileRetriever: the rankings another system wrote to a file, served as a retriever.

A run produced by any system (Pyserini, Elasticsearch, a vendor API, a script) is read once and
answered from memory, so the harness scores, tests, gates and fuses it like any built-in
retriever. Two formats:

* TREC run: one line per (query, document), ``qid Q0 docid rank score tag``, whitespace
  separated (trec_eval's format; ``.gz`` files are read too);
* BEIR results: a JSON object ``{qid: {docid: score}}`` (what ``beir``'s ``EvaluateRetrieval``
  and the harness's own runs hold).

The query mapping: the :class:`~retrievers.types.Retriever` protocol hands a retriever only query
*text*, while a run file is keyed by query *id*. The retriever is therefore built with the
queries the file answers, ``queries`` = ``{query id: text}`` (BEIR's query mapping, or the path of
a BEIR ``queries.jsonl``): a text asked for is looked up among them. The harness passes the
dataset's queries (every query of its ``queries.jsonl``); a caller of the library passes its own.
When several ids share one text and the file ranks them differently, the first id (in mapping
order) answers and ``file_ambiguous_texts`` counts the case; a text that is not among the queries,
or a query the file has no line for, gets no results.

Rules, each an error naming the file and line (a JSON file: the query and document keys):

* a line that is not six fields, a score that is not a finite number: refused;
* the same (query, document) twice: refused, naming both lines (a second score for a document
  cannot be read any way that is not a guess);
* ranks in the file are ignored: results follow the project's order, score descending then doc
  id ascending, as every retriever's do (trec_eval, too, orders by score, not by rank);
* a document id that is not in the store is dropped and counted; a query id that is not among
  ``queries`` is counted. When any line names one, one warning line gives the counts (once per
  file, store and queries in a process);
* a file whose lines mostly name unknown queries or documents (more than ``max_unknown``, a
  fraction of its lines, 0.5 by default) is refused when the retriever is built, with the counts:
  it is almost surely a run of another dataset (MedLine's run over ADI: 2,610 of 2,831 lines name
  documents ADI does not hold), and scoring what is left would be a wrong number.
  ``max_unknown: 1.0`` accepts any file.

Counts go into every result's ``provenance["stats"]`` (the harness averages them over a run, so a
file-wide count reads as itself): ``file_queries`` (query ids in the file), ``file_lines``,
``file_unknown_queries`` (query ids not among ``queries``), ``file_unknown_doc_lines`` (lines
naming a document the store does not hold), ``file_ambiguous_texts``, and per query
``unknown_docs`` (that query's lines dropped for an unknown document).

The kernel does the rest as for every family: scope and ``filters`` (applied before the top-k
cut), an optional reranker, the ranking order and the ``top_k`` cut. Over a chunked store a
document stands for itself through its first chunk (the file scores documents, not chunks).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from retrievers.kernel import Candidates, KernelRetriever, RetrieverParams
from retrievers.params import ParamError, param

__all__ = ["RunFile", "RunFileError", "RunFileParams", "RunFileRetriever", "read_queries", "read_run_file"]

log = logging.getLogger(__name__)

RunFormat = Literal["auto", "trec", "json"]
TREC_FIELDS = 6


class RunFileError(ValueError):
    """A run file that cannot be read as it stands: ``path:line: what`` (``path: what`` where no
    line applies)."""

    def __init__(self, path: Path | str, what: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {what}")
        self.path = Path(path)
        self.line = line


@dataclass(frozen=True)
class RunFile:
    """A parsed run: for each query id, its document ids and scores in file order; ``lines``
    counts the (query, document) entries read and ``sha256`` is the file's text's digest."""

    path: Path
    format: str
    rankings: dict[str, tuple[tuple[str, ...], npt.NDArray[np.float64]]]
    lines: int
    sha256: str = ""

    @property
    def query_ids(self) -> list[str]:
        return list(self.rankings)


def _open_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RunFileError(path, "run file not found") from None
    except OSError as error:
        raise RunFileError(path, f"cannot read: {error.strerror or error}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise RunFileError(path, f"not a readable gzip file: {error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise RunFileError(path, f"not UTF-8 text (byte {error.start})", line) from None


def _score(text: str, path: Path, line: int, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RunFileError(path, f"score {text!r} of {where} is not a number", line) from None
    if not math.isfinite(value):
        raise RunFileError(path, f"score {text!r} of {where} is not a finite number", line)
    return value


def _parse_trec(path: Path, text: str) -> tuple[dict[str, dict[str, float]], int]:
    run: dict[str, dict[str, float]] = {}
    first_line: dict[tuple[str, str], int] = {}
    count = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields:
            continue
        if len(fields) != TREC_FIELDS:
            raise RunFileError(
                path,
                f"expected 6 fields 'qid Q0 docid rank score tag', got {len(fields)}: {raw.strip()[:80]!r}",
                number,
            )
        query_id, _, doc_id, _, score_text, _ = fields
        where = f"query {query_id!r}, doc {doc_id!r}"
        score = _score(score_text, path, number, where)
        key = (query_id, doc_id)
        if key in first_line:
            raise RunFileError(
                path, f"{where} appears twice (first at line {first_line[key]}); one line per pair", number
            )
        first_line[key] = number
        run.setdefault(query_id, {})[doc_id] = score
        count += 1
    return run, count


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise KeyError(key)
        seen[key] = value
    return seen


def _parse_json(path: Path, text: str) -> tuple[dict[str, dict[str, float]], int]:
    try:
        document = json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as error:
        raise RunFileError(path, f"not valid JSON: {error.msg}", error.lineno) from None
    except KeyError as error:
        raise RunFileError(
            path, f"key {error.args[0]!r} appears twice in one object; one entry per query and document"
        ) from None
    if not isinstance(document, dict):
        raise RunFileError(
            path, f"expected a JSON object {{qid: {{docid: score}}}}, got {type(document).__name__}"
        )
    run: dict[str, dict[str, float]] = {}
    count = 0
    for query_id, docs in document.items():
        if not isinstance(docs, dict):
            raise RunFileError(
                path, f"query {query_id!r}: expected an object {{docid: score}}, got {docs!r}"[:200]
            )
        scores: dict[str, float] = {}
        for doc_id, score in docs.items():
            where = f"query {query_id!r}, doc {doc_id!r}"
            if isinstance(score, bool) or not isinstance(score, int | float):
                raise RunFileError(path, f"score {score!r} of {where} is not a number")
            if not math.isfinite(score):
                raise RunFileError(path, f"score {score!r} of {where} is not a finite number")
            scores[doc_id] = float(score)
        run[query_id] = scores
        count += len(scores)
    return run, count


def _check_ids(path: Path, run: Mapping[str, Mapping[str, float]]) -> None:
    for query_id, docs in run.items():
        for value, what in ((query_id, "query id"), *((doc_id, "doc id") for doc_id in docs)):
            if not value or any(char.isspace() for char in value):
                raise RunFileError(path, f"{what} {value!r} is empty or holds whitespace")


#: parsed runs by (resolved path, size, mtime): a config is checked before a run and each of its
#: retrievers is built once per scope, and the file is read once for all of them
_PARSED: dict[tuple[str, int, int, str], RunFile] = {}
_PARSED_LIMIT = 8


def read_run_file(path: str | os.PathLike[str], format: RunFormat = "auto") -> RunFile:
    """Parse a TREC run or BEIR JSON results (see the module docstring); RunFileError on any
    problem. ``auto``: JSON when the first non-blank character is ``{``, else TREC."""
    file = Path(path)
    try:
        stat = file.stat()
    except FileNotFoundError:
        raise RunFileError(file, "run file not found") from None
    except OSError as error:
        raise RunFileError(file, f"cannot read: {error.strerror or error}") from None
    if not file.is_file():
        raise RunFileError(file, "not a file")
    key = (str(file.resolve()), stat.st_size, stat.st_mtime_ns, format)
    cached = _PARSED.get(key)
    if cached is not None:
        return cached
    text = _open_text(file)
    chosen = format
    if chosen == "auto":
        chosen = "json" if text.lstrip().startswith("{") else "trec"
    run, count = _parse_json(file, text) if chosen == "json" else _parse_trec(file, text)
    _check_ids(file, run)
    parsed = RunFile(
        path=file,
        format=chosen,
        rankings={
            query_id: (tuple(docs), np.fromiter(docs.values(), dtype=np.float64, count=len(docs)))
            for query_id, docs in run.items()
        },
        lines=count,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
    )
    if len(_PARSED) >= _PARSED_LIMIT:
        _PARSED.pop(next(iter(_PARSED)))
    _PARSED[key] = parsed
    return parsed


def read_queries(path: str | os.PathLike[str]) -> dict[str, str]:
    """``{query id: text}`` from a BEIR ``queries.jsonl`` (``_id`` and ``text`` of each line)."""
    file = Path(path)
    queries: dict[str, str] = {}
    for number, raw in enumerate(_open_text(file).splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as error:
            raise RunFileError(file, f"not valid JSON: {error.msg}", number) from None
        if not isinstance(record, dict) or not isinstance(record.get("_id"), str):
            raise RunFileError(file, "expected an object with a string '_id' and 'text'", number)
        queries[record["_id"]] = str(record.get("text", ""))
    return queries


@dataclass(frozen=True)
class RunFileParams(RetrieverParams):
    """The run file and the queries it answers (plus the kernel's parameters)."""

    path: str = param(
        "", non_empty=True, doc="a TREC run (qid Q0 docid rank score tag) or BEIR JSON {qid: {docid: score}}"
    )
    format: Literal["auto", "trec", "json"] = param("auto", doc="auto: JSON when the file starts with {")
    queries: Any = param(
        None,
        doc="the queries the file answers: {query id: text} or a BEIR queries.jsonl path; "
        "null = the harness passes the dataset's",
    )
    max_unknown: float = param(
        0.5,
        low=0.0,
        high=1.0,
        doc="refuse the file when more than this fraction of its lines name a query not among the "
        "queries or a document the store does not hold (a run of another dataset); 1 = accept any",
    )

    def check(self) -> None:
        super().check()
        try:
            read_run_file(self.path, self.format)
        except RunFileError as error:
            raise ParamError(self.key("path"), f"{self.key('path')}: {error}") from None
        queries = self.queries
        if queries is None or isinstance(queries, str | os.PathLike):
            return
        if not isinstance(queries, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in queries.items()
        ):
            raise self.fail(
                "queries", "must be null, a queries.jsonl path or a mapping {query id: text} of strings"
            )


@dataclass
class _FileStats:
    queries: int = 0
    lines: int = 0
    unknown_queries: int = 0
    unknown_query_lines: int = 0  # lines of a query id not among the queries
    unknown_doc_lines: int = 0
    unknown_lines: int = 0  # lines naming an unknown query or an unknown document (each once)
    ambiguous_texts: int = 0
    by_text: dict[str, str] = field(default_factory=dict)


#: (file digest, counts) already warned about: the harness builds one retriever per query scope
#: and again to time queries, and the warning is said once
_WARNED: set[tuple[str, int, int, int, int]] = set()


class RunFileRetriever(KernelRetriever):
    """Answers each query with the ranking a run file holds for it; see the module docstring.
    Needs no embedder; ``queries`` (``{query id: text}``) maps the text asked for to the file's
    query id."""

    Params = RunFileParams
    params: RunFileParams
    #: the harness supplies ``queries`` (the dataset's) when a config leaves it null
    wants_queries: ClassVar[bool] = True

    @classmethod
    def input_files(cls, params: Mapping[str, Any]) -> list[str]:
        """Files besides the store that this retriever's results depend on (for resume keys)."""
        paths = [str(params["path"])] if params.get("path") else []
        queries = params.get("queries")
        if isinstance(queries, str | os.PathLike):
            paths.append(str(queries))
        return paths

    def uses_embedder(self) -> bool:
        return False

    def setup(self) -> None:
        queries = self.params.queries
        if queries is None:
            raise ValueError(
                "RunFileRetriever needs queries: {query id: text} (BEIR's query mapping) or a queries.jsonl "
                "path, to look up the file's query id for a query text (the harness passes the dataset's)"
            )
        if isinstance(queries, str | os.PathLike):
            queries = read_queries(queries)
        run = read_run_file(self.params.path, self.params.format)
        store = self.store
        if store.chunked:
            # a document stands for itself through its first chunk (the lowest row of its chunks)
            first_chunk = np.full(len(store.parent_ids), -1, dtype=np.int64)
            for row in range(len(store) - 1, -1, -1):
                first_chunk[int(store.parent_of[row])] = row
            row_of: Mapping[str, int] = {
                doc_id: int(first_chunk[index]) for doc_id, index in store.parent_row_of.items()
            }
        else:
            row_of = store.row_of
        stats = _FileStats(queries=len(run.rankings), lines=run.lines)
        stats.unknown_queries = sum(1 for query_id in run.rankings if query_id not in queries)
        self._rankings: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], int]] = {}
        for query_id, (doc_ids, scores) in run.rankings.items():
            rows = np.fromiter(
                (row_of.get(doc_id, -1) for doc_id in doc_ids), dtype=np.int64, count=len(doc_ids)
            )
            known = rows >= 0
            unknown = int(len(doc_ids) - np.count_nonzero(known))
            stats.unknown_doc_lines += unknown
            if query_id in queries:
                stats.unknown_lines += unknown
            else:  # every line of an unknown query is unknown, whatever its document
                stats.unknown_query_lines += len(doc_ids)
                stats.unknown_lines += len(doc_ids)
            self._rankings[query_id] = (rows[known], scores[known], unknown)
        ids_of_text: dict[str, list[str]] = {}
        for query_id, text in queries.items():
            ids_of_text.setdefault(text, []).append(query_id)
        for text, query_ids in ids_of_text.items():
            answered = [query_id for query_id in query_ids if query_id in run.rankings]
            stats.by_text[text] = answered[0] if answered else query_ids[0]
            if len(answered) > 1 and any(
                run.rankings[other][0] != run.rankings[answered[0]][0]
                or not np.array_equal(run.rankings[other][1], run.rankings[answered[0]][1])
                for other in answered[1:]
            ):
                stats.ambiguous_texts += 1
        self._stats = stats
        self._file_stats = {
            "file_queries": stats.queries,
            "file_lines": stats.lines,
            "file_unknown_queries": stats.unknown_queries,
            "file_unknown_doc_lines": stats.unknown_doc_lines,
            "file_ambiguous_texts": stats.ambiguous_texts,
        }
        parts = []
        if stats.unknown_queries:
            parts.append(
                f"{stats.unknown_query_lines:,} lines of {stats.unknown_queries:,} of its {stats.queries:,} "
                f"query ids, which are not among the {len(queries):,} queries"
            )
        if stats.unknown_doc_lines:
            parts.append(f"{stats.unknown_doc_lines:,} lines naming a document the store does not hold")
        share = stats.unknown_lines / stats.lines if stats.lines else 0.0
        counts = (
            f"{stats.unknown_lines:,} of {stats.lines:,} lines ({share:.1%}) name a query or a document "
            f"unknown here ({'; '.join(parts)})"
        )
        if stats.unknown_lines > self.params.max_unknown * stats.lines:
            raise ParamError(
                self.params.key("max_unknown"),
                f"run file {run.path}: {counts}: is it a run of another dataset? Refused above "
                f"max_unknown={self.params.max_unknown:g} of the lines; max_unknown: 1.0 on this "
                "retriever scores the known lines anyway",
            )
        warned = (run.sha256, stats.lines, stats.unknown_lines, len(queries), stats.ambiguous_texts)
        if (stats.unknown_lines or stats.ambiguous_texts) and warned not in _WARNED:
            _WARNED.add(warned)
            log.warning(
                "run file %s: %s, dropped (scored as not retrieved); %d query texts shared by ids "
                "ranked differently",
                run.path,
                counts,
                stats.ambiguous_texts,
            )

    @property
    def file_stats(self) -> dict[str, int]:
        """File-wide counts (see the module docstring)."""
        return dict(self._file_stats)

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        """The file's documents for each query (all of them: the kernel orders and cuts), inside
        the scope and filters."""
        mask = self.mask
        found = []
        for text in queries:
            query_id = self._stats.by_text.get(text)
            ranking = self._rankings.get(query_id) if query_id is not None else None
            if ranking is None:
                found.append(Candidates.empty())
                continue
            rows, scores, unknown = ranking
            if mask is not None:
                allowed = np.asarray(mask, dtype=np.bool_)[rows]
                rows, scores = rows[allowed], scores[allowed]
            found.append(Candidates.of(scores, rows, stats={**self._file_stats, "unknown_docs": unknown}))
        return found
