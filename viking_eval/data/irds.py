"""Datasets of ``ir_datasets`` by name: ``dataset.name=irds:<id>`` (e.g. ``irds:beir/scifact/test``).

``ir_datasets`` (https://github.com/allenai/ir_datasets) knows hundreds of collections by id and
downloads them with checksums into ``IR_DATASETS_HOME`` (default ``~/.ir_datasets``).
:func:`load_irds` reads one id's documents, queries and qrels and returns the same validated
:class:`~viking_eval.data.BeirDataset` that :func:`~viking_eval.data.load_beir` returns, with the
same guarantees (see ``viking_eval/data.py``): ids without whitespace or control characters, unique
document and query ids, judgments naming unknown documents or queries dropped and counted (errors
with ``strict``), only judged queries kept, empty documents counted, graded relevance as ints.
Errors are one-line :class:`~viking_eval.data.DataError`\\ s that name ``irds:<id>`` and the record
(``irds:<id>: docs record <n> (doc_id '<id>'): <what>``). Full guide: ``docs/datasets-irds.md``.

**Split.** The id chooses the queries and qrels (``beir/scifact/test`` is SciFact's test split,
``cranfield`` its only set of queries). ``split`` must be ``None``, the harness default ``test``, or
the id's own split label: the part of the id after the collection whose documents it uses
(:func:`ir_datasets.docs_parent_id`: ``test`` for ``beir/scifact/test``, ``dev/small`` for
``msmarco-passage/dev/small``; an id that is the collection itself, like ``cranfield``, is labelled
``test``). Anything else is an error saying which id to name instead, with one exception: a split
``irds:<other id>`` of the same collection loads that id (so a sweep can tune on
``dataset.tune_split=irds:beir/scifact/train`` and report on ``irds:beir/scifact/test``).

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

**Offline.** When ir_datasets cannot get a file (no network, a host down, a file it cannot
download itself), the error is one line naming each file it wanted (URL, md5), where to put it
(ir_datasets then uses it as is), and ``IR_DATASETS_HOME``. ir_datasets' own log lines about the
failed attempts are held back while loading: replayed if the load succeeds, dropped with the error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import difflib
import enum
import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from retrievers.types import Document
from viking_eval.data import BeirDataset, DataError, Query, id_problem
from viking_eval.judgments import data_issues, strict_mode_problems, unknown_judgments, warn_dropped_judgments

__all__ = [
    "IRDS_PREFIX",
    "QUERY_FIELDS",
    "TEXT_FIELDS",
    "TITLE_FIELDS",
    "irds_folder",
    "is_irds_name",
    "load_irds",
    "split_label",
]

IRDS_PREFIX = "irds:"
"""Dataset names starting with this are ir_datasets ids (``dataset.name=irds:beir/scifact/test``)."""

TITLE_FIELDS = ("title", "headline", "page_title", "document_title")
"""Document fields tried, in order, for a document's title."""

TEXT_FIELDS = ("text", "body", "abstract", "contents", "passage", "code")
"""Document fields tried, in order, for a document's text (a string field; raw ``bytes`` bodies are not)."""

QUERY_FIELDS = ("text", "title", "query")
"""Query fields tried, in order, for a query's text."""

DEFAULT_SPLIT = "test"
"""The harness's default ``dataset.split``; also the label of an id that is a whole collection."""

_SUGGESTIONS = 6
_LOGGER = "ir_datasets"  # every ir_datasets module logs through this one logger (ir_datasets.log.easy)
_DROP = object()  # a metadata value left out (bytes)


# --------------------------------------------------------------------------- names


def is_irds_name(name: str) -> bool:
    """Whether a dataset name (``dataset.name``) names an ir_datasets id."""
    return isinstance(name, str) and name.startswith(IRDS_PREFIX)


def _bare_id(dataset_id: str) -> str:
    """``dataset_id`` without the ``irds:`` prefix, checked for shape."""
    bare = dataset_id[len(IRDS_PREFIX) :] if is_irds_name(dataset_id) else dataset_id
    if not bare or bare != bare.strip() or any(ch.isspace() for ch in bare):
        raise DataError(
            f"{IRDS_PREFIX}{bare}: not an ir_datasets id (ids have no spaces, e.g. "
            f"'{IRDS_PREFIX}beir/scifact/test'); list them with `python -m ir_datasets list`",
            path=Path(f"{IRDS_PREFIX}{bare}"),
        )
    return bare


