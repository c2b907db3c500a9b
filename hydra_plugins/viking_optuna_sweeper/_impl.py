"""The Optuna sweeper's implementation: an Optuna study run with the ask/tell API (optuna >= 4).

Each trial is one Hydra job, launched through whatever launcher is configured (basic, joblib,
submitit), ``n_jobs`` trials per batch:

    ask n_jobs trials -> their overrides -> launcher.launch(batch) -> tell each trial its value(s)

- The objective is read from the job's return value, ``{retriever: {metric: value}}``:
  ``bm25.nDCG@10`` is ``returned["bm25"]["nDCG@10"]``. A job that raises (or calls
  ``sys.exit``), or returns a missing, NaN or infinite objective, is told to the study as FAIL
  and the study goes on (hydra issue 2237: hydra-optuna-sweeper ended the whole study).
- Job folders are ``<sweep dir>/<trial number>``: a resumed study never overwrites a folder. A
  trial whose folder holds another job (another study sent into the same ``hydra.sweep.dir``)
  stops the command before it is launched: one line, exit 2 (viking_eval.sweep.summary).
- With a ``storage`` a study resumes: finished trials (complete or failed) count toward
  ``n_trials`` and are never redone; trials left RUNNING by a killed process are marked FAIL.
- The search space is written in hydra-optuna-sweeper's override syntax and parsed with Hydra's
  OverridesParser. Hydra's ``range`` keeps its meaning: the stop is excluded.

This module is not scanned by Hydra (its name starts with "_"; sweeper.py holds the plugin class)
and imports Optuna only when a study runs: Hydra imports the plugin modules at every start-up.
"""

from __future__ import annotations

import logging
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import CompactHydraException, HydraException
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "random", "grid", "cmaes", "nsgaii")
DIRECTIONS = ("maximize", "minimize")


class SweeperConfigError(CompactHydraException):
    """A bad ``hydra.sweeper`` setting or search space, found before any trial runs. ``key``: the
    setting at fault (``hydra.sweeper`` when it is the search space as a whole or one of its
    overrides, which the message names); ``detail``: the message without that key at its start."""

    def __init__(self, message: str, *, key: str = "hydra.sweeper") -> None:
        super().__init__(message)
        self.key = key
        self.detail = (
            message[len(key) :].lstrip(" :") if message.startswith((f"{key} ", f"{key}:")) else message
        )


class JobExitError(RuntimeError):
    """A job called ``sys.exit``: recorded as a failed trial, not the end of the study."""


class ObjectiveError(ValueError):
    """A finished job's return value has no finite value for an objective."""


# ---------------------------------------------------------------------------------------------
# search space


@dataclass(frozen=True)
class SearchParam:
    """One dimension of the search space: the override key, its Optuna distribution, and the
    values the grid sampler walks (None for an interval, which has no grid)."""

    key: str
    source: str  # the override as written, for error messages
    distribution: BaseDistribution
    grid_values: tuple[Any, ...] | None


def _params_lines(params: Mapping[str, Any] | None) -> list[str]:
    lines = []
    for key, value in (params or {}).items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif value is None:
            text = "null"
        elif isinstance(value, int | float | str):
            text = str(value)
        else:
            raise SweeperConfigError(
                f"hydra.sweeper.params.{key}: write the search space as a string in override syntax "
                f"(e.g. 'interval(0,1)' or 'choice(a,b)'), got {value!r}",
                key=f"hydra.sweeper.params.{key}",
            )
        lines.append(f"{key}={text}")
    return lines


def _parse(parser: OverridesParser, line: str, where: str, key: str = "hydra.sweeper") -> Override:
    try:
        return parser.parse_override(line)
    except HydraException as error:
        raise SweeperConfigError(f"{where}: cannot parse {line!r}: {error}", key=key) from error


Choice = str | int | float | bool | None  # what an Optuna CategoricalDistribution holds


def _check_choice(source: str, values: Sequence[Any]) -> tuple[Choice, ...]:
    """``values``, each checked to be a :data:`Choice`."""
    checked: list[Choice] = []
    for value in values:
        if value is not None and not isinstance(value, str | int | float | bool):
            raise SweeperConfigError(
                f"{source}: a choice must be a str, int, float, bool or null, got {value!r}"
            )
        checked.append(value)
    return tuple(checked)


