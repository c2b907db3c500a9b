"""The gate's entry points: ``python -m viking_eval ... gate.baseline=<file>`` or
``gate.baseline_run=<folder>`` after a run, and ``python -m viking_eval.gate check|record|compare``.
Exit status: 0 when no check fails, 1 when one does, 2 when the baseline file or a run folder
cannot be used."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from viking_eval.config import Settings
from viking_eval.gate.baseline import GateError
from viking_eval.gate.checks import PROJECT_ROOT, compose_overrides, resolve_path, run_gate
from viking_eval.gate.compare import compare_runs
from viking_eval.gate.record import record_baseline
from viking_eval.measures.significance import SignificanceSettings
from viking_eval.results.model import RunExperiment
from viking_eval.run.ray_jobs import RayOptions


def gate_from_settings(
    settings: Settings,
    output_dir: Path,
    run: RunExperiment,
    *,
    overrides: Sequence[str] = (),
    ray: RayOptions | None = None,
) -> int:
    """``python -m viking_eval ... gate.baseline=<file>``: run the file's checks; exit status.
    ``run``: the runner's ``run_experiment`` (viking_eval/cli.py's ``gate_program`` passes it). ``overrides``:
    the command line's own overrides (``store.bm25.k1=0.05``), applied after each check's command
    so that the gate tests what the command line says; printed, and recorded in gate.txt's
    summary line."""
    extra = list(overrides)
    if extra:
        print(f"gate: applying overrides to every check: {' '.join(extra)}", file=sys.stderr, flush=True)

    def compose(check_overrides: Sequence[str]) -> DictConfig:
        return compose_overrides([*check_overrides, *extra])

    try:
        report = run_gate(settings.gate.baseline or "", output_dir, run, compose, ray=ray)
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
    ``record`` (``python -m viking_eval.gate``, viking_eval/gate/__main__.py, passes it)."""
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
