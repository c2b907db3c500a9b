"""Paired significance tests on per-query values, effect sizes, and multiple-comparison corrections.

Every test compares two systems evaluated on the *same* queries: ``a[i]`` and ``b[i]`` are the two
systems' scores on query ``i`` and the tested quantity is the difference ``d = a - b`` (positive:
``a`` is better on a metric where higher is better). Every test returns its effect size.

- ``paired_t_test``: Student's paired t-test (``scipy.stats.ttest_rel``); effect size Cohen's d_z.
- ``wilcoxon_test``: Wilcoxon signed-rank test (``scipy.stats.wilcoxon``); effect size the
  matched-pairs rank-biserial correlation.
- ``permutation_test``: Fisher's paired randomisation (sign-flip) test, exact for small n, else
  Monte Carlo with a seeded numpy RNG; effect size Cohen's d_z.
- ``bootstrap_interval``: bootstrap confidence interval of the mean difference
  (``scipy.stats.bootstrap``, BCa by default).
- ``holm``, ``benjamini_hochberg``: adjusted p-values across all comparisons of a report.
- ``compare_with_baseline``: every other system against one baseline, on every metric.

IR background: Smucker, Allan & Carterette, "A comparison of statistical significance tests for
information retrieval evaluation", CIKM 2007 (the t-test and the randomisation test agree; the
Wilcoxon and sign tests disagree with both more often).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from viking_eval.progress import progress_bar

TestName = Literal["t-test", "wilcoxon", "permutation"]
CorrectionName = Literal["holm", "bh", "none"]
BootstrapMethod = Literal["BCa", "percentile", "basic"]

TESTS: tuple[str, ...] = ("t-test", "wilcoxon", "permutation")
TEST_NAMES = {
    "t-test": "paired t-test",
    "wilcoxon": "Wilcoxon signed-rank test",
    "permutation": "randomisation test",
}
CORRECTIONS: tuple[str, ...] = ("holm", "bh", "none")
BOOTSTRAP_METHODS: tuple[str, ...] = ("BCa", "percentile", "basic")

# per-query differences at most this far from 0 count as ties (win/tie/loss counts only; the
# tests use the differences as they are)
TIE_TOLERANCE = 1e-12


@dataclass(frozen=True)
class SignificanceSettings:
    """How runs are compared (``run.significance``).

    ``test``: the test behind the report's markers and the gate's decisions (every test is
    computed and written to significance.csv); ``correction``: across all comparisons of a report
    (``holm``: Holm 1979, controls the family-wise error; ``bh``: Benjamini-Hochberg 1995,
    controls the false discovery rate; ``none``); ``alpha`` in (0, 0.5]; ``permutations``:
    randomisation-test resamples in [100, 10^7] (exact enumeration when 2^n is not larger);
    ``bootstrap``: resamples for the confidence interval in [100, 10^7]; ``confidence`` in
    (0.5, 1); ``seed``: the RNG seed of the randomisation test and the bootstrap."""

    test: str = "t-test"
    correction: str = "holm"
    alpha: float = 0.05
    permutations: int = 10_000
    bootstrap: int = 10_000
    bootstrap_method: str = "BCa"
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if self.test not in TESTS:
            raise ValueError(f"significance.test must be one of {list(TESTS)}, got {self.test!r}")
        if self.correction not in CORRECTIONS:
            raise ValueError(
                f"significance.correction must be one of {list(CORRECTIONS)}, got {self.correction!r}"
            )
        if not 0.0 < self.alpha <= 0.5:
            raise ValueError(f"significance.alpha must be in (0, 0.5], got {self.alpha}")
        if not 100 <= self.permutations <= 10_000_000:
            raise ValueError(f"significance.permutations must be in [100, 10000000], got {self.permutations}")
        if not 100 <= self.bootstrap <= 10_000_000:
            raise ValueError(f"significance.bootstrap must be in [100, 10000000], got {self.bootstrap}")
        if self.bootstrap_method not in BOOTSTRAP_METHODS:
            raise ValueError(
                f"significance.bootstrap_method must be one of {list(BOOTSTRAP_METHODS)}, "
                f"got {self.bootstrap_method!r}"
            )
        if not 0.5 < self.confidence < 1.0:
            raise ValueError(f"significance.confidence must be in (0.5, 1), got {self.confidence}")


@dataclass(frozen=True)
class TestResult:
    """One paired test: its statistic, two-sided p-value and effect size (name says which)."""

    test: str
    statistic: float
    p_value: float
    effect_size: float
    effect_size_name: str
    n: int


@dataclass(frozen=True)
class Interval:
    """A bootstrap confidence interval of the mean difference."""

    mean_difference: float
    low: float
    high: float
    confidence: float
    method: str
    n_resamples: int


def _differences(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> np.ndarray:
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
    differences = _differences(a, b)
    dz = cohens_dz(differences)
    if not np.any(differences):
        return TestResult("t-test", 0.0, 1.0, 0.0, "d_z", differences.size)
    if math.isinf(dz):
        return TestResult("t-test", dz, 0.0, dz, "d_z", differences.size)
    result = stats.ttest_rel(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return TestResult("t-test", float(result.statistic), float(result.pvalue), dz, "d_z", differences.size)


def rank_biserial(differences: np.ndarray) -> float:
    """Matched-pairs rank-biserial correlation r = (W+ - W-) / (W+ + W-) over the non-zero
    differences ranked by absolute value with average ranks for ties (Kerby 2014, "The simple
    difference formula"); in [-1, 1], 0 when every difference is 0."""
    nonzero = differences[differences != 0.0]
    if nonzero.size == 0:
        return 0.0
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
    differences = _differences(a, b)
    effect = rank_biserial(differences)
    if not np.any(differences):
        return TestResult("wilcoxon", 0.0, 1.0, 0.0, "rank_biserial", differences.size)
    result = stats.wilcoxon(differences, zero_method="wilcox")
    return TestResult(
        "wilcoxon", float(result.statistic), float(result.pvalue), effect, "rank_biserial", differences.size
    )


def _sign_flip_means(differences: np.ndarray, signs: np.ndarray) -> np.ndarray:
    return (signs.astype(np.float64) @ differences) / differences.size


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
    differences = _differences(a, b)
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
    differences = _differences(a, b)
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"method must be one of {list(BOOTSTRAP_METHODS)}, got {method!r}")
    mean = float(np.mean(differences))
    if all_equal(differences):
        return Interval(mean, mean, mean, confidence, method, 0)
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
        return _check_p_values(p_values).tolist()
    raise ValueError(f"correction must be one of {list(CORRECTIONS)}, got {correction!r}")


