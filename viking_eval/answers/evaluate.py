"""Answer metrics of each retriever's run (docs/answers.md).

Without a model: ``answer_recall@k`` (1 when one of the top-k documents holds the normalised
gold answer as whole tokens, DPR's top-k accuracy) and ``answer_token_recall@k`` (the share of
the answer's content tokens found in the top-k documents). With ``llm.*`` set: the reader answers
each question from the top-k documents, the judge grades that answer against the gold one
(``J``: 1 correct, 0 wrong) and ``answer_F1`` is SQuAD's token F1 of the two; per query the
tokens and cost of both calls (``llm_tokens``, ``llm_cost_usd``).

Only queries whose metadata holds a gold answer (``answers.answer_key``) are measured; the others
(LoCoMo's adversarial questions) are left out of every answer metric and counted, overall and per
group. The metrics join each retriever's ``metrics``, ``per_query`` (answered queries only) and
``groups``; ``answers`` holds the counts, intervals and usage. Gold answers are read here, from
query metadata, after retrieval: they never reach a retriever."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.llm import LLMError, parse_json_content
from viking_eval.answers import names
from viking_eval.answers.cache import ReplyCache
from viking_eval.answers.chat import Asked, LlmCaller, Request
from viking_eval.answers.prompts import JUDGE_FIELDS, READER_FIELDS, load_prompt
from viking_eval.answers.settings import AnswerSettings, LlmSettings
from viking_eval.answers.text import (
    answer_text,
    contains_answer,
    content_tokens,
    normalise,
    token_f1,
    token_recall,
)
from viking_eval.config.errors import ConfigError
from viking_eval.data import BeirDataset, Query
from viking_eval.measures.corrections import bootstrap_interval
from viking_eval.measures.significance import SignificanceSettings
from viking_eval.results.model import RetrieverResult

__all__ = ["answer_results", "check_answer_settings", "gold_answers", "parse_verdict", "recall_values"]

PerQuery = dict[str, dict[str, float]]  # metric -> query id -> value
NO_GROUP = "(none)"


def gold_answers(dataset: BeirDataset, key: str) -> dict[str, str]:
    """Each query's normalised gold answer, for the queries that have one (an answer that
    normalises to nothing, such as ``"-"``, counts as none)."""
    return queries_gold_answers(dataset.queries, key)


def queries_gold_answers(queries: Mapping[str, Query], key: str) -> dict[str, str]:
    """:func:`gold_answers` of a query file's queries (a benchmark checks each dataset's before
    any runs)."""
    gold = {}
    for query_id, query in queries.items():
        text = answer_text(query.metadata.get(key))
        normalised = normalise(text) if text is not None else ""
        if normalised:
            gold[query_id] = normalised
    return gold


def _texts(dataset: BeirDataset, ranking: Sequence[str], k: int) -> list[str]:
    return [normalise(dataset.corpus[doc_id].full_text) for doc_id in ranking[:k]]


def recall_values(
    dataset: BeirDataset, gold: Mapping[str, str], ranking: Mapping[str, Sequence[str]], k: int
) -> PerQuery:
    """``answer_recall@k`` and ``answer_token_recall@k`` of each answered query."""
    found: dict[str, float] = {}
    share: dict[str, float] = {}
    for query_id, answer in gold.items():
        texts = _texts(dataset, ranking.get(query_id, ()), k)
        found[query_id] = float(contains_answer(answer, texts))
        share[query_id] = token_recall(content_tokens(answer), texts)
    return {names.recall_name(k): found, names.token_recall_name(k): share}


def parse_verdict(content: str) -> float:
    """1.0 for CORRECT, 0.0 for WRONG: ``{"label": ...}`` (in a code fence or not) or the bare
    word; anything else is an ``LLMError("format")`` (asked again)."""
    word = content.strip().strip(".").upper()
    if word not in ("CORRECT", "WRONG"):
        value = parse_json_content(content)
        label = value.get("label") if isinstance(value, dict) else None
        word = label.strip().upper() if isinstance(label, str) else ""
    if word == "CORRECT":
        return 1.0
    if word == "WRONG":
        return 0.0
    raise LLMError("format", f'no verdict: expected {{"label": "CORRECT"}} or WRONG, got {content[:80]!r}')


def _answer(content: str) -> str:
    answer = content.strip()
    if not answer:
        raise LLMError("format", "an empty answer")
    return answer


def context_text(dataset: BeirDataset, ranking: Sequence[str], answers: AnswerSettings) -> str:
    """The reader's context: the top-k documents in rank order, each ``[metadata values] text``
    on its own lines, whole documents up to ``answers.max_context_chars``."""
    parts: list[str] = []
    used = 0
    for rank, doc_id in enumerate(ranking[: answers.k], 1):
        document = dataset.corpus[doc_id]
        shown = [str(document.metadata[key]) for key in answers.context_keys if key in document.metadata]
        part = f"{rank}. " + (f"[{'; '.join(shown)}] " if shown else "") + document.full_text
        if parts and used + len(part) > answers.max_context_chars:
            break
        parts.append(part)
        used += len(part) + 1
    return "\n".join(parts)


@dataclass(frozen=True)
class _Models:
    reader: LlmCaller
    judge: LlmCaller
    settings: LlmSettings


def _cost(settings: LlmSettings, asked: Sequence[Asked[Any]]) -> float:
    prompt = sum(reply.prompt_tokens for reply in asked)
    completion = sum(reply.completion_tokens for reply in asked)
    return (prompt * settings.price_input_per_mtok + completion * settings.price_output_per_mtok) / 1e6


def read_and_judge(
    models: _Models,
    answers: AnswerSettings,
    dataset: BeirDataset,
    gold: Mapping[str, str],
    ranking: Mapping[str, Sequence[str]],
) -> tuple[PerQuery, dict[str, Any]]:
    """J, answer_F1, llm_tokens and llm_cost_usd of each answered query, and the usage summary."""
    reader_prompt = load_prompt(answers.reader_prompt, "answers.reader_prompt", READER_FIELDS)
    judge_prompt = load_prompt(answers.judge_prompt, "answers.judge_prompt", JUDGE_FIELDS)
    query_ids = list(gold)
    read = models.reader.ask_all(
        [
            Request(
                qid,
                reader_prompt,
                {
                    "question": dataset.queries[qid].text,
                    "context": context_text(dataset, ranking.get(qid, ()), answers),
                },
            )
            for qid in query_ids
        ],
        _answer,
    )
    raw_gold = {
        qid: answer_text(dataset.queries[qid].metadata.get(answers.answer_key)) or "" for qid in query_ids
    }
    judged = models.judge.ask_all(
        [
            Request(
                qid,
                judge_prompt,
                {"question": dataset.queries[qid].text, "gold": raw_gold[qid], "answer": reply.value},
            )
            for qid, reply in zip(query_ids, read, strict=True)
        ],
        parse_verdict,
    )
    values: PerQuery = {names.J: {}, names.F1: {}, names.TOKENS: {}, names.COST: {}}
    for qid, reply, verdict in zip(query_ids, read, judged, strict=True):
        values[names.J][qid] = verdict.value
        values[names.F1][qid] = token_f1(normalise(reply.value), gold[qid])
        pair: list[Asked[Any]] = [reply, verdict]
        values[names.TOKENS][qid] = float(sum(r.prompt_tokens + r.completion_tokens for r in pair))
        values[names.COST][qid] = _cost(models.settings, pair)
    every: list[Asked[Any]] = [*read, *judged]
    fresh = [reply for reply in every if not reply.cached]
    usage = {
        "model": models.settings.model,
        "temperature": 0.0,
        "reader_prompt": reader_prompt.path,
        "judge_prompt": judge_prompt.path,
        "prices_per_mtok": {
            "input": models.settings.price_input_per_mtok,
            "output": models.settings.price_output_per_mtok,
        },
        "calls": len(every),
        "cache_hits": sum(reply.cached for reply in every),
        "prompt_tokens": sum(reply.prompt_tokens for reply in every),
        "completion_tokens": sum(reply.completion_tokens for reply in every),
        "cost_usd": _cost(models.settings, every),
        "cost_usd_this_run": _cost(models.settings, fresh),
        "usage_missing": sum(not reply.usage_known for reply in every),
        "reader": dataclasses.asdict(models.reader.usage),
        "judge": dataclasses.asdict(models.judge.usage),
    }
    return values, usage


def _mean(values: Mapping[str, float], query_ids: Sequence[str]) -> float:
    return math.fsum(values[qid] for qid in query_ids) / len(query_ids)


def _interval(values: Sequence[float], significance: SignificanceSettings) -> list[float] | None:
    """The bootstrap interval of a mean (run.significance's method, resamples, level, seed);
    None for fewer than 2 values (no interval)."""
    if len(values) < 2:
        return None
    sample = np.asarray(values, dtype=np.float64)
    interval = bootstrap_interval(
        sample,
        np.zeros_like(sample),
        confidence=significance.confidence,
        n_resamples=significance.bootstrap,
        method=significance.bootstrap_method,
        seed=significance.seed,
    )
    return [interval.low, interval.high]


def summarise(
    values: PerQuery,
    groups: Mapping[str, str],
    all_queries: Sequence[str],
    significance: SignificanceSettings,
) -> dict[str, Any]:
    """Counts, means per group, and intervals of J and answer_F1 (overall and per group)."""
    answered = sorted(next(iter(values.values())))
    means = [name for name in values if name not in (names.TOKENS, names.COST)]
    with_interval = [name for name in (names.J, names.F1) if name in values]

    def block(query_ids: Sequence[str], members: Sequence[str]) -> dict[str, Any]:
        entry: dict[str, Any] = {"n_queries": len(members), "n_with_answer": len(query_ids)}
        if query_ids:
            entry["metrics"] = {name: _mean(values[name], query_ids) for name in means}
            entry["intervals"] = {
                name: _interval([values[name][q] for q in query_ids], significance) for name in with_interval
            }
        return entry

    by_group: dict[str, list[str]] = {}
    for query_id in all_queries:
        by_group.setdefault(groups.get(query_id, NO_GROUP), []).append(query_id)
    answered_set = set(answered)
    return {
        **block(answered, list(all_queries)),
        "n_without_answer": len(all_queries) - len(answered),
        "confidence": significance.confidence,
        "groups": {
            group: block([q for q in members if q in answered_set], members)
            for group, members in sorted(by_group.items())
        }
        if groups
        else {},
    }


def with_answers(result: RetrieverResult, values: PerQuery, summary: dict[str, Any]) -> RetrieverResult:
    """``result`` with the answer metrics in its metrics (means; tokens and cost as totals),
    per-query values and groups, and ``answers`` set to ``summary``."""
    metrics = dict(result.metrics)
    for name, by_query in values.items():
        total = math.fsum(by_query.values())
        metrics[name] = (
            total if name in (names.TOKENS, names.COST) else (total / len(by_query) if by_query else math.nan)
        )
    groups = {group: dict(entry) for group, entry in result.groups.items()}
    for group, entry in summary["groups"].items():
        if group in groups and "metrics" in entry:
            groups[group]["metrics"] = {**groups[group]["metrics"], **entry["metrics"]}
            groups[group]["n_with_answer"] = entry["n_with_answer"]
    return dataclasses.replace(
        result, metrics=metrics, per_query={**result.per_query, **values}, groups=groups, answers=summary
    )


def answer_results(
    results: Sequence[RetrieverResult],
    answers: AnswerSettings,
    llm: LlmSettings,
    dataset: BeirDataset,
    *,
    ranking_of: Callable[[str], Mapping[str, Sequence[str]]],
    group_key: str | None,
    significance: SignificanceSettings,
    cache_root: Path | None,
) -> list[RetrieverResult]:
    """Every result with its answer metrics (see the module docstring); ``ranking_of(name)``
    gives a retriever's ranked document ids per query (its run file)."""
    gold = gold_answers(dataset, answers.answer_key)  # check_answer_settings: not empty
    groups = (
        {qid: str(q.metadata.get(group_key, NO_GROUP)) for qid, q in dataset.queries.items()}
        if group_key
        else {}
    )
    cache = ReplyCache(cache_root)
    finished = []
    for result in results:
        ranking = ranking_of(result.name)
        values = recall_values(dataset, gold, ranking, answers.k)
        usage = None
        if llm.configured:  # callers per retriever: their counts are this retriever's
            models = _Models(LlmCaller(llm, cache, "reader"), LlmCaller(llm, cache, "judge"), llm)
            llm_values, usage = read_and_judge(models, answers, dataset, gold, ranking)
            values.update(llm_values)
        summary = {
            "k": answers.k,
            "answer_key": answers.answer_key,
            **summarise(values, groups, list(dataset.queries), significance),
        }
        if usage is not None:
            summary["llm"] = usage
        finished.append(with_answers(result, values, summary))
    return finished


def check_answer_settings(
    answers: AnswerSettings, llm: LlmSettings, dataset: BeirDataset, writes_run_files: bool
) -> None:
    """Before any retrieval: answers need the run files (a run folder), gold answers in the
    queries' metadata, and prompts that load."""
    if not answers.enabled:
        return
    if not writes_run_files:
        raise ConfigError(
            "answers.enabled",
            "answers are read from the run files: give the run an output folder (output_dir) "
            "or set answers.enabled=false",
        )
    if not gold_answers(dataset, answers.answer_key):
        carried = sorted({key for query in dataset.queries.values() for key in query.metadata})
        raise ConfigError(
            "answers.answer_key",
            f"no query of {dataset.name} has a gold answer under {answers.answer_key!r}; "
            f"its queries' metadata keys: {carried or 'none'}",
        )
    if llm.configured:
        load_prompt(answers.reader_prompt, "answers.reader_prompt", READER_FIELDS)
        load_prompt(answers.judge_prompt, "answers.judge_prompt", JUDGE_FIELDS)
