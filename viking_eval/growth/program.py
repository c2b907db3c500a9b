"""``experiment=locomo_growth`` (any config with ``growth.by`` set): quality as the memory grows.

    python -m viking_eval experiment=locomo_growth                       # LoCoMo, session by session
    python -m viking_eval experiment=growth_smoke                        # ADI in 5 steps of ids
    python -m viking_eval experiment=locomo_growth hydra.run.dir=<its folder>   # resume

1. The dataset (``dataset.half`` of ``dataset.split``) is read and planned into steps
   (viking_eval/growth/schedule.py): the documents each step adds, and each question's first
   step (its last evidence document in memory).
2. Every document is embedded once, up front, through the cache (viking_eval/growth/ingest.py).
3. For each step: the store grows by the step's documents (:func:`~viking_eval.growth.ingest.grow`,
   today a full rebuild, timed), then every configured retriever is evaluated on the questions
   asked after the step, as a normal run evaluates them (viking_eval/growth/step.py), and the
   step's record is written atomically (``steps/<NNN>/step.json``).
4. growth.json, growth.csv, growth.md, growth.html and the plots (viking_eval/growth/report.py).

Resuming: a step whose record exists with the same key (the data, the memory, the questions,
every setting) is not run again; the store of the first step that still runs is built from the
documents of the steps before it (``catch_up_seconds``, not part of any step's ingest cost).
"""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path
from typing import Any

from retrievers.params import ParamError
from retrievers.store import ContextStore
from viking_eval.answers.evaluate import check_answer_settings
from viking_eval.config import Settings
from viking_eval.config.errors import from_library_error
from viking_eval.data import BeirDataset
from viking_eval.data.splits import load_for_phase
from viking_eval.growth.checks import check_growth
from viking_eval.growth.ingest import MemoEmbedder, StoreRecipe, embed_up_front, ingest
from viking_eval.growth.report import write_report
from viking_eval.growth.schedule import Schedule, plan_schedule
from viking_eval.growth.step import evaluate_step, memory_dataset, read_step, step_key, write_step
from viking_eval.results import run_folder
from viking_eval.results.environment import collect_environment, peak_rss_mb
from viking_eval.run.cache import ArtifactCache
from viking_eval.run.cached_embedder import CachedEmbedder
from viking_eval.run.store import embedder_for

__all__ = ["growth_program", "run_growth"]

log = logging.getLogger(__name__)


def _memory_size(
    dataset: BeirDataset, schedule: Schedule, number: int, scope_key: str | None
) -> dict[str, Any]:
    """Documents in memory after step ``number``, and their mean number per query scope (the
    memory a question searches when queries are scoped: LoCoMo's conversation)."""
    in_memory = schedule.in_memory(number)
    size: dict[str, Any] = {"documents": len(in_memory), "documents_per_scope": None, "scopes": None}
    if scope_key is not None:
        scopes = {str(query.metadata.get(scope_key)) for query in dataset.queries.values()}
        counts = dict.fromkeys(scopes, 0)
        for doc_id in in_memory:
            value = str(dataset.corpus[doc_id].metadata.get(scope_key))
            if value in counts:
                counts[value] += 1
        size.update(
            documents_per_scope=statistics.fmean(counts.values()) if counts else None, scopes=len(counts)
        )
    return size


def _catch_up(
    dataset: BeirDataset, schedule: Schedule, number: int, recipe: StoreRecipe
) -> ContextStore | None:
    """The memory after steps 1 .. ``number - 1``: in one build with ``growth.ingest=rebuild``;
    step by step with ``add`` (an added-to store is not a rebuilt one: its tree and edges
    depend on the steps that made it)."""
    if number <= 1:
        return None
    if recipe.ingest == "rebuild":
        held = [dataset.corpus[doc] for doc in schedule.added_through(number - 1)]
        return ingest(None, held, recipe).store if held else None
    store: ContextStore | None = None
    for earlier in schedule.steps[: number - 1]:
        if earlier.added:
            store = ingest(store, [dataset.corpus[doc] for doc in earlier.added], recipe).store
    return store


