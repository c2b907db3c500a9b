"""Regression gate: expected scores with tolerances (Pyserini's 2CR checks), decided by paired tests.

Two modes, one verdict per check, printed one line each:

- **Baseline file** (``experiments/baselines/<name>.yaml``): for each check, the command that
  produces a run (``python -m viking_eval <overrides>``), the expected metric values per retriever,
  a tolerance, optionally the stored per-query values of the run that set the expectations, and
  latency expectations. The gate composes every command, runs them (in worker processes, one per
  core: :func:`run_checks`), then compares.
  ``python -m viking_eval experiment=ci_regression`` (``gate.baseline`` set: the entry point hands
  the run to ``run_gate``) or ``python -m viking_eval.gate check <file>``.
- **Run folder against a baseline run folder** (``python -m viking_eval.gate compare RUN BASELINE``
  or ``gate.baseline_run=<folder>`` after a run): the expected values are the baseline run's
  per-query means, the paired test is over the two runs' per_query.csv.

The verdicts (``OK``, ``IMPROVED``, ``OKISH``, ``FAIL``) are decided in
:mod:`viking_eval.gate.verdicts`. This module runs a baseline file's checks; :mod:`viking_eval.gate.record` rewrites a baseline file
with what its checks measure; :mod:`viking_eval.gate.compare` compares two run folders;
:mod:`viking_eval.gate.commands` holds the entry points.

Exit status: 0 when no check fails, 1 when one does, 2 when the baseline file or a run folder
cannot be used (``GateError``: the message names the file, key and value).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from threadpoolctl import threadpool_limits

from viking_eval.config import ConfigError, Settings, load_settings
from viking_eval.data import DataError, resolve_dataset
from viking_eval.gate.baseline import (
    BaselineFile,
    Check,
    GateError,
    PerQuery,
    load_baseline,
    read_per_query,
)
from viking_eval.gate.verdicts import (
    CheckResult,
    GateReport,
    MetricComparison,
    decide,
    latency_ratio,
    latency_status,
    per_query_mean,
)
from viking_eval.measures.metrics import MetricError, parse_metric
from viking_eval.results.model import RunExperiment, RunSummary
from viking_eval.run.ray_jobs import RayOptions

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = PROJECT_ROOT / "conf"
# expected values are written with 4 decimals; the stored per-query values must average to them
PER_QUERY_CONSISTENCY = 1e-4
Compose = Callable[[Sequence[str]], DictConfig]


@dataclass(frozen=True)
class PlannedCheck:
    check: Check
    settings: Settings
    config_yaml: str
    stored: PerQuery | None


def compose_overrides(overrides: Sequence[str]) -> DictConfig:
    """The project's config with ``overrides``, as ``python -m viking_eval <overrides>`` composes
    it (inside a running Hydra app through its compose API, else with a fresh one)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose(config_name="config", overrides=list(overrides))
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def plan_checks(baseline: BaselineFile, compose: Compose = compose_overrides) -> list[PlannedCheck]:
    """Compose and validate every check before anything runs: each command's config, its dataset,
    the retrievers, metrics and latency names the file expects, and the stored per-query values."""
    planned = []
    for check in baseline.checks:
        where = f"{baseline.path}: check {check.name!r}"
        try:
            cfg = compose(check.overrides)
        except Exception as error:  # Hydra raises several types for a missing option or bad override
            from viking_eval.config.compose import explain

            reason = explain(error, check.overrides).line()
            raise GateError(f"{where}: the command {check.command!r} does not compose: {reason}") from None
        try:
            settings = load_settings(cfg)
        except ConfigError as error:
            raise GateError(
                f"{where}: the command {check.command!r} is not a valid run: {error.line()}"
            ) from None
        if settings.gate.baseline is not None or settings.gate.baseline_run is not None:
            raise GateError(
                f"{where}: the command must describe one evaluation, but it sets gate.baseline/baseline_run; "
                f"add gate.baseline=null to {check.command!r}"
            )
        if settings.dataset.name != check.dataset:
            raise GateError(
                f"{where}: dataset is {check.dataset!r} but the command evaluates {settings.dataset.name!r}"
            )
        try:
            resolve_dataset(settings.dataset.path or settings.dataset.name)
        except DataError as error:
            raise GateError(f"{where}: dataset {check.dataset!r}: {error}") from None
        names = [spec.name for spec in settings.retrievers]
        metric_names = [metric.name for metric in settings.metrics]
        for retriever, expected in check.metrics.items():
            if retriever not in names:
                raise GateError(
                    f"{where}: metrics: unknown retriever {retriever!r}; the command configures {names}"
                )
            for metric in expected:
                try:
                    parse_metric(metric)
                except MetricError as error:
                    raise GateError(f"{where}: metrics.{retriever}: {error}") from None
                if metric not in metric_names:
                    raise GateError(
                        f"{where}: metrics.{retriever}: metric {metric!r} is not computed by the command; "
                        f"it computes {metric_names} (run.metrics)"
                    )
        if check.latency is not None:
            for retriever in [check.latency.reference, *check.latency.ratios]:
                if retriever not in names:
                    raise GateError(
                        f"{where}: latency: unknown retriever {retriever!r}; the command configures {names}"
                    )
            if settings.run.latency.n_queries == 0:
                raise GateError(f"{where}: latency checks need timed queries, but run.latency.n_queries is 0")
        stored = _stored_per_query(check, check.per_query, where) if check.per_query is not None else None
        planned.append(PlannedCheck(check, settings, OmegaConf.to_yaml(cfg, resolve=True), stored))
    return planned


