"""Evaluating one retriever: its run over the judged queries (per query scope, in blocks of
``run.batch_size``, every result checked against the retriever contract), the run file, metrics
(overall and per query group), what the retriever reports about its own work, latency."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Container, Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.rerank.policy import fallback_summary
from retrievers.store import ContextStore
from retrievers.types import Embedder, EncodeKind, RetrievalResult, Retriever
from viking_eval.config import RetrieverSpec, Settings, instantiate_objects
from viking_eval.config.registry import resolve
from viking_eval.data import BeirDataset
from viking_eval.measures.metrics import evaluate
from viking_eval.progress import progress_bar
from viking_eval.results import run_folder
from viking_eval.results.model import RetrieverResult
from viking_eval.run.ann_quality import AnnQuality
from viking_eval.run.cache import ArtifactCache
from viking_eval.run.cached_embedder import CachedEmbedder
from viking_eval.run.contract import check_batch, check_results
from viking_eval.run.inputs import build_retriever, dataset_queries, wants_queries
from viking_eval.run.latency import measure_latency
from viking_eval.run.otel import export_spans, span_exporter
from viking_eval.run.redundancy import Redundancy
from viking_eval.run.stages import SPAN_COLUMNS, span_rows

log = logging.getLogger(__name__)


def query_scopes(dataset: BeirDataset, scope_key: str | None) -> dict[str, str | None]:
    """Each judged query's scope value (None for every query when there is no scope key)."""
    if scope_key is None:
        return dict.fromkeys(dataset.queries)
    missing = [qid for qid, query in dataset.queries.items() if scope_key not in query.metadata]
    if missing:
        raise ValueError(
            f"dataset.scope_key={scope_key!r}: {len(missing)} queries have no such metadata key "
            f"(first: {missing[:3]}); queries of this dataset carry {sorted(next(iter(dataset.queries.values())).metadata)}"
        )
    return {qid: str(query.metadata[scope_key]) for qid, query in dataset.queries.items()}


def query_groups(dataset: BeirDataset, group_key: str | None) -> dict[str, str]:
    """Each judged query's report group (``group_key``'s metadata value, or "(none)")."""
    if group_key is None:
        return {}
    return {qid: str(query.metadata.get(group_key, "(none)")) for qid, query in dataset.queries.items()}