def make_search_param(override: Override, *, grid: bool) -> SearchParam:
    """The Optuna distribution of one sweep override.

    ``choice(a,b)`` / ``a,b`` -> categorical; ``range(start, stop, step)`` -> int or float with
    that step, stop excluded (a shuffled range -> categorical); ``interval(lo, hi)`` -> float,
    ``int(interval(...))`` -> int, ``tag(log, interval(...))`` -> log scale. An empty range, an
    interval with lo >= hi, or, for the grid sampler, an interval, is a SweeperConfigError
    that names the parameter.
    """
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    key = override.get_key_element()
    source = override.input_line or key
    value = override.value()
    if isinstance(value, ChoiceSweep):
        choices = _check_choice(source, tuple(override.sweep_iterator(transformer=Transformer.encode)))
        if not choices:
            raise SweeperConfigError(f"{source}: empty choice; give at least one value")
        return SearchParam(key, source, CategoricalDistribution(choices), choices)
    if isinstance(value, RangeSweep):
        # Hydra's range() yields ints or floats (sweep_iterator's annotation covers every sweep)
        values = cast(tuple[int | float, ...], tuple(override.sweep_iterator(transformer=Transformer.encode)))
        if not values:
            raise SweeperConfigError(
                f"{source}: empty range (from {value.start} up to, not including, {value.stop} "
                f"by {value.step}); give start < stop for a positive step"
            )
        if value.shuffle or grid:
            return SearchParam(key, source, CategoricalDistribution(values), values)
        low, high, step = min(values), max(values), abs(value.step)
        if any(isinstance(item, float) for item in (*values, step)):
            distribution: BaseDistribution = FloatDistribution(float(low), float(high), step=float(step))
        else:
            distribution = IntDistribution(int(low), int(high), step=int(step))
        return SearchParam(key, source, distribution, values)
    if isinstance(value, IntervalSweep):
        if grid:
            raise SweeperConfigError(
                f"{source}: the grid sampler needs choice(...) or range(...) values; "
                f"{key} is an interval (use sampler tpe, random or cmaes, or list the values)"
            )
        start, end = value.start, value.end
        if start is None or end is None or not start < end:
            raise SweeperConfigError(f"{source}: empty interval; give interval(low, high) with low < high")
        log_scale = "log" in value.tags
        if log_scale and start <= 0:
            raise SweeperConfigError(f"{source}: a log-scale interval needs low > 0, got {start}")
        if isinstance(start, int) and isinstance(end, int):
            distribution = IntDistribution(start, end, log=log_scale)
        else:
            distribution = FloatDistribution(float(start), float(end), log=log_scale)
        return SearchParam(key, source, distribution, None)
    raise SweeperConfigError(
        f"{source}: not supported by the Optuna sweeper; use choice(...), range(...) or interval(...)"
    )


def search_space(
    params: Mapping[str, Any] | None, arguments: Sequence[str], parser: OverridesParser, *, grid: bool
) -> tuple[list[SearchParam], list[str]]:
    """The search space (``hydra.sweeper.params``, then sweep overrides of the command line,
    which replace a key the config gives) and the fixed overrides passed to every trial."""
    by_key: dict[str, Override] = {}
    for line in _params_lines(params):
        override = _parse(parser, line, "hydra.sweeper.params", "hydra.sweeper.params")
        by_key[override.get_key_element()] = override
    fixed: list[str] = []
    for line in arguments:
        override = _parse(parser, line, "command line")
        key = override.get_key_element()
        if override.is_sweep_override():
            by_key[key] = override
        else:
            by_key.pop(key, None)  # a fixed value on the command line wins over the config's range
            fixed.append(override.input_line or line)
    space: list[SearchParam] = []
    for override in by_key.values():
        if override.is_sweep_override():
            space.append(make_search_param(override, grid=grid))
        else:  # a plain value in hydra.sweeper.params: the same for every trial
            fixed.append(override.input_line or override.get_key_element())
    if not space:
        raise SweeperConfigError(
            "no search space: give hydra.sweeper.params (see conf/hparams_search/) or sweep "
            "overrides such as key=interval(0,1) or key=a,b,c"
        )
    return space, fixed


