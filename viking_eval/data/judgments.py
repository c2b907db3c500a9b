"""Judgments (qrels) against the corpus and queries they were loaded with: which name an unknown
query or document, strict mode's refusal of them, the warning when they are dropped, and the
counts a dataset reports (:class:`DataIssues`). One account for both loaders, used through
their shared last step :func:`viking_eval.data.dataset.assemble`: BEIR folders
(:func:`viking_eval.data.beir.load_beir`) and ir_datasets collections
(:func:`viking_eval.data.irds.load_irds`).

Judgments are ``(query id, doc id)`` rows; a row naming an unknown query counts as an unknown
query only.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from retrievers.types import Document

__all__ = [
    "DataIssues",
    "DataWarning",
    "data_issues",
    "strict_mode_problems",
    "unknown_judgments",
    "warn_dropped_judgments",
]

_EXAMPLES = 3  # ids quoted in warnings about dropped judgments


class DataWarning(UserWarning):
    """A non-fatal data problem (dropped judgments); the counts are also in :class:`DataIssues`."""


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


def _examples(items: list[str]) -> str:
    shown = ", ".join(repr(item) for item in items[:_EXAMPLES])
    return shown + (", ..." if len(items) > _EXAMPLES else "")


def unknown_judgments(
    judged: Mapping[str, Mapping[str, int]], queries: Mapping[str, Any], corpus: Mapping[str, Any]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The ``(query, doc)`` judgments naming a query not in ``queries``, and those naming a known
    query but a document not in ``corpus``."""
    unknown_query_rows = [(q, d) for q, docs in judged.items() if q not in queries for d in docs]
    unknown_doc_rows = [(q, d) for q, docs in judged.items() if q in queries for d in docs if d not in corpus]
    return unknown_query_rows, unknown_doc_rows


def strict_mode_problems(
    unknown_query_rows: list[tuple[str, str]],
    unknown_doc_rows: list[tuple[str, str]],
    position: Mapping[tuple[str, str], int],
    unit: str,
    queries_name: str,
    corpus_name: str,
) -> tuple[str, int]:
    """Strict mode's refusal of :func:`unknown_judgments`: what is wrong, with the first such
    judgment of each kind (``position``: its ``unit``, a line or a record), and the first
    position of all."""
    problems = []
    if unknown_query_rows:
        q, _ = row = min(unknown_query_rows, key=lambda row: position[row])
        problems.append(
            f"{len(unknown_query_rows)} judgment(s) name query ids not in {queries_name} "
            f"(first: {unit} {position[row]}, query {q!r})"
        )
    if unknown_doc_rows:
        _, d = row = min(unknown_doc_rows, key=lambda row: position[row])
        problems.append(
            f"{len(unknown_doc_rows)} judgment(s) name doc ids not in {corpus_name} "
            f"(first: {unit} {position[row]}, doc {d!r})"
        )
    first = min(position[row] for row in unknown_query_rows + unknown_doc_rows)
    return "; ".join(problems), first


def warn_dropped_judgments(
    where: str, unknown_query_rows: list[tuple[str, str]], unknown_doc_rows: list[tuple[str, str]]
) -> None:
    """A ``DataWarning`` from ``where`` (the qrels' file or source) counting the judgments dropped
    because they name an unknown document or query, ``(query, doc)`` rows, with examples; nothing
    when none were. Warned at the loader's caller (through :func:`~viking_eval.data.dataset.assemble`)."""
    if not unknown_query_rows and not unknown_doc_rows:
        return
    parts = []
    if unknown_doc_rows:
        parts.append(
            f"{len(unknown_doc_rows)} naming unknown documents ({_examples(sorted({d for _, d in unknown_doc_rows}))})"
        )
    if unknown_query_rows:
        parts.append(
            f"{len(unknown_query_rows)} naming unknown queries ({_examples(sorted({q for q, _ in unknown_query_rows}))})"
        )
    warnings.warn(
        f"{where}: dropped judgments: {'; '.join(parts)}. Use strict=True to make this an error.",
        DataWarning,
        stacklevel=4,
    )


def data_issues(
    corpus: Mapping[str, Document],
    n_queries_read: int,
    n_queries_kept: int,
    unknown_query_rows: list[tuple[str, str]],
    unknown_doc_rows: list[tuple[str, str]],
) -> DataIssues:
    """What a loader counted and dropped (see :class:`DataIssues`)."""
    return DataIssues(
        qrels_unknown_docs=len(unknown_doc_rows),
        qrels_unknown_queries=len(unknown_query_rows),
        empty_documents=sum(1 for doc in corpus.values() if not doc.title.strip() and not doc.text.strip()),
        unjudged_queries=n_queries_read - n_queries_kept,
    )
