"""Paired significance tests on per-query values, each with its effect size.

Every test compares two systems evaluated on the *same* queries: ``a[i]`` and ``b[i]`` are the two
systems' scores on query ``i`` and the tested quantity is the difference ``d = a - b`` (positive:
``a`` is better on a metric where higher is better). Every test returns its effect size.

- ``paired_t_test``: Student's paired t-test (``scipy.stats.ttest_rel``); effect size Cohen's d_z.
- ``wilcoxon_test``: Wilcoxon signed-rank test (``scipy.stats.wilcoxon``); effect size the
  matched-pairs rank-biserial correlation.
- ``permutation_test``: Fisher's paired randomisation (sign-flip) test, exact for small n, else
  Monte Carlo with a seeded numpy RNG; effect size Cohen's d_z.

IR background: Smucker, Allan & Carterette, "A comparison of statistical significance tests for
information retrieval evaluation", CIKM 2007 (the t-test and the randomisation test agree; the
Wilcoxon and sign tests disagree with both more often).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

TestName = Literal["t-test", "wilcoxon", "permutation"]

TESTS: tuple[str, ...] = ("t-test", "wilcoxon", "permutation")
TEST_NAMES = {
    "t-test": "paired t-test",
    "wilcoxon": "Wilcoxon signed-rank test",
    "permutation": "randomisation test",
}


@dataclass(frozen=True)
class TestResult:
    """One paired test: its statistic, two-sided p-value and effect size (name says which)."""

    test: str
    statistic: float
    p_value: float
    effect_size: float
    effect_size_name: str
    n: int


def paired_differences(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> np.ndarray:
    """``a - b`` as float64, after checking both are equally long, finite and n >= 2."""
    first = np.asarray(a, dtype=np.float64)
    second = np.asarray(b, dtype=np.float64)
    if first.ndim != 1 or second.ndim != 1:
        raise ValueError(f"paired values must be 1-d sequences, got shapes {first.shape} and {second.shape}")
    if first.shape != second.shape:
        raise ValueError(
            f"paired values must have one value per query on both sides, got {first.size} and {second.size}"
        )
    if first.size < 2:
        raise ValueError(f"a paired test needs at least 2 queries, got {first.size}")
    for name, values in (("a", first), ("b", second)):
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise ValueError(
                f"{name}[{bad[0]}] is not finite ({values[bad[0]]}); per-query values must be finite"
            )
    return first - second


def all_equal(differences: np.ndarray) -> bool:
    """True when the differences are equal up to float rounding (0.6 - 0.35 and 0.5 - 0.25 differ
    in the last bit; their spread is no evidence of variance)."""
    scale = max(1.0, float(np.max(np.abs(differences))))
    return float(np.ptp(differences)) <= 1e-12 * scale


def cohens_dz(differences: np.ndarray) -> float:
    """Cohen's d_z = mean(d) / sd(d) (sd with n - 1): the paired-samples effect size
    (Cohen 1988; Lakens 2013, "Calculating and reporting effect sizes", eq. 6). 0 when every
    difference is 0, +-inf when they are all equal and non-zero."""
    mean = float(np.mean(differences))
    if all_equal(differences):
        return 0.0 if not np.any(differences) else math.copysign(math.inf, mean)
    return mean / float(np.std(differences, ddof=1))


def paired_t_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TestResult:
    """Student's paired t-test of mean(a - b) = 0, two-sided (``scipy.stats.ttest_rel``):
    t = mean(d) / (sd(d) / sqrt(n)), n - 1 degrees of freedom.

    Assumes the differences are independent across queries and their mean is close to normal
    (the central limit theorem makes this hold for a few dozen queries even though per-query
    metrics are bounded and skewed). Effect size: Cohen's d_z. All differences 0: t = 0, p = 1;
    all equal and non-zero: t = +-inf, p = 0."""
    differences = paired_differences(a, b)
    dz = cohens_dz(differences)
    if not np.any(differences):
        return TestResult("t-test", 0.0, 1.0, 0.0, "d_z", differences.size)
    if math.isinf(dz):
        return TestResult("t-test", dz, 0.0, dz, "d_z", differences.size)
    from scipy import stats  # here, not at import: scipy.stats takes a second to load

    result = stats.ttest_rel(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return TestResult("t-test", float(result.statistic), float(result.pvalue), dz, "d_z", differences.size)


def rank_biserial(differences: np.ndarray) -> float:
    """Matched-pairs rank-biserial correlation r = (W+ - W-) / (W+ + W-) over the non-zero
    differences ranked by absolute value with average ranks for ties (Kerby 2014, "The simple
    difference formula"); in [-1, 1], 0 when every difference is 0."""
    nonzero = differences[differences != 0.0]
    if nonzero.size == 0:
        return 0.0
    from scipy import stats  # here, not at import: scipy.stats takes a second to load

    ranks = stats.rankdata(np.abs(nonzero))
    positive = float(ranks[nonzero > 0].sum())
    negative = float(ranks[nonzero < 0].sum())
    return (positive - negative) / (positive + negative)


def wilcoxon_test(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TestResult:
    """Wilcoxon signed-rank test of a median difference of 0, two-sided (``scipy.stats.wilcoxon``,
    zero differences dropped as Wilcoxon 1945 did; exact null distribution for small samples
    without ties, else the normal approximation).

    Assumes the differences are independent and symmetric about their median. Statistic:
    min(W+, W-) as scipy reports it. Effect size: the matched-pairs rank-biserial correlation.
    All differences 0: statistic 0, p = 1."""
    differences = paired_differences(a, b)
    effect = rank_biserial(differences)
    if not np.any(differences):
        return TestResult("wilcoxon", 0.0, 1.0, 0.0, "rank_biserial", differences.size)
    from scipy import stats  # here, not at import: scipy.stats takes a second to load

    result = stats.wilcoxon(differences, zero_method="wilcox")
    return TestResult(
        "wilcoxon", float(result.statistic), float(result.pvalue), effect, "rank_biserial", differences.size
    )


def _sign_flip_means(differences: np.ndarray, signs: np.ndarray) -> np.ndarray:
    means: np.ndarray = (signs.astype(np.float64) @ differences) / differences.size
    return means


def permutation_test(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    permutations: int = 10_000,
    seed: int = 0,
    batch: int = 1000,
) -> TestResult:
    """Fisher's paired randomisation test, two-sided, statistic mean(a - b).

    Under the null hypothesis the two systems are exchangeable on every query, so each difference
    keeps or flips its sign with probability 1/2. p = the share of the 2^n sign assignments whose
    |mean| is at least the observed |mean| (Smucker et al. 2007's test). Exact enumeration when
    2^n <= ``permutations``; otherwise ``permutations`` random assignments from
    ``numpy.random.default_rng(seed)`` and p = (count + 1) / (permutations + 1) (Phipson & Smyth
    2010: the observed assignment counts as one, so p is never 0).

    Assumes only that queries are independent. scipy.stats.permutation_test(..., permutation_type=
    "samples") computes the same test (the tests check this), about 4x slower on 2,000 queries;
    the runner runs this for every retriever and metric of every sweep job. Effect size: d_z."""
    differences = paired_differences(a, b)
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    n = differences.size
    dz = cohens_dz(differences)
    observed = float(_sign_flip_means(differences, np.ones((1, n), dtype=np.int8))[0])
    # sums of the same numbers in another order may differ in the last bits
    threshold = abs(observed) - 1e-12 * max(1.0, abs(observed))
    if n < 63 and 2**n <= permutations:
        total = 2**n
        count = 0
        bits = np.arange(n, dtype=np.int64)
        for start in range(0, total, batch):
            patterns = np.arange(start, min(start + batch, total), dtype=np.int64)
            signs = 1 - 2 * ((patterns[:, None] >> bits) & 1).astype(np.int8)
            count += int(np.count_nonzero(np.abs(_sign_flip_means(differences, signs)) >= threshold))
        p_value = count / total
    else:
        rng = np.random.default_rng(seed)
        count = 0
        for start in range(0, permutations, batch):
            size = min(batch, permutations - start)
            signs = 1 - 2 * rng.integers(0, 2, size=(size, n), dtype=np.int8)
            count += int(np.count_nonzero(np.abs(_sign_flip_means(differences, signs)) >= threshold))
        p_value = (count + 1) / (permutations + 1)
    return TestResult("permutation", observed, min(1.0, p_value), dz, "d_z", n)
