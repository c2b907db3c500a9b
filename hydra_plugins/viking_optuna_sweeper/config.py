"""The sweeper's configuration (``hydra.sweeper.*``), stored in Hydra's ConfigStore as
``hydra/sweeper: viking_optuna``.

No ``from __future__ import annotations`` here: Hydra's plugin scan executes this module outside
``sys.modules``, where dataclasses cannot resolve string annotations.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class VikingOptunaSweeperConf:
    _target_: str = "hydra_plugins.viking_optuna_sweeper.sweeper.VikingOptunaSweeper"

    # value(s) of the task's return dict to optimise, as "<retriever>.<key>" (e.g.
    # "bm25.nDCG@10", "hybrid.latency.p95_ms"), or a list of them for several objectives
    objective: Any = None
    # maximize | minimize, or a list with one direction per objective
    direction: Any = "maximize"

    # tpe | random | grid | cmaes | nsgaii; sampler_kwargs go to the Optuna sampler's constructor
    # (e.g. population_size for nsgaii, n_startup_trials for tpe)
    sampler: str = "tpe"
    seed: int | None = None
    sampler_kwargs: dict[str, Any] = field(default_factory=dict)

    # trials in the study, counting finished (complete or failed) trials of a resumed study
    n_trials: int = 20
    # trials asked per batch and launched together through the Hydra launcher
    n_jobs: int = 1

    # Optuna storage URL: null = in memory, no resuming; sqlite:///reports/optuna.db (workers on
    # one machine); postgresql+psycopg://user:password@host:5432/db (workers on several machines).
    # Workers: the same command run several times with the same storage and study_name
    storage: str | None = None
    # null = the task config's `name`
    study_name: str | None = None
    # resume a study of that name found in the storage (false: such a study is an error)
    load_if_exists: bool = True

    # search space, in override syntax: interval(0,1), int(interval(1,100)),
    # tag(log, interval(1e-3,1)), choice(a,b,c), range(1,10,2); sweep overrides on the command
    # line (key=a,b,c) join it and replace a key given here
    params: dict[str, Any] | None = None

    # several workers on one storage (docs/tuning.md): each running trial's heartbeat is recorded
    # every heartbeat_interval seconds (null: none; then only a dead worker of this host is
    # noticed); a trial whose heartbeat is older than grace_period (null: 2 x heartbeat_interval)
    # is marked failed, and run again up to retry_killed times (0: skipped, counted as failed)
    heartbeat_interval: int | None = 10
    grace_period: int | None = None
    retry_killed: int = 0
    # seconds between looks at the storage while other workers' last trials run
    poll_seconds: float = 1.0


ConfigStore.instance().store(
    group="hydra/sweeper", name="viking_optuna", node=VikingOptunaSweeperConf, provider="viking_eval"
)
