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

Dependency order: ``results`` (values) <- ``run_folder`` (files) <- ``runner`` (this module). The
reports and the gate read results and run folders and never import the runner; the programs at
the end of this module (``run_program``, ``gate_program``, ``compare_program``) are what the CLI
calls.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Container, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.builders import build_store
from retrievers.embedders.tfidf import CorpusFitError
from retrievers.index.ann import code_default_knobs
from retrievers.params import ParamError
from retrievers.rerank.policy import fallback_summary
from retrievers.store import STORE_FORMAT, ContextStore
from retrievers.types import Embedder, EncodeKind, RetrievalResult, Retriever
from viking_eval.config import RetrieverSpec, Settings, instantiate_objects
from viking_eval.config.errors import from_library_error
from viking_eval.config.registry import resolve
from viking_eval.config.settings import build_object
from viking_eval.data import BeirDataset, DataError
from viking_eval.data.splits import Phase, load_for_phase
from viking_eval.files import sha256_file
from viking_eval.gate import checks as gate
from viking_eval.measures.metrics import deeper_than_run, depth_note, evaluate
from viking_eval.measures.significance import compare_with_baseline
from viking_eval.progress import library_progress, progress_bar
from viking_eval.report import summary_table
from viking_eval.results import run_folder
from viking_eval.results.environment import collect_environment, peak_rss_mb
from viking_eval.results.model import FinishedRetriever, ResumeKey, RetrieverResult, RunSummary
from viking_eval.run.ann_quality import AnnQuality, describe_index
from viking_eval.run.cache import ArtifactCache, CachedEmbedder, content_key, memo_get, memo_put
from viking_eval.run.contract import check_batch, check_results
from viking_eval.run.inputs import build_retriever, dataset_queries, input_files, wants_queries
from viking_eval.run.latency import measure_latency

log = logging.getLogger(__name__)


def corpus_key(dataset: BeirDataset) -> str:
    """Content hash of the corpus as it will be indexed (ids, titles, texts, metadata)."""
    parts: list[str] = []
    for doc_id in sorted(dataset.corpus):
        doc = dataset.corpus[doc_id]
        parts += [
            doc.id,
            doc.title,
            doc.text,
            json.dumps(dict(doc.metadata), sort_keys=True, ensure_ascii=False),
        ]
    return content_key(["corpus", *parts])


def prepare_embedder(
    embedder: Embedder, dataset: BeirDataset, cache: ArtifactCache | None = None, config: Any = None
) -> Embedder:
    """Fit an embedder that learns from the corpus (TF-IDF+SVD) on the documents, in id order.

    With a ``cache``, an embedder that can save its fitted state as files (``save_fitted`` /
    ``load_fitted``, no pickle) is fitted once per (embedder settings, corpus) and loaded from the
    content-addressed cache afterwards: a warm run over TF-IDF spends no time refitting it."""
    fit_method = getattr(embedder, "fit", None)
    if not callable(fit_method) or getattr(embedder, "fitted", True):
        return embedder

    def fit(texts: list[str]) -> None:
        try:
            fit_method(texts)
        except CorpusFitError as error:  # the corpus, not the code: one line naming the dataset
            raise DataError(
                f"{dataset.folder}: dataset {dataset.name}: the embedder cannot be fitted on its "
                f"corpus: {error}; give the documents text, or use an embedder that is not fitted "
                "on the corpus (embedder=static or minilm)",
                path=dataset.folder,
            ) from None

    texts = [dataset.corpus[doc_id].full_text for doc_id in sorted(dataset.corpus)]
    save, load = getattr(embedder, "save_fitted", None), getattr(type(embedder), "load_fitted", None)
    if cache is None or not callable(save) or not callable(load):
        fit(texts)
        return embedder
    settings = json.dumps(config, sort_keys=True, default=str) if config is not None else repr(embedder)
    key = content_key(["fitted-embedder", type(embedder).__qualname__, settings, corpus_key(dataset)])

    def build(folder: Path) -> None:
        fit(texts)
        save(folder)

    fitted: Embedder = load(cache.get_or_build("fitted", key, build))
    return fitted


