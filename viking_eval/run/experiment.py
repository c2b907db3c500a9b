"""One evaluation run: dataset -> cached ContextStore -> retrievers -> results -> run folder.

Data flow (DESIGN.md section 4)::

    settings -> load_dataset -> embedder (fit if it must be) -> ContextStore (content-addressed cache)
      -> for each retriever: retrieve_batch over all judged queries -> runs/<name>.trec
                             -> metrics (ir-measures) -> latency (one query at a time)
                             -> results/<name>.json   (the marker that this retriever is finished)
      -> paired tests of every retriever against run.baseline (significance.py)
      -> metrics.json, metrics.csv, per_query.csv, latency.json, significance.csv, environment.json,
         report.md, report.html (run_folder.py writes every file)

Resuming: a retriever whose ``results/<name>.json`` was produced by exactly the same inputs (its
``resume_key``: data files, evaluated queries, every setting, the algorithm version) is not run
again; the store is then not even loaded unless some retriever still has work to do. When a marker
exists but its key differs, the log says which part differs.

The loop's parts, one job each: ``store.py`` (the run's embedder and ContextStore),
``evaluate.py`` (one retriever: run, run file, metrics, latency), ``resume.py`` (resume keys). The
reports and the gate read results and run folders and never import this loop: the gate is handed
``run_experiment`` by its callers (viking_eval/cli.py, ``python -m viking_eval.gate``), which
also hold the programs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from retrievers.types import Embedder, Retriever
from viking_eval.answers.evaluate import answer_results, check_answer_settings
from viking_eval.answers.names import answer_metric_names
from viking_eval.config import Settings
from viking_eval.data import BeirDataset
from viking_eval.data.splits import Phase, load_for_phase
from viking_eval.measures.metrics import deeper_than_run, depth_note
from viking_eval.measures.significance import compare_with_baseline
from viking_eval.results import run_folder
from viking_eval.results.environment import collect_environment, peak_rss_mb
from viking_eval.results.model import FinishedRetriever, RunSummary
from viking_eval.run.cache import ArtifactCache
from viking_eval.run.evaluate import built_result, run_retriever
from viking_eval.run.resume import resume_key
from viking_eval.run.store import StoreLoader, embedder_for

log = logging.getLogger(__name__)


def run_experiment(
    settings: Settings,
    output_dir: Path | None,
    *,
    embedder_factory: Callable[[], Embedder] | None = None,
    config_yaml: str = "",
    phase: Phase = "report",
    dataset: BeirDataset | None = None,
    built: Mapping[str, Retriever] | None = None,
    environment: Mapping[str, Any] | None = None,
) -> RunSummary:
    """The one experiment loop, for the CLI, sweeps, benchmarks, the gate and
    :func:`viking_eval.evaluate`: data, embedder (fitted once per corpus and cached), store,
    every retriever (resumed from its finished marker when ``run.resume`` and nothing that
    produced it changed), significance, the run folder; returns the summary.

    ``phase``: ``report`` (a single run: the configured split), ``tune`` (a sweep job: the
    tuning split), ``final`` (the chosen configuration after a sweep); see viking_eval/data/splits.py.
    ``output_dir`` None writes nothing (and so resumes nothing). ``dataset``: a loaded dataset
    to use instead of loading ``settings.dataset``. ``built``: retrievers given as objects by
    name (the specs of those names are not built from config). ``environment``: extra entries
    for environment.json.

    ``wall_seconds`` is what the results cost: this invocation's time plus, for each result taken
    from a finished marker, the seconds recorded when it was computed (a resumed sweep job keeps
    the cost of its work, not the fraction of a second of the resume)."""
    started = time.perf_counter()
    built = dict(built or {})
    deeper = depth_note(settings.run.top_k, deeper_than_run(settings.metrics, settings.run.top_k))
    if deeper:  # computed, said here once, marked in every output (run_folder, report)
        log.warning(deeper)
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        if config_yaml:
            run_folder.write_config(output_dir, config_yaml)
    cache = ArtifactCache(Path(settings.cache_dir) if settings.cache_dir else None)
    on_reported_split = False
    if dataset is None:
        dataset, split_choice = load_for_phase(
            settings.dataset.path or settings.dataset.name,
            phase,
            split=settings.dataset.split,
            tune_split=settings.dataset.tune_split,
            strict=settings.dataset.strict,
            partition_key=settings.dataset.partition_key,
            partition_seed=settings.dataset.partition_seed,
            download=settings.dataset.download,
            half=settings.dataset.half,
        )
        on_reported_split = split_choice.on_reported_split
    check_answer_settings(
        settings.answers, settings.llm, dataset, output_dir is not None
    )  # before any retrieval
    configured = [spec for spec in settings.retrievers if spec.name not in built]
    embedder: Embedder | None = None
    stores: StoreLoader | None = None
    if configured:  # only retrievers built from configs need the run's embedder and store
        embedder = embedder_for(settings, dataset, embedder_factory, cache)
        stores = StoreLoader(settings, dataset, embedder, cache)
    results = []
    resumed_seconds = 0.0
    work_started = started  # the cost of a computed result runs from here (setup included)
    for spec in settings.retrievers:
        if spec.name in built:
            result = built_result(settings, spec.name, built[spec.name], dataset, output_dir)
            work_started = time.perf_counter()
            results.append(result)
            continue
        if stores is None or embedder is None:  # made above whenever a spec is built from its config
            raise RuntimeError(f"retriever {spec.name}: the run's embedder and store were not made")
        key = resume_key(settings, spec, dataset, embedder, stores.key)
        finished = _finished(settings, output_dir, spec.name)
        if finished is not None:
            reason = finished.reason_to_rerun(key)
            if reason is None:
                log.info("retriever %s already finished in %s; not rerun", spec.name, output_dir)
                results.append(finished.result)
                resumed_seconds += finished.cost_seconds
                continue
            log.info("rerunning %s: %s", spec.name, reason)
        result = run_retriever(settings, spec, dataset, stores.get(), embedder, cache, output_dir)
        now = time.perf_counter()
        if output_dir is not None:
            run_folder.write_finished(output_dir, result, key, now - work_started)
        work_started = now
        results.append(result)
    if settings.answers.enabled and output_dir is not None:  # after retrieval: gold answers never reach it
        results = answer_results(
            results,
            settings.answers,
            settings.llm,
            dataset,
            ranking_of=lambda name: run_folder.read_rankings(output_dir, name),
            group_key=settings.dataset.group_key,
            significance=settings.run.significance,
            cache_root=cache.root,
        )
    significance = compare_with_baseline(
        {result.name: result.per_query for result in results},
        settings.run.baseline or results[0].name,
        [metric.name for metric in settings.metrics] + answer_metric_names(results),
        settings.run.significance,
        show_progress=settings.show_progress,
    )
    summary = RunSummary(
        output_dir=output_dir,
        dataset=dataset.name,
        split=dataset.split,
        results=results,
        data_issues=dataset.issues.as_dict(),
        phase=phase,
        tuned_on_reported_split=on_reported_split,
        significance=significance,
        wall_seconds=time.perf_counter() - started + resumed_seconds,
    )
    if output_dir is not None:
        recorded = collect_environment(
            {
                **(stores.info if stores is not None else {}),
                "dataset_files": dataset.files,
                "dataset_split": dataset.split,  # with the half evaluated, e.g. test[holdout half]
                "dataset_subset": dataset.subset,  # the half's partition key and seed ("" = every query)
                "cache_root": str(cache.root),
                "cache_hits": cache.hits,
                "cache_builds": cache.builds,
                "peak_rss_mb": peak_rss_mb(),
                **(environment or {}),
            }
        )
        run_folder.write_outputs(summary, settings, recorded)
    return summary


def _finished(settings: Settings, output_dir: Path | None, name: str) -> FinishedRetriever | None:
    """The finished marker of retriever ``name`` in ``output_dir`` when resuming; None to run it."""
    if output_dir is None or not settings.run.resume:
        return None
    try:
        return run_folder.read_finished(output_dir, name)
    except run_folder.RunFolderError as error:
        log.info("rerunning %s: %s", name, error)
        return None
