"""Benchmark mode: the same retrievers over several datasets, one table (BEIR/MTEB style).

``python -m viking_eval experiment=benchmark 'benchmark.datasets=[scifact,cisi,cranfield,medline]'``

A benchmark is not a sweep. A multirun (``-m dataset=a,b``) tunes: its jobs evaluate the tuning
split and ``best.yaml`` picks one job. A benchmark evaluates every dataset on its reported split,
picks nothing, and compares retrievers across datasets. The CLI says which one runs.

How it runs (``benchmark_program``)::

    the command's overrides, without the benchmark's own keys
      -> one job per dataset (and per variant): + dataset=<entry> (a conf/dataset/ option;
         otherwise dataset.name=<entry>), benchmark.datasets=null, + the variant's overrides
      -> each job is exactly the single-dataset command with those overrides: composed,
         validated, and run by the runner into <benchmark folder>/<dataset>[@<variant>]/
         (a normal run folder: its own report, markers, run files; stores cached as always)
      -> the table (viking_eval/benchmark/table.py): every cell from its run, the mean over
         datasets, paired tests against the baseline with the correction over the whole table
      -> benchmark.json/.csv/.md/.html in the benchmark folder (benchmark_folder.write_benchmark)

Every job is composed and validated, and every dataset located (its folder and split), before the
first one runs (``check_benchmark``, called by the CLI's pre-flight): an unknown dataset is one
``error:`` line and exit 2 with nothing run. Resuming: rerun the command with
``hydra.run.dir=<the benchmark folder>``; each dataset's run folder resumes as any run does
(finished retrievers are not rerun). A run holds ``benchmark.lock`` in the benchmark folder while
it works; a second run into the same folder meanwhile refuses with one line, exit 2.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf

from viking_eval.benchmark.table import BenchmarkTable, build_table
from viking_eval.config import ConfigError, Settings, load_settings
from viking_eval.config.compose import CONFIG_DIR, compose_config, explain, hydra_session
from viking_eval.data import DataError, resolve_dataset
from viking_eval.results import benchmark_folder, run_folder
from viking_eval.results.environment import collect_environment
from viking_eval.results.model import RunSummary
from viking_eval.run.ray_jobs import RayOptions

__all__ = ["BenchmarkJob", "benchmark_program", "check_benchmark", "plan_jobs"]

log = logging.getLogger(__name__)

#: command-line keys that choose the benchmark itself, left out of each job's overrides
OWN_KEYS = ("benchmark",)
#: held in the benchmark folder for the whole run; a second run into that folder refuses
LOCK_FILE = "benchmark.lock"


@dataclass(frozen=True)
class BenchmarkJob:
    """One run of a benchmark: a dataset (and variant), its folder and its overrides."""

    dataset: str  # the label in the table (the entry, or a folder's name)
    entry: str  # as benchmark.datasets gives it
    variant: str | None
    overrides: tuple[str, ...]

    @property
    def folder(self) -> str:
        return self.dataset if self.variant is None else f"{self.dataset}@{self.variant}"

    @property
    def command(self) -> str:
        return " ".join(self.overrides)


def _key(line: str) -> str:
    return line.split("=", 1)[0].lstrip("+~")


def dataset_options(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(path.stem for path in (config_dir / "dataset").glob("*.yaml"))


def _label(entry: str) -> str:
    return Path(entry).name if "/" in entry else entry


def plan_jobs(settings: Settings, task_overrides: Sequence[str]) -> list[BenchmarkJob]:
    """The benchmark's jobs, base run first for each dataset, then its variants; ConfigError for
    a command that also chooses a dataset or names a dataset twice."""
    datasets = settings.benchmark.datasets or ()
    kept = []
    for line in task_overrides:
        key = _key(line)
        if key == "dataset":
            raise ConfigError(
                "dataset",
                f"{line!r} and benchmark.datasets both choose datasets: a benchmark runs each of "
                "benchmark.datasets (dataset.* settings, e.g. dataset.strict=true, apply to all of them)",
            )
        if key in OWN_KEYS or key.startswith(tuple(f"{own}." for own in OWN_KEYS)):
            continue
        kept.append(line)
    labels = [_label(entry) for entry in datasets]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise ConfigError("benchmark.datasets", f"{twice} named twice (datasets are table columns)")
    options = set(dataset_options())
    jobs = []
    for entry, label in zip(datasets, labels, strict=True):
        choice = f"dataset={entry}" if entry in options else f"dataset.name={entry}"
        base = (*kept, choice, "benchmark.datasets=null")
        jobs.append(BenchmarkJob(label, entry, None, base))
        for variant, extra in settings.benchmark.variants.items():
            jobs.append(BenchmarkJob(label, entry, variant, (*base, *extra)))
    return jobs


def _job_settings(job: BenchmarkJob) -> tuple[Settings, DictConfig]:
    """The job's config, composed and validated; ConfigError naming the job when it is not."""
    where = f"benchmark.datasets: {job.entry}" + (f", variant {job.variant}" if job.variant else "")
    try:
        cfg = compose_config(list(job.overrides))
        return load_settings(cfg), cfg
    except Exception as error:  # Hydra raises several types for a missing option or a bad override
        found = explain(error, list(job.overrides))
        detail = f"{found.detail} ({where})"
        raise ConfigError(found.key, detail, key=found.key, detail=detail) from error


