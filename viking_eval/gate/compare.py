"""Compare a run folder with a baseline run folder (``python -m viking_eval.gate compare RUN
BASELINE``, or ``gate.baseline_run=<folder>`` after a run): the expected values are the baseline
run's per-query means, the paired test is over the two runs' per_query.csv."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from viking_eval.gate.baseline import GateError, read_per_query
from viking_eval.gate.verdicts import (
    CheckResult,
    GateReport,
    MetricComparison,
    decide,
    latency_ratio,
    latency_status,
    per_query_mean,
)
from viking_eval.measures.significance import SignificanceSettings
from viking_eval.results import run_folder
from viking_eval.results.run_folder import RunFolderError


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
                    observed=per_query_mean(current[retriever][metric]),
                    expected=per_query_mean(by_metric[metric]),
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