def _import_irds() -> Any:
    try:
        import ir_datasets
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        raise DataError(
            f"irds: datasets need the ir_datasets package ({exc}); install it with "
            "`pip install 'ir-datasets>=0.6'`"
        ) from None
    return ir_datasets


def _lookup(ir_datasets: Any, bare: str) -> Any:
    """The registered dataset ``bare``; an unknown id is one line listing similar ids."""
    try:
        return ir_datasets.load(bare)
    except KeyError:
        pass
    names = sorted(ir_datasets.registry)
    similar = [name for name in names if name.startswith(bare + "/")][:_SUGGESTIONS]
    for name in difflib.get_close_matches(bare, names, n=_SUGGESTIONS, cutoff=0.6):
        if name not in similar:
            similar.append(name)
    hint = f"similar ids: {', '.join(similar[:_SUGGESTIONS])}" if similar else "no similar id"
    raise DataError(
        f"{IRDS_PREFIX}{bare}: unknown ir_datasets id (ir_datasets {ir_datasets.__version__} knows "
        f"{len(names)}; {hint}); list them with `python -m ir_datasets list`",
        path=Path(f"{IRDS_PREFIX}{bare}"),
    )


def _docs_parent(ir_datasets: Any, bare: str) -> str:
    try:
        return str(ir_datasets.docs_parent_id(bare))
    except Exception:  # a dataset without docs: it is its own collection
        return bare


def split_label(dataset_id: str) -> str:
    """The split an ir_datasets id stands for: the part of the id after the collection whose
    documents it uses (``test`` for ``beir/scifact/test``, ``dev/small`` for
    ``msmarco-passage/dev/small``), or ``test`` for an id that is a whole collection."""
    ir_datasets = _import_irds()
    bare = _bare_id(dataset_id)
    _lookup(ir_datasets, bare)
    return _split_label(ir_datasets, bare)


def _split_label(ir_datasets: Any, bare: str) -> str:
    parent = _docs_parent(ir_datasets, bare)
    if bare != parent and bare.startswith(parent + "/"):
        return bare[len(parent) + 1 :]
    return DEFAULT_SPLIT


def _evaluable_ids(ir_datasets: Any, collection: str) -> list[str]:
    """Ids of ``collection`` (itself and ids under it) that have documents, queries and qrels."""
    found = []
    for name in sorted(ir_datasets.registry):
        if name != collection and not name.startswith(collection + "/"):
            continue
        try:
            dataset = ir_datasets.registry[name]
            if dataset.has_docs() and dataset.has_queries() and dataset.has_qrels():
                found.append(name)
        except Exception:
            continue
    return found


def irds_folder(dataset_id: str) -> Path:
    """Where ir_datasets keeps the files of ``dataset_id`` (checked to be a known id):
    ``IR_DATASETS_HOME/<first part of the id>``. It is the :attr:`BeirDataset.folder` of an irds
    dataset; it holds no ``qrels/`` folder, so sweeps with ``tune_split: auto`` tune on a seeded
    half of the queries (or name ``tune_split: irds:<id of the tuning split>``)."""
    ir_datasets = _import_irds()
    bare = _bare_id(dataset_id)
    _lookup(ir_datasets, bare)
    return _home() / bare.split("/")[0]


def _home() -> Path:
    """ir_datasets' data folder (``ir_datasets.util.home_path()``, without creating it)."""
    return Path(os.environ.get("IR_DATASETS_HOME") or Path.home() / ".ir_datasets").expanduser()


# --------------------------------------------------------------------------- records


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
        return _jsonable(value._asdict())
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
class _Mapper:
    """Turns one kind of ir_datasets record (docs, queries or qrels) into the harness's values
    under the field mapping of the module docstring; its errors name the id and the record."""

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


