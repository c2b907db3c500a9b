"""The search space: ``hydra.sweeper.params`` and the command line's sweep overrides, in
hydra-optuna-sweeper's override syntax, parsed with Hydra's OverridesParser into one SearchParam
(an Optuna distribution) per key; the fixed overrides every trial gets; a sampled value written
back as an override. Hydra's ``range`` keeps its meaning: the stop is excluded.

Optuna is imported inside make_search_param, when a study is checked or run (the name starts with
"_" so that Hydra's plugin scan leaves the module alone: see _errors.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep, Transformer
from hydra.errors import HydraException

from hydra_plugins.viking_optuna_sweeper._errors import SweeperConfigError

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution


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
