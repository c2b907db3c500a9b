"""The grid sampler under the ask/tell API: Optuna's GridSampler without its ``study.stop()``,
and the count of grid points no trial has taken yet (the sweeper stops when it is 0).

Named with a leading "_" so that Hydra's plugin scan leaves it alone (see _errors.py); Optuna is
imported inside the functions, when a study runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hydra_plugins.viking_optuna_sweeper._space import SearchParam

if TYPE_CHECKING:
    import optuna


def grid_sampler(search_space: Mapping[str, list[Any]], **kwargs: Any) -> optuna.samplers.BaseSampler:
    from optuna.samplers import GridSampler

    class AskTellGridSampler(GridSampler):
        """GridSampler whose after_trial does not call ``study.stop()``: that is legal only
        inside ``study.optimize``; the sweeper stops by counting unvisited grid points."""

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            return None

    return AskTellGridSampler(search_space, **kwargs)


def unvisited_grid_points(study: optuna.Study, space: list[SearchParam]) -> int:
    """Grid points no finished or running trial of the study has taken."""
    import itertools

    keys = [param.key for param in space]
    points = {tuple(values) for values in itertools.product(*(param.grid_values or () for param in space))}
    for trial in study.get_trials(deepcopy=False):
        if trial.state.is_finished() or trial.state.name == "RUNNING":
            points.discard(tuple(trial.params.get(key) for key in keys))
    return len(points)
