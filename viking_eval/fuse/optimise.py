"""Choosing a fusion's weights and parameters on tuning queries: an exhaustive grid, or Optuna.

A candidate is ``(weights, params)``; its value is the mean of one metric over the tuning
queries (:func:`viking_eval.measures.metrics.evaluate`: the project's tie rule, judged queries
without results count 0). The grid holds every weight vector whose entries are multiples of
``step`` summing to 1 (as ranx's ``optimize_fusion``; one weight of 1 per run when the method takes
none: then only the parameters vary) times every value of each parameter's range
(:attr:`retrievers.fusion.FusionMethod.ranges`). Both search the same points: Optuna samples
each weight on the ``step`` grid (the last one is what is left, rounded) and each parameter on
its range's steps. Ties: the grid keeps the first best candidate in its order (weights in
lexicographic order, then parameters); Optuna keeps the earliest best trial.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from retrievers.fusion import METHODS

__all__ = ["Candidate", "grid", "grid_search", "optuna_search"]

Objective = Callable[[tuple[float, ...] | None, dict[str, float]], float]


@dataclass(frozen=True)
class Candidate:
    """A choice and its value on the tuning queries."""

    weights: tuple[float, ...] | None
    params: dict[str, float]
    value: float
    evaluated: int  # how many candidates were evaluated


def _digits(step: float) -> int:
    text = f"{step:.10f}".rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


def weight_grid(n_legs: int, step: float) -> list[tuple[float, ...]]:
    """Every vector of ``n_legs`` multiples of ``step`` in [0, 1] summing to 1 (lexicographic)."""
    units = round(1 / step)
    if abs(units * step - 1) > 1e-9:
        raise ValueError(f"step must divide 1 (0.1, 0.05, 0.25, ...), got {step}")
    digits = _digits(step)
    return [
        tuple(round(u * step, digits) for u in combo)
        for combo in itertools.product(range(units + 1), repeat=n_legs)
        if sum(combo) == units
    ]


def param_values(low: float, high: float, step: float) -> list[float]:
    count = round((high - low) / step)
    digits = max(_digits(step), _digits(low))
    return [round(low + i * step, digits) for i in range(count + 1)]


def grid(method: str, n_legs: int, step: float) -> list[tuple[tuple[float, ...] | None, dict[str, float]]]:
    """Every candidate of ``method`` (see the module docstring)."""
    spec = METHODS[method]
    weight_options: list[tuple[float, ...] | None] = (
        list(weight_grid(n_legs, step)) if spec.weighted else [None]
    )
    names = sorted(spec.ranges)
    value_lists = [param_values(*spec.ranges[name]) for name in names]
    return [
        (weights, dict(zip(names, values, strict=True)))
        for weights in weight_options
        for values in itertools.product(*value_lists)
    ]


def grid_search(method: str, n_legs: int, step: float, objective: Objective) -> Candidate:
    """The best candidate of the grid (the first of equal values)."""
    best: Candidate | None = None
    points = grid(method, n_legs, step)
    for weights, params in points:
        value = objective(weights, params)
        if best is None or value > best.value:
            best = Candidate(weights, params, value, 0)
    if best is None:
        raise ValueError(f"{method}: nothing to search")
    return Candidate(best.weights, best.params, best.value, len(points))


def optuna_search(
    method: str, n_legs: int, step: float, objective: Objective, *, trials: int, seed: int
) -> Candidate:
    """The best of ``trials`` Optuna (TPE, seeded) trials over the grid's points."""
    import optuna

    logging.getLogger("optuna").setLevel(logging.WARNING)
    spec = METHODS[method]
    digits = _digits(step)
    units = round(1 / step)

    def suggest(trial: optuna.Trial) -> tuple[tuple[float, ...] | None, dict[str, float]]:
        weights: tuple[float, ...] | None = None
        if spec.weighted:
            left = units
            chosen: list[float] = []
            for i in range(n_legs - 1):
                u = trial.suggest_int(f"w{i}", 0, units)
                u = min(u, left)
                chosen.append(round(u * step, digits))
                left -= u
            chosen.append(round(left * step, digits))
            weights = tuple(chosen)
        params: dict[str, float] = {}
        for name in sorted(spec.ranges):
            low, high, width = spec.ranges[name]
            values = param_values(low, high, width)
            params[name] = values[trial.suggest_int(name, 0, len(values) - 1)]
        return weights, params

    chosen_of: dict[int, tuple[tuple[float, ...] | None, dict[str, float]]] = {}

    def run(trial: optuna.Trial) -> float:
        weights, params = suggest(trial)
        chosen_of[trial.number] = (weights, params)
        return objective(weights, params)

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(run, n_trials=trials)
    values = [(t.value, t.number) for t in study.trials if t.value is not None]
    best_value, best_number = max(values, key=lambda pair: (pair[0], -pair[1]))
    weights, params = chosen_of[best_number]
    return Candidate(weights, params, float(best_value), len(values))


def describe(weights: Sequence[float] | None, params: Mapping[str, float]) -> str:
    parts = [] if weights is None else [f"weights={list(weights)}"]
    parts += [f"{name}={value}" for name, value in params.items()]
    return ", ".join(parts) or "(defaults)"