class StoreLoader:
    """Loads (building on a cache miss) the run's ContextStore the first time it is needed."""

    def __init__(
        self, settings: Settings, dataset: BeirDataset, embedder: Embedder, cache: ArtifactCache
    ) -> None:
        self.settings = settings
        self.dataset = dataset
        self.embedder = embedder
        self.cache = cache
        self.key = content_key(
            [
                "store",
                f"format:{STORE_FORMAT}",  # a new artifact layout never reuses an old entry
                corpus_key(dataset),
                embedder.name,
                json.dumps(settings.store.to_dict(), sort_keys=True),
                # files a store component reads besides the corpus (e.g. tree summaries); none
                # for most stores, which keeps their keys as they were
                *(
                    f"{path.name}:{sha256_file(path)}"
                    for path in settings.store.input_files(dataset.folder)
                    if path.is_file()
                ),
            ]
        )
        self._store: ContextStore | None = None
        self.info: dict[str, Any] = {"store_key": self.key, "embedder": embedder.name}
        try:  # pre-flight: settings the data cannot hold are refused before anything is embedded
            settings.store.check_against(dataset.corpus.values(), lambda: embedder.dim)
        except ParamError as error:
            raise from_library_error("store", error) from None

    def get(self) -> ContextStore:
        if self._store is None and memo_get(self.key) is not None:
            # loaded by an earlier job of this process (Hydra's basic launcher runs a sweep in one process)
            self._store = memo_get(self.key)
            self.info.update(store_built_now=False, store_ready_seconds=0.0, store_from_memory=True)
            self.info["store_build_seconds"] = self._store.build_seconds
        if self._store is None:
            builds_before = self.cache.builds
            start = time.perf_counter()

            def build(folder: Path) -> None:
                build_store(
                    self.dataset.corpus.values(),
                    CachedEmbedder(
                        self.embedder,
                        self.cache,
                        label=f"{self.dataset.name} corpus",
                        show_progress=self.settings.show_progress,
                    ),
                    self.settings.store,
                    show_progress=library_progress(self.settings.show_progress),
                    source_folder=self.dataset.folder,
                    folder=folder,  # built into the entry's folder part by part, and saved there
                )

            folder = self.cache.get_or_build("stores", self.key, build)
            self._store = ContextStore.load(folder)
            memo_put(self.key, self._store)
            self.info.update(
                store_folder=str(folder),
                store_built_now=self.cache.builds > builds_before,
                store_ready_seconds=round(time.perf_counter() - start, 3),
                store_build_seconds=self._store.build_seconds,
            )
        if self._store.has_vectors:  # exact, or a faiss index: kind, settings, knobs (ann_quality.py)
            self.info["vector_index"] = describe_index(self._store)
        if self._store.timestamps is not None:  # parsed/missing/unparseable counts (timeparse.py)
            self.info["timestamps"] = self._store.timestamps.report
        if self._store.edges is not None:  # edges kept per relation, links dropped and why (edges.py)
            self.info["edges"] = self._store.edges.report
        return self._store


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
    scoped_stores: dict[str | None, ContextStore] = {}

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
    return RetrieverResult(
        name=name,
        metrics={**evaluation.aggregate, **ann.metrics()},
        per_query=evaluation.per_query,
        latency=report.as_dict() if report else None,
        n_queries=evaluation.n_queries,
        n_queries_without_results=evaluation.n_queries_without_results,
        run_seconds=run_seconds,
        groups=group_means(evaluation.per_query, query_groups(dataset, settings.dataset.group_key)),
        stats=provenance_stats(run),
        vector_search=ann.info(),
    )


def _embedder_for(
    settings: Settings,
    dataset: BeirDataset,
    embedder_factory: Callable[[], Embedder] | None,
    cache: ArtifactCache | None = None,
) -> Embedder:
    """The run's embedder, fitted when it learns from the corpus; memoised per process by its
    config and the corpus, so sweep jobs neither refit TF-IDF nor reload a model."""
    if embedder_factory is not None:
        return prepare_embedder(embedder_factory(), dataset)
    key = content_key(
        ["embedder", json.dumps(settings.embedder, sort_keys=True, default=str), corpus_key(dataset)]
    )
    embedder = memo_get(key)
    if embedder is None:
        built = build_object(settings.embedder, "embedder", "embedder")  # through the class registry
        embedder = prepare_embedder(built, dataset, cache, settings.embedder)
        memo_put(key, embedder)
    return embedder


# --------------------------------------------------------------------------- resume keys


