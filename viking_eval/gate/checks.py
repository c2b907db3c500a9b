"""Regression gate: expected scores with tolerances (Pyserini's 2CR checks), decided by paired tests.

Two modes, one verdict per check, printed one line each:

- **Baseline file** (``experiments/baselines/<name>.yaml``): for each check, the command that
  produces a run (``python -m viking_eval <overrides>``), the expected metric values per retriever,
  a tolerance, optionally the stored per-query values of the run that set the expectations, and
  latency expectations. The gate composes and runs every command in this process, then compares.
  ``python -m viking_eval experiment=ci_regression`` (``gate.baseline`` set: the entry point hands
  the run to ``run_gate``) or ``python -m viking_eval.gate check <file>``.
- **Run folder against a baseline run folder** (``python -m viking_eval.gate compare RUN BASELINE``
  or ``gate.baseline_run=<folder>`` after a run): the expected values are the baseline run's
  per-query means, the paired test is over the two runs' per_query.csv.

Verdicts on a metric, with d = observed - expected:

- ``OK``: |d| <= tolerance.
- ``IMPROVED``: d > tolerance (update the baseline: ``python -m viking_eval.gate record <file>``).
- ``OKISH``: d < -tolerance but not significantly worse: the paired test (``significance.test``)
  of the per-query values against the stored ones, p-values adjusted across every metric check of
  the gate (``significance.correction``), gives p_adj > alpha.
- ``FAIL``: d < -tolerance and significantly worse; or d < -tolerance with no per-query values to
  test (a drop that cannot be shown to be noise fails).

Latency is gated only as a ratio to a reference retriever measured in the same process on the same
queries (``search_p50_ms`` of a retriever over that of exact dense search, say), never as a time:
``FAIL`` above expected x (1 + tolerance), ``IMPROVED`` below expected / (1 + tolerance), else ``OK``.

Exit status: 0 when no check fails, 1 when one does, 2 when the baseline file or a run folder
cannot be used (``GateError``: the message names the file, key and value).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from threadpoolctl import threadpool_limits

from viking_eval import files
from viking_eval.config import ConfigError, Settings, load_settings
from viking_eval.data import DataError, resolve_dataset
from viking_eval.gate.baseline import (
    BaselineFile,
    Check,
    GateError,
    PerQuery,
    load_baseline,
    read_per_query,
    write_per_query,
)
from viking_eval.measures.metrics import MetricError, parse_metric
from viking_eval.measures.significance import TEST_NAMES, SignificanceSettings, adjust, aligned, run_test
from viking_eval.results import run_folder
from viking_eval.results.model import RunExperiment, RunSummary
from viking_eval.results.run_folder import RunFolderError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = PROJECT_ROOT / "conf"
STATUSES = ("OK", "OKISH", "FAIL", "IMPROVED")
# expected values are written with 4 decimals; the stored per-query values must average to them
PER_QUERY_CONSISTENCY = 1e-4
Compose = Callable[[Sequence[str]], DictConfig]


def _mean(values: Mapping[str, float]) -> float:
    return math.fsum(values.values()) / len(values) if values else math.nan


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class CheckResult:
    """One verdict: a metric (or a latency ratio) of one retriever in one check."""

    status: str
    check: str
    retriever: str
    what: str  # the metric, or "<measure>/<reference>" for latency
    observed: float
    expected: float
    tolerance: float
    p_value: float | None = None
    p_adjusted: float | None = None
    n_queries: int | None = None
    note: str = ""
    kind: str = "metric"  # or "latency": observed and expected are ratios, tolerance relative

    @property
    def is_latency(self) -> bool:
        return self.kind == "latency"

    def line(self) -> str:
        # a name longer than its column still ends in a space (multi_strategy_tuned, locomo-hybrid):
        # lines split into fields on whitespace
        head = f"{self.status:<9}{self.check:<11} {self.retriever:<11} {self.what:<24}"
        if self.is_latency:
            low, high = self.expected / (1 + self.tolerance), self.expected * (1 + self.tolerance)
            body = f"{self.observed:6.2f}x  expected {self.expected:.2f}x (ok in [{low:.2f}, {high:.2f}])"
        else:
            difference = self.observed - self.expected
            shown = 0.0 if abs(difference) < 5e-5 else difference  # no "-0.0000" for rounding noise
            body = f"{self.observed:.4f}  expected {self.expected:.4f} ±{self.tolerance:.4f}  Δ {shown:+.4f}"
            if self.p_adjusted is not None and self.p_value is not None:
                body += f"  p {self.p_value:.2g} (adj. {self.p_adjusted:.2g}, {self.n_queries} queries)"
        return head + body + (f"  {self.note}" if self.note else "")


@dataclass(frozen=True)
class GateReport:
    results: tuple[CheckResult, ...]
    significance: SignificanceSettings
    source: str

    @property
    def passed(self) -> bool:
        return all(result.status != "FAIL" for result in self.results)

    def counts(self) -> dict[str, int]:
        return {status: sum(1 for r in self.results if r.status == status) for status in STATUSES}

    def summary_line(self) -> str:
        counts = self.counts()
        parts = ", ".join(f"{counts[status]} {status}" for status in STATUSES)
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"gate {verdict}: {len(self.results)} checks ({parts}); {TEST_NAMES[self.significance.test]}, "
            f"{self.significance.correction} correction, alpha {self.significance.alpha}; {self.source}"
        )

    def text(self) -> str:
        return "\n".join([*(result.line() for result in self.results), self.summary_line()]) + "\n"

    def write(self, folder: Path) -> None:
        """gate.txt (the printed lines) and gate.csv (one row per verdict)."""
        columns = [f.name for f in dataclasses.fields(CheckResult)]
        rows = [
            columns,
            *([_csv_cell(getattr(result, column)) for column in columns] for result in self.results),
        ]
        run_folder.write_gate_report(folder, self.text(), rows)


def _csv_cell(value: object) -> str:
    if value is None:
        return ""
    text = repr(value) if isinstance(value, float) else str(value)
    return f'"{text}"' if "," in text or '"' in text else text


def metric_status(difference: float, tolerance: float, p_adjusted: float | None, alpha: float) -> str:
    """The verdict on observed - expected (see the module docstring)."""
    slack = 1e-12  # expected values and tolerances are decimals; do not fail on float noise
    if abs(difference) <= tolerance + slack:
        return "OK"
    if difference > 0:
        return "IMPROVED"
    if p_adjusted is not None and p_adjusted > alpha:
        return "OKISH"
    return "FAIL"


def latency_status(ratio: float, expected: float, tolerance: float) -> str:
    if ratio > expected * (1 + tolerance):
        return "FAIL"
    if ratio < expected / (1 + tolerance):
        return "IMPROVED"
    return "OK"


@dataclass(frozen=True)
class MetricComparison:
    """What a metric verdict needs: observed and expected means, and the per-query pairs (or None)."""

    check: str
    retriever: str
    metric: str
    observed: float
    expected: float
    tolerance: float
    current: Mapping[str, float] | None = None
    stored: Mapping[str, float] | None = None


def decide(
    comparisons: Sequence[MetricComparison],
    latency_results: Sequence[CheckResult],
    significance: SignificanceSettings,
    source: str,
) -> GateReport:
    """Paired tests where per-query values exist, adjusted across all of them, then verdicts."""
    tested: list[tuple[int, float, int]] = []  # index, p-value, n
    for index, comparison in enumerate(comparisons):
        if comparison.current is None or comparison.stored is None:
            continue
        try:
            _, current, stored = aligned(
                comparison.current,
                comparison.stored,
                f"{comparison.check}: {comparison.retriever} {comparison.metric}, this run vs the baseline",
            )
        except ValueError as error:
            raise GateError(str(error)) from None
        if current.size < 2:
            continue
        tested.append(
            (index, run_test(significance.test, current, stored, significance).p_value, current.size)
        )
    adjusted = adjust([p for _, p, _ in tested], significance.correction) if tested else []
    by_index = {index: (p, p_adj, n) for (index, p, n), p_adj in zip(tested, adjusted, strict=True)}
    results = []
    for index, comparison in enumerate(comparisons):
        p_value, p_adjusted, n_queries = by_index.get(index, (None, None, None))
        difference = comparison.observed - comparison.expected
        status = metric_status(difference, comparison.tolerance, p_adjusted, significance.alpha)
        note = ""
        if status == "FAIL" and p_adjusted is None:
            note = "(no per-query baseline to test the drop)"
        results.append(
            CheckResult(
                status=status,
                check=comparison.check,
                retriever=comparison.retriever,
                what=comparison.metric,
                observed=comparison.observed,
                expected=comparison.expected,
                tolerance=comparison.tolerance,
                p_value=p_value,
                p_adjusted=p_adjusted,
                n_queries=n_queries,
                note=note,
            )
        )
    return GateReport(
        results=tuple(results) + tuple(latency_results), significance=significance, source=source
    )


def _latency_value(
    latency: Mapping[str, Mapping[str, Any] | None], retriever: str, measure: str, where: str
) -> float:
    entry = latency.get(retriever) or {}
    value = entry.get(measure)
    if not isinstance(value, int | float) or not value > 0:
        raise GateError(
            f"{where}: no positive latency {measure!r} for {retriever!r} (got {value!r}); latency checks "
            "need run.latency.n_queries > 0"
        )
    return float(value)


def latency_ratio(
    latency: Mapping[str, Mapping[str, Any] | None], retriever: str, reference: str, measure: str, where: str
) -> float:
    """``measure`` of ``retriever`` over that of ``reference``, both from one run."""
    return _latency_value(latency, retriever, measure, where) / _latency_value(
        latency, reference, measure, where
    )


# --------------------------------------------------------------------------- baseline-file mode


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
            mean = _mean(stored[retriever][metric])
            if abs(mean - value) > PER_QUERY_CONSISTENCY:
                raise GateError(
                    f"{where}: {retriever} {metric}: the expected value {value} does not match the mean "
                    f"{mean:.6f} of {per_query}; the two are stale with respect to each other "
                    "(re-record the baseline)"
                )
    return stored


def run_checks(
    planned: Sequence[PlannedCheck], output_dir: Path, run: RunExperiment
) -> dict[str, RunSummary]:
    """Run every planned check into ``output_dir/<check name>``; returns the summaries by name.

    BLAS runs on one thread here. On a shared machine (CI, or two cores and a neighbour's job) a
    multi-threaded matrix product waits for a descheduled thread: exact dense search of one query
    over 1,400 documents took 8 ms with two threads under load and 0.24 ms with one, so the
    latency ratios would measure the machine's load instead of the code. ``run`` is the runner's
    ``run_experiment`` (passed in: the gate sits beside the runner, not above it)."""
    summaries = {}
    with threadpool_limits(limits=1):
        for number, item in enumerate(planned, start=1):
            # one line per check and step, numbered: readable in a CI log, where no bar is drawn,
            # and between the bars of the check's own run on a terminal
            step = f"gate [{number}/{len(planned)}] {item.check.name}"
            start = time.perf_counter()
            print(f"{step}: running {item.check.command}", file=sys.stderr, flush=True)
            summaries[item.check.name] = run(
                item.settings, output_dir / item.check.name, config_yaml=item.config_yaml
            )
            seconds = time.perf_counter() - start
            print(f"{step}: done in {seconds:.1f} s", file=sys.stderr, flush=True)
    return summaries


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
    baseline_path: str | Path, output_dir: Path, run: RunExperiment, compose: Compose = compose_overrides
) -> GateReport:
    """Validate the baseline file and every check, run the checks, print and write the verdicts."""
    baseline = load_baseline(resolve_path(baseline_path))
    planned = plan_checks(baseline, compose)
    summaries = run_checks(planned, output_dir, run)
    report = evaluate_baseline(baseline, planned, summaries)
    report.write(output_dir)
    return report


def record_baseline(
    baseline_path: str | Path, output_dir: Path, run: RunExperiment, compose: Compose = compose_overrides
) -> Path:
    """Run every check and rewrite the baseline file's expected values, latency ratios and stored
    per-query values with what this run measured (tolerances and commands are kept)."""
    from viking_eval.results.environment import git_state

    path = resolve_path(baseline_path)
    baseline = load_baseline(path)
    # the stored per-query values are what is being replaced: do not require them to exist
    without_stored = tuple(dataclasses.replace(check, per_query=None) for check in baseline.checks)
    planned = plan_checks(dataclasses.replace(baseline, checks=without_stored), compose)
    summaries = run_checks(planned, output_dir, run)
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["measured"] = {
        "date": time.strftime("%Y-%m-%d"),
        "git_sha": (git_state() or {}).get("sha"),
        "git_dirty": (git_state() or {}).get("dirty"),
        "by": f"python -m viking_eval.gate record {baseline_path}",
    }
    for raw, item in zip(document["checks"], planned, strict=True):
        check = item.check
        results = {result.name: result for result in summaries[check.name].results}
        for retriever, expected in check.metrics.items():
            for metric in expected:
                raw["metrics"][retriever][metric] = round(results[retriever].metrics[metric], 4)
        per_query_name = raw.get("per_query") or f"{path.stem}/{check.name}.csv"
        raw["per_query"] = per_query_name
        metrics = list(dict.fromkeys(metric for expected in check.metrics.values() for metric in expected))
        write_per_query(
            path.parent / per_query_name,
            {retriever: {m: results[retriever].per_query[m] for m in metrics} for retriever in check.metrics},
            metrics,
        )
        if check.latency is not None:
            latency = {name: result.latency for name, result in results.items()}
            for retriever in check.latency.ratios:
                raw["latency"]["ratios"][retriever] = round(
                    latency_ratio(
                        latency, retriever, check.latency.reference, check.latency.measure, check.name
                    ),
                    2,
                )
    header = (
        "# Expected scores for the regression gate (viking_eval/gate/checks.py); see README 'Regression gate'.\n"
        "# Values, per-query files and `measured` are written by `python -m viking_eval.gate record`;\n"
        "# tolerances and commands are edited by hand.\n"
    )
    files.write_text(path, header + yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=110))
    return path


# --------------------------------------------------------------------------- run-folder mode


def compare_runs(
    run_dir: Path,
    baseline_dir: Path,
    *,
    tolerance: float = 0.005,
    significance: SignificanceSettings | None = None,
    metrics: Sequence[str] | None = None,
    latency_reference: str | None = None,
    latency_tolerance: float = 1.0,
) -> GateReport:
    """Compare a run folder with a baseline run folder on every retriever and metric of the
    baseline (or ``metrics``): expected = the baseline's per-query mean, paired test over the two
    per_query.csv files. With ``latency_reference``, each retriever's search p50 over the
    reference's is compared with the same ratio in the baseline run."""
    significance = significance or SignificanceSettings()
    if not 0.0 <= tolerance <= 1.0:
        raise GateError(f"tolerance must be in [0, 1], got {tolerance}")
    if not 0.0 <= latency_tolerance <= 100.0:
        raise GateError(f"latency tolerance must be in [0, 100], got {latency_tolerance}")
    for folder, role in ((run_dir, "run"), (baseline_dir, "baseline run")):
        if not folder.is_dir():
            raise GateError(f"{role} folder {folder} does not exist")
    if not (baseline_dir / "per_query.csv").is_file():
        raise GateError(
            f"baseline run folder {baseline_dir} has no per_query.csv; a per-query comparison needs the "
            "baseline run's per-query values (every run writes them; rerun the baseline configuration)"
        )
    if not (run_dir / "per_query.csv").is_file():
        raise GateError(f"run folder {run_dir} has no per_query.csv (is it a finished run folder?)")
    stored = read_per_query(baseline_dir / "per_query.csv")
    current = read_per_query(run_dir / "per_query.csv")
    missing = sorted(set(stored) - set(current))
    if missing:
        raise GateError(
            f"{run_dir}/per_query.csv lacks retriever(s) {missing} of the baseline run {baseline_dir} "
            f"(run has {sorted(current)})"
        )
    comparisons = []
    for retriever, by_metric in stored.items():
        wanted = list(metrics) if metrics else list(by_metric)
        for metric in wanted:
            if metric not in by_metric:
                raise GateError(
                    f"{baseline_dir}/per_query.csv has no metric {metric!r} (it has {sorted(by_metric)})"
                )
            if metric not in current[retriever]:
                raise GateError(
                    f"{run_dir}/per_query.csv has no metric {metric!r} for {retriever!r} "
                    f"(it has {sorted(current[retriever])})"
                )
            comparisons.append(
                MetricComparison(
                    check=run_dir.name,
                    retriever=retriever,
                    metric=metric,
                    observed=_mean(current[retriever][metric]),
                    expected=_mean(by_metric[metric]),
                    tolerance=tolerance,
                    current=current[retriever][metric],
                    stored=by_metric[metric],
                )
            )
    latency_results = []
    if latency_reference is not None:
        latencies = []
        for folder in (run_dir, baseline_dir):
            if not (folder / "latency.json").is_file():
                raise GateError(
                    f"{folder} has no latency.json; a latency comparison needs both runs' latency"
                )
            try:
                latencies.append(run_folder.read_latency(folder))
            except RunFolderError as error:
                raise GateError(str(error)) from None
        for retriever in stored:
            if retriever == latency_reference:
                continue
            observed = latency_ratio(
                latencies[0], retriever, latency_reference, "search_p50_ms", str(run_dir)
            )
            expected = latency_ratio(
                latencies[1], retriever, latency_reference, "search_p50_ms", str(baseline_dir)
            )
            latency_results.append(
                CheckResult(
                    status=latency_status(observed, expected, latency_tolerance),
                    check=run_dir.name,
                    retriever=retriever,
                    what=f"search_p50_ms/{latency_reference}",
                    observed=observed,
                    expected=expected,
                    tolerance=latency_tolerance,
                    kind="latency",
                )
            )
    return decide(comparisons, latency_results, significance, f"{run_dir} vs {baseline_dir}")


# --------------------------------------------------------------------------- entry points


def gate_from_settings(
    settings: Settings, output_dir: Path, run: RunExperiment, *, overrides: Sequence[str] = ()
) -> int:
    """``python -m viking_eval ... gate.baseline=<file>``: run the file's checks; exit status.
    ``run``: the runner's ``run_experiment`` (``runner.gate_program`` passes it). ``overrides``:
    the command line's own overrides (``store.bm25.k1=0.05``), applied after each check's command
    so that the gate tests what the command line says; printed, and recorded in gate.txt's
    summary line."""
    extra = list(overrides)
    if extra:
        print(f"gate: applying overrides to every check: {' '.join(extra)}", file=sys.stderr, flush=True)

    def compose(check_overrides: Sequence[str]) -> DictConfig:
        return compose_overrides([*check_overrides, *extra])

    try:
        report = run_gate(settings.gate.baseline or "", output_dir, run, compose)
    except GateError as error:
        print(f"error: gate: {error}", file=sys.stderr)
        return 2
    if extra:
        report = dataclasses.replace(
            report, source=f"{report.source}; overrides applied to every check: {' '.join(extra)}"
        )
        report.write(output_dir)
    print(report.text(), end="")
    print(f"gate report: {output_dir}/gate.txt")
    return 0 if report.passed else 1


def compare_from_settings(settings: Settings, run_dir: Path) -> int:
    """``python -m viking_eval ... gate.baseline_run=<folder>``: compare the finished run."""
    try:
        report = compare_runs(
            run_dir,
            resolve_path(settings.gate.baseline_run or ""),
            tolerance=settings.gate.tolerance,
            significance=settings.run.significance,
            latency_reference=settings.gate.latency_reference,
            latency_tolerance=settings.gate.latency_tolerance,
        )
    except GateError as error:
        print(f"gate error: {error}", file=sys.stderr)
        return 2
    report.write(run_dir)
    print(report.text(), end="")
    return 0 if report.passed else 1


def main(argv: Sequence[str] | None, *, run: RunExperiment) -> int:
    """``python -m viking_eval.gate``; ``run``: the runner's ``run_experiment`` for ``check`` and
    ``record`` (``runner.gate_cli`` passes it)."""
    parser = argparse.ArgumentParser(
        prog="python -m viking_eval.gate",
        description="Regression gate: check runs against expected scores (see README, 'Regression gate').",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="run a baseline file's checks and print one verdict per line")
    check.add_argument("baseline", help="experiments/baselines/<name>.yaml")
    check.add_argument(
        "--output", type=Path, default=None, help="folder for the runs (default reports/gate/<time>)"
    )
    record = commands.add_parser("record", help="run a baseline file's checks and store what they measure")
    record.add_argument("baseline")
    record.add_argument("--output", type=Path, default=None)
    compare = commands.add_parser(
        "compare", help="compare a run folder with a baseline run folder (per query)"
    )
    compare.add_argument("run", type=Path)
    compare.add_argument("baseline_run", type=Path)
    compare.add_argument(
        "--tolerance", type=float, default=0.005, help="absolute, per metric (default 0.005)"
    )
    compare.add_argument(
        "--metrics", default=None, help="comma-separated; default: every metric of the baseline run"
    )
    compare.add_argument("--test", default="t-test", choices=["t-test", "wilcoxon", "permutation"])
    compare.add_argument("--correction", default="holm", choices=["holm", "bh", "none"])
    compare.add_argument("--alpha", type=float, default=0.05)
    compare.add_argument(
        "--latency-reference", default=None, help="gate search p50 as a ratio to this retriever"
    )
    compare.add_argument("--latency-tolerance", type=float, default=1.0)
    args = parser.parse_args(argv)
    output = getattr(args, "output", None) or PROJECT_ROOT / "reports" / "gate" / time.strftime(
        "%Y-%m-%d_%H-%M-%S"
    )
    try:
        if args.command == "record":
            path = record_baseline(args.baseline, output, run)
            print(f"recorded {path} (runs in {output}); review the diff before committing")
            return 0
        if args.command == "check":
            report = run_gate(args.baseline, output, run)
        else:
            try:
                significance = SignificanceSettings(
                    test=args.test, correction=args.correction, alpha=args.alpha
                )
            except ValueError as error:
                raise GateError(str(error)) from None
            report = compare_runs(
                args.run,
                args.baseline_run,
                tolerance=args.tolerance,
                significance=significance,
                metrics=[m.strip() for m in args.metrics.split(",")] if args.metrics else None,
                latency_reference=args.latency_reference,
                latency_tolerance=args.latency_tolerance,
            )
    except GateError as error:
        print(f"gate error: {error}", file=sys.stderr)
        return 2
    print(report.text(), end="")
    return 0 if report.passed else 1
