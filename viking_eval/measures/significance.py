"""How runs are compared (``run.significance``) and the comparison of every system with a
baseline on every metric, with every paired test and a bootstrap interval, p-values adjusted per
test across the report (the significance.csv rows).

The tests are in :mod:`viking_eval.measures.paired_tests`; corrections and bootstrap intervals in
:mod:`viking_eval.measures.corrections`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from viking_eval.measures.corrections import (
    BOOTSTRAP_METHODS,
    CORRECTIONS,
    adjust,
    bootstrap_interval,
)
from viking_eval.measures.paired_tests import (
    TEST_NAMES,
    TESTS,
    TestResult,
    paired_t_test,
    permutation_test,
    wilcoxon_test,
)
from viking_eval.progress import progress_bar

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