def algorithm_versions(spec: RetrieverSpec) -> dict[str, Any]:
    """``ALGORITHM_VERSION`` of the retriever class and of every object in its parameters (a
    reranker, ...); None for a class that declares none. A family bumps its version when the same
    parameters start to give different results."""
    versions: dict[str, Any] = {}

    def visit(target: str) -> None:
        # every target was checked against the class registry when the settings were loaded
        versions[target] = getattr(
            resolve(target, f"retrievers.{spec.name}._target_"), "ALGORITHM_VERSION", None
        )

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            if isinstance(value.get("_target_"), str):
                visit(value["_target_"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    visit(spec.target)
    walk(spec.params)
    return versions


def resume_key(
    settings: Settings, spec: RetrieverSpec, dataset: BeirDataset, embedder: Embedder, store_key: str
) -> ResumeKey:
    """Everything a retriever's result depends on, by part (see ``results.ResumeKey``)."""
    query_ids = list(dataset.queries)
    inputs = input_files(spec.target, spec.params)  # e.g. a run file: its sha256
    defaults = code_default_knobs(settings.store.vector_index.kind)
    return ResumeKey(
        {
            **({"inputs": inputs} if inputs else {}),
            "files": dict(sorted(dataset.files.items())),
            "evaluated_queries": {
                "n": len(query_ids),
                "sha256": hashlib.sha256(json.dumps(query_ids).encode("utf-8")).hexdigest(),
            },
            "split": dataset.split,
            # dataset.download decides whether a missing dataset is fetched, not what is evaluated
            "dataset": {
                key: value for key, value in dataclasses.asdict(settings.dataset).items() if key != "download"
            },
            "retriever": {"target": spec.target, "params": spec.params},
            "algorithm": algorithm_versions(spec),
            "embedder": {"config": settings.embedder, "name": embedder.name},
            "store": {
                "settings": settings.store.to_dict(),
                "content_key": store_key,
                # defaults the code sets, not the store (none for exact, HNSW, IVF-Flat)
                **({"search_defaults": defaults} if defaults else {}),
            },
            "run": {
                "top_k": settings.run.top_k,
                "batch_size": settings.run.batch_size,
                "metrics": [metric.name for metric in settings.metrics],
                "latency": dataclasses.asdict(settings.run.latency),
            },
        }
    )


# --------------------------------------------------------------------------- a run


class _NoEmbedder:
    """Stands in for the embedder of a retriever built outside the harness (``evaluate()`` given
    an object): the harness does not know it, so latency counts the whole query as search."""

    name = "(the retriever's own)"
    dim = 0

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        raise RuntimeError("a built retriever encodes with its own embedder")


def _built_result(
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
    configured = [spec for spec in settings.retrievers if spec.name not in built]
    embedder: Embedder | None = None
    stores: StoreLoader | None = None
    if configured:  # only retrievers built from configs need the run's embedder and store
        embedder = _embedder_for(settings, dataset, embedder_factory, cache)
        stores = StoreLoader(settings, dataset, embedder, cache)
    results = []
    resumed_seconds = 0.0
    work_started = started  # the cost of a computed result runs from here (setup included)
    for spec in settings.retrievers:
        if spec.name in built:
            result = _built_result(settings, spec.name, built[spec.name], dataset, output_dir)
            work_started = time.perf_counter()
            results.append(result)
            continue
        assert stores is not None and embedder is not None  # made above for configured specs
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
    significance = compare_with_baseline(
        {result.name: result.per_query for result in results},
        settings.run.baseline or results[0].name,
        [metric.name for metric in settings.metrics],
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


# --------------------------------------------------------------------------- programs
# One function per program of ``python -m viking_eval``; the CLI composes and validates the
# config, then calls one of them.


def objectives(summary: RunSummary) -> dict[str, dict[str, float]]:
    """What a sweeper optimises (``hydra.sweeper.objective``, e.g. ``bm25.nDCG@10``): every metric,
    and p50/p95 latency for quality-vs-latency studies."""
    return {
        result.name: {
            **result.metrics,
            **{f"latency.{key}": result.latency[key] for key in ("p50_ms", "p95_ms") if result.latency},
        }
        for result in summary.results
    }


def run_program(
    settings: Settings, output_dir: Path, *, config_yaml: str = "", phase: Phase = "report"
) -> dict[str, dict[str, float]]:
    """Evaluate (``python -m viking_eval experiment=...``; a sweep job with ``phase="tune"``):
    run, print the summary table, return the objectives for a sweeper."""
    summary = run_experiment(settings, output_dir, config_yaml=config_yaml, phase=phase)
    print(f"\n{settings.name}: {summary.dataset} ({summary.split}), {summary.results[0].n_queries} queries")
    print(summary_table(summary, settings, fmt="simple"))
    if summary.significance is not None and summary.significance.comparisons:
        print(summary.significance.legend())
    print(f"\nreport: {output_dir}/report.md and report.html")
    return objectives(summary)


def gate_program(settings: Settings, output_dir: Path, *, overrides: Sequence[str] = ()) -> int:
    """The regression gate (``gate.baseline=<file>``): run the baseline file's checks into
    ``output_dir``, each with the command line's ``overrides`` applied, print one verdict per
    line; returns the exit status (0 pass, 1 a check failed, 2 the file or a check cannot be used)."""
    return gate.gate_from_settings(settings, output_dir, run_experiment, overrides=overrides)


def compare_program(
    settings: Settings, output_dir: Path, *, config_yaml: str = "", phase: Phase = "report"
) -> int:
    """Evaluate, then gate the run against a stored run folder (``gate.baseline_run=<folder>``):
    prints the summary, then the verdicts; returns the exit status as ``gate_program``."""
    run_program(settings, output_dir, config_yaml=config_yaml, phase=phase)
    return gate.compare_from_settings(settings, output_dir)


def gate_cli(argv: Sequence[str] | None = None) -> int:
    """``python -m viking_eval.gate check|record|compare ...``; returns the exit status."""
    return gate.main(argv, run=run_experiment)