def override_value(value: Any) -> str:
    """A sampled value written back in override syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    return str(value)


# ---------------------------------------------------------------------------------------------
# objectives


_MISSING = object()


def _lookup(returned: Any, path: str) -> Any:
    """``returned[a][b]`` for ``path`` "a.b"; a key may itself hold dots ("latency.p95_ms")."""
    if isinstance(returned, Mapping):
        if path in returned:
            return returned[path]
        for match in re.finditer(r"\.", path):
            head, tail = path[: match.start()], path[match.end() :]
            if head in returned:
                found = _lookup(returned[head], tail)
                if found is not _MISSING:
                    return found
    return _MISSING


def _available(returned: Any, prefix: str = "") -> list[str]:
    if not isinstance(returned, Mapping):
        return [prefix.rstrip(".")] if prefix else []
    keys: list[str] = []
    for key, value in returned.items():
        keys += _available(value, f"{prefix}{key}.")
    return keys


def objective_values(returned: Any, objectives: Sequence[str]) -> list[float]:
    """The objectives' values in a job's return value; ObjectiveError when one is missing,
    not a number, NaN or infinite (the trial is then a failure)."""
    values = []
    for objective in objectives:
        value = _lookup(returned, objective)
        if value is _MISSING and len(objectives) == 1 and isinstance(returned, numbers.Real):
            value = returned  # a task that returns the number itself
        if value is _MISSING:
            available = _available(returned)
            raise ObjectiveError(
                f"objective {objective!r} is not in the job's return value; it has "
                f"{available[:20]}{' ...' if len(available) > 20 else ''}"
            )
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ObjectiveError(f"objective {objective!r} is not a number: {value!r}")
        if not math.isfinite(float(value)):
            raise ObjectiveError(f"objective {objective!r} is {float(value)}")
        values.append(float(value))
    return values


# ---------------------------------------------------------------------------------------------
# the sweeper


class FailOnExit:
    """Wraps the task function so that ``sys.exit`` in a job (the harness exits with status 2
    on a bad parameter) raises JobExitError: Hydra then records the job as failed, where a
    SystemExit would have gone through the launcher and ended the study. A top-level class,
    so that launchers that pickle the task (joblib, submitit) can."""

    def __init__(self, task_function: TaskFunction) -> None:
        self.task_function = task_function

    def __call__(self, cfg: DictConfig) -> Any:
        try:
            return self.task_function(cfg)
        except SystemExit as exit_:
            raise JobExitError(f"the job exited with status {exit_.code!r}") from None


def _as_list(value: Any, name: str) -> list[str]:
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple) and value and all(isinstance(item, str) for item in value):
        return list(value)
    raise SweeperConfigError(
        f"hydra.sweeper.{name} must be a string or a non-empty list of strings, got {value!r}",
        key=f"hydra.sweeper.{name}",
    )


def _plain_dict(value: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """``hydra.sweeper.<name>`` (a mapping by the config schema, VikingOptunaSweeperConf) as a
    plain dict, a DictConfig resolved; None: empty."""
    plain = OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value
    if not plain:
        return {}
    if not isinstance(plain, Mapping):
        raise SweeperConfigError(
            f"hydra.sweeper.{name} must be a mapping, got {value!r}", key=f"hydra.sweeper.{name}"
        )
    return {str(key): item for key, item in plain.items()}


def _redacted(storage: str | None) -> str | None:
    """A storage URL without its password (results files are shared)."""
    return None if storage is None else re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", storage)


class OptunaSweeperImpl(Sweeper):
    """Does the work of sweeper.VikingOptunaSweeper (same arguments as VikingOptunaSweeperConf)."""

    def __init__(
        self,
        objective: Any,
        direction: Any = "maximize",
        sampler: str = "tpe",
        seed: int | None = None,
        sampler_kwargs: Mapping[str, Any] | None = None,
        n_trials: int = 20,
        n_jobs: int = 1,
        storage: str | None = None,
        study_name: str | None = None,
        load_if_exists: bool = True,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        if objective is None:
            raise SweeperConfigError(
                "hydra.sweeper.objective is required: the value to optimise, as "
                "<retriever>.<metric> (e.g. bm25.nDCG@10), or a list of them",
                key="hydra.sweeper.objective",
            )
        self.objectives = _as_list(objective, "objective")
        directions = _as_list(direction, "direction")
        if len(directions) != len(self.objectives):
            raise SweeperConfigError(
                f"hydra.sweeper.direction has {len(directions)} entries {directions} for "
                f"{len(self.objectives)} objectives {self.objectives}; give one direction per objective",
                key="hydra.sweeper.direction",
            )
        for item in directions:
            if item not in DIRECTIONS:
                raise SweeperConfigError(
                    f"hydra.sweeper.direction: {item!r} is not one of {list(DIRECTIONS)}",
                    key="hydra.sweeper.direction",
                )
        self.directions = directions
        if sampler not in SAMPLERS:
            raise SweeperConfigError(
                f"hydra.sweeper.sampler: unknown sampler {sampler!r}; use one of {list(SAMPLERS)}",
                key="hydra.sweeper.sampler",
            )
        if sampler == "cmaes" and len(self.objectives) > 1:
            raise SweeperConfigError(
                "hydra.sweeper.sampler: cmaes optimises a single objective; use nsgaii, tpe or "
                f"random for {len(self.objectives)} objectives",
                key="hydra.sweeper.sampler",
            )
        self.sampler_name = sampler
        self.seed = seed
        self.sampler_kwargs = _plain_dict(sampler_kwargs, "sampler_kwargs")
        for name, number in (("n_trials", n_trials), ("n_jobs", n_jobs)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise SweeperConfigError(
                    f"hydra.sweeper.{name} must be an integer >= 1, got {number!r}",
                    key=f"hydra.sweeper.{name}",
                )
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.storage = storage
        self.study_name = study_name
        self.load_if_exists = load_if_exists
        self.params = _plain_dict(params, "params")
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=FailOnExit(task_function), config=config
        )

    def _config(self) -> DictConfig:
        """The config :meth:`setup` was given (Hydra sets a sweeper up before it sweeps)."""
        if self.config is None:
            raise RuntimeError("OptunaSweeperImpl used before setup(): Hydra sets the sweeper up first")
        return self.config

    # -- study --------------------------------------------------------------------------------

    def make_sampler(self, space: list[SearchParam], seed: int | None) -> optuna.samplers.BaseSampler:
        import optuna

        kwargs = {**self.sampler_kwargs, "seed": seed}
        try:
            if self.sampler_name == "grid":
                return _grid_sampler({param.key: list(param.grid_values or ()) for param in space}, **kwargs)
            factories: dict[str, Callable[..., optuna.samplers.BaseSampler]] = {
                "tpe": optuna.samplers.TPESampler,
                "random": optuna.samplers.RandomSampler,
                "cmaes": optuna.samplers.CmaEsSampler,
                "nsgaii": optuna.samplers.NSGAIISampler,
            }
            return factories[self.sampler_name](**kwargs)
        except TypeError as error:
            raise SweeperConfigError(
                f"hydra.sweeper.sampler_kwargs {self.sampler_kwargs} do not fit the {self.sampler_name} sampler: {error}",
                key="hydra.sweeper.sampler_kwargs",
            ) from error

    def _study(self, space: list[SearchParam]) -> optuna.Study:
        import optuna

        name = self.study_name or str(self._config().get("name") or "viking_eval")
        if self.storage and self.storage.startswith("sqlite:///"):
            path = self.storage.removeprefix("sqlite:///")
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        expected = [optuna.study.StudyDirection[item.upper()] for item in self.directions]
        try:
            study = optuna.create_study(
                storage=self.storage,
                sampler=optuna.samplers.RandomSampler(),  # replaced below, once the trials are known
                study_name=name,
                directions=expected,
                load_if_exists=self.load_if_exists,
            )
        except optuna.exceptions.DuplicatedStudyError as error:
            raise SweeperConfigError(
                f"study {name!r} already exists in {_redacted(self.storage)}; set "
                "hydra.sweeper.load_if_exists=true to resume it, or another hydra.sweeper.study_name"
            ) from error
        if list(study.directions) != expected:
            raise SweeperConfigError(
                f"study {name!r} in {_redacted(self.storage)} has directions "
                f"{[d.name.lower() for d in study.directions]}, not {self.directions}; "
                "use another hydra.sweeper.study_name"
            )
        seed = self.seed
        n_existing = len(study.get_trials(deepcopy=False))
        if seed is not None and n_existing:
            # a resumed study: the same seed would draw the first run's points again
            seed += n_existing
            log.info(
                "resuming study %r with %d trials: sampler seed %d + %d",
                name,
                n_existing,
                self.seed,
                n_existing,
            )
        study.sampler = self.make_sampler(space, seed)
        stale = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        for trial in stale:
            # left RUNNING by a process that was killed: its job never reported
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
            log.warning("trial %d was left running by an earlier process; marked FAIL", trial.number)
        return study

    # -- the loop -------------------------------------------------------------------------------

    def sweep(self, arguments: list[str]) -> Any:
        import optuna

        config = self._config()
        if self.hydra_context is None:
            raise RuntimeError("OptunaSweeperImpl.sweep() before setup(): Hydra sets the sweeper up first")
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        grid = self.sampler_name == "grid"
        space, fixed = check_study(self, config, arguments, parser)
        study = self._study(space)
        distributions = {param.key: param.distribution for param in space}
        finished_states = (
            optuna.trial.TrialState.COMPLETE,
            optuna.trial.TrialState.FAIL,
            optuna.trial.TrialState.PRUNED,
        )
        n_finished = len(study.get_trials(deepcopy=False, states=finished_states))
        remaining = max(self.n_trials - n_finished, 0)
        log.info(
            "study %r (%s, sampler %s): %d finished trials, %d to run, %d per batch; objective %s (%s)",
            study.study_name,
            _redacted(self.storage) or "in memory",
            self.sampler_name,
            n_finished,
            remaining,
            self.n_jobs,
            self.objectives if len(self.objectives) > 1 else self.objectives[0],
            self.directions if len(self.directions) > 1 else self.directions[0],
        )
        sweep_dir = Path(str(config.hydra.sweep.dir))

        returns: list[Sequence[JobReturn]] = []
        while remaining > 0:
            batch_size = min(self.n_jobs, remaining)
            if grid:
                batch_size = min(batch_size, _unvisited_grid_points(study, space))
                if batch_size == 0:
                    log.info("every grid point has been run")
                    break
            trials = [study.ask(fixed_distributions=distributions) for _ in range(batch_size)]
            overrides = {
                trial.number: [
                    *fixed,
                    *(f"{key}={override_value(value)}" for key, value in trial.params.items()),
                ]
                for trial in trials
            }
            self._refuse_folder_clashes(study, trials, overrides)
            if not returns:  # the first batch: written once its folders are known to be free
                self._save_multirun(sweep_dir)
            returns.append(self._run_batch(study, trials, overrides))
            remaining -= batch_size
        if not returns:
            self._save_multirun(sweep_dir)
        self._write_results(study, sweep_dir)
        return returns

    def _save_multirun(self, sweep_dir: Path) -> None:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self._config(), sweep_dir / "multirun.yaml")

    def _refuse_folder_clashes(
        self, study: optuna.Study, trials: list[optuna.Trial], overrides: Mapping[int, list[str]]
    ) -> None:
        """A trial whose job folder (``<sweep dir>/<trial number>``) holds another job (an earlier
        study sent into the same hydra.sweep.dir) would overwrite it: the command stops with one
        line, exit 2, before the batch is launched; the batch's trials are told FAIL (a study in
        a storage counts them as finished). The same job (the same overrides, e.g. an in-memory
        study run again with its seed) reuses its folder."""
        import optuna

        from viking_eval.sweep.summary import job_folder_clashes, numbered_job_dirs, refuse_clashes

        sweep_dir = numbered_job_dirs(self._config())
        if sweep_dir is None or not sweep_dir.is_dir():
            return
        clashes = job_folder_clashes(sweep_dir, overrides)
        if clashes:
            for trial in trials:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            refuse_clashes(clashes, "trial")

    def _run_batch(
        self, study: optuna.Study, trials: list[optuna.Trial], overrides: Mapping[int, list[str]]
    ) -> list[JobReturn]:
        import optuna

        if self.launcher is None:
            raise RuntimeError("OptunaSweeperImpl used before setup(): Hydra sets the sweeper up first")
        launcher = self.launcher
        runnable: list[int] = []
        by_number = {trial.number: trial for trial in trials}
        for trial in trials:
            trial.set_user_attr("overrides", overrides[trial.number])
            try:
                # the config composes (a choice value may name a missing config option)
                self.validate_batch_is_legal([overrides[trial.number]])
            except Exception as error:
                log.error(
                    "trial %d failed to compose (overrides %s): %s",
                    trial.number,
                    overrides[trial.number],
                    error,
                )
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            runnable.append(trial.number)
        results: dict[int, JobReturn] = {}
        try:
            # a job's folder is its trial number: launch runs of consecutive numbers together
            for run in _consecutive_runs(runnable):
                launched = launcher.launch([overrides[number] for number in run], initial_job_idx=run[0])
                results.update(zip(run, launched, strict=True))
        except BaseException:
            for number in runnable:  # so that a resumed study does not wait for them
                if number not in results:
                    study.tell(number, state=optuna.trial.TrialState.FAIL)
            for number, result in results.items():
                self._tell(study, by_number[number], result)
            raise
        for number in runnable:
            self._tell(study, by_number[number], results[number])
        return [results[number] for number in runnable]

    def _tell(self, study: optuna.Study, trial: optuna.Trial, result: JobReturn) -> None:
        import optuna

        number = trial.number
        output_dir = (
            OmegaConf.select(result.hydra_cfg, "hydra.runtime.output_dir") if result.hydra_cfg else None
        )
        if output_dir:
            trial.set_user_attr("job_dir", str(output_dir))
        try:
            if result.status != JobStatus.COMPLETED:
                _ = result.return_value  # raises the job's exception (and Hydra names its overrides)
            values = objective_values(result.return_value, self.objectives)
        except Exception as error:
            log.error(
                "trial %d failed (overrides %s): %s: %s",
                number,
                list(result.overrides or []),
                type(error).__name__,
                error,
            )
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        study.tell(trial, values if len(values) > 1 else values[0])
        shown = ", ".join(
            f"{name} = {value:.6g}" for name, value in zip(self.objectives, values, strict=True)
        )
        log.info("trial %d: %s (overrides %s)", number, shown, list(result.overrides or []))

    # -- results ----------------------------------------------------------------------------------

    def _write_results(self, study: optuna.Study, sweep_dir: Path) -> Path:
        document = results_document(study, self.objectives, self.directions, self.sampler_name, self.storage)
        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
        path = sweep_dir / "optimization_results.yaml"
        path.write_text(text, encoding="utf-8")
        print(f"\noptimization results ({path}):\n{text}")
        return path


def check_study(
    sweeper: OptunaSweeperImpl, config: DictConfig, arguments: Sequence[str], parser: OverridesParser
) -> tuple[list[SearchParam], list[str]]:
    """The study's search space and fixed overrides (:func:`search_space`), checked before any
    trial runs, by the sweeper itself and by the CLI's pre-flight (viking_eval/cli.py): every
    swept key is in ``config``, every objective names one of its retrievers, the sampler_kwargs
    fit the sampler. A problem is a SweeperConfigError naming the setting (its ``key``)."""
    space, fixed = search_space(sweeper.params, arguments, parser, grid=sweeper.sampler_name == "grid")
    _check_keys(config, space)
    _check_retrievers(config, sweeper.objectives)
    sweeper.make_sampler(
        space, sweeper.seed
    )  # sampler_kwargs that do not fit fail here, before the study exists
    return space, fixed


def _check_keys(config: DictConfig, space: list[SearchParam]) -> None:
    """A swept key that is not in the config would fail every trial at composition: say so
    before any runs. Keys that add (+), delete (~) or select a config group are left to Hydra."""
    groups = set(config.hydra.runtime.choices)
    for param in space:
        key = param.key
        if key.startswith(("+", "~")) or "@" in key or key in groups:
            continue
        try:
            found = OmegaConf.select(config, key, default=_MISSING)
        except Exception:  # an interpolation that does not resolve here: the key exists
            continue
        if found is _MISSING:
            raise SweeperConfigError(
                f"{param.source}: {key} is not in the config (a typo? '+{key}=...' adds a new key)"
            )


def _check_retrievers(config: DictConfig, objectives: Sequence[str]) -> None:
    """An objective naming a retriever the experiment does not have fails every trial: say so
    before any runs (tasks that return other shapes have no `retrievers` to check against)."""
    retrievers = config.get("retrievers")
    if not isinstance(retrievers, DictConfig) or not len(retrievers):
        return
    names = [str(name) for name in retrievers]
    for objective in objectives:
        if not any(objective.startswith(f"{name}.") for name in names):
            raise SweeperConfigError(
                f"hydra.sweeper.objective {objective!r} names no retriever of this run; "
                f"write <retriever>.<metric> with a retriever among {names}",
                key="hydra.sweeper.objective",
            )


def _consecutive_runs(numbers: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for number in numbers:
        if runs and runs[-1][-1] + 1 == number:
            runs[-1].append(number)
        else:
            runs.append([number])
    return runs


def _unvisited_grid_points(study: optuna.Study, space: list[SearchParam]) -> int:
    """Grid points no finished or running trial of the study has taken."""
    import itertools

    keys = [param.key for param in space]
    points = {tuple(values) for values in itertools.product(*(param.grid_values or () for param in space))}
    for trial in study.get_trials(deepcopy=False):
        if trial.state.is_finished() or trial.state.name == "RUNNING":
            points.discard(tuple(trial.params.get(key) for key in keys))
    return len(points)


def _trial_entry(trial: optuna.trial.FrozenTrial, objectives: Sequence[str]) -> dict[str, Any]:
    values = dict(zip(objectives, trial.values, strict=True))
    return {
        "trial": trial.number,
        "values": values,
        "params": dict(trial.params),
        "overrides": list(trial.user_attrs.get("overrides", [])),
        "job_dir": trial.user_attrs.get("job_dir"),
    }


def results_document(
    study: optuna.Study,
    objectives: Sequence[str],
    directions: Sequence[str],
    sampler_name: str,
    storage: str | None,
) -> dict[str, Any]:
    """``optimization_results.yaml``: the study, trial counts by state, and the best trial
    (one objective) or the Pareto front (several; non-dominated complete trials)."""
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.state.name.lower()] = counts.get(trial.state.name.lower(), 0) + 1
    single = len(objectives) == 1
    document: dict[str, Any] = {
        "study_name": study.study_name,
        "storage": _redacted(storage),
        "sampler": sampler_name,
        "objective": objectives[0] if single else list(objectives),
        "direction": directions[0] if single else list(directions),
        "trials": {"total": len(trials), **dict(sorted(counts.items()))},
    }
    complete = [trial for trial in trials if trial.state.name == "COMPLETE"]
    if not complete:
        document["best"] = None
        return document
    if single:
        best = study.best_trial
        entry = _trial_entry(best, objectives)
        document.update(
            best_trial=best.number,
            best_value=entry["values"][objectives[0]],
            best_params=entry["params"],
            best_overrides=entry["overrides"],
            best_job_dir=entry["job_dir"],
        )
    else:
        front = sorted(study.best_trials, key=lambda trial: trial.number)
        document["pareto_front"] = [_trial_entry(trial, objectives) for trial in front]
    return document


def _grid_sampler(search_space: Mapping[str, list[Any]], **kwargs: Any) -> optuna.samplers.BaseSampler:
    from optuna.samplers import GridSampler

    class AskTellGridSampler(GridSampler):
        """GridSampler whose after_trial does not call ``study.stop()``: that is legal only
        inside ``study.optimize``; the sweeper stops by counting unvisited grid points."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return AskTellGridSampler(search_space, **kwargs)