def run_growth(settings: Settings, output_dir: Path, *, config_yaml: str = "") -> dict[str, Any]:
    """The growth run into ``output_dir`` (see the module docstring); returns growth.json's content."""
    check_growth(settings)
    started = time.perf_counter()
    output_dir.mkdir(parents=True, exist_ok=True)
    if config_yaml:
        run_folder.write_config(output_dir, config_yaml)
    cache = ArtifactCache(Path(settings.cache_dir) if settings.cache_dir else None)
    dataset, _ = load_for_phase(
        settings.dataset.path or settings.dataset.name,
        "report",
        split=settings.dataset.split,
        tune_split=settings.dataset.tune_split,
        strict=settings.dataset.strict,
        partition_key=settings.dataset.partition_key,
        partition_seed=settings.dataset.partition_seed,
        download=settings.dataset.download,
        half=settings.dataset.half,
    )
    check_answer_settings(settings.answers, settings.llm, dataset, True)
    schedule = plan_schedule(dataset, settings.growth)
    inner = embedder_for(settings, dataset, None, cache)
    try:  # settings the data cannot hold are refused before anything is embedded
        settings.store.check_against(dataset.corpus.values(), lambda: inner.dim)
    except ParamError as error:
        raise from_library_error("store", error) from None
    cached = CachedEmbedder(
        inner, cache, label=f"{dataset.name} corpus", show_progress=settings.show_progress
    )
    memo = MemoEmbedder(inner)  # misses (queries, a tree's abstracts) to the model; callers cache
    hits_before = cache.hits
    up_front = embed_up_front(memo, cached, dataset.corpus.values())
    embedding = {
        "name": inner.name,
        "config": settings.embedder,
        "up_front_seconds": up_front,
        "from_cache": cache.hits > hits_before and cached.parts_encoded == 0,
    }
    recipe = StoreRecipe(settings.store, memo, dataset.folder, settings.growth.ingest)
    store: ContextStore | None = None
    store_step = 0
    catch_up = 0.0
    records: list[dict[str, Any]] = []
    query_order = list(dataset.queries)
    for step in schedule.steps:
        memory = memory_dataset(dataset, schedule, step)
        key = step_key(settings, dataset, memory, memo)
        folder = output_dir / "steps" / f"{step.number:03d}"
        finished = read_step(folder, key) if settings.run.resume else None
        if finished is not None:
            log.info("growth step %d already finished in %s; not rerun", step.number, folder)
            records.append(finished)
            continue
        if store_step != step.number - 1:  # resumed: the memory as the earlier steps left it
            start = time.perf_counter()
            store = _catch_up(dataset, schedule, step.number, recipe)
            catch_up += time.perf_counter() - start
        start = time.perf_counter()
        made = ingest(store, [dataset.corpus[doc] for doc in step.added], recipe)
        ingest_seconds = time.perf_counter() - start
        store = made.store
        store_step = step.number
        new = [
            qid for qid in schedule.asked(step.number, query_order) if schedule.first_step[qid] == step.number
        ]
        start = time.perf_counter()
        results = evaluate_step(settings, memory, store, memo, cache, folder) if memory.queries else []
        info = {
            "key": key,
            "memory": _memory_size(dataset, schedule, step.number, settings.dataset.scope_key),
            "ingest": {"seconds": ingest_seconds, **made.record()},
            "eval_seconds": time.perf_counter() - start,
        }
        records.append(write_step(folder, settings, step, memory, new, results, info))
        log.info(
            "growth step %d/%d (%s): %d questions",
            step.number,
            len(schedule.steps),
            step.label,
            len(memory.queries),
        )
    document = {
        "dataset": dataset.name,
        "split": dataset.split,
        "half": settings.dataset.half,
        "growth": settings.growth.to_dict(),
        "ingest_kind": settings.growth.ingest,
        "embedding": embedding,
        "catch_up_seconds": catch_up,
        "n_questions": len(dataset.queries),
        "never_asked": list(schedule.never_asked),
        "group_key": settings.dataset.group_key,
        "retrievers": [spec.name for spec in settings.retrievers],
        "steps": records,
        "wall_seconds": time.perf_counter() - started,
    }
    environment = collect_environment({"peak_rss_mb": peak_rss_mb(), "cache_root": str(cache.root)})
    write_report(output_dir, document, environment)
    return document


def growth_program(settings: Settings, output_dir: Path, *, config_yaml: str = "") -> int:
    """The command: the run, then where its report is; the exit status."""
    document = run_growth(settings, output_dir, config_yaml=config_yaml)
    print(f"\n{settings.name}: {document['dataset']} ({document['split']}), {len(document['steps'])} steps")
    print(f"report: {output_dir}/growth.md and growth.html")
    return 0