def run_test(
    test: str,
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    settings: SignificanceSettings,
) -> TestResult:
    """The named paired test with the settings' resamples and seed."""
    if test == "t-test":
        return paired_t_test(a, b)
    if test == "wilcoxon":
        return wilcoxon_test(a, b)
    if test == "permutation":
        return permutation_test(a, b, permutations=settings.permutations, seed=settings.seed)
    raise ValueError(f"test must be one of {list(TESTS)}, got {test!r}")


@dataclass(frozen=True)
class Comparison:
    """One system against the baseline on one metric with one test (a row of significance.csv).
    ``mean_difference`` = mean(system) - mean(baseline); wins/ties/losses count queries where the
    system scores higher / the same / lower."""

    retriever: str
    baseline: str
    metric: str
    test: str
    n_queries: int
    mean: float
    baseline_mean: float
    mean_difference: float
    ci_low: float
    ci_high: float
    wins: int
    ties: int
    losses: int
    statistic: float
    p_value: float
    p_adjusted: float
    effect_size: float
    effect_size_name: str
    significant: bool


@dataclass(frozen=True)
class SignificanceReport:
    """All comparisons of a run against its baseline, corrected per test across the report."""

    baseline: str
    settings: SignificanceSettings
    comparisons: tuple[Comparison, ...]

    def find(self, retriever: str, metric: str, test: str | None = None) -> Comparison | None:
        """The comparison of ``retriever`` on ``metric`` by ``test`` (default: the primary test)."""
        wanted = test or self.settings.test
        for comparison in self.comparisons:
            if (
                comparison.retriever == retriever
                and comparison.metric == metric
                and comparison.test == wanted
            ):
                return comparison
        return None

    def marker(self, retriever: str, metric: str) -> str:
        """``▲`` significantly better than the baseline, ``▼`` significantly worse, else empty
        (primary test, after correction)."""
        comparison = self.find(retriever, metric)
        if comparison is None or not comparison.significant:
            return ""
        return "▲" if comparison.mean_difference > 0 else "▼"

    def legend(self) -> str:
        return (
            f"▲/▼: significantly better/worse than {self.baseline} ({TEST_NAMES[self.settings.test]}, "
            f"{self.settings.correction} correction over {self.family_size()} comparisons, "
            f"alpha {self.settings.alpha})"
        )

    def family_size(self) -> int:
        return sum(1 for comparison in self.comparisons if comparison.test == self.settings.test)


def win_tie_loss(differences: np.ndarray) -> tuple[int, int, int]:
    """Queries where the difference is > 0, within TIE_TOLERANCE of 0, < 0."""
    ties = int(np.count_nonzero(np.abs(differences) <= TIE_TOLERANCE))
    wins = int(np.count_nonzero(differences > TIE_TOLERANCE))
    return wins, ties, differences.size - wins - ties


