"""Effectiveness metrics through ir-measures (trec_eval's definitions, via pytrec_eval, and every
other tool ir-measures drives in memory: cwl_eval, gdeval, compat, accuracy).

Metric names are strings in the config, parsed by ir-measures (``nDCG@10``, ``R@100``, ``RR@10``,
``AP@100``, ``P@5``, ``Judged@10``, ``ERR@20``, ``RBP(p=0.8,rel=1)``, ``SDCG(max_rel=2)@10``,
``INST(T=3.0,max_rel=2)``, ``Compat(p=0.8)``, ...). Each measure goes to the first tool of
:data:`PROVIDERS` that computes it, so the measures pytrec_eval computes keep its numbers.
Intent-aware measures (alpha-nDCG, ERR-IA, NRBP, ...) are refused: they need judgments per query
*subtopic*, which no dataset here carries (ir-measures would compute them over one subtopic per
query and only warn). A few common spellings are accepted as aliases
(``Recall@k`` -> ``R@k``, ``MRR@k`` -> ``RR@k``, ``MAP@k`` -> ``AP@k``); results are keyed by the
name as the config wrote it. Two names of one measure (``R@10`` and ``Recall@10``) each get the
measure's value: it is computed once and reported under both names.

Ties: trec_eval orders tied scores by doc id *descending*, other tools differently. Before any
metric is computed, each query's run is sorted by (score desc, doc id asc) and the scores are
replaced by rank-derived values, so every tool sees the same order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ir_measures

from retrievers.ranking import pair_key

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

_ALIASES = [
    (re.compile(r"^(?:Recall|recall)(@\d+)?$"), "R"),
    (re.compile(r"^(?:MRR|mrr)(@\d+)?$"), "RR"),
    (re.compile(r"^(?:MAP|map)(@\d+)?$"), "AP"),
    (re.compile(r"^(?:NDCG|ndcg)(@\d+)?$"), "nDCG"),
]

EXAMPLE_METRICS = "nDCG@10, R@100, RR@10, AP@100, P@5, Judged@10 (aliases: Recall@k, MRR@k, MAP@k)"

#: the ir-measures providers used, in order of preference: a measure goes to the first that computes
#: it (pytrec_eval first: the measures it computes keep its numbers); pyndeval's intent-aware
#: measures are refused (:data:`INTENT_AWARE`), and a measure none of these computes is refused at
#: start-up
PROVIDERS = ("pytrec_eval", "judged", "msmarco", "cwl_eval", "gdeval", "compat", "accuracy")
#: the provider whose measures need subtopic (intent-aware) judgments
INTENT_AWARE = "pyndeval"
#: where the measure names and their parameters are listed
MEASURES_DOC = "https://ir-measur.es/en/latest/measures.html"
#: gdeval (ERR@k) refuses judgments above this grade
_GDEVAL_MAX_GRADE = 4


class MetricError(ValueError):
    """An unknown or malformed metric name."""


@dataclass(frozen=True)
class Metric:
    name: str  # as written in the config; the key in every output
    measure: ir_measures.measures.Measure


def accepted_measures() -> list[str]:
    """The measure names :func:`parse_metric` accepts (before ``@k`` or parameters)."""
    names = {
        measure.NAME
        for key in PROVIDERS
        for measure in _provider(key).SUPPORTED_MEASURES
        if measure.NAME is not None  # Optional on ir-measures' base class; every measure sets it
    }
    return sorted(names, key=str.lower)


def _accepted_text() -> str:
    return (
        f"accepted measures: {', '.join(accepted_measures())}; e.g. {EXAMPLE_METRICS}; "
        f"names and parameters: {MEASURES_DOC}"
    )


def _params_text(measure_name: str) -> str:
    """``RBP's parameters: cutoff (int), p (float, default 0.8: persistence), ...`` ('' when unknown)."""
    kind = ir_measures.measures.registry.get(measure_name)
    if kind is None:
        return ""
    parts = []
    for key, info in kind.SUPPORTED_PARAMS.items():
        dtype = getattr(info.dtype, "__name__", str(info.dtype))
        default = info.default
        default_text = "" if not isinstance(default, int | float | str) else f", default {default}"
        required = ", required" if info.required else ""
        parts.append(f"{key} ({dtype}{required}{default_text}: {info.desc})")
    return f"{measure_name}'s parameters: " + "; ".join(parts)


def _assert_text(error: AssertionError) -> str:
    """ir-measures' ``invalid param max_rel=<object ...>`` (a required parameter left out) as
    ``parameter max_rel is required``; other texts as they are."""
    found = re.match(r"invalid param (\w+)=<object object", str(error))
    return f"parameter {found.group(1)} is required" if found else str(error)


def _intent_aware(measure: ir_measures.measures.Measure) -> bool:
    return bool(ir_measures.providers.registry[INTENT_AWARE].supports(measure))