def _stored_per_query(check: Check, per_query: Path, where: str) -> PerQuery:
    """The stored per-query values of ``check``, checked against its expected values."""
    if not per_query.is_file():
        raise GateError(
            f"{where}: per_query file {per_query} does not exist; write it with "
            "`python -m viking_eval.gate record <baseline file>` or remove the per_query key"
        )
    stored = read_per_query(per_query)
    for retriever, expected in check.metrics.items():
        if retriever not in stored:
            raise GateError(
                f"{where}: {per_query} has no rows for retriever {retriever!r} (it has {sorted(stored)})"
            )
        for metric, value in expected.items():
            if metric not in stored[retriever]:
                raise GateError(
                    f"{where}: {per_query} has no column {metric!r} (it has {sorted(stored[retriever])})"
                )
            mean = per_query_mean(stored[retriever][metric])
            if abs(mean - value) > PER_QUERY_CONSISTENCY:
                raise GateError(
                    f"{where}: {retriever} {metric}: the expected value {value} does not match the mean "
                    f"{mean:.6f} of {per_query}; the two are stale with respect to each other "
                    "(re-record the baseline)"
                )
    return stored


def run_checks(
    planned: Sequence[PlannedCheck],
    output_dir: Path,
    run: RunExperiment,
    workers: int | None = None,
    *,
    ray: RayOptions | None = None,
) -> dict[str, RunSummary]:
    """Run every planned check into ``output_dir/<check name>``; returns the summaries by name,
    in the file's order.

    The checks are independent runs: on a machine with several cores they run in that many
    forked worker processes at once (``workers``; default: the cores this process may use, see
    :func:`gate_workers`), each check's output kept aside and printed whole when it finishes, so
    the log reads one check at a time. A check that fails in a worker is run again here, so that
    its error is raised as the one-process gate raises it.

    BLAS runs on one thread here. On a shared machine (CI, or two cores and a neighbour's job) a
    multi-threaded matrix product waits for a descheduled thread: exact dense search of one query
    over 1,400 documents took 8 ms with two threads under load and 0.24 ms with one, so the
    latency ratios would measure the machine's load instead of the code. ``run`` is the runner's
    ``run_experiment`` (passed in: the gate sits beside the runner, not above it)."""
    count = gate_workers(len(planned)) if workers is None else max(1, min(workers, len(planned)))
    with threadpool_limits(limits=1):
        if ray is not None:  # hydra/launcher=ray: every check a Ray task, launched at once
            from viking_eval.run.ray_jobs import run_all

            print(f"gate: {len(planned)} checks as Ray tasks", file=sys.stderr, flush=True)
            calls = [
                (
                    f"check {item.check.name}",
                    (item.settings, output_dir / item.check.name),
                    {"config_yaml": item.config_yaml},
                )
                for item in planned
            ]
            return dict(zip([item.check.name for item in planned], run_all(ray, run, calls), strict=True))
        if count == 1:
            return {
                item.check.name: _run_here(item, number, len(planned), output_dir, run)
                for number, item in enumerate(planned, start=1)
            }
        print(f"gate: {len(planned)} checks, {count} at a time", file=sys.stderr, flush=True)
        finished, failed = run_in_workers(planned, output_dir, run, count)
        for number, item in enumerate(planned, start=1):
            if item.check.name in failed:
                finished[item.check.name] = _run_here(item, number, len(planned), output_dir, run)
    return {item.check.name: finished[item.check.name] for item in planned}