def aligned(
    values: Mapping[str, float], baseline_values: Mapping[str, float], what: str
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Both systems' values on the same queries, in query id order; ValueError naming the
    queries only one side has."""
    only_here = sorted(set(values) - set(baseline_values))
    only_there = sorted(set(baseline_values) - set(values))
    if only_here or only_there:
        raise ValueError(
            f"{what}: the query sets differ ({len(values)} vs {len(baseline_values)} queries; "
            f"{len(only_here)} only in the first, e.g. {only_here[:3]}; {len(only_there)} only in the "
            f"baseline, e.g. {only_there[:3]}); paired tests need the same queries on both sides"
        )
    query_ids = sorted(values)
    return (
        query_ids,
        np.array([values[qid] for qid in query_ids], dtype=np.float64),
        np.array([baseline_values[qid] for qid in query_ids], dtype=np.float64),
    )


def compare_with_baseline(
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]],
    baseline: str,
    metrics: Sequence[str],
    settings: SignificanceSettings,
    *,
    show_progress: bool | None = False,
) -> SignificanceReport:
    """Compare every system in ``per_query`` (system -> metric -> query id -> value) except
    ``baseline`` with ``baseline`` on every metric, with every test; p-values adjusted per test
    across all (system, metric) comparisons. Fewer than 2 queries: no comparisons. A progress
    bar counts the (system, metric) comparisons (``show_progress``: True, False, or None for a
    terminal only)."""
    if baseline not in per_query:
        raise ValueError(f"baseline {baseline!r} is not among the systems {sorted(per_query)}")
    unadjusted: list[Comparison] = []
    pairs = [(name, metric) for name in per_query if name != baseline for metric in metrics]
    bar = progress_bar(
        total=len(pairs),
        desc=f"significance vs {baseline}: {len(pairs)} comparisons ({settings.bootstrap:,} resamples)",
        unit="cmp",
        show=show_progress if pairs else False,
    )
    with bar:
        for name, metric in pairs:
            bar.update()
            query_ids, mine, theirs = aligned(
                per_query[name][metric], per_query[baseline][metric], f"{name} vs {baseline} on {metric}"
            )
            if len(query_ids) < 2:
                continue
            interval = bootstrap_interval(
                mine,
                theirs,
                confidence=settings.confidence,
                n_resamples=settings.bootstrap,
                method=settings.bootstrap_method,
                seed=settings.seed,
            )
            wins, ties, losses = win_tie_loss(mine - theirs)
            for test in TESTS:
                result = run_test(test, mine, theirs, settings)
                unadjusted.append(
                    Comparison(
                        retriever=name,
                        baseline=baseline,
                        metric=metric,
                        test=test,
                        n_queries=len(query_ids),
                        mean=float(np.mean(mine)),
                        baseline_mean=float(np.mean(theirs)),
                        mean_difference=interval.mean_difference,
                        ci_low=interval.low,
                        ci_high=interval.high,
                        wins=wins,
                        ties=ties,
                        losses=losses,
                        statistic=result.statistic,
                        p_value=result.p_value,
                        p_adjusted=math.nan,
                        effect_size=result.effect_size,
                        effect_size_name=result.effect_size_name,
                        significant=False,
                    )
                )
    adjusted_by_row: dict[int, float] = {}
    for test in TESTS:
        family = [index for index, comparison in enumerate(unadjusted) if comparison.test == test]
        adjusted = adjust([unadjusted[index].p_value for index in family], settings.correction)
        adjusted_by_row.update(zip(family, adjusted, strict=True))
    comparisons = [
        dataclasses.replace(
            comparison,
            p_adjusted=adjusted_by_row[index],
            significant=adjusted_by_row[index] <= settings.alpha and comparison.mean_difference != 0.0,
        )
        for index, comparison in enumerate(unadjusted)
    ]
    return SignificanceReport(baseline=baseline, settings=settings, comparisons=tuple(comparisons))


CSV_COLUMNS = [
    "retriever",
    "baseline",
    "metric",
    "test",
    "n_queries",
    "mean",
    "baseline_mean",
    "mean_difference",
    "ci_low",
    "ci_high",
    "wins",
    "ties",
    "losses",
    "statistic",
    "p_value",
    "p_adjusted",
    "effect_size",
    "effect_size_name",
    "significant",
]


def csv_rows(report: SignificanceReport) -> list[list[object]]:
    """significance.csv rows, in CSV_COLUMNS order."""
    return [[getattr(comparison, column) for column in CSV_COLUMNS] for comparison in report.comparisons]