def group_means(per_query: dict[str, dict[str, float]], groups: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Metric means per group of queries: ``{group: {"n_queries": n, "metrics": {...}}}``."""
    members: dict[str, list[str]] = {}
    for query_id, group in groups.items():
        members.setdefault(group, []).append(query_id)
    return {
        group: {
            "n_queries": len(query_ids),
            "metrics": {
                name: math.fsum(values[qid] for qid in query_ids) / len(query_ids)
                for name, values in per_query.items()
            },
        }
        for group, query_ids in sorted(members.items())
    }


def provenance_stats(run: dict[str, list[RetrievalResult]]) -> dict[str, Any]:
    """What a retriever says about its own work per query, summarised over the run.

    A retriever may put a mapping in ``provenance["stats"]`` of its results (the same for every
    result of a query: directories popped and nodes scored for the hierarchical retriever, edges
    followed for the graph retriever, ...). Numeric fields become their mean over the queries
    that carry stats, string fields a count per value; ``n_queries`` says how many queries that
    was (a query with no results carries none). Empty when no result has stats."""
    numbers: dict[str, list[float]] = {}
    labels: dict[str, dict[str, int]] = {}
    n_queries = 0
    for results in run.values():
        stats = results[0].provenance.get("stats") if results else None
        if not isinstance(stats, dict):
            continue
        n_queries += 1
        for key, value in stats.items():
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                continue
            if isinstance(value, str):
                counts = labels.setdefault(key, {})
                counts[value] = counts.get(value, 0) + 1
            elif math.isfinite(value):
                numbers.setdefault(key, []).append(float(value))
    if not n_queries:
        return {}
    summary: dict[str, Any] = {"n_queries": n_queries}
    summary.update({key: math.fsum(values) / len(values) for key, values in numbers.items()})
    summary.update({key: dict(sorted(counts.items())) for key, counts in labels.items()})
    return summary


def run_retriever(
    settings: Settings,
    spec: RetrieverSpec,
    dataset: BeirDataset,
    store: ContextStore,
    embedder: Embedder,
    cache: ArtifactCache,
    output_dir: Path | None,
) -> RetrieverResult:
    """One configured retriever, built over ``store`` (per query scope), evaluated by
    :func:`evaluate_retriever`; its run file goes to ``output_dir`` (None: not written)."""
    cls = resolve(spec.target, f"retrievers.{spec.name}._target_", "retriever")
    scoped_stores: dict[Hashable, ContextStore] = {}

    def store_for(scope: Hashable) -> ContextStore:
        if scope not in scoped_stores:
            key = settings.dataset.scope_key
            scoped_stores[scope] = store if key is None else store.restricted(store.metadata_mask(key, scope))
        return scoped_stores[scope]

    params = instantiate_objects(spec.params, f"retrievers.{spec.name}")  # e.g. a reranker, built once
    # the dataset's queries for a run-file retriever; retrievers in the parameters (a hybrid's
    # legs) built over the same store (viking_eval/run/inputs.py)
    queries = dataset_queries(dataset) if wants_queries(cls, params) else None

    def make(with_embedder: Embedder, scope: Hashable) -> Retriever:
        retriever: Retriever = build_retriever(
            cls, params, store_for(scope), with_embedder, queries, f"retrievers.{spec.name}"
        )
        return retriever

    return evaluate_retriever(
        settings,
        spec.name,
        make,
        dataset,
        run_embedder=CachedEmbedder(
            embedder, cache, label=f"{dataset.name} queries", show_progress=settings.show_progress
        ),
        latency_embedder=embedder,
        known_ids=lambda scope: store_for(scope).parent_row_of,
        output_dir=output_dir,
    )


def evaluate_retriever(
    settings: Settings,
    name: str,
    make: Callable[[Embedder, Hashable], Retriever],
    dataset: BeirDataset,
    *,
    run_embedder: Embedder,
    latency_embedder: Embedder,
    known_ids: Callable[[Hashable], Container[str]],
    output_dir: Path | None,
) -> RetrieverResult:
    """One retriever over the dataset's judged queries: ``retrieve_batch`` in blocks of
    ``run.batch_size`` (one retriever per query scope, ``make(embedder, scope)``), every result
    list checked against the retriever contract (viking_eval/run/contract.py: at most ``run.top_k``
    RetrievalResults, unique doc ids in ``known_ids(scope)``, finite scores; a breach raises
    RetrieverContractError), the run file written (when
    ``output_dir`` is given), metrics, latency one query at a time. The runner builds retrievers
    from configs; ``viking_eval.evaluate`` passes built ones."""
    scopes = query_scopes(dataset, settings.dataset.scope_key)
    by_scope: dict[str | None, list[str]] = {}
    for query_id, scope in scopes.items():
        by_scope.setdefault(scope, []).append(query_id)
    run: dict[str, list[RetrievalResult]] = {}
    batch = settings.run.batch_size
    ann = AnnQuality(settings.run.top_k)  # ann_recall@10, @top_k over an ANN index (ann_quality.py)
    diversity = Redundancy(name, settings.run.redundancy)  # redundancy@k when asked (redundancy.py)
    start = time.perf_counter()
    with progress_bar(
        total=len(scopes),
        desc=f"retrieve {name}: {len(scopes):,} queries",
        unit="q",
        show=settings.show_progress,
    ) as bar:
        for scope, scope_query_ids in by_scope.items():
            retriever = make(run_embedder, scope)
            for begin in range(0, len(scope_query_ids), batch):
                chunk_ids = scope_query_ids[begin : begin + batch]
                texts = [dataset.queries[qid].text for qid in chunk_ids]
                batch_results = check_batch(
                    name, chunk_ids, retriever.retrieve_batch(texts, settings.run.top_k)
                )
                known = known_ids(scope)
                for query_id, results in zip(chunk_ids, batch_results, strict=True):
                    # the contract (viking_eval/run/contract.py): <= top_k RetrievalResults, unique
                    # known doc ids, finite scores; a breach is one RetrieverContractError
                    run[query_id] = check_results(name, query_id, results, known, settings.run.top_k)
                    diversity.add(retriever, run[query_id])
                bar.update(len(chunk_ids))
                ann.add(retriever, texts)  # not part of run_seconds
    run_seconds = time.perf_counter() - start - ann.seconds
    run = {qid: run[qid] for qid in dataset.queries}  # dataset order, whatever the scopes
    fallbacks = fallback_summary(run)  # one line per run, not one per query
    if fallbacks is not None:
        log.warning("retriever %s: its reranker %s", name, fallbacks)
    if output_dir is not None:
        run_folder.write_run(output_dir, name, run)

    evaluation = evaluate(
        {qid: {r.doc_id: r.score for r in results} for qid, results in run.items()},
        dataset.qrels,
        settings.metrics,
        ignore_identical_ids=settings.dataset.ignore_identical_ids,
    )
    latency_settings = settings.run.latency
    report = measure_latency(
        make,
        latency_embedder,
        [(dataset.queries[qid].text, scopes[qid]) for qid in dataset.queries],
        top_k=settings.run.top_k,
        n_queries=latency_settings.n_queries,
        warmup=latency_settings.warmup,
        seed=latency_settings.seed,
        blas_threads=latency_settings.blas_threads,
        label=name,
        show_progress=settings.show_progress,
    )
    if report is not None:
        if output_dir is not None:
            run_folder.write_spans(output_dir, name, SPAN_COLUMNS, span_rows(report.queries))
        exporter = span_exporter(latency_settings.otel.exporter)
        if exporter is not None:
            export_spans(exporter, name, report.queries)
    return RetrieverResult(
        name=name,
        metrics={**evaluation.aggregate, **ann.metrics(), **diversity.metrics()},
        per_query=evaluation.per_query,
        latency=report.as_dict() if report else None,
        n_queries=evaluation.n_queries,
        n_queries_without_results=evaluation.n_queries_without_results,
        run_seconds=run_seconds,
        groups=group_means(evaluation.per_query, query_groups(dataset, settings.dataset.group_key)),
        stats=provenance_stats(run),
        vector_search=ann.info(),
    )


class _NoEmbedder:
    """Stands in for the embedder of a retriever built outside the harness (``evaluate()`` given
    an object): the harness does not know it, so latency counts the whole query as search."""

    name = "(the retriever's own)"
    dim = 0

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        raise RuntimeError("a built retriever encodes with its own embedder")


def built_result(
    settings: Settings, name: str, retriever: Retriever, dataset: BeirDataset, output_dir: Path | None
) -> RetrieverResult:
    """A retriever object the caller built (``evaluate()``): evaluated as a config's would be,
    without a resume marker (nothing says whether it is the same object next time)."""

    def built(_: Embedder, __: Hashable) -> Retriever:
        return retriever

    return evaluate_retriever(
        settings,
        name,
        built,
        dataset,
        run_embedder=_NoEmbedder(),
        latency_embedder=_NoEmbedder(),
        known_ids=lambda _: dataset.corpus,
        output_dir=output_dir,
    )
