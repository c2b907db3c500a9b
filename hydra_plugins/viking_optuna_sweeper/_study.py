"""The Optuna sweeper's study loop (OptunaSweeperImpl, the work of sweeper.VikingOptunaSweeper):
an Optuna study run with the ask/tell API (optuna >= 4).

Each trial is one Hydra job, launched through whatever launcher is configured (basic, joblib,
submitit), ``n_jobs`` trials per batch:

    ask n_jobs trials -> their overrides -> launcher.launch(batch) -> tell each trial its value(s)

- The objective is read from the job's return value (_objectives.py). A job that raises (or
  calls ``sys.exit``: FailOnExit), or returns a missing, NaN or infinite objective, is told to
  the study as FAIL and the study goes on (hydra issue 2237: hydra-optuna-sweeper ended the
  whole study).
- Job folders are ``<sweep dir>/<trial number>``: a resumed study never overwrites a folder. A
  trial whose folder holds another job (another study sent into the same ``hydra.sweep.dir``)
  stops the command before it is launched: one line, exit 2 (viking_eval.sweep.summary).
- With a ``storage`` a study resumes, and several workers (the same command run several times,
  on one machine or several) share it: every trial counts toward ``n_trials`` and none is
  redone; trials of a killed worker are marked FAIL (and retried with ``retry_killed``); one
  worker writes the results when no trial is left (_workers.py; the lock: _storage.py).
- Trial number k is drawn by a sampler seeded with ``seed + k`` (grid: ``seed``; _ask_batch).
- Before any trial: the settings are checked here (constructor), the search space and the
  config in _checks.py (the search space itself: _space.py); at the end the study's results go
  to ``optimization_results.yaml`` (_results.py).

Named _study.py, not study.py: Hydra's plugin scan imports (and re-executes) every module of
``hydra_plugins`` whose name does not start with "_" at every start-up (see _errors.py); this
module and its helpers are imported only when the sweeper is created, and Optuna only when a
study runs.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.viking_optuna_sweeper._checks import as_list, check_study, plain_dict
from hydra_plugins.viking_optuna_sweeper._errors import JobExitError, SweeperConfigError
from hydra_plugins.viking_optuna_sweeper._grid import grid_sampler, unvisited_grid_points
from hydra_plugins.viking_optuna_sweeper._objectives import objective_values
from hydra_plugins.viking_optuna_sweeper._results import redacted_storage, results_document
from hydra_plugins.viking_optuna_sweeper._space import SearchParam, override_value
from hydra_plugins.viking_optuna_sweeper._storage import StudyLock, open_storage, storage_dialect
from hydra_plugins.viking_optuna_sweeper._workers import (
    CLAIM_ATTR,
    WORKER_ATTR,
    Heartbeat,
    WorkerSettings,
    claim_results,
    counted_trials,
    fail_dead_trials,
    this_worker,
    unfinished,
)

if TYPE_CHECKING:
    import optuna

    from viking_eval.config.compose import JobComposer

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "random", "grid", "cmaes", "nsgaii")
DIRECTIONS = ("maximize", "minimize")


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
        heartbeat_interval: int | None = 10,
        grace_period: int | None = None,
        retry_killed: int = 0,
        poll_seconds: float = 1.0,
    ) -> None:
        if objective is None:
            raise SweeperConfigError(
                "hydra.sweeper.objective is required: the value to optimise, as "
                "<retriever>.<metric> (e.g. bm25.nDCG@10), or a list of them",
                key="hydra.sweeper.objective",
            )
        self.objectives = as_list(objective, "objective")
        directions = as_list(direction, "direction")
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
        self.sampler_kwargs = plain_dict(sampler_kwargs, "sampler_kwargs")
        for name, number in (("n_trials", n_trials), ("n_jobs", n_jobs)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise SweeperConfigError(
                    f"hydra.sweeper.{name} must be an integer >= 1, got {number!r}",
                    key=f"hydra.sweeper.{name}",
                )
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        workers = WorkerSettings.checked(heartbeat_interval, grace_period, retry_killed, poll_seconds)
        self.heartbeat_interval = workers.heartbeat_interval
        self.grace_period = workers.grace_period
        self.retry_killed = workers.retry_killed
        self.poll_seconds = workers.poll_seconds
        if storage is not None:
            storage_dialect(storage)  # an unknown scheme stops the study before anything runs
        self.storage = storage
        self.study_name = study_name
        self.load_if_exists = load_if_exists
        self.params = plain_dict(params, "params")
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None
        self._composer: JobComposer | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=FailOnExit(task_function), config=config
        )
        from viking_eval.config.compose import JobComposer  # trials composed once per shape

        self._composer = JobComposer(
            compose=lambda lines: hydra_context.config_loader.load_sweep_config(config, lines)
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
                return grid_sampler({param.key: list(param.grid_values or ()) for param in space}, **kwargs)
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

    def _study(self, name: str) -> optuna.Study:
        """The study (created, or loaded to resume it), the storage opened with its heartbeat.
        Call inside the study lock: several workers may open it at once."""
        import optuna

        expected = [optuna.study.StudyDirection[item.upper()] for item in self.directions]
        storage = (
            None
            if self.storage is None
            else open_storage(self.storage, self.heartbeat_interval, self.grace_period, self.retry_killed)
        )
        try:
            study = optuna.create_study(
                storage=storage,
                sampler=optuna.samplers.RandomSampler(),  # replaced before each ask (_ask_batch)
                study_name=name,
                directions=expected,
                load_if_exists=self.load_if_exists,
            )
        except optuna.exceptions.DuplicatedStudyError as error:
            raise SweeperConfigError(
                f"study {name!r} already exists in {redacted_storage(self.storage)}; set "
                "hydra.sweeper.load_if_exists=true to resume it, or another hydra.sweeper.study_name"
            ) from error
        if list(study.directions) != expected:
            raise SweeperConfigError(
                f"study {name!r} in {redacted_storage(self.storage)} has directions "
                f"{[d.name.lower() for d in study.directions]}, not {self.directions}; "
                "use another hydra.sweeper.study_name"
            )
        return study

    def _ask_batch(self, study: optuna.Study, space: list[SearchParam]) -> list[optuna.Trial]:
        """The trials this worker runs next (inside the study lock): waiting trials (retries of
        killed workers' trials) first, then new ones while the study counts fewer than
        ``n_trials`` (_workers.py). Trial number k is drawn by a sampler seeded with seed + k, so
        the points do not depend on which worker asks, nor on an earlier run of the study; the
        grid sampler keeps its seed (it numbers the grid's points by a shuffle seeded with it)."""
        import optuna

        distributions = {param.key: param.distribution for param in space}
        batch: list[optuna.Trial] = []
        worker = this_worker()
        for _ in range(self.n_jobs):
            trials = study.get_trials(deepcopy=False)
            waiting = any(trial.state == optuna.trial.TrialState.WAITING for trial in trials)
            if not waiting and counted_trials(trials) >= self.n_trials:
                break
            if not waiting and self.sampler_name == "grid" and unvisited_grid_points(study, space) == 0:
                break
            step = 0 if self.sampler_name == "grid" else len(trials)  # the grid's seed numbers its points
            study.sampler = self.make_sampler(space, None if self.seed is None else self.seed + step)
            with warnings.catch_warnings():  # the heartbeat is beaten here (Heartbeat), not by optimize()
                warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
                trial = study.ask(fixed_distributions=distributions)
            trial.set_user_attr(WORKER_ATTR, worker)
            if self.heartbeat_interval and self.storage is not None:
                study._storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]
            batch.append(trial)
        return sorted(batch, key=lambda trial: trial.number)

    # -- the loop -------------------------------------------------------------------------------

    def sweep(self, arguments: list[str]) -> Any:
        config = self._config()
        if self.hydra_context is None:
            raise RuntimeError("OptunaSweeperImpl.sweep() before setup(): Hydra sets the sweeper up first")
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        space, fixed = check_study(self, config, arguments, parser)
        name = self.study_name or str(config.get("name") or "viking_eval")
        lock = StudyLock(self.storage, name)
        try:
            with lock.held():
                study = self._study(name)
                fail_dead_trials(study, self.retry_killed)
                claim_at_start = study.user_attrs.get(CLAIM_ATTR)
                n_trials = len(study.get_trials(deepcopy=False))
            log.info(
                "study %r (%s, sampler %s): %d trials so far, %d in all, %d per batch; objective %s (%s)",
                name,
                redacted_storage(self.storage) or "in memory",
                self.sampler_name,
                n_trials,
                self.n_trials,
                self.n_jobs,
                self.objectives if len(self.objectives) > 1 else self.objectives[0],
                self.directions if len(self.directions) > 1 else self.directions[0],
            )
            returns = self._run_study(study, space, fixed, lock)
            sweep_dir = Path(str(config.hydra.sweep.dir))
            with lock.held():
                writer = (
                    None if self.storage is None else claim_results(study, str(sweep_dir), claim_at_start)
                )
            if writer is None:
                self._write_results(study, sweep_dir)
            else:
                from viking_eval.sweep.summary import leave_summary_to

                note = f"study {name!r}: every trial has finished; worker {writer} writes the results in {sweep_dir}"
                print(note)
                leave_summary_to(sweep_dir, note)
        finally:
            lock.close()
        return returns

    def _run_study(
        self, study: optuna.Study, space: list[SearchParam], fixed: list[str], lock: StudyLock
    ) -> list[Sequence[JobReturn]]:
        """Ask, launch and tell batches until the study has no trial left to ask, then wait for
        the trials other workers run (failing those of dead workers; running retries)."""
        sweep_dir = Path(str(self._config().hydra.sweep.dir))
        returns: list[Sequence[JobReturn]] = []
        saved = False
        waiting_logged = False
        while True:
            with lock.held():
                fail_dead_trials(study, self.retry_killed)
                trials = self._ask_batch(study, space)
                left = unfinished(study) if not trials else []
            if not trials:
                if not left:
                    break
                if not waiting_logged:
                    log.info("waiting for trials %s of other workers to finish", left)
                    waiting_logged = True
                time.sleep(self.poll_seconds)
                continue
            waiting_logged = False
            overrides = {
                trial.number: [
                    *fixed,
                    *(f"{key}={override_value(value)}" for key, value in trial.params.items()),
                ]
                for trial in trials
            }
            self._refuse_folder_clashes(study, trials, overrides)
            if not saved:  # the first batch: written once its folders are known to be free
                self._save_multirun(sweep_dir)
                saved = True
            beat = self.heartbeat_interval if self.storage is not None else None
            with Heartbeat(study._storage, [trial._trial_id for trial in trials], beat):
                returns.append(self._run_batch(study, trials, overrides))
        if not saved:
            self._save_multirun(sweep_dir)
        return returns

    def _save_multirun(self, sweep_dir: Path) -> None:
        from viking_eval import files

        sweep_dir.mkdir(parents=True, exist_ok=True)  # several workers may write it: atomically
        files.write_text(sweep_dir / "multirun.yaml", OmegaConf.to_yaml(self._config()))

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

        if self.launcher is None or self._composer is None:
            raise RuntimeError("OptunaSweeperImpl used before setup(): Hydra sets the sweeper up first")
        launcher, composer = self.launcher, self._composer
        runnable: list[int] = []
        by_number = {trial.number: trial for trial in trials}
        for trial in trials:
            trial.set_user_attr("overrides", overrides[trial.number])
            try:
                # the config composes (a choice value may name a missing config option)
                composer.config(overrides[trial.number])
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
        from viking_eval import files

        sweep_dir.mkdir(parents=True, exist_ok=True)
        document = results_document(study, self.objectives, self.directions, self.sampler_name, self.storage)
        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
        path = sweep_dir / "optimization_results.yaml"
        files.write_text(path, text)
        print(f"\noptimization results ({path}):\n{text}")
        return path


def _consecutive_runs(numbers: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for number in numbers:
        if runs and runs[-1][-1] + 1 == number:
            runs[-1].append(number)
        else:
            runs.append([number])
    return runs
