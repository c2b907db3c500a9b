"""``python -m viking_eval [overrides]``: check the whole config, then run one program.

    argv -> pre-flight: compose the config for the overrides (for a multirun, every job of the
            sweep; for an Optuna study, its settings and the part every trial shares) and
            validate everything (viking_eval.config) -- before any data is read
         -> the Hydra app (@hydra.main, the same argv) -> one program:
              run      evaluate the configured retrievers (the default)
              benchmark  benchmark.datasets=[...]: every dataset's run, one table (viking_eval/benchmark/run.py)
              fuse       fuse.runs=[...]: run files fused, tuned on one half, reported on the other (viking_eval/fuse/)
              growth     growth.by=...: the corpus added in steps, every step evaluated (viking_eval/growth/)
              gate     gate.baseline=<file>: run a baseline file's checks (viking_eval/gate/checks.py)
              compare  gate.baseline_run=<folder>: evaluate, then gate against a stored run

Exit status: 0 success; 1 a gate check failed, a remote model gave no usable answer (one line
``error: remote model call failed: ...``), or a bug (its traceback is printed); 2 the config
or the data is invalid: one line ``error: <key or file:line>: <what is wrong; what is allowed>`` on
stderr and no traceback (``VIKING_EVAL_DEBUG=1`` or ``HYDRA_FULL_ERROR=1`` print it; the debug
switch also lets through libraries' info and debug lines, dropped otherwise: viking_eval/progress.py).
A data error met while running marks the run folder failed (``status.json``), so it never looks
finished.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from retrievers.backends.base import BackendError, BackendLost
from retrievers.http import EndpointError
from viking_eval.config import ConfigError, Settings, check_sweep_objective, load_settings
from viking_eval.config.compose import (
    BASIC_SWEEPER,
    CONFIG_DIR,
    compose_config,
    explain,
    hydra_session,
    job_configs,
    job_overrides,
)
from viking_eval.config.launchers import check_launcher
from viking_eval.config.registry import check_hydra_targets
from viking_eval.data import DataError
from viking_eval.data.splits import Phase, check_half_for_sweep
from viking_eval.exits import EXIT_FAILED, EXIT_OK, debugging, invalid
from viking_eval.progress import progress_interval, quiet_libraries
from viking_eval.run.cache import CacheError
from viking_eval.run.ray_jobs import RayOptions, ray_options

OPTUNA_SWEEPER = "hydra_plugins.viking_optuna_sweeper.sweeper.VikingOptunaSweeper"


# --------------------------------------------------------------------------- pre-flight

_NO_RUN_FLAGS = ("help", "hydra_help", "version", "cfg", "info", "shell_completion", "experimental_rerun")


def preflight(argv: Sequence[str]) -> None:
    """Compose and validate the config of every job ``argv`` would run; exit 2 on the first
    problem. A ``--config-dir`` is searched first, as Hydra does; commands that run nothing
    (``--help``, ``--cfg``, ...) and another primary config folder (``--config-path``) are left to
    Hydra (the app validates the composed config before it builds anything)."""
    args = _hydra_arguments(argv)
    if args is None:
        return  # argparse printed its usage; Hydra will too
    if any(getattr(args, flag, None) for flag in _NO_RUN_FLAGS) or args.config_path:
        return
    extra_dir = Path(args.config_dir).resolve() if args.config_dir else None
    if extra_dir is not None and not extra_dir.is_dir():
        return  # Hydra says so
    config_name = args.config_name or "config"
    overrides = list(args.overrides)
    try:
        with hydra_session(extra_dir=extra_dir):
            _check_command(overrides, multirun=bool(args.multirun), config_name=config_name)
    except ConfigError as error:
        invalid(error.line())
    except (HydraException, OmegaConfBaseException) as error:
        invalid(explain(error, overrides).line())


def habits(argv: Sequence[str]) -> list[str]:
    """Forms other command lines take, answered before Hydra reads them: ``--experiment smoke``
    or ``--dataset=adi`` (argparse would take a prefix of one of Hydra's own flags, e.g.
    ``--experimental-rerun``) is refused with the ``key=value`` form to type; ``dataset=irds:<id>``
    (the form README.md and docs/datasets-irds.md write) becomes ``dataset.name=irds:<id>``."""
    flags = {option for action in _hydra_parser()._actions for option in action.option_strings}
    taking_value = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn"}
    taking_value |= {"--config-dir", "-cd", "--experimental-rerun"}
    kept: list[str] = []
    expects_value = False  # the previous argument was a flag that takes the next one
    for position, argument in enumerate(argv):
        if expects_value or not argument.startswith("-"):  # a flag's value, or an override
            irds = None if expects_value else re.fullmatch(r"dataset=(irds:.+)", argument)
            kept.append(f"dataset.name={irds.group(1)}" if irds else argument)
            expects_value = False
            continue
        name, has_value, value = argument.partition("=")
        if name not in flags:
            following = argv[position + 1] if position + 1 < len(argv) else ""
            if not has_value and following and not following.startswith("-") and "=" not in following:
                value = following
            shown = f"{name.lstrip('-')}={value or '<value>'}"
            invalid(
                f"command line: {argument!r} is not an option; Hydra takes settings as key=value: "
                f"type {shown} (python -m viking_eval --help lists the options)"
            )
        expects_value = name in taking_value and not has_value
        kept.append(argument)
    return kept


def _hydra_parser() -> argparse.ArgumentParser:
    """Hydra's own command-line parser. Hydra has no public API for it, so this is the CLI's one
    use of ``hydra._internal``: the pre-flight and :func:`habits` must read the arguments exactly
    as the app will."""
    from hydra._internal.utils import get_args_parser

    parser: argparse.ArgumentParser = get_args_parser()
    return parser


def _hydra_arguments(argv: Sequence[str]) -> argparse.Namespace | None:
    """``argv`` read as the Hydra app will read it (flags, ``--config-dir``, overrides); None when
    argparse refuses it."""
    try:
        return _hydra_parser().parse_args(list(argv))
    except SystemExit:
        return None


def _settings(cfg: DictConfig, *, multirun: bool) -> Settings:
    settings = load_settings(cfg)
    if multirun:
        check_sweep_objective(settings)
        check_half_for_sweep(settings.dataset.half)
    return settings


def _check_command(overrides: list[str], *, multirun: bool, config_name: str) -> None:
    mode = RunMode.MULTIRUN if multirun else RunMode.RUN
    base = compose_config(overrides, run_mode=mode, config_name=config_name, with_hydra=True)
    # Hydra builds its callbacks, sweeper and launcher before the app runs: their _target_ first
    check_hydra_targets(_container(base.hydra))
    multirun = multirun or str(base.hydra.get("mode")) == "MULTIRUN"
    if multirun:  # the launcher's own commands (sbatch), before Hydra writes the sweep folder
        check_launcher(_container(base.hydra.launcher))
    if multirun and OmegaConf.select(base, "benchmark.datasets") is not None:
        raise ConfigError(
            "benchmark.datasets",
            "a benchmark runs every dataset itself: drop -m (a multirun is a tuning sweep, whose jobs "
            "evaluate the tuning split and pick a best configuration; to sweep, set benchmark.datasets=null)",
        )
    if multirun and OmegaConf.select(base, "growth.by") is not None:
        raise ConfigError(
            "growth.by", "a growth run evaluates every step itself: drop -m (or set growth.by=null)"
        )
    if not multirun:
        settings = _settings(base, multirun=False)
        if settings.benchmark.datasets:  # every dataset's run composed and located now
            from viking_eval.benchmark.run import check_benchmark

            check_benchmark(settings, [str(line) for line in base.hydra.overrides.task])
        if settings.growth.by is not None:
            from viking_eval.growth.checks import check_growth

            check_growth(settings)
        return
    task = [str(line) for line in base.hydra.overrides.task]
    hydra_overrides = [str(line) for line in base.hydra.overrides.hydra]
    sweeper = str(base.hydra.sweeper.get("_target_", ""))
    if sweeper == BASIC_SWEEPER:
        numbered: dict[tuple[str, ...], int] = {}  # each distinct job, by its first number
        for number, given in enumerate(job_overrides(base, task)):
            numbered.setdefault(tuple(given), number)
        configs = job_configs(numbered, hydra_overrides, config_name=config_name)
        for (job, number), (overrides, composed) in zip(numbered.items(), configs, strict=True):
            try:
                if isinstance(composed, Exception):
                    raise composed
                _settings(composed, multirun=True)
            except (ConfigError, HydraException, OmegaConfBaseException) as error:
                found = explain(error, overrides)
                detail = f"{found.detail} (job {number} of the sweep: {' '.join(job)})"
                raise ConfigError(found.key, detail, key=found.key, detail=detail) from error
    elif sweeper == OPTUNA_SWEEPER:
        _check_study(base, task, hydra_overrides, config_name)
    else:  # another sweeper: the config without its sweeps
        _settings(base, multirun=True)


def _container(node: Any, *, resolve: bool = False) -> dict[str, Any]:
    plain = OmegaConf.to_container(node, resolve=resolve) if isinstance(node, DictConfig) else {}
    return {str(key): value for key, value in plain.items()} if isinstance(plain, dict) else {}


def _check_study(base: DictConfig, task: list[str], hydra_overrides: list[str], config_name: str) -> None:
    """An Optuna study (hydra_plugins/viking_optuna_sweeper): its settings as the sweeper reads
    them, and the config every trial shares (the fixed overrides, and each choice of a
    categorical parameter); sampled numbers are the trial's, checked when it runs."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra_plugins.viking_optuna_sweeper._checks import check_study
    from hydra_plugins.viking_optuna_sweeper._errors import SweeperConfigError
    from hydra_plugins.viking_optuna_sweeper._study import OptunaSweeperImpl

    settings = _container(base.hydra.sweeper, resolve=True)
    settings.pop("_target_", None)
    try:
        space, fixed = check_study(OptunaSweeperImpl(**settings), base, task, OverridesParser.create())
    except SweeperConfigError as error:  # names its key
        detail = error.detail.splitlines()[0]
        raise ConfigError(error.key, detail, key=error.key, detail=detail) from error
    except (TypeError, ValueError) as error:  # a setting the sweeper does not take, or a sampler refuses
        detail = str(error).splitlines()[0]
        raise ConfigError("hydra.sweeper", detail, key="hydra.sweeper", detail=detail) from error
    cfg = compose_config([*hydra_overrides, *fixed], config_name=config_name)
    _settings(cfg, multirun=True)
    for param in space:
        for choice in getattr(param.distribution, "choices", ()) or ():
            line = f"{param.key}={_override_text(choice)}"
            try:
                _settings(
                    compose_config([*hydra_overrides, *fixed, line], config_name=config_name), multirun=True
                )
            except (ConfigError, HydraException, OmegaConfBaseException) as error:
                found = explain(error, [*hydra_overrides, *fixed, line])
                detail = f"{found.detail} (choice {line} of the search space)"
                raise ConfigError(found.key, detail, key=found.key, detail=detail) from error


