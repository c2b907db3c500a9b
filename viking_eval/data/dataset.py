"""The value every loader returns (:class:`BeirDataset` of queries and documents) and
the one step both loaders end with (:func:`assemble`): BEIR folders
(:func:`viking_eval.data.beir.load_beir`) and ir_datasets collections
(:func:`viking_eval.data.irds.load_irds`) read their documents, queries and judgments each their
own way, then hand them here to be cross-checked the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrievers.types import Document
from viking_eval.data.errors import DataError
from viking_eval.data.judgments import (
    DataIssues,
    data_issues,
    strict_mode_problems,
    unknown_judgments,
    warn_dropped_judgments,
)

__all__ = ["BeirDataset", "Query", "assemble"]


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


def assemble(
    *,
    name: str,
    split: str,
    folder: Path,
    corpus: dict[str, Document],
    all_queries: dict[str, Query],
    judged: Mapping[str, Mapping[str, int]],
    files: dict[str, str],
    strict: bool,
    position: Mapping[tuple[str, str], int],
    unit: str,
    names: tuple[str, str],
    strict_error: Callable[[str, int], DataError],
    dropped_where: str,
    check_judged: Callable[[Query], None] | None = None,
    checksums_verified: tuple[str, ...] = (),
) -> BeirDataset:
    """The :class:`BeirDataset` of what a loader read: ``corpus``, every query read
    (``all_queries``, in order) and the judgments ``judged`` (``position``: the ``unit``, a line
    or a record, each judgment came from).

    Judgments naming an unknown query or document are dropped, counted in ``issues`` and reported
    with a :class:`~viking_eval.data.judgments.DataWarning` from ``dropped_where``; with
    ``strict`` they are the error ``strict_error(what, first position)`` instead (``names``: how
    the message names the queries and the corpus). Only queries with at least one kept judgment
    are kept, in the order read, each first passed to ``check_judged`` (which may refuse it).
    """
    unknown_query_rows, unknown_doc_rows = unknown_judgments(judged, all_queries, corpus)
    if strict and (unknown_query_rows or unknown_doc_rows):
        what, first = strict_mode_problems(unknown_query_rows, unknown_doc_rows, position, unit, *names)
        raise strict_error(what, first)

    qrels: dict[str, dict[str, int]] = {}
    for query_id, query in all_queries.items():
        kept = {d: rel for d, rel in judged.get(query_id, {}).items() if d in corpus}
        if not kept:
            continue
        if check_judged is not None:
            check_judged(query)
        qrels[query_id] = kept
    queries = {query_id: all_queries[query_id] for query_id in qrels}

    warn_dropped_judgments(dropped_where, unknown_query_rows, unknown_doc_rows)
    issues = data_issues(corpus, len(all_queries), len(queries), unknown_query_rows, unknown_doc_rows)
    return BeirDataset(
        name=name,
        split=split,
        folder=folder,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        issues=issues,
        files=files,
        checksums_verified=checksums_verified,
    )