def _locate(job: BenchmarkJob, settings: Settings) -> None:
    """The job's dataset folder and split exist (no data read); ConfigError, one line, if not."""
    name = settings.dataset.path or settings.dataset.name
    if name.startswith("irds:"):  # located (and possibly fetched) when it runs
        return
    try:
        folder = resolve_dataset(name)
    except DataError as error:
        if _downloadable(name, settings.dataset.download):  # fetched when its run starts
            return
        first = str(error).splitlines()[0]
        configs = ", ".join(dataset_options())
        raise ConfigError(
            "benchmark.datasets",
            f"unknown dataset {job.entry!r}: not a dataset config (conf/dataset/: {configs}) and {first}",
        ) from None
    split = settings.dataset.split
    if not (folder / "qrels" / f"{split}.tsv").is_file():
        splits = sorted(path.stem for path in (folder / "qrels").glob("*.tsv"))
        raise ConfigError(
            "benchmark.datasets",
            f"dataset {job.entry!r} ({folder}) has no qrels for split {split!r}; splits: {', '.join(splits) or 'none'}",
        )
    if settings.answers.enabled:
        _check_gold_answers(job, folder, settings.answers.answer_key)


def _check_gold_answers(job: BenchmarkJob, folder: Path, key: str) -> None:
    """With answers.enabled, every dataset must carry gold answers: checked from its query file
    before any dataset runs (not at its turn, after the others have run)."""
    from viking_eval.answers.evaluate import queries_gold_answers
    from viking_eval.data.beir import load_queries

    path = next((p for p in (folder / "queries.jsonl", folder / "queries.jsonl.gz") if p.is_file()), None)
    if path is None:  # load_beir names the missing file when the job runs
        return
    if not queries_gold_answers(load_queries(path), key):
        raise ConfigError(
            "answers.enabled",
            f"dataset {job.entry!r} ({folder}): no query has a gold answer under {key!r} "
            "(answer metrics need one): remove it from benchmark.datasets or set answers.enabled=false",
        )


def _downloadable(name: str, mode: str) -> bool:
    """Whether a dataset found nowhere will be fetched when its run starts (the registry has it,
    as a BEIR zip or as a raw release the project converts, and ``dataset.download`` allows it;
    viking_eval/data/download.py, fetch.py)."""
    from viking_eval.data.download import downloads_allowed
    from viking_eval.data.fetch import converted_entry
    from viking_eval.data.registry import load_registry

    if not downloads_allowed(mode):
        return False
    try:
        entry = load_registry().datasets.get(name)
        return (entry is not None and entry.url is not None) or converted_entry(name) is not None
    except (OSError, ValueError):
        return False