def _override_text(value: Any) -> str:
    from hydra_plugins.viking_optuna_sweeper._space import override_value

    return override_value(value)


# --------------------------------------------------------------------------- programs
# One function per program of ``python -m viking_eval``; the app validates the config, then calls
# one of them. The programs hand the one experiment loop (viking_eval/run/experiment.py) to the
# gate, which never imports it. A benchmark is viking_eval/benchmark/run.py's benchmark_program.


def run_program(
    settings: Settings, output_dir: Path, *, config_yaml: str = "", phase: Phase = "report"
) -> dict[str, dict[str, float]]:
    """Evaluate (``python -m viking_eval experiment=...``; a sweep job with ``phase="tune"``):
    run, print the summary table, return the objectives for a sweeper."""
    from viking_eval.report import summary_table
    from viking_eval.run.experiment import run_experiment

    summary = run_experiment(settings, output_dir, config_yaml=config_yaml, phase=phase)
    print(f"\n{settings.name}: {summary.dataset} ({summary.split}), {summary.results[0].n_queries} queries")
    print(summary_table(summary, settings, fmt="simple"))
    if summary.significance is not None and summary.significance.comparisons:
        print(summary.significance.legend())
    print(f"\nreport: {output_dir}/report.md and report.html")
    return summary.objectives()


