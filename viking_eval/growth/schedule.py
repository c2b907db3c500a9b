"""The growth schedule: which documents enter the memory at each step, and from which step each
question can be answered (docs/growth.md).

A document's step comes from ``growth.by`` (viking_eval/config/growth_settings.py): its metadata
value (LoCoMo's ``session``: step s adds session s of every conversation), its id order, or its
timestamp order. A question's evidence is the documents its qrels judge relevant (> 0); it is
first asked at the step its last evidence document enters, and again at every later step, so
it is never asked of a memory that cannot answer it. For LoCoMo the qrels' documents are the
turns its evidence ids name (``D3:5``: session 3, turn 5), so the step is the evidence's last
session. Questions with no relevant judged document are never asked (counted).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from retrievers.timeparse.stamps import parse_timestamp
from viking_eval.config.errors import ConfigError
from viking_eval.config.growth_settings import GrowthSettings
from viking_eval.data import BeirDataset, DataError

__all__ = ["Schedule", "Step", "plan_schedule"]


@dataclass(frozen=True)
class Step:
    """One step: its number (1 = the first), a label saying what it adds, and the ids added."""

    number: int
    label: str
    added: tuple[str, ...]


@dataclass(frozen=True)
class Schedule:
    """The steps in order, each document's step and each askable question's first step."""

    steps: tuple[Step, ...]
    step_of_doc: Mapping[str, int]
    first_step: Mapping[str, int]  # query id -> the step its last evidence document enters
    never_asked: tuple[str, ...]  # judged queries with no relevant document

    def in_memory(self, number: int) -> list[str]:
        """The ids of the documents in memory after step ``number`` (sorted)."""
        return sorted(doc for doc, step in self.step_of_doc.items() if step <= number)

    def asked(self, number: int, query_order: Sequence[str]) -> list[str]:
        """The questions asked after step ``number``, in ``query_order``."""
        return [qid for qid in query_order if qid in self.first_step and self.first_step[qid] <= number]

    def added_through(self, number: int) -> list[str]:
        """The ids added by the steps before and at ``number``, in the order they were added."""
        return [doc for step in self.steps[:number] for doc in step.added]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _metadata_value(dataset: BeirDataset, doc_id: str, key: str) -> Any:
    value = dataset.corpus[doc_id].metadata.get(key)
    if value is None:
        raise DataError(
            f"{dataset.folder}: dataset {dataset.name}: document {doc_id!r} has no metadata {key!r} "
            f"(growth.order_key); every document needs it, or use growth.by=id",
            path=dataset.folder,
        )
    return value


def _cut(ordered: Sequence[str], n_steps: int, what: str) -> list[list[str]]:
    """``ordered`` cut into ``n_steps`` contiguous runs of (nearly) equal length."""
    if n_steps > len(ordered):
        raise ConfigError("growth.steps", f"is {n_steps}, but there are only {len(ordered)} {what} to add")
    bounds = [round(i * len(ordered) / n_steps) for i in range(n_steps + 1)]
    return [list(ordered[bounds[i] : bounds[i + 1]]) for i in range(n_steps)]


def _by_metadata(dataset: BeirDataset, key: str, n_steps: int | None) -> list[tuple[str, list[str]]]:
    values = {doc_id: _metadata_value(dataset, doc_id, key) for doc_id in dataset.corpus}
    numeric = all(_is_number(value) for value in values.values())
    distinct = (
        sorted(set(values.values()), key=float) if numeric else sorted({str(v) for v in values.values()})
    )
    members: dict[Any, list[str]] = {value: [] for value in distinct}
    for doc_id in sorted(values):
        members[values[doc_id] if numeric else str(values[doc_id])].append(doc_id)
    groups = (
        [[value] for value in distinct] if n_steps is None else _cut(distinct, n_steps, f"values of {key}")
    )
    planned = []
    for group in groups:
        shown = str(group[0]) if len(group) == 1 else f"{group[0]}..{group[-1]}"
        planned.append((f"{key} {shown}", [doc for value in group for doc in members[value]]))
    return planned


def _id_order(ids: Sequence[str]) -> list[str]:
    """Ids in order: as numbers when every id is a decimal integer (ADI's ``1``..``82``), else as text."""
    if all(doc_id.isdecimal() for doc_id in ids):
        return sorted(ids, key=lambda doc_id: (int(doc_id), doc_id))
    return sorted(ids)


def _by_id(dataset: BeirDataset, n_steps: int) -> list[tuple[str, list[str]]]:
    runs = _cut(_id_order(list(dataset.corpus)), n_steps, "documents")
    return [(f"ids {run[0]}..{run[-1]}", run) for run in runs]


def _by_time(dataset: BeirDataset, key: str, n_steps: int) -> list[tuple[str, list[str]]]:
    stamps: dict[str, float] = {}
    for doc_id in dataset.corpus:
        value = _metadata_value(dataset, doc_id, key)
        parsed = parse_timestamp(value, tz=UTC, epoch_unit="s")
        if parsed is None:
            raise DataError(
                f"{dataset.folder}: dataset {dataset.name}: document {doc_id!r}: metadata {key!r} "
                f"(growth.order_key) holds {str(value)[:60]!r}, not a time (epoch seconds, ISO 8601, "
                "or '1:56 pm on 8 May, 2023')",
                path=dataset.folder,
            )
        stamps[doc_id] = parsed.timestamp()
    ordered = sorted(stamps, key=lambda doc_id: (stamps[doc_id], doc_id))
    return [(f"{key} up to step {i + 1}", run) for i, run in enumerate(_cut(ordered, n_steps, "documents"))]


def plan_schedule(dataset: BeirDataset, growth: GrowthSettings) -> Schedule:
    """The schedule of ``dataset`` under ``growth`` (``growth.by`` set)."""
    if growth.by == "metadata" and growth.order_key is not None:
        planned = _by_metadata(dataset, growth.order_key, growth.steps)
    elif growth.by == "id" and growth.steps is not None:
        planned = _by_id(dataset, growth.steps)
    elif growth.by == "time" and growth.order_key is not None and growth.steps is not None:
        planned = _by_time(dataset, growth.order_key, growth.steps)
    else:  # GrowthSettings.check refuses every other combination
        raise ConfigError("growth.by", f"is {growth.by!r}; choose metadata, id or time")
    steps = tuple(Step(number, label, tuple(added)) for number, (label, added) in enumerate(planned, start=1))
    step_of_doc = {doc: step.number for step in steps for doc in step.added}
    first_step: dict[str, int] = {}
    never: list[str] = []
    for query_id in dataset.queries:
        evidence = [doc for doc, grade in dataset.qrels.get(query_id, {}).items() if grade > 0]
        if evidence:
            first_step[query_id] = max(step_of_doc[doc] for doc in evidence)
        else:
            never.append(query_id)
    return Schedule(steps, step_of_doc, first_step, tuple(never))