def check_benchmark(settings: Settings, task_overrides: Sequence[str]) -> list[BenchmarkJob]:
    """Compose and validate every job and locate every dataset, before anything runs."""
    if settings.gate.baseline is not None or settings.gate.baseline_run is not None:
        raise ConfigError(
            "benchmark.datasets", "a benchmark does not run the gate: unset gate.baseline / gate.baseline_run"
        )
    jobs = plan_jobs(settings, task_overrides)
    with hydra_session():
        for job in jobs:
            job_settings, _ = _job_settings(job)
            _locate(job, job_settings)
    return jobs


def run_benchmark(
    settings: Settings, output_dir: Path, task_overrides: Sequence[str], *, ray: RayOptions | None = None
) -> BenchmarkTable:
    """Run every job into ``output_dir`` and write the table; returns it. ``ray``
    (``hydra/launcher=ray``): the jobs run at once as Ray tasks (viking_eval/run/ray_jobs.py),
    each into the run folder it would write here."""
    from viking_eval.run.experiment import run_experiment

    started = time.perf_counter()
    output_dir.mkdir(parents=True, exist_ok=True)
    jobs = check_benchmark(settings, task_overrides)
    summaries: list[RunSummary] = []
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    with hydra_session():
        for number, job in enumerate(jobs, start=1):
            job_settings, cfg = _job_settings(job)
            print(
                f"benchmark [{number}/{len(jobs)}] {job.folder}: {', '.join(s.name for s in job_settings.retrievers)}"
                + (" (a Ray task)" if ray is not None else ""),
                flush=True,
            )
            args = (job_settings, output_dir / job.folder)
            kwargs: dict[str, Any] = {"config_yaml": OmegaConf.to_yaml(cfg, resolve=True), "phase": "report"}
            if ray is None:
                summaries.append(run_experiment(*args, **kwargs))
            else:
                calls.append((f"benchmark job {job.folder}", args, kwargs))
    if ray is not None:
        from viking_eval.run.ray_jobs import run_all

        summaries = run_all(ray, run_experiment, calls)
    runs = []
    for job, summary in zip(jobs, summaries, strict=True):
        files = run_folder.read_environment(output_dir / job.folder).get("dataset_files") or {}
        runs.append((job.dataset, job.variant, job.folder, summary, dict(files)))
    baseline = settings.run.baseline or settings.retrievers[0].name
    table = build_table(
        settings.name,
        runs,
        datasets=list(dict.fromkeys(job.dataset for job in jobs)),
        baseline=baseline,
        metrics=[metric.name for metric in settings.metrics],
        settings=settings.run.significance,
        variants=settings.benchmark.variants,
        wall_seconds=time.perf_counter() - started,
    )
    benchmark_folder.write_benchmark(output_dir, table, collect_environment({}))
    return table


def benchmark_program(
    settings: Settings, output_dir: Path, *, overrides: Sequence[str], ray: RayOptions | None = None
) -> int:
    """``python -m viking_eval ... benchmark.datasets=[...]``: run, print the primary metric's
    table, return the exit status."""
    from viking_eval.report.benchmark import metric_table

    datasets = settings.benchmark.datasets or ()
    print(
        f"benchmark (not a sweep): {len(settings.retrievers)} retriever(s) x {len(datasets)} dataset(s)"
        + (f" + variants {', '.join(settings.benchmark.variants)}" if settings.benchmark.variants else ""),
        flush=True,
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(output_dir / LOCK_FILE))
    try:
        lock.acquire(timeout=0)  # held for the whole run: two benchmarks never share a folder
    except Timeout:
        print(
            f"error: {output_dir}: another benchmark is running into this folder (it holds "
            f"{output_dir / LOCK_FILE}); wait for it to finish, or give this one another hydra.run.dir",
            file=sys.stderr,
            flush=True,
        )
        return 2
    try:
        table = run_benchmark(settings, output_dir, overrides, ray=ray)
    finally:
        lock.release()
    print(f"\n{settings.name}: {table.primary_metric}, {len(table.datasets)} datasets, mean over datasets")
    print(metric_table(table, table.primary_metric, fmt="simple"))
    print(table.legend())
    print(f"\nbenchmark: {output_dir}/benchmark.md and benchmark.html ({table.wall_seconds:.1f} s)")
    return 0
