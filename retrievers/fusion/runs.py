"""Fusing whole runs with a named method: the method table, checks, training, per-query fusion.

``fuse_runs(runs, "rrf")`` fuses runs ``{query: {doc: score}}`` with any method of
:data:`METHODS` after the normalisation ``norm`` (:mod:`retrievers.fusion.norms`); supervised
methods first learn from judged training runs (:func:`train`). Ties: each leg is read in the
project's ranking order (score descending, doc id ascending), so positions never depend on the
order a file or dict listed tied documents; the fused run is ordered the same way. ranx orders a
leg's tied scores by its own sort, so the two agree exactly when no leg has ties.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrievers.fusion.methods import score_methods
from retrievers.fusion.norms import NORMS, Leg, norm_name, normalise_legs
from retrievers.fusion.supervised import learn
from retrievers.ranking import pair_key

__all__ = [
    "METHODS",
    "MISSING",
    "NORMALISATIONS",
    "SUPERVISED",
    "FusionMethod",
    "Model",
    "check_options",
    "fuse_legs",
    "fuse_runs",
    "method_spec",
    "train",
]

Run = Mapping[str, Mapping[str, float]]
Model = tuple[tuple[float, ...], ...]
MISSING: tuple[str, ...] = ("zero", "floor")


@dataclass(frozen=True)
class FusionMethod:
    """A method's name (ranx's), whether it reads ``weights``, its parameters with defaults and
    the ranges an optimiser searches (``(low, high, step)``), and whether it learns from training
    runs (``supervised``: it needs a model from :func:`train`)."""

    name: str
    weighted: bool = False
    params: Mapping[str, float] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)
    supervised: bool = False
    uses_missing: bool = False


def _method(name: str, **kwargs: Any) -> FusionMethod:
    return FusionMethod(name, **kwargs)


METHODS: dict[str, FusionMethod] = {
    method.name: method
    for method in (
        _method("sum", uses_missing=True),
        _method("wsum", weighted=True, uses_missing=True),
        _method("mnz", uses_missing=True),
        _method("wmnz", weighted=True, uses_missing=True),
        _method("gmnz", params={"gamma": 1.0}, ranges={"gamma": (0.0, 2.0, 0.05)}, uses_missing=True),
        _method("anz"),
        _method("min"),
        _method("max"),
        _method("med"),
        _method("mixed", weighted=True),
        _method("rrf", weighted=True, params={"k": 60}, ranges={"k": (10, 100, 10)}),
        _method("rbc", params={"phi": 0.8}, ranges={"phi": (0.05, 0.95, 0.05)}),
        _method("isr"),
        _method("log_isr"),
        _method("logn_isr", params={"sigma": 0.01}, ranges={"sigma": (0.01, 1.0, 0.01)}),
        _method("bordafuse"),
        _method("w_bordafuse", weighted=True),
        _method("condorcet"),
        _method("w_condorcet", weighted=True),
        _method("posfuse", supervised=True),
        _method("slidefuse", params={"w": 6}, ranges={"w": (1, 20, 1)}, supervised=True),
        _method("probfuse", params={"n_segments": 10}, ranges={"n_segments": (2, 50, 1)}, supervised=True),
        _method("segfuse", supervised=True),
        _method("mapfuse", supervised=True),
        _method("bayesfuse", supervised=True),
    )
}
_FUNCTIONS = score_methods()
_INTEGER_PARAMS = ("w", "n_segments")


def method_spec(method: str) -> FusionMethod:
    """The :class:`FusionMethod` named ``method``; ValueError listing the names."""
    if method not in METHODS:
        raise ValueError(f"fusion method must be one of {', '.join(METHODS)}, got {method!r}")
    return METHODS[method]


def check_options(
    method: str,
    n_legs: int,
    *,
    norm: str = "min-max",
    weights: Sequence[float] | None = None,
    params: Mapping[str, float] | None = None,
    missing: str = "zero",
) -> tuple[FusionMethod, list[float], dict[str, Any]]:
    """Every option checked against ``method``: the spec, the weights (1 each by default) and
    the parameters with their defaults. ValueError naming the option and what is allowed."""
    spec = method_spec(method)
    norm_name(norm)
    if missing not in MISSING:
        raise ValueError(f"missing must be one of {', '.join(MISSING)}, got {missing!r}")
    if missing != "zero" and not spec.uses_missing:
        raise ValueError(
            f"missing={missing!r} applies to {', '.join(m for m in METHODS if METHODS[m].uses_missing)}, not {method}"
        )
    if n_legs < 1:
        raise ValueError("fusion needs at least one run")
    if weights is None:
        leg_weights = [1.0] * n_legs
    else:
        if not spec.weighted:
            weighted = ", ".join(name for name, m in METHODS.items() if m.weighted)
            raise ValueError(f"{method} takes no weights (the weighted methods: {weighted})")
        leg_weights = [float(w) for w in weights]
        if len(leg_weights) != n_legs:
            raise ValueError(f"got {len(leg_weights)} weights for {n_legs} runs; give one weight per run")
        if not all(math.isfinite(w) and w >= 0 for w in leg_weights):
            raise ValueError(f"weights must be finite numbers >= 0, got {list(weights)}")
    values: dict[str, Any] = dict(spec.params)
    for key, value in (params or {}).items():
        if key not in spec.params:
            known = ", ".join(spec.params) or "none"
            raise ValueError(f"{method} has no parameter {key!r} (its parameters: {known})")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{method}'s {key} must be a finite number, got {value!r}")
        values[key] = int(value) if key in _INTEGER_PARAMS else float(value)
    for key in _INTEGER_PARAMS:
        if key in values and values[key] < 1:
            raise ValueError(f"{method}'s {key} must be an integer >= 1, got {values[key]}")
    if "phi" in values and not 0 < values["phi"] < 1:
        raise ValueError(f"rbc's phi must be in (0, 1), got {values['phi']}")
    if "k" in values and values["k"] <= 0:
        raise ValueError(f"rrf's k must be > 0, got {values['k']}")
    values["missing"] = missing
    return spec, leg_weights, values


def fuse_legs(
    legs: Sequence[Leg[Any]],
    method: str,
    *,
    norm: str = "min-max",
    weights: Sequence[float] | None = None,
    params: Mapping[str, float] | None = None,
    model: Model | None = None,
    missing: str = "zero",
) -> dict[Any, float]:
    """One query: ``legs`` (lists of ``(item, score)``, any order) fused by ``method`` after
    ``norm``: ``{item: fused score}``."""
    spec, leg_weights, values = check_options(
        method, len(legs), norm=norm, weights=weights, params=params, missing=missing
    )
    if spec.supervised:
        if model is None or len(model) != len(legs):
            raise ValueError(f"{method} is supervised: give the model train() learned, one entry per run")
        values["model"] = model
    ordered = [sorted(leg, key=pair_key) for leg in legs]
    return _FUNCTIONS[method](normalise_legs(ordered, norm), leg_weights, values)


def _legs_of(runs: Sequence[Run], query_id: str) -> list[Leg[str]]:
    return [sorted(run.get(query_id, {}).items(), key=pair_key) for run in runs]


def fuse_runs(
    runs: Sequence[Run],
    method: str,
    *,
    norm: str = "min-max",
    weights: Sequence[float] | None = None,
    params: Mapping[str, float] | None = None,
    model: Model | None = None,
    missing: str = "zero",
) -> dict[str, dict[str, float]]:
    """Every query of any run fused (:func:`fuse_legs`); a run without a query adds nothing to it."""
    check_options(method, len(runs), norm=norm, weights=weights, params=params, missing=missing)
    query_ids = sorted({query_id for run in runs for query_id in run})
    return {
        query_id: fuse_legs(
            _legs_of(runs, query_id),
            method,
            norm=norm,
            weights=weights,
            params=params,
            model=model,
            missing=missing,
        )
        for query_id in query_ids
    }


def train(
    method: str,
    runs: Sequence[Run],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    norm: str = "min-max",
    params: Mapping[str, float] | None = None,
) -> Model | None:
    """What a supervised ``method`` learns from judged training ``runs`` (one per leg, the same
    legs it will fuse; :mod:`retrievers.fusion.supervised`); None for a method that learns
    nothing. ``norm`` is checked only: learning reads positions."""
    spec, _, values = check_options(method, len(runs), norm=norm, params=params)
    if not spec.supervised:
        return None
    rankings = [
        {query_id: [doc for doc, _ in sorted(docs.items(), key=pair_key)] for query_id, docs in run.items()}
        for run in runs
    ]
    return learn(method, rankings, qrels, n_segments=int(values.get("n_segments", 10)))


#: the supervised methods (they need :func:`train`); the normalisations
SUPERVISED: tuple[str, ...] = tuple(name for name, m in METHODS.items() if m.supervised)
NORMALISATIONS: tuple[str, ...] = NORMS