def gate_workers(checks: int) -> int:
    """How many checks run at once: the cores this process may use (at most ``checks``); 1 where
    processes cannot be forked."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, checks))


def _step(number: int, total: int, item: PlannedCheck) -> str:
    # one line per check and step, numbered: readable in a CI log, where no bar is drawn, and
    # between the bars of the check's own run on a terminal
    return f"gate [{number}/{total}] {item.check.name}"


def _run_here(
    item: PlannedCheck, number: int, total: int, output_dir: Path, run: RunExperiment
) -> RunSummary:
    step = _step(number, total, item)
    start = time.perf_counter()
    print(f"{step}: running {item.check.command}", file=sys.stderr, flush=True)
    summary = run(item.settings, output_dir / item.check.name, config_yaml=item.config_yaml)
    print(f"{step}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return summary


def _run_forked(
    item: PlannedCheck, output_dir: Path, run: RunExperiment, log: Path, answer: Connection
) -> None:
    """A worker process: one check, its output (stdout and stderr) into ``log``, the summary
    sent back (None when the check failed: the gate runs it again in its own process)."""
    sink = log.open("w", encoding="utf-8", buffering=1)
    os.dup2(sink.fileno(), 1)  # what writes to the file descriptors (logging's handlers, C code)
    os.dup2(sink.fileno(), 2)
    sys.stdout = sys.stderr = sink  # and Python's own streams, whatever they were replaced by
    summary: RunSummary | None = None
    try:
        with threadpool_limits(limits=1):
            summary = run(item.settings, output_dir / item.check.name, config_yaml=item.config_yaml)
    except BaseException:  # reported by running the check again in the gate's process
        traceback.print_exc()
    finally:
        sink.flush()
        answer.send(summary)
        answer.close()


def run_in_workers(
    planned: Sequence[PlannedCheck], output_dir: Path, run: RunExperiment, workers: int
) -> tuple[dict[str, RunSummary], set[str]]:
    """Run the checks in up to ``workers`` forked processes at once, in the file's order; each
    check's output is printed when it finishes. Returns the summaries by name and the names of
    the checks that failed."""
    context = multiprocessing.get_context("fork")
    finished: dict[str, RunSummary] = {}
    failed: set[str] = set()
    waiting = list(enumerate(planned, start=1))
    running: dict[Connection, tuple[int, PlannedCheck, BaseProcess, float, Path]] = {}
    with tempfile.TemporaryDirectory(prefix="gate-") as logs:
        while waiting or running:
            while waiting and len(running) < workers:
                number, item = waiting.pop(0)
                print(
                    f"{_step(number, len(planned), item)}: running {item.check.command}",
                    file=sys.stderr,
                    flush=True,
                )
                log = Path(logs) / f"{number}.log"
                receive, send = context.Pipe(duplex=False)
                process: BaseProcess = context.Process(
                    target=_run_forked, args=(item, output_dir, run, log, send)
                )
                process.start()
                send.close()
                running[receive] = (number, item, process, time.perf_counter(), log)
            for ready in wait(list(running)):
                connection = next(key for key in running if key is ready)
                number, item, process, start, log = running.pop(connection)
                try:
                    summary: RunSummary | None = connection.recv()
                except EOFError:  # the worker died before it could answer
                    summary = None
                connection.close()
                process.join()
                seconds = time.perf_counter() - start
                sys.stderr.write(log.read_text(encoding="utf-8", errors="replace"))
                step = _step(number, len(planned), item)
                if summary is None:
                    failed.add(item.check.name)
                    print(f"{step}: failed in a worker after {seconds:.1f} s", file=sys.stderr, flush=True)
                else:
                    finished[item.check.name] = summary
                    print(f"{step}: done in {seconds:.1f} s", file=sys.stderr, flush=True)
    return finished, failed


def evaluate_baseline(
    baseline: BaselineFile, planned: Sequence[PlannedCheck], summaries: Mapping[str, RunSummary]
) -> GateReport:
    comparisons: list[MetricComparison] = []
    latency_results: list[CheckResult] = []
    for item in planned:
        check = item.check
        summary = summaries[check.name]
        results = {result.name: result for result in summary.results}
        for retriever, expected in check.metrics.items():
            for metric, value in expected.items():
                comparisons.append(
                    MetricComparison(
                        check=check.name,
                        retriever=retriever,
                        metric=metric,
                        observed=results[retriever].metrics[metric],
                        expected=value,
                        tolerance=check.tolerance,
                        current=results[retriever].per_query[metric] if item.stored is not None else None,
                        stored=item.stored[retriever][metric] if item.stored is not None else None,
                    )
                )
        if check.latency is not None:
            latency = {name: result.latency for name, result in results.items()}
            for retriever, expected_ratio in check.latency.ratios.items():
                ratio = latency_ratio(
                    latency,
                    retriever,
                    check.latency.reference,
                    check.latency.measure,
                    f"check {check.name!r}",
                )
                latency_results.append(
                    CheckResult(
                        status=latency_status(ratio, expected_ratio, check.latency.tolerance),
                        check=check.name,
                        retriever=retriever,
                        what=f"{check.latency.measure}/{check.latency.reference}",
                        observed=ratio,
                        expected=expected_ratio,
                        tolerance=check.latency.tolerance,
                        kind="latency",
                    )
                )
    return decide(comparisons, latency_results, baseline.significance, str(baseline.path))


def resolve_path(path: str | Path) -> Path:
    """A path as given if it exists (relative to the working directory), else relative to the
    project root (so ``experiments/baselines/...`` works from anywhere)."""
    given = Path(path).expanduser()
    if given.exists() or given.is_absolute():
        return given
    in_project = PROJECT_ROOT / given
    return in_project if in_project.exists() else given


def run_gate(
    baseline_path: str | Path,
    output_dir: Path,
    run: RunExperiment,
    compose: Compose = compose_overrides,
    *,
    ray: RayOptions | None = None,
) -> GateReport:
    """Validate the baseline file and every check, run the checks (``ray``: as Ray tasks), print
    and write the verdicts."""
    baseline = load_baseline(resolve_path(baseline_path))
    planned = plan_checks(baseline, compose)
    summaries = run_checks(planned, output_dir, run, ray=ray)
    report = evaluate_baseline(baseline, planned, summaries)
    report.write(output_dir)
    return report
