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

    # Optuna storage URL (e.g. sqlite:///reports/optuna.db); null = in memory, no resuming
    storage: str | None = None
    # null = the task config's `name`
    study_name: str | None = None
    # resume a study of that name found in the storage (false: such a study is an error)
    load_if_exists: bool = True

    # search space, in override syntax: interval(0,1), int(interval(1,100)),
    # tag(log, interval(1e-3,1)), choice(a,b,c), range(1,10,2); sweep overrides on the command
    # line (key=a,b,c) join it and replace a key given here
    params: dict[str, Any] | None = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="viking_optuna", node=VikingOptunaSweeperConf, provider="viking_eval"
)