def _canonical(payload: Any) -> bytes:
    return (json.dumps(payload, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


class _Digest:
    """sha256 over what one part of the dataset gave, prefixed with the id and library version."""

    def __init__(self, where: str, version: str, kind: str) -> None:
        self._hash = hashlib.sha256(f"{where}\nir_datasets {version}\n{kind}\n".encode())

    def add(self, data: bytes) -> None:
        self._hash.update(data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


# --------------------------------------------------------------------------- reading


class _HeldLogs(logging.Filter):
    """Holds ir_datasets' log records while a dataset is read (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


class _Reading:
    """One load: ir_datasets' logs held back, and each ``Download`` that failed recorded (the
    ``path``/``stream`` methods of ``ir_datasets.util.Download`` are wrapped for the duration, so
    an offline error can say which file ir_datasets wanted and where it would look for it)."""

    def __init__(self, ir_datasets: Any) -> None:
        self.ir_datasets = ir_datasets
        self.failed: list[tuple[Any, BaseException]] = []
        self.held = _HeldLogs()
        self._restore: list[Callable[[], None]] = []

    def __enter__(self) -> _Reading:
        logger = logging.getLogger(_LOGGER)
        logger.addFilter(self.held)
        self._restore.append(lambda: logger.removeFilter(self.held))
        download_cls = self.ir_datasets.util.Download
        original_path, original_stream = download_cls.path, download_cls.stream
        failed = self.failed

        def path(download: Any, force: bool = True) -> Any:
            try:
                return original_path(download, force)
            except Exception as exc:
                failed.append((download, exc))
                raise

        @contextlib.contextmanager
        def stream(download: Any) -> Iterator[Any]:
            try:
                with original_stream(download) as handle:
                    yield handle
            except Exception as exc:
                failed.append((download, exc))
                raise

        download_cls.path, download_cls.stream = path, stream

        def restore() -> None:
            download_cls.path, download_cls.stream = original_path, original_stream

        self._restore.append(restore)
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        for undo in reversed(self._restore):
            undo()
        if error is None or not isinstance(error, DataError):
            logger = logging.getLogger(_LOGGER)
            for record in self.held.records:  # the load worked: say what ir_datasets said
                logger.handle(record)

    def download_failures(self) -> list[tuple[Any, BaseException]]:
        """Failed downloads (network, checksum, a file ir_datasets cannot fetch), each once."""
        seen: set[int] = set()
        out = []
        for download, exc in self.failed:
            if id(download) in seen or not _is_download_error(exc):
                continue
            seen.add(id(download))
            out.append((download, exc))
        return out


def _is_download_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError):  # FileNotFoundError, HashVerificationError (an IOError), disk full
        return True
    if isinstance(exc, RuntimeError) and exc.args and exc.args[0] == "All download sources failed":
        return True
    try:
        import requests
    except ImportError:  # pragma: no cover - a dependency of ir_datasets
        return False
    return isinstance(exc, requests.RequestException)


def _reason(exc: BaseException) -> str:
    """A few words on why a download failed."""
    if isinstance(exc, RuntimeError) and len(exc.args) > 1 and isinstance(exc.args[1], list):
        reasons = [_reason(inner) for _, inner in exc.args[1] if isinstance(inner, BaseException)]
        return "; ".join(dict.fromkeys(reasons)) or "every source failed"
    try:
        import requests
    except ImportError:  # pragma: no cover
        requests = None  # type: ignore[assignment]
    if requests is not None:
        if isinstance(exc, requests.ConnectionError) and not isinstance(exc, requests.Timeout):
            return "cannot connect (no network, or the host is down)"
        if isinstance(exc, requests.Timeout):
            return "timed out"
        if isinstance(exc, requests.HTTPError):
            status = getattr(getattr(exc, "response", None), "status_code", None)
            return f"HTTP {status}" if status else "HTTP error"
    if isinstance(exc, FileNotFoundError):
        return "not there"
    if type(exc).__name__ == "HashVerificationError":
        return f"checksum mismatch ({' '.join(str(exc).split())[:160]})"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"


def _wanted(download: Any) -> str:
    """What ir_datasets wanted for one failed download (URL and md5, or its own instructions for
    a file it cannot fetch), and where a copy would be picked up as it is."""
    mirrors = list(getattr(download, "mirrors", []) or [])
    urls = [str(m.url) for m in mirrors if getattr(m, "url", None)]
    uris = [str(m.uri) for m in mirrors if getattr(m, "uri", None)]
    locals_ = [m for m in mirrors if type(m).__name__ == "LocalDownload"]
    cache_path = getattr(download, "_cache_path", None)
    md5 = getattr(download, "expected_md5", None)
    target = cache_path if cache_path and cache_path != os.devnull else None
    if target is None and locals_:
        target = str(locals_[0]._path)
    source = (urls or uris or [None])[0]
    if source:
        what = source + (f" (md5 {md5})" if md5 else "")
    else:  # a file ir_datasets cannot download: it says how to get it
        message = " ".join(str(getattr(locals_[0], "_message", "") or "").split()) if locals_ else ""
        first = re.split(r"(?<=[.!?])\s", message, maxsplit=1)[0] if message else ""
        what = "a file ir_datasets cannot download itself" + (f" ({first[:200]})" if first else "")
    return what + (f" -> put it at {target}" if target else "")


def _offline_error(where: str, failures: list[tuple[Any, BaseException]]) -> DataError:
    reasons: dict[str, list[str]] = {}  # one entry per file, however many parts of the dataset want it
    for download, exc in failures:
        reasons.setdefault(_wanted(download), [])
        for reason in _reason(exc).split("; "):
            if reason not in reasons[_wanted(download)]:
                reasons[_wanted(download)].append(reason)
    wanted = "; ".join(f"{file} [{'; '.join(why)}]" for file, why in reasons.items())
    count = f"{len(reasons)} files" if len(reasons) > 1 else "a file"
    return DataError(
        f"{where}: ir_datasets could not get {count} it needs: {wanted}. Fetch each where there is a "
        f"network and put it there (check its md5: ir_datasets uses a file found there as it is), or "
        f"set IR_DATASETS_HOME (now {_home()}) to a folder where ir_datasets already holds this "
        "collection",
        path=Path(where),
    )


# --------------------------------------------------------------------------- loading


def load_irds(
    dataset_id: str,
    split: str | None = None,
    *,
    strict: bool = False,
    title_field: str | None = None,
    text_field: str | None = None,
    query_field: str | None = None,
) -> BeirDataset:
    """Load the ir_datasets collection ``dataset_id`` (``beir/scifact/test`` or
    ``irds:beir/scifact/test``) as a validated :class:`BeirDataset` named ``irds:<id>``.

    ``split``: ``None``, ``"test"`` (the harness default) or the id's own label (see
    :func:`split_label`); ``irds:<other id>`` of the same collection loads that id instead.
    ``strict``: judgments naming unknown documents or queries are errors instead of being
    dropped, counted and warned about (:class:`~viking_eval.judgments.DataWarning`). ``title_field``, ``text_field``,
    ``query_field``: use these record fields instead of the default mapping (module docstring).
    Every problem is a one-line :class:`DataError` naming ``irds:<id>``.
    """
    ir_datasets = _import_irds()
    bare = _bare_id(dataset_id)
    where = f"{IRDS_PREFIX}{bare}"
    dataset = _lookup(ir_datasets, bare)
    collection = _docs_parent(ir_datasets, bare)
    label = _split_label(ir_datasets, bare)

    if split is not None and is_irds_name(split) and _bare_id(split) != bare:
        # another id of the same collection (a sweep's tune_split): load that one
        other = _bare_id(split)
        _lookup(ir_datasets, other)
        if _docs_parent(ir_datasets, other) != collection:
            raise DataError(
                f"{where}: split {split!r} is not an id of the same collection ({collection!r}); "
                f"ids of it with qrels: {', '.join(_evaluable_ids(ir_datasets, collection)) or 'none'}",
                path=Path(where),
            )
        return load_irds(
            other,
            None,
            strict=strict,
            title_field=title_field,
            text_field=text_field,
            query_field=query_field,
        )
    if split is not None and split not in (DEFAULT_SPLIT, label, where):
        ids = _evaluable_ids(ir_datasets, collection)
        wanted = f"{collection}/{split}"
        hint = (
            f"set dataset.name={IRDS_PREFIX}{wanted}"
            if wanted in ids
            else f"name one of its ids instead: {', '.join(ids) or 'none with qrels'}"
        )
        raise DataError(
            f"{where}: split {split!r} does not match the id, which is split {label!r} of "
            f"{collection!r} (the ir_datasets id chooses the queries and qrels; leave dataset.split "
            f"at {DEFAULT_SPLIT!r}); {hint}",
            path=Path(where),
        )

    missing = [kind for kind in ("docs", "queries", "qrels") if not dataset.has(kind)]
    if missing:
        ids = [name for name in _evaluable_ids(ir_datasets, collection) if name != bare]
        raise DataError(
            f"{where}: has no {' and no '.join(missing)}, so there is nothing to evaluate; ids of "
            f"{collection!r} with documents, queries and qrels: {', '.join(ids) or 'none'}",
            path=Path(where),
        )

    version = str(ir_datasets.__version__)
    digests = {kind: _Digest(where, version, kind) for kind in ("docs", "queries", "qrels")}
    doc_mapper = _Mapper(where, "docs", title_field, text_field)
    query_mapper = _Mapper(where, "queries", None, query_field)
    qrels_mapper = _Mapper(where, "qrels")

    corpus: dict[str, Document] = {}
    all_queries: dict[str, Query] = {}
    judged: dict[str, dict[str, int]] = {}
    record_of: dict[tuple[str, str], int] = {}

    def read_docs() -> None:
        first: dict[str, int] = {}
        for number, record in enumerate(dataset.docs_iter(), start=1):
            doc = doc_mapper.document(number, record)
            if doc.id in first:
                raise doc_mapper.fail(number, f"duplicate doc_id (first at record {first[doc.id]})", doc.id)
            first[doc.id] = number
            corpus[doc.id] = doc
            digests["docs"].add(
                _canonical({"_id": doc.id, "title": doc.title, "text": doc.text, "metadata": doc.metadata})
            )
        if not corpus:
            raise DataError(f"{where}: ir_datasets gave no documents", path=Path(where))

    def read_queries() -> None:
        first: dict[str, int] = {}
        for number, record in enumerate(dataset.queries_iter(), start=1):
            query = query_mapper.query(number, record)
            if query.id in first:
                raise query_mapper.fail(
                    number, f"duplicate query_id (first at record {first[query.id]})", query.id
                )
            first[query.id] = number
            all_queries[query.id] = query
            digests["queries"].add(
                _canonical({"_id": query.id, "text": query.text, "metadata": query.metadata})
            )
        if not all_queries:
            raise DataError(f"{where}: ir_datasets gave no queries", path=Path(where))

    def read_qrels() -> None:
        for number, record in enumerate(dataset.qrels_iter(), start=1):
            query_id, doc_id, relevance = qrels_mapper.judgment(number, record)
            judgments = judged.setdefault(query_id, {})
            if doc_id in judgments and judgments[doc_id] != relevance:
                raise qrels_mapper.fail(
                    number,
                    f"judgment ({query_id!r}, {doc_id!r}) = {relevance} contradicts record "
                    f"{record_of[(query_id, doc_id)]} (= {judgments[doc_id]}); graded per-subtopic or "
                    "per-passage qrels cannot be evaluated as one relevance per document",
                )
            judgments[doc_id] = relevance
            record_of.setdefault((query_id, doc_id), number)
            digests["qrels"].add(f"{query_id}\t{doc_id}\t{relevance}\n".encode())
        if not judged:
            raise DataError(f"{where}: ir_datasets gave no judgments", path=Path(where))

    with _Reading(ir_datasets) as reading:
        errors: list[tuple[str, BaseException]] = []
        for kind, read in (("docs", read_docs), ("queries", read_queries), ("qrels", read_qrels)):
            try:
                read()
            except DataError:
                raise
            except Exception as exc:  # a download or a parse in ir_datasets; the others may say more
                errors.append((kind, exc))
        if errors:
            failures = reading.download_failures()
            if failures:
                raise _offline_error(where, failures) from None
            kind, exc = errors[0]
            what = " ".join(str(exc).split())[:300]
            if isinstance(exc, FileNotFoundError):
                what = f"file not found: {exc.filename or what}"
            raise DataError(
                f"{where}: ir_datasets failed reading its {kind}: {type(exc).__name__}: {what}",
                path=Path(where),
            ) from None

    unknown_query_rows, unknown_doc_rows = unknown_judgments(judged, all_queries, corpus)
    if strict and (unknown_query_rows or unknown_doc_rows):
        what, first = strict_mode_problems(
            unknown_query_rows, unknown_doc_rows, record_of, "record", "its queries", "its docs"
        )
        raise DataError(f"{where}: qrels: strict mode: {what}", path=Path(where), line=first)

    qrels: dict[str, dict[str, int]] = {}
    for query_id, query in all_queries.items():
        kept = {d: rel for d, rel in judged.get(query_id, {}).items() if d in corpus}
        if not kept:
            continue
        if not query.text.strip():
            number = list(all_queries).index(query_id) + 1
            raise query_mapper.fail(
                number,
                "judged query has empty text; a query without words would score 0 and skew every "
                "mean (name another field with query_field=...)",
                query_id,
            )
        qrels[query_id] = kept
    queries = {query_id: all_queries[query_id] for query_id in qrels}

    warn_dropped_judgments(f"{where}: qrels", unknown_query_rows, unknown_doc_rows)
    issues = data_issues(corpus, len(all_queries), len(queries), unknown_query_rows, unknown_doc_rows)
    return BeirDataset(
        name=where,
        split=label,
        folder=_home() / bare.split("/")[0],
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        issues=issues,
        files={f"{where}#{kind}": digest.hexdigest() for kind, digest in digests.items()},
    )
