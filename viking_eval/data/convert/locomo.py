"""Converter for LoCoMo (``locomo10.json``): dialog turns as documents, QA items as queries.

LoCoMo (Maharana et al., ACL 2024) is ten long two-person conversations, each a list of dated
sessions of turns, with annotated questions whose ``evidence`` names the turns (``D<session>:
<turn>``) that answer them. The BEIR view: one document per turn (``<sample_id>_<dia_id>``, text
``"<speaker>: <turn text>"``), one query per QA item (``<sample_id>_q<index>``), a judgment of 1
for every evidence turn that exists, and ``sessions.jsonl`` with each session's date, turn ids and
the release's generated summaries, for hierarchical retrieval. Nothing is repaired: evidence ids
naming no turn give no judgment, as in the shared folder's PROVENANCE.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from viking_eval.data.convert._common import JsonSource, write_jsonl, write_qrels
from viking_eval.data.errors import DataError

__all__ = ["CATEGORY_NAMES", "convert_locomo"]

CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""LoCoMo category ids (paper Table 5 counts; ``task_eval/evaluation.py``)."""

_SAMPLE_KEYS = ("sample_id", "conversation", "qa", "session_summary", "observation", "event_summary")
_TURN_KEYS = ("speaker", "dia_id", "text")
_IMAGE_KEYS = ("img_url", "blip_caption", "query", "re-download")  # copied when present, in this order
_QA_KEYS = ("question", "evidence", "category")
_ANSWER_KEYS = ("answer", "adversarial_answer")  # copied when present, in this order
_SESSION_RE = re.compile(r"session_([0-9]+)")
_EVIDENCE_SPLIT = re.compile(r"[;\s]+")

Path_ = tuple[Any, ...]


def _require(source: JsonSource, obj: Any, path: Path_, keys: tuple[str, ...], what: str) -> None:
    if not isinstance(obj, dict):
        raise source.error(path, f"{what} must be a JSON object, got {type(obj).__name__}")
    for key in keys:
        if key not in obj:
            raise source.error(path, f"{what} is missing key {key!r}")


def _string(source: JsonSource, value: Any, path: Path_, what: str) -> str:
    if not isinstance(value, str):
        raise source.error(path, f"{what} must be a string, got {type(value).__name__}")
    return value


def _sessions(source: JsonSource, sample: dict[str, Any], index: int) -> list[int]:
    """Session numbers that hold turns (``conversation.session_<n>``), ascending. Some
    conversations also carry dates of sessions without turns; those are not sessions here."""
    conversation = sample["conversation"]
    path: Path_ = (index, "conversation")
    _require(source, conversation, path, ("speaker_a", "speaker_b"), "conversation")
    numbers = sorted(
        int(match.group(1)) for key in conversation if (match := _SESSION_RE.fullmatch(key)) is not None
    )
    if not numbers:
        raise source.error(path, "conversation has no session_<n> lists of turns")
    for number in numbers:
        if f"session_{number}_date_time" not in conversation:
            raise source.error(path, f"conversation is missing key 'session_{number}_date_time'")
        if not isinstance(conversation[f"session_{number}"], list):
            raise source.error((*path, f"session_{number}"), f"session_{number} must be a list of turns")
    return numbers


def _turns(
    source: JsonSource, sample: dict[str, Any], index: int, numbers: list[int]
) -> Iterator[dict[str, Any]]:
    sample_id = sample["sample_id"]
    conversation = sample["conversation"]
    for number in numbers:
        date = _string(
            source,
            conversation[f"session_{number}_date_time"],
            (index, "conversation", f"session_{number}_date_time"),
            "session date",
        )
        for position, turn in enumerate(conversation[f"session_{number}"]):
            path: Path_ = (index, "conversation", f"session_{number}", position)
            _require(source, turn, path, _TURN_KEYS, "turn")
            speaker = _string(source, turn["speaker"], (*path, "speaker"), "speaker")
            dia_id = _string(source, turn["dia_id"], (*path, "dia_id"), "dia_id")
            text = _string(source, turn["text"], (*path, "text"), "turn text")
            metadata: dict[str, Any] = {
                "conversation": sample_id,
                "session": number,
                "session_date_time": date,
                "speaker": speaker,
                "dia_id": dia_id,
                "turn_index": position,
            }
            metadata.update((key, turn[key]) for key in _IMAGE_KEYS if key in turn)
            yield {
                "_id": f"{sample_id}_{dia_id}",
                "title": "",
                "text": f"{speaker}: {text}",
                "metadata": metadata,
            }