def parse_metric(name: str) -> Metric:
    """Parse one metric name; raise MetricError naming the bad value and the accepted forms.

    Checked here, before any retrieval runs: the measure exists and one of :data:`PROVIDERS`
    computes it with these parameters, and a cutoff (``@k``) is an integer >= 1 (pytrec_eval
    aborts the process on ``@0``)."""
    if not isinstance(name, str):
        raise MetricError(f"metric names are strings such as nDCG@10, got {name!r}")
    text = name.strip()
    for pattern, canonical in _ALIASES:
        found = pattern.match(text)
        if found:
            text = canonical + (found.group(1) or "")
            break
    try:
        measure = ir_measures.parse_measure(text)
    except NameError:
        raise MetricError(f"unknown metric {name!r}; {_accepted_text()}") from None
    except AssertionError as error:  # ir-measures validates parameters with assert
        base = re.split(r"[(@]", text, maxsplit=1)[0]
        raise MetricError(
            f"metric {name!r}: {_assert_text(error)}; {_params_text(base) or _accepted_text()}"
        ) from None
    except (ValueError, TypeError, SyntaxError):
        raise MetricError(
            f"unknown metric {name!r}: write <measure>@<cutoff> with an integer cutoff >= 1; {_accepted_text()}"
        ) from None
    cutoff = measure.params.get("cutoff")
    if cutoff is not None and (isinstance(cutoff, bool) or not isinstance(cutoff, int) or cutoff < 1):
        raise MetricError(f"metric {name!r}: the cutoff after @ must be an integer >= 1, got {cutoff!r}")
    try:
        measure.validate_params()
    except AssertionError as error:  # ir-measures validates with assert
        raise MetricError(
            f"metric {name!r}: {_assert_text(error)}; {_params_text(measure.NAME or '')}"
        ) from None
    try:
        if _intent_aware(measure):
            raise MetricError(
                f"metric {name!r} is intent-aware: it needs judgments per query subtopic, and the "
                "datasets here judge each (query, document) once (ir-measures would compute it over one "
                f"subtopic per query and only warn); use its plain form (nDCG@k, ERR@k, RBP(rel=1)) instead"
            )
        supported = any(_provider(key).supports(measure) for key in PROVIDERS)
    except AssertionError as error:
        raise MetricError(f"metric {name!r}: {error}") from None
    if not supported:
        raise MetricError(
            f"metric {name!r} is not computed here with these parameters "
            f"({_params_text(measure.NAME or '') or 'see ' + MEASURES_DOC}); {_accepted_text()}"
        )
    return Metric(name=name, measure=measure)


def provider_of(measure: ir_measures.measures.Measure) -> str:
    """The name of the provider that computes ``measure``: the first of :data:`PROVIDERS` that does."""
    return next(key for key in PROVIDERS if _provider(key).supports(measure))


def _provider(key: str) -> Any:
    """The ir-measures provider ``key``; RuntimeError naming the package to install when it is missing."""
    provider = ir_measures.providers.registry[key]
    if not provider.is_available():
        raise RuntimeError(f"ir-measures' {key} provider is not installed: {provider.install_instructions()}")
    return provider


def parse_metrics(names: Sequence[str]) -> list[Metric]:
    """Every name parsed (see :func:`parse_metric`); an empty list or a name given twice is an error."""
    if isinstance(names, str) or not names:
        raise MetricError(f"give a non-empty list of metric names such as [{EXAMPLE_METRICS}], got {names!r}")
    metrics = [parse_metric(name) for name in names]
    seen: set[str] = set()
    for metric in metrics:
        if metric.name in seen:
            raise MetricError(f"metric {metric.name!r} is listed twice")
        seen.add(metric.name)
    return metrics


def deeper_than_run(metrics: Sequence[Metric], top_k: int) -> dict[str, int]:
    """The metrics whose cutoff is deeper than the run (``R@100`` at ``run.top_k`` 10): name ->
    cutoff. They are computed over the ``top_k`` results a retriever returns (``R@100`` is then
    ``R@10``), said once when the run starts (:func:`depth_note`) and marked in the outputs
    (:func:`depth_label`)."""
    deeper: dict[str, int] = {}
    for metric in metrics:
        cutoff = metric.measure.params.get("cutoff")
        if isinstance(cutoff, int) and cutoff > top_k:
            deeper[metric.name] = cutoff
    return deeper


def depth_label(name: str, top_k: int, deeper: Mapping[str, int]) -> str:
    """``name``, or ``R@100 (depth 10)`` for a metric deeper than the run: the column heading of
    the printed table, report.md, report.html and metrics.csv."""
    return f"{name} (depth {top_k})" if name in deeper else name


def depth_note(top_k: int, deeper: Mapping[str, int]) -> str:
    """One line about the metrics deeper than the run ('' when there are none)."""
    if not deeper:
        return ""
    names = ", ".join(deeper)
    return (
        f"run.top_k={top_k} is shallower than the cutoff of {names}: computed over the {top_k} results "
        f"each retriever returns, so they measure depth {top_k} (R@100 is then R@{top_k}); marked "
        f"'(depth {top_k})' in the outputs; for the full depth set run.top_k={max(deeper.values())}"
    )


