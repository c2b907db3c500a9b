"""Datasets of ``ir_datasets`` by name: ``dataset.name=irds:<id>`` (e.g. ``irds:beir/scifact/test``).

``ir_datasets`` (https://github.com/allenai/ir_datasets) knows hundreds of collections by id and
downloads them with checksums into ``IR_DATASETS_HOME`` (default ``~/.ir_datasets``).
:func:`load_irds` reads one id's documents, queries and qrels and returns the same validated
:class:`~viking_eval.data.dataset.BeirDataset` that :func:`~viking_eval.data.beir.load_beir` returns, with
the same guarantees (see ``viking_eval/data/beir.py``): ids without whitespace or control characters, unique
document and query ids, judgments naming unknown documents or queries dropped and counted (errors
with ``strict``), only judged queries kept, empty documents counted, graded relevance as ints.
Errors are one-line :class:`~viking_eval.data.errors.DataError`\\ s that name ``irds:<id>`` and the record
(``irds:<id>: docs record <n> (doc_id '<id>'): <what>``). Full guide: ``docs/datasets-irds.md``.

**Split.** The id chooses the queries and qrels (``beir/scifact/test`` is SciFact's test split,
``cranfield`` its only set of queries). ``split`` must be ``None``, the harness default ``test``, or
the id's own split label: the part of the id after the collection whose documents it uses
(:func:`ir_datasets.docs_parent_id`: ``test`` for ``beir/scifact/test``, ``dev/small`` for
``msmarco-passage/dev/small``; an id that is the collection itself, like ``cranfield``, is labelled
``test``). Anything else is an error saying which id to name instead, with one exception: a split
``irds:<other id>`` of the same collection loads that id (so a sweep can tune on
``dataset.tune_split=irds:beir/scifact/train`` and report on ``irds:beir/scifact/test``).

**Field mapping** and **checksums**: see :mod:`viking_eval.data.irds_records`. **Offline**: when
ir_datasets cannot get a file, the error is one line naming each file it wanted
(:mod:`viking_eval.data.irds_reading`).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from retrievers.types import Document
from viking_eval.data.dataset import BeirDataset, Query, assemble
from viking_eval.data.errors import DataError
from viking_eval.data.irds_reading import Reading, irds_home, offline_error
from viking_eval.data.irds_records import QUERY_FIELDS, TEXT_FIELDS, TITLE_FIELDS, Digest, Mapper, canonical

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

DEFAULT_SPLIT = "test"
"""The harness's default ``dataset.split``; also the label of an id that is a whole collection."""

_SUGGESTIONS = 6

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
    return irds_home() / bare.split("/")[0]


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
    dropped, counted and warned about (:class:`~viking_eval.data.judgments.DataWarning`). ``title_field``, ``text_field``,
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
    digests = {kind: Digest(where, version, kind) for kind in ("docs", "queries", "qrels")}
    doc_mapper = Mapper(where, "docs", title_field, text_field)
    query_mapper = Mapper(where, "queries", None, query_field)
    qrels_mapper = Mapper(where, "qrels")

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
                canonical({"_id": doc.id, "title": doc.title, "text": doc.text, "metadata": doc.metadata})
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
                canonical({"_id": query.id, "text": query.text, "metadata": query.metadata})
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

    with Reading(ir_datasets) as reading:
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
                raise offline_error(where, failures) from None
            kind, first = errors[0]
            what = " ".join(str(first).split())[:300]
            if isinstance(first, FileNotFoundError):
                what = f"file not found: {first.filename or what}"
            raise DataError(
                f"{where}: ir_datasets failed reading its {kind}: {type(first).__name__}: {what}",
                path=Path(where),
            ) from None

    def check_judged(query: Query) -> None:
        if not query.text.strip():
            number = list(all_queries).index(query.id) + 1
            raise query_mapper.fail(
                number,
                "judged query has empty text; a query without words would score 0 and skew every "
                "mean (name another field with query_field=...)",
                query.id,
            )

    def strict_error(what: str, first: int) -> DataError:
        return DataError(f"{where}: qrels: strict mode: {what}", path=Path(where), line=first)

    return assemble(
        name=where,
        split=label,
        folder=irds_home() / bare.split("/")[0],
        corpus=corpus,
        all_queries=all_queries,
        judged=judged,
        files={f"{where}#{kind}": digest.hexdigest() for kind, digest in digests.items()},
        strict=strict,
        position=record_of,
        unit="record",
        names=("its queries", "its docs"),
        strict_error=strict_error,
        dropped_where=f"{where}: qrels",
        check_judged=check_judged,
    )