def gate_program(
    settings: Settings, output_dir: Path, *, overrides: Sequence[str] = (), ray: RayOptions | None = None
) -> int:
    """The regression gate (``gate.baseline=<file>``, ``experiment=ci_regression``): the baseline
    file's checks into ``output_dir``, each with the command line's ``overrides`` applied, one
    verdict per line; returns the exit status (0 pass, 1 a check failed, 2 the file or a check
    cannot be used)."""
    from viking_eval.gate import commands as gate
    from viking_eval.run.experiment import run_experiment

    return gate.gate_from_settings(settings, output_dir, run_experiment, overrides=overrides, ray=ray)


def compare_program(
    settings: Settings, output_dir: Path, *, config_yaml: str = "", phase: Phase = "report"
) -> int:
    """Evaluate, then gate the run against a stored run folder (``gate.baseline_run=<folder>``):
    prints the summary, then the verdicts; returns the exit status as :func:`gate_program`."""
    from viking_eval.gate import commands as gate

    run_program(settings, output_dir, config_yaml=config_yaml, phase=phase)
    return gate.compare_from_settings(settings, output_dir)


def gate_overrides(task_overrides: Sequence[str]) -> list[str]:
    """The command line's overrides a gate applies to its checks: all but the ones that choose
    the gate (``experiment=...``, ``gate.*``)."""
    kept = []
    for line in task_overrides:
        key = line.split("=", 1)[0].lstrip("+~")
        if key == "experiment" or key == "gate" or key.startswith("gate."):
            continue
        kept.append(line)
    return kept


