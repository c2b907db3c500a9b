"""The Hydra Sweeper plugin ``hydra/sweeper: viking_optuna``: an Optuna study over Hydra jobs.

Hydra imports this module at every start-up to find plugins, so it stays small: the work is in
``_study.py`` (see its docstring for the behaviour), imported when the sweeper is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class VikingOptunaSweeper(Sweeper):
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
        from hydra_plugins.viking_optuna_sweeper._study import OptunaSweeperImpl

        self.sweeper = OptunaSweeperImpl(
            objective=objective,
            direction=direction,
            sampler=sampler,
            seed=seed,
            sampler_kwargs=sampler_kwargs,
            n_trials=n_trials,
            n_jobs=n_jobs,
            storage=storage,
            study_name=study_name,
            load_if_exists=load_if_exists,
            params=params,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            retry_killed=retry_killed,
            poll_seconds=poll_seconds,
        )

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        return self.sweeper.sweep(arguments)