def _queries(
    source: JsonSource, sample: dict[str, Any], index: int
) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """Each QA item as a query record, with its evidence ids split into single ids."""
    sample_id = sample["sample_id"]
    if not isinstance(sample["qa"], list):
        raise source.error((index, "qa"), "qa must be a list of question items")
    for position, item in enumerate(sample["qa"]):
        path: Path_ = (index, "qa", position)
        _require(source, item, path, _QA_KEYS, "QA item")
        category = item["category"]
        if isinstance(category, bool) or category not in CATEGORY_NAMES:
            raise source.error((*path, "category"), f"category must be one of 1-5, got {category!r}")
        if not any(key in item for key in _ANSWER_KEYS):
            raise source.error(path, "QA item is missing key 'answer' (or 'adversarial_answer')")
        evidence = item["evidence"]
        if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
            raise source.error((*path, "evidence"), "evidence must be a list of strings")
        metadata: dict[str, Any] = {
            "conversation": sample_id,
            "category": category,
            "category_name": CATEGORY_NAMES[category],
        }
        metadata.update((key, item[key]) for key in _ANSWER_KEYS if key in item)
        metadata["evidence_raw"] = evidence
        text = _string(source, item["question"], (*path, "question"), "question")
        ids = [part for entry in evidence for part in _EVIDENCE_SPLIT.split(entry) if part]
        yield {"_id": f"{sample_id}_q{position}", "text": text, "metadata": metadata}, ids


def _session_record(
    source: JsonSource, sample: dict[str, Any], index: int, number: int, turn_ids: list[str]
) -> dict[str, Any]:
    sample_id = sample["sample_id"]
    conversation = sample["conversation"]
    parts = {
        "session_summary_generated": ("session_summary", f"session_{number}_summary"),
        "observation_generated": ("observation", f"session_{number}_observation"),
        "event_summary_annotated": ("event_summary", f"events_session_{number}"),
    }
    record: dict[str, Any] = {
        "_id": f"{sample_id}_session_{number}",
        "conversation": sample_id,
        "session": number,
        "session_date_time": conversation[f"session_{number}_date_time"],
        "speaker_a": conversation["speaker_a"],
        "speaker_b": conversation["speaker_b"],
        "turn_ids": turn_ids,
    }
    for out_key, (section, key) in parts.items():
        table = sample[section]
        if not isinstance(table, dict):
            raise source.error((index, section), f"{section} must be a JSON object")
        if key not in table:
            raise source.error((index, section), f"{section} is missing key {key!r}")
        record[out_key] = table[key]
    return record


def convert_locomo(raw: Path, out: Path) -> list[str]:
    """Convert ``locomo10.json`` into ``corpus.jsonl``, ``queries.jsonl``, ``sessions.jsonl``
    and ``qrels/test.tsv`` in ``out``; return the relative paths written."""
    try:
        data = raw.read_bytes()
    except OSError as exc:
        raise DataError(f"{raw}: cannot read: {exc}") from None
    source = JsonSource(str(raw), data)
    samples = source.value
    if not isinstance(samples, list) or not samples:
        raise source.error((), "expected a non-empty JSON list of conversations (locomo10.json)")

    corpus: list[dict[str, Any]] = []
    queries: list[dict[str, Any]] = []
    sessions: list[dict[str, Any]] = []
    qrels: list[tuple[str, str, int]] = []
    seen_samples: set[str] = set()
    for index, sample in enumerate(samples):
        _require(source, sample, (index,), _SAMPLE_KEYS, "conversation sample")
        sample_id = _string(source, sample["sample_id"], (index, "sample_id"), "sample_id")
        if sample_id in seen_samples:
            raise source.error((index, "sample_id"), f"duplicate sample_id {sample_id!r}")
        seen_samples.add(sample_id)
        numbers = _sessions(source, sample, index)
        turns = list(_turns(source, sample, index, numbers))
        known: set[str] = set()
        for turn in turns:
            if turn["_id"] in known:
                raise source.error(
                    (index, "conversation"), f"duplicate dia_id {turn['metadata']['dia_id']!r}"
                )
            known.add(turn["_id"])
        corpus.extend(turns)
        for number in numbers:
            ids = [turn["_id"] for turn in turns if turn["metadata"]["session"] == number]
            sessions.append(_session_record(source, sample, index, number, ids))
        for query, evidence in _queries(source, sample, index):
            queries.append(query)
            judged: set[str] = set()
            for dia_id in evidence:
                doc_id = f"{sample_id}_{dia_id}"
                if doc_id in known and doc_id not in judged:
                    judged.add(doc_id)
                    qrels.append((query["_id"], doc_id, 1))

    write_jsonl(out / "corpus.jsonl", corpus)
    write_jsonl(out / "queries.jsonl", queries)
    write_jsonl(out / "sessions.jsonl", sessions)
    write_qrels(out / "qrels/test.tsv", qrels)
    return ["corpus.jsonl", "queries.jsonl", "sessions.jsonl", "qrels/test.tsv"]