def canonical_run(run: Run, *, ignore_identical_ids: bool = False) -> dict[str, dict[str, float]]:
    """Order each query's documents by (score desc, doc id asc) and replace the scores by
    ``n - rank`` so that tie-breaking no longer depends on the evaluation tool.

    With ``ignore_identical_ids`` a document whose id equals the query id is removed first
    (BEIR does this for corpora where queries are also documents, e.g. ArguAna, Quora)."""
    ranked: dict[str, dict[str, float]] = {}
    for query_id, doc_scores in run.items():
        items = [(doc_id, score) for doc_id, score in doc_scores.items()]
        if ignore_identical_ids:
            items = [(doc_id, score) for doc_id, score in items if doc_id != query_id]
        for doc_id, score in items:
            if not math.isfinite(score):
                raise ValueError(f"run score for query {query_id!r}, doc {doc_id!r} is not finite: {score}")
        items.sort(key=pair_key)
        count = len(items)
        ranked[query_id] = {doc_id: float(count - rank) for rank, (doc_id, _) in enumerate(items)}
    return ranked


@dataclass(frozen=True)
class Evaluation:
    """Per-query values and means over the judged queries."""

    aggregate: dict[str, float]  # metric name -> mean over judged queries
    per_query: dict[str, dict[str, float]]  # metric name -> query id -> value
    n_queries: int  # judged queries evaluated (queries absent from the run count as 0)
    n_queries_without_results: int


def evaluate(
    run: Run,
    qrels: Qrels,
    metrics: Sequence[Metric],
    *,
    ignore_identical_ids: bool = False,
) -> Evaluation:
    """Evaluate ``run`` against ``qrels`` on every judged query.

    Only queries in ``qrels`` count; a judged query with no retrieved documents scores 0 on every
    metric (pytrec_eval alone would silently skip it and inflate the mean)."""
    judged = sorted(qrels)
    ranked = canonical_run(
        {qid: run.get(qid, {}) for qid in judged}, ignore_identical_ids=ignore_identical_ids
    )
    per_query: dict[str, dict[str, float]] = {metric.name: dict.fromkeys(judged, 0.0) for metric in metrics}
    # one measure may be listed under several names (R@10 and its alias Recall@10): each gets the value
    names_of: dict[ir_measures.measures.Measure, list[str]] = {}
    for metric in metrics:
        names_of.setdefault(metric.measure, []).append(metric.name)
    non_empty = {qid: docs for qid, docs in ranked.items() if docs}
    qrels_plain = {qid: dict(qrels[qid]) for qid in judged}
    if non_empty:
        for query_id, measure, value in _calculate(list(names_of), qrels_plain, non_empty):
            for name in names_of[measure]:
                per_query[name][query_id] = value
    aggregate = {
        name: (math.fsum(values.values()) / len(values) if values else 0.0)
        for name, values in per_query.items()
    }
    return Evaluation(
        aggregate=aggregate,
        per_query=per_query,
        n_queries=len(judged),
        n_queries_without_results=len(judged) - len(non_empty),
    )


def _calculate(
    measures: list[ir_measures.measures.Measure],
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
) -> list[tuple[str, ir_measures.measures.Measure, float]]:
    """``(query id, measure, value)`` of every measure, each computed by the first provider of
    :data:`PROVIDERS` that supports it. gdeval (ERR@k) reads numeric topic ids only, so it is given
    ``1..n`` in place of the query ids (mapped back), and refuses grades above 4: said here."""
    by_provider: dict[str, list[ir_measures.measures.Measure]] = {}
    for measure in measures:
        by_provider.setdefault(provider_of(measure), []).append(measure)
    values: list[tuple[str, ir_measures.measures.Measure, float]] = []
    for key, group in by_provider.items():
        if key == "gdeval":
            top = max((grade for docs in qrels.values() for grade in docs.values()), default=0)
            if top > _GDEVAL_MAX_GRADE:
                raise ValueError(
                    f"{', '.join(map(str, group))}: gdeval accepts relevance grades up to "
                    f"{_GDEVAL_MAX_GRADE}, and these judgments have {top}"
                )
            number = {query_id: str(i + 1) for i, query_id in enumerate(sorted(qrels))}
            query_of = {n: query_id for query_id, n in number.items()}
            found = _provider(key).iter_calc(
                group,
                {number[q]: docs for q, docs in qrels.items()},
                {number[q]: docs for q, docs in run.items()},
            )
            values.extend((query_of[v.query_id], v.measure, float(v.value)) for v in found)
            continue
        found = _provider(key).iter_calc(group, qrels, run)
        values.extend((str(v.query_id), v.measure, float(v.value)) for v in found)
    return values
