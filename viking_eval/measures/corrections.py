"""Multiple-comparison corrections of p-values (Holm, Benjamini-Hochberg) and bootstrap
confidence intervals of a mean paired difference."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from viking_eval.measures.paired_tests import all_equal, paired_differences

CorrectionName = Literal["holm", "bh", "none"]
BootstrapMethod = Literal["BCa", "percentile", "basic"]

CORRECTIONS: tuple[str, ...] = ("holm", "bh", "none")
BOOTSTRAP_METHODS: tuple[str, ...] = ("BCa", "percentile", "basic")


@dataclass(frozen=True)
class Interval:
    """A bootstrap confidence interval of the mean difference."""

    mean_difference: float
    low: float
    high: float
    confidence: float
    method: str
    n_resamples: int


def bootstrap_interval(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    method: str = "BCa",
    seed: int = 0,
) -> Interval:
    """Bootstrap confidence interval of mean(a - b): resample queries with replacement
    (``scipy.stats.bootstrap`` on the differences, which keeps the pairs together; Efron &
    Tibshirani 1993). ``method``: ``BCa`` (bias-corrected and accelerated, the default),
    ``percentile`` or ``basic``. When all differences are equal the interval is that value."""
    differences = paired_differences(a, b)
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"method must be one of {list(BOOTSTRAP_METHODS)}, got {method!r}")
    mean = float(np.mean(differences))
    if all_equal(differences):
        return Interval(mean, mean, mean, confidence, method, 0)
    from scipy import stats  # here, not at import: scipy.stats takes a second to load

    result = stats.bootstrap(
        (differences,),
        np.mean,
        n_resamples=n_resamples,
        batch=1000,
        confidence_level=confidence,
        method=method,
        rng=np.random.default_rng(seed),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    return Interval(mean, low, high, confidence, method, n_resamples)


def _check_p_values(p_values: Sequence[float]) -> np.ndarray:
    values = np.asarray(p_values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"p-values must be a 1-d sequence, got shape {values.shape}")
    for index, value in enumerate(values):
        if not 0.0 <= value <= 1.0:  # also rejects NaN
            raise ValueError(f"p-value {index} is {value}; p-values must be in [0, 1]")
    return values


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): with p sorted ascending,
    adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)); reject where adj <= alpha. Controls the
    family-wise error rate under any dependence; uniformly more powerful than Bonferroni."""
    values = _check_p_values(p_values)
    m = values.size
    order = np.argsort(values, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * values[index]))
        adjusted[index] = running
    return adjusted.tolist()


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg step-up adjusted p-values (Benjamini & Hochberg 1995): with p sorted
    ascending, adj_(i) = min_{j >= i} min(1, m p_(j) / j); reject where adj <= q. Controls the
    false discovery rate for independent (or positively dependent) tests."""
    values = _check_p_values(p_values)
    m = values.size
    order = np.argsort(values, kind="stable")
    adjusted = np.empty(m)
    running = 1.0
    for rank in range(m - 1, -1, -1):
        index = order[rank]
        running = min(running, m * values[index] / (rank + 1))
        adjusted[index] = running
    return adjusted.tolist()


def adjust(p_values: Sequence[float], correction: str) -> list[float]:
    """Adjusted p-values by ``correction``: ``holm``, ``bh`` or ``none``."""
    if correction == "holm":
        return holm(p_values)
    if correction == "bh":
        return benjamini_hochberg(p_values)
    if correction == "none":
        unadjusted: list[float] = _check_p_values(p_values).tolist()  # a 1-d float64 array's list
        return unadjusted
    raise ValueError(f"correction must be one of {list(CORRECTIONS)}, got {correction!r}")
