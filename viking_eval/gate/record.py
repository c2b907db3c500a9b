"""``python -m viking_eval.gate record <file>``: run a baseline file's checks and rewrite its
expected values, latency ratios and stored per-query values with what they measure."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import yaml

from viking_eval import files
from viking_eval.gate.baseline import load_baseline, write_per_query
from viking_eval.gate.checks import Compose, compose_overrides, plan_checks, resolve_path, run_checks
from viking_eval.gate.verdicts import latency_ratio
from viking_eval.results.model import RunExperiment


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
