"""One step of a growth run: the dataset as the memory holds it after the step, every configured
retriever evaluated on the questions asked then (the experiment loop's own evaluation:
viking_eval/run/evaluate.py, answers by viking_eval/answers/), and the step's record.

The record (``steps/<NNN>/step.json``, written last and atomically: the marker that the step is
finished) holds the memory size, the questions asked (and how many are new), the ingest cost
and, per retriever, its family, metrics over every question asked, over the new ones, and per
query group (LoCoMo: category). ``per_query.csv`` beside it has every value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from retrievers.store import ContextStore
from retrievers.types import Embedder
from viking_eval.answers.evaluate import answer_results
from viking_eval.answers.names import answer_metric_names
from viking_eval.config import Settings
from viking_eval.data import BeirDataset
from viking_eval.files import read_json
from viking_eval.growth.schedule import Schedule, Step
from viking_eval.results import growth_folder, layout, run_folder
from viking_eval.results.model import RetrieverResult
from viking_eval.run.cache import ArtifactCache, content_key
from viking_eval.run.evaluate import run_retriever
from viking_eval.run.resume import algorithm_versions

__all__ = ["FAMILIES", "evaluate_step", "family_of", "memory_dataset", "read_step", "step_key", "write_step"]

FAMILIES = {
    "retrievers.baselines.BM25Retriever": "bm25",
    "retrievers.baselines.DenseRetriever": "dense",
    "retrievers.hierarchical.": "hierarchical",
    "retrievers.hybrid.": "hybrid",
    "retrievers.graph.": "graph",
    "retrievers.multi_strategy.": "multi-strategy",
}
"""A retriever's family by its class (a prefix ending in ``.`` names a package)."""

RECORD = layout.GROWTH_STEP
PER_QUERY = "per_query.csv"


def family_of(target: str) -> str:
    for prefix, family in FAMILIES.items():
        if target == prefix or (prefix.endswith(".") and target.startswith(prefix)):
            return family
    return "other"


def memory_dataset(dataset: BeirDataset, schedule: Schedule, step: Step) -> BeirDataset:
    """``dataset`` as the memory holds it after ``step``: the documents added so far and the
    questions asked then (all their evidence in memory)."""
    in_memory = schedule.in_memory(step.number)
    asked = schedule.asked(step.number, list(dataset.queries))
    return dataclasses.replace(
        dataset,
        corpus={doc_id: dataset.corpus[doc_id] for doc_id in in_memory},
        queries={qid: dataset.queries[qid] for qid in asked},
        qrels={qid: dataset.qrels[qid] for qid in asked},
        subset=f"{dataset.subset} growth step {step.number}".strip(),
    )


def step_key(settings: Settings, dataset: BeirDataset, memory: BeirDataset, embedder: Embedder) -> str:
    """Everything a step's numbers depend on: the data files and half, the documents in memory,
    the questions asked, every setting that changes a number, the classes' algorithm versions."""
    return content_key(
        [
            "growth-step",
            dataset.fingerprint,
            content_key(["docs", *memory.corpus]),
            content_key(["queries", *memory.queries]),
            repr(settings.store.to_dict()),
            repr(sorted(settings.embedder.items())),
            embedder.name,
            repr(
                [
                    (spec.name, spec.target, spec.params, algorithm_versions(spec))
                    for spec in settings.retrievers
                ]
            ),
            repr({k: v for k, v in dataclasses.asdict(settings.dataset).items() if k != "download"}),
            repr(
                (
                    settings.run.top_k,
                    settings.run.batch_size,
                    [metric.name for metric in settings.metrics],
                    dataclasses.asdict(settings.run.latency),
                    settings.run.redundancy,
                )
            ),
            repr(dataclasses.asdict(settings.answers)),
            repr({k: v for k, v in dataclasses.asdict(settings.llm).items()}),
            repr(dataclasses.asdict(settings.growth)),
        ]
    )


def _mean(values: Mapping[str, float], query_ids: Sequence[str]) -> float | None:
    kept = [values[qid] for qid in query_ids if qid in values]
    return math.fsum(kept) / len(kept) if kept else None


def _retriever_entry(
    result: RetrieverResult, target: str, metric_names: list[str], new: list[str]
) -> dict[str, Any]:
    return {
        "family": family_of(target),
        "target": target,
        "n_queries": result.n_queries,
        "metrics": {name: result.metrics[name] for name in metric_names if name in result.metrics},
        "new_metrics": {
            name: _mean(result.per_query[name], new) for name in metric_names if name in result.per_query
        },
        "groups": {
            group: {
                "n_queries": entry["n_queries"],
                "metrics": {
                    name: entry["metrics"][name] for name in metric_names if name in entry["metrics"]
                },
            }
            for group, entry in result.groups.items()
        },
        "run_seconds": result.run_seconds,
    }


def evaluate_step(
    settings: Settings,
    memory: BeirDataset,
    store: ContextStore,
    embedder: Embedder,
    cache: ArtifactCache,
    folder: Path,
) -> list[RetrieverResult]:
    """Every configured retriever over ``store`` on ``memory``'s questions (answers included when
    ``answers.enabled``); run files go to ``folder/runs/`` (removed unless ``growth.keep_runs``)."""
    folder.mkdir(parents=True, exist_ok=True)
    results = [
        run_retriever(settings, spec, memory, store, embedder, cache, folder) for spec in settings.retrievers
    ]
    if settings.answers.enabled:
        results = answer_results(
            results,
            settings.answers,
            settings.llm,
            memory,
            ranking_of=lambda name: run_folder.read_rankings(folder, name),
            group_key=settings.dataset.group_key,
            significance=settings.run.significance,
            cache_root=cache.root,
        )
    if not settings.growth.keep_runs:
        growth_folder.drop_step_runs(folder)
    return results


def write_step(
    folder: Path,
    settings: Settings,
    step: Step,
    memory: BeirDataset,
    new_queries: list[str],
    results: list[RetrieverResult],
    info: Mapping[str, Any],
) -> dict[str, Any]:
    """``per_query.csv`` and then the marker ``step.json`` (atomic); the record written."""
    names = [metric.name for metric in settings.metrics] + answer_metric_names(results)
    targets = {spec.name: spec.target for spec in settings.retrievers}
    run_folder.write_per_query(folder / PER_QUERY, {r.name: r.per_query for r in results}, names)
    record = {
        "step": step.number,
        "label": step.label,
        "added": len(step.added),
        "metric_names": names,
        **info,
        "questions": {"asked": len(memory.queries), "new": len(new_queries)},
        "retrievers": {r.name: _retriever_entry(r, targets[r.name], names, new_queries) for r in results},
    }
    growth_folder.write_step_record(folder, record)
    return record


def read_step(folder: Path, key: str) -> dict[str, Any] | None:
    """The finished record of the step in ``folder`` when its key is ``key``; None to run it."""
    path = folder / RECORD
    if not path.is_file():
        return None
    try:
        record = read_json(path)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("key") == key else None
