"""The study's checks before any trial runs, shared by the sweeper (OptunaSweeperImpl.sweep) and
the CLI's pre-flight (viking_eval/cli.py): the search space parses, every swept key is in the
config, every objective names one of the run's retrievers, the sampler_kwargs fit the sampler;
as_list and plain_dict read the sweeper's list and mapping settings.
A problem is a SweeperConfigError naming the setting at fault (its ``key``).

check_study takes the sweeper through the StudySettings protocol (what it reads of
OptunaSweeperImpl), so this module does not import _study.py, which imports it. Named with a
leading "_" so that Hydra's plugin scan leaves it alone (see _errors.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.viking_optuna_sweeper._errors import SweeperConfigError
from hydra_plugins.viking_optuna_sweeper._space import SearchParam, search_space
from hydra_plugins.viking_optuna_sweeper._storage import check_storage

_ABSENT = object()


class StudySettings(Protocol):
    """What check_study reads of the sweeper (OptunaSweeperImpl): its checked settings, and the
    sampler it would make."""

    @property
    def params(self) -> Mapping[str, object]: ...

    @property
    def sampler_name(self) -> str: ...

    @property
    def seed(self) -> int | None: ...

    @property
    def objectives(self) -> Sequence[str]: ...

    @property
    def storage(self) -> str | None: ...

    def make_sampler(self, space: list[SearchParam], seed: int | None) -> object: ...


def check_study(
    sweeper: StudySettings, config: DictConfig, arguments: Sequence[str], parser: OverridesParser
) -> tuple[list[SearchParam], list[str]]:
    """The study's search space and fixed overrides (:func:`search_space`), checked before any
    trial runs, by the sweeper itself and by the CLI's pre-flight (viking_eval/cli.py): every
    swept key is in ``config``, every objective names one of its retrievers, the sampler_kwargs
    fit the sampler, a storage server accepts a connection. A problem is a SweeperConfigError naming the setting (its ``key``)."""
    space, fixed = search_space(sweeper.params, arguments, parser, grid=sweeper.sampler_name == "grid")
    check_swept_keys(config, space)
    check_objective_retrievers(config, sweeper.objectives)
    sweeper.make_sampler(
        space, sweeper.seed
    )  # sampler_kwargs that do not fit fail here, before the study exists
    check_storage(sweeper.storage)  # a server that refuses: one line naming it, before any trial
    return space, fixed


def check_swept_keys(config: DictConfig, space: list[SearchParam]) -> None:
    """A swept key that is not in the config would fail every trial at composition: say so
    before any runs. Keys that add (+), delete (~) or select a config group are left to Hydra."""
    groups = set(config.hydra.runtime.choices)
    for param in space:
        key = param.key
        if key.startswith(("+", "~")) or "@" in key or key in groups:
            continue
        try:
            found = OmegaConf.select(config, key, default=_ABSENT)
        except Exception:  # an interpolation that does not resolve here: the key exists
            continue
        if found is _ABSENT:
            raise SweeperConfigError(
                f"{param.source}: {key} is not in the config (a typo? '+{key}=...' adds a new key)"
            )


def check_objective_retrievers(config: DictConfig, objectives: Sequence[str]) -> None:
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


def as_list(value: Any, name: str) -> list[str]:
    """``hydra.sweeper.<name>``: a string or a non-empty list of strings, as a list."""
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


def plain_dict(value: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
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
