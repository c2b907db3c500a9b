"""Several worker processes on one study (the same command run on several machines, or twice on
one, with a shared ``hydra.sweeper.storage``): who runs which trial, when a trial's worker is
dead, how many trials are left, and who writes the results.

Every decision below is taken inside the study lock (_storage.StudyLock), so that two workers
never count the same free slot:

- **Budget.** ``n_trials`` counts every trial of the study (running, waiting, complete, failed,
  pruned) except a failed trial that Optuna's retry callback (_storage.retry_callback) has replaced by a retry:
  the retry takes its place. A worker asks a new trial only while the count is below
  ``n_trials``, so N workers together finish exactly ``n_trials`` trials, each asked once.
- **Dead workers.** Each trial records its worker (``user_attrs["worker"]``: host and process id)
  and the worker's heartbeat (Optuna's RDBStorage heartbeat, beaten by a thread of the worker
  while its trials run). A running trial is failed when its worker is a process of this host
  that no longer exists, when it names no worker (left by a process of an earlier version, or a
  trial asked outside the sweeper), or, for workers on other hosts, when its heartbeat is older
  than the grace period (``optuna.storages.fail_stale_trials``). ``retry_killed`` > 0 runs it
  again (a waiting copy with the same parameters, asked first).
- **Results.** When no trial is left to ask, a worker waits until the study has no running or
  waiting trial (failing dead workers' trials as it goes), then claims the results: the first
  worker to claim, for a given sweep folder and number of finished trials, writes
  ``optimization_results.yaml`` and the sweep summary; the others leave them to it.

Named with a leading "_" so that Hydra's plugin scan leaves it alone (see _errors.py).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hydra_plugins.viking_optuna_sweeper._errors import SweeperConfigError
from hydra_plugins.viking_optuna_sweeper._storage import retry_callback

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)

WORKER_ATTR = "worker"
CLAIM_ATTR = "results_claim"


@dataclass(frozen=True)
class WorkerSettings:
    """``hydra.sweeper.heartbeat_interval``, ``grace_period`` (seconds; None: no heartbeat, or
    Optuna's twice the interval), ``retry_killed`` (retries of a dead worker's trial) and
    ``poll_seconds`` (between looks at the storage while other workers' last trials run)."""

    heartbeat_interval: int | None
    grace_period: int | None
    retry_killed: int
    poll_seconds: float

    @classmethod
    def checked(
        cls, heartbeat_interval: Any, grace_period: Any, retry_killed: Any, poll_seconds: Any
    ) -> WorkerSettings:
        """The settings, or a SweeperConfigError naming the one that is not a positive number
        (``retry_killed``: an integer >= 0; the first two may be null)."""
        for name, value, nullable in (
            ("heartbeat_interval", heartbeat_interval, True),
            ("grace_period", grace_period, True),
            ("poll_seconds", poll_seconds, False),
        ):
            if value is None and nullable:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise SweeperConfigError(
                    f"hydra.sweeper.{name} must be a number > 0{' or null' if nullable else ''}, got {value!r}",
                    key=f"hydra.sweeper.{name}",
                )
        if isinstance(retry_killed, bool) or not isinstance(retry_killed, int) or retry_killed < 0:
            raise SweeperConfigError(
                f"hydra.sweeper.retry_killed must be an integer >= 0, got {retry_killed!r}",
                key="hydra.sweeper.retry_killed",
            )
        return cls(
            heartbeat_interval=None if heartbeat_interval is None else max(1, round(heartbeat_interval)),
            grace_period=None if grace_period is None else max(1, round(grace_period)),
            retry_killed=retry_killed,
            poll_seconds=float(poll_seconds),
        )


def this_worker() -> str:
    """``host:pid`` of this process: recorded on each trial it runs."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _dead_reason(trial: optuna.trial.FrozenTrial, host: str) -> str | None:
    """Why a running trial's worker is known dead now (None: alive, or on another host)."""
    worker = trial.user_attrs.get(WORKER_ATTR)
    if not isinstance(worker, str):
        return "was left running by an earlier process"
    worker_host, _, pid = worker.rpartition(":")
    if worker_host == host and pid.isdigit() and not _process_exists(int(pid)):
        return f"was left running by worker {worker}, which no longer runs"
    return None


def fail_dead_trials(study: optuna.Study, retry_killed: int) -> list[int]:
    """Fail the running trials whose worker is dead (see the module's docstring), and run the
    storage's retry callback for them; the numbers of the trials failed. Call inside the lock."""
    import optuna

    host = socket.gethostname()
    storage = study._storage
    failed: list[int] = []
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        reason = _dead_reason(trial, host)
        if reason is None:
            continue
        try:
            if not storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:  # its worker finished it just now
            continue
        log.warning("trial %d %s; marked FAIL", trial.number, reason)
        failed.append(trial.number)
        if retry_killed:
            retry_callback(retry_killed)(study, storage.get_trial(trial._trial_id))
    running = {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
    with warnings.catch_warnings():  # experimental since Optuna 2.9, and still the way to do it
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # other hosts' workers, by their heartbeat
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)):
        if trial.number in running:
            log.warning(
                "trial %d: its worker %s stopped beating; marked FAIL",
                trial.number,
                trial.user_attrs.get(WORKER_ATTR),
            )
            failed.append(trial.number)
    return failed


def counted_trials(trials: Sequence[optuna.trial.FrozenTrial]) -> int:
    """Trials that count toward ``n_trials``: all but failed trials replaced by a retry."""
    replaced = {trial.system_attrs.get("failed_trial") for trial in trials}
    return sum(1 for trial in trials if not (trial.state.name == "FAIL" and trial.number in replaced))


def unfinished(study: optuna.Study) -> list[int]:
    """Numbers of the study's running and waiting trials."""
    import optuna

    states = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)
    return [trial.number for trial in study.get_trials(deepcopy=False, states=states)]


def claim_results(study: optuna.Study, sweep_dir: str, seen_at_start: Any) -> str | None:
    """Claim the writing of the study's results for ``sweep_dir`` (inside the lock, once no trial
    is left). None: this worker writes them; else the worker that claimed them since this one
    started (for the same folder and number of finished trials) and writes them instead."""
    finished = len(study.get_trials(deepcopy=False))
    claim = study.user_attrs.get(CLAIM_ATTR)
    if (
        isinstance(claim, dict)
        and claim != seen_at_start
        and claim.get("sweep_dir") == sweep_dir
        and claim.get("trials") == finished
        and claim.get("worker") != this_worker()
    ):
        return str(claim.get("worker"))
    study.set_user_attr(CLAIM_ATTR, {"worker": this_worker(), "sweep_dir": sweep_dir, "trials": finished})
    return None


class Heartbeat:
    """Beats the heartbeat of the trials this worker runs (Optuna's RDBStorage heartbeat) every
    ``interval`` seconds from a thread, while the launcher runs them."""

    def __init__(self, storage: Any, trial_ids: Sequence[int], interval: int | None) -> None:
        self.storage = storage
        self.trial_ids = list(trial_ids)
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        for trial_id in self.trial_ids:
            self.storage.record_heartbeat(trial_id)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception as error:  # the database is away for a moment: the next beat retries
                log.warning("heartbeat of trials %s not recorded: %s", self.trial_ids, error)

    def __enter__(self) -> Heartbeat:
        if self.interval:
            self._thread = threading.Thread(target=self._run, name="optuna-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