@contextlib.contextmanager
def _marked_on_failure(output_dir: Path) -> Iterator[None]:
    """A data (or cache) error becomes ``error: ...`` and exit 2, a remote model that gave no
    usable answer (``EndpointError``: time-out, HTTP error, malformed answer) ``error: ...`` and
    exit 1, a bug keeps its traceback; all leave ``status.json`` ``{"status": "failed"}`` in the
    run folder."""
    try:
        yield
    except (DataError, CacheError) as error:
        mark_failed(output_dir, str(error))
        invalid(str(error))
    except ConfigError as error:
        mark_failed(output_dir, error.line())
        invalid(error.line())
    except BackendError as error:  # a search backend refused at start (retrievers/backends/)
        mark_failed(output_dir, str(error))
        invalid(str(error))
    except BackendLost as error:  # a search backend lost in the middle of the run: exit 1, resumable
        mark_failed(output_dir, str(error))
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(EXIT_FAILED)
    except EndpointError as error:  # a remote model gave no usable answer: a failed run, exit 1
        mark_failed(output_dir, str(error))
        if debugging():
            traceback.print_exc()
        print(f"error: remote model call failed: {error}", file=sys.stderr, flush=True)
        sys.exit(EXIT_FAILED)
    except Exception as error:
        mark_failed(output_dir, f"{type(error).__name__}: {error}")
        raise


def mark_failed(output_dir: Path, message: str) -> None:
    """``status.json`` ``{"status": "failed", "error": message}`` in the run folder."""
    from viking_eval.results import run_folder  # the run folder's writer: only when a run fails

    with contextlib.suppress(OSError):  # the folder itself may be what failed
        run_folder.mark_failed(output_dir, message)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def app(cfg: DictConfig) -> Any:
    """The Hydra task: validate, pick the program, run it."""
    quiet_libraries(debug=debugging())  # again: a launcher may run this job in another process
    try:
        settings = load_settings(cfg)
    except ConfigError as error:
        invalid(error.line())
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    # jobs of a sweep or study evaluate the tuning split; the chosen one is evaluated on the
    # reported split when the sweep ends (viking_eval/sweep/summary.py)
    phase: Phase = "tune" if hydra_cfg.mode == RunMode.MULTIRUN else "report"
    with _marked_on_failure(output_dir):
        if settings.benchmark.datasets:  # a benchmark (viking_eval/benchmark/run.py), not a sweep
            from viking_eval.benchmark.run import benchmark_program

            sys.exit(
                benchmark_program(
                    settings,
                    output_dir,
                    overrides=[str(line) for line in hydra_cfg.overrides.task],
                    ray=ray_options(hydra_cfg.launcher),  # hydra/launcher=ray: the datasets as Ray tasks
                )
            )
        if settings.growth.by is not None:  # quality as the memory grows (viking_eval/growth/program.py)
            from viking_eval.growth.program import growth_program

            config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
            sys.exit(growth_program(settings, output_dir, config_yaml=config_yaml))
        if settings.fuse.runs is not None:  # a fusion of run files (viking_eval/fuse/program.py)
            from viking_eval.fuse.program import fuse_program

            sys.exit(fuse_program(settings, output_dir))
        if settings.gate.baseline is not None:
            overrides = gate_overrides([str(line) for line in hydra_cfg.overrides.task])
            sys.exit(
                gate_program(settings, output_dir, overrides=overrides, ray=ray_options(hydra_cfg.launcher))
            )
        config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
        if settings.gate.baseline_run is not None:
            sys.exit(compare_program(settings, output_dir, config_yaml=config_yaml, phase=phase))
        return run_program(settings, output_dir, config_yaml=config_yaml, phase=phase)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: pre-flight, then the Hydra app with the same arguments."""
    quiet_libraries(debug=debugging())  # libraries' info/debug lines and bars: VIKING_EVAL_DEBUG=1 shows them
    try:
        progress_interval()  # VIKING_EVAL_PROGRESS_INTERVAL: refused now, not in the middle of a run
    except ValueError as error:
        invalid(str(error))
    arguments = habits(sys.argv[1:] if argv is None else argv)
    preflight(arguments)
    sys.argv = [sys.argv[0], *arguments]
    app()
    return EXIT_OK
