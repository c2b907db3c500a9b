"""Paired tests, effect sizes and corrections: textbook values worked out in the comments, scipy as
the oracle, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from viking_eval.measures.corrections import adjust, benjamini_hochberg, bootstrap_interval, holm
from viking_eval.measures.paired_tests import (
    cohens_dz,
    paired_t_test,
    permutation_test,
    rank_biserial,
    wilcoxon_test,
)
from viking_eval.measures.significance import SignificanceSettings, compare_with_baseline

# Student's sleep data (Cushny & Peebles 1905, analysed in "Student" 1908; R's `sleep`): extra
# hours of sleep of ten patients under two drugs. R: t.test(extra ~ group, data = sleep,
# paired = TRUE) gives t = -4.0621, df = 9, p-value = 0.002833.
SLEEP_DRUG_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_DRUG_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]
# differences drug 1 - drug 2: -1.2 -2.4 -1.3 -1.3 0.0 -1.0 -1.8 -0.8 -4.6 -1.4; mean -1.58


def test_t_test_reproduces_students_sleep_data() -> None:
    result = paired_t_test(SLEEP_DRUG_1, SLEEP_DRUG_2)
    assert result.statistic == pytest.approx(-4.0621, abs=5e-5)
    assert result.p_value == pytest.approx(0.002833, abs=5e-7)
    # d_z = mean / sd = -1.58 / 1.229995 (sd of the differences with n - 1)
    assert result.effect_size == pytest.approx(-1.58 / 1.229995, rel=1e-5)
    assert (result.test, result.effect_size_name, result.n) == ("t-test", "d_z", 10)


def test_t_test_by_hand_and_against_scipy() -> None:
    # d = 1, 1, 2, 1, 2: mean 1.4, sd = sqrt((3 * 0.16 + 2 * 0.36) / 4) = sqrt(0.3),
    # t = 1.4 / sqrt(0.3 / 5) = 5.7155, 4 degrees of freedom
    a, b = [5, 7, 8, 6, 9], [4, 6, 6, 5, 7]
    result = paired_t_test(a, b)
    assert result.statistic == pytest.approx(1.4 / math.sqrt(0.3 / 5), rel=1e-12)
    assert result.p_value == pytest.approx(2 * stats.t.sf(1.4 / math.sqrt(0.3 / 5), 4), rel=1e-10)
    assert result.effect_size == pytest.approx(1.4 / math.sqrt(0.3), rel=1e-12)
    rng = np.random.default_rng(3)
    x, y = rng.random(40), rng.random(40)
    reference = stats.ttest_rel(x, y)
    mine = paired_t_test(x, y)
    assert mine.statistic == pytest.approx(reference.statistic, rel=1e-12)
    assert mine.p_value == pytest.approx(reference.pvalue, rel=1e-12)


def test_t_test_degenerate_differences() -> None:
    same = paired_t_test([0.1, 0.2, 0.3], [0.1, 0.2, 0.3])
    assert (same.statistic, same.p_value, same.effect_size) == (0.0, 1.0, 0.0)  # scipy says nan
    shifted = paired_t_test([0.5, 0.75, 1.0], [0.25, 0.5, 0.75])  # every difference exactly 0.25
    assert shifted.p_value == 0.0 and shifted.statistic == math.inf and shifted.effect_size == math.inf
    # 0.6 - 0.35 is 0.24999999999999997: rounding, not variance (scipy reports t = 1.8e15)
    rounded = paired_t_test([0.5, 0.6, 0.7], [0.25, 0.35, 0.45])
    assert rounded.p_value == 0.0 and rounded.effect_size == math.inf


def test_wilcoxon_by_hand() -> None:
    # d = 1.5, -0.5, 2, 3, -1, 4; ranks of |d|: 0.5->1, 1->2, 1.5->3, 2->4, 3->5, 4->6.
    # W+ = 3+4+5+6 = 18, W- = 1+2 = 3. Exact null: the 64 sign patterns equally likely; subsets of
    # ranks summing to <= 3: {}, {1}, {2}, {3}, {1,2} -> P(W- <= 3) = 5/64, two-sided 10/64.
    # Rank-biserial r = (18 - 3) / 21.
    result = wilcoxon_test([1.5, -0.5, 2, 3, -1, 4], [0, 0, 0, 0, 0, 0])
    assert result.statistic == 3.0
    assert result.p_value == pytest.approx(10 / 64, rel=1e-12)
    assert result.effect_size == pytest.approx(15 / 21, rel=1e-12)
    assert result.effect_size_name == "rank_biserial"


def test_wilcoxon_sleep_data_drops_the_zero() -> None:
    # 9 non-zero differences, all negative: W+ = 0; P(all nine signs negative) = 1/2^9,
    # two-sided 2/512. Every non-zero difference favours drug 2: r = -1.
    result = wilcoxon_test(SLEEP_DRUG_1, SLEEP_DRUG_2)
    assert result.statistic == 0.0
    assert result.p_value == pytest.approx(2 / 512, rel=1e-12)
    assert result.effect_size == -1.0


def test_wilcoxon_agrees_with_scipy_and_handles_all_ties() -> None:
    rng = np.random.default_rng(5)
    x = rng.random(60)
    y = x + rng.normal(0.05, 0.2, 60)
    y[:10] = x[:10]  # zero differences, as IR runs have
    reference = stats.wilcoxon(x - y)
    mine = wilcoxon_test(x, y)
    assert mine.statistic == reference.statistic and mine.p_value == pytest.approx(
        reference.pvalue, rel=1e-12
    )
    same = wilcoxon_test([0.3, 0.4], [0.3, 0.4])
    assert (same.p_value, same.effect_size) == (1.0, 0.0)


def test_rank_biserial_with_tied_ranks() -> None:
    # |d| = 1, 1, 2: average ranks 1.5, 1.5, 3; signs +, -, +: (4.5 - 1.5) / 6 = 0.5
    assert rank_biserial(np.array([1.0, -1.0, 2.0, 0.0])) == pytest.approx(0.5)


def test_permutation_exact_by_hand() -> None:
    # d = 0.2, 0.5, -0.1, 0.4: sum 1.0 out of sum |d| = 1.2; a sign pattern reaches |sum| >= 1.0
    # only by flipping nothing or just the 0.1 (and the two mirror images): 4 of 16 patterns.
    result = permutation_test([0.2, 0.5, -0.1, 0.4], [0, 0, 0, 0])
    assert result.p_value == pytest.approx(4 / 16, rel=1e-12)
    assert result.statistic == pytest.approx(0.25)
    # sleep data: |mean| 1.58 only with the nine non-zero signs all kept or all flipped, times the
    # two signs of the zero: 4 of 1024
    sleep = permutation_test(SLEEP_DRUG_1, SLEEP_DRUG_2)
    assert sleep.p_value == pytest.approx(4 / 1024, rel=1e-12)
    assert sleep.effect_size == pytest.approx(cohens_dz(np.subtract(SLEEP_DRUG_1, SLEEP_DRUG_2)))


def test_permutation_agrees_with_scipy() -> None:
    rng = np.random.default_rng(11)
    small_a, small_b = rng.random(12), rng.random(12)
    exact = stats.permutation_test(
        (small_a - small_b,), np.mean, permutation_type="samples", n_resamples=np.inf
    )
    assert permutation_test(small_a, small_b, permutations=4096).p_value == pytest.approx(
        exact.pvalue, rel=1e-9
    )
    a = rng.random(200)
    b = a + rng.normal(0.02, 0.15, 200)
    reference = stats.permutation_test(
        (a - b,), np.mean, permutation_type="samples", n_resamples=20_000, rng=0
    ).pvalue
    mine = permutation_test(a, b, permutations=20_000, seed=1).p_value
    standard_error = math.sqrt(reference * (1 - reference) / 20_000)
    assert abs(mine - reference) < 5 * standard_error + 1e-4
    assert 1e-3 < mine < 0.9  # neither extreme: the two have something to agree on


def test_permutation_is_seeded() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.random(50), rng.random(50)
    first = permutation_test(a, b, permutations=2000, seed=7)
    assert permutation_test(a, b, permutations=2000, seed=7) == first
    assert permutation_test(a, b, permutations=2000, seed=8).p_value != first.p_value
    # never 0 with Monte Carlo: the observed pattern counts
    far = permutation_test(np.ones(40), np.zeros(40) + np.linspace(0, 0.1, 40), permutations=500)
    assert far.p_value == pytest.approx(1 / 501)


def test_bootstrap_interval_matches_the_t_interval_on_normal_data() -> None:
    rng = np.random.default_rng(4)
    differences = rng.normal(0.1, 0.3, 400)
    interval = bootstrap_interval(differences, np.zeros(400), n_resamples=4000, seed=0)
    half_width = stats.t.ppf(0.975, 399) * differences.std(ddof=1) / math.sqrt(400)
    assert interval.low == pytest.approx(differences.mean() - half_width, abs=0.1 * half_width)
    assert interval.high == pytest.approx(differences.mean() + half_width, abs=0.1 * half_width)
    assert interval.low < interval.mean_difference < interval.high
    again = bootstrap_interval(differences, np.zeros(400), n_resamples=4000, seed=0)
    assert again == interval
    percentile = bootstrap_interval(differences, np.zeros(400), n_resamples=4000, method="percentile")
    assert percentile.method == "percentile" and percentile.low < percentile.high


def test_bootstrap_interval_of_constant_differences_is_the_constant() -> None:
    interval = bootstrap_interval([0.5, 0.75, 1.0], [0.25, 0.5, 0.75])
    assert (interval.low, interval.mean_difference, interval.high) == (0.25, 0.25, 0.25)
    rounded = bootstrap_interval([0.5, 0.6, 0.7], [0.25, 0.35, 0.45])  # differences equal up to 1 ulp
    assert rounded.low == rounded.high == pytest.approx(0.25, abs=1e-15)


def test_holm_and_bh_worked_example() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm, sorted 0.005, 0.01, 0.03, 0.04: x4 = 0.02, x3 = 0.03, x2 = 0.06, x1 = 0.04 -> running
    # max 0.02, 0.03, 0.06, 0.06; back in input order:
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: m/j p_(j) = 4 * 0.005, 2 * 0.01, 4/3 * 0.03, 1 * 0.04 = 0.02, 0.02, 0.04, 0.04; running
    # min from the largest: 0.04, 0.04, 0.02, 0.02
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust(p, "none") == p


def test_benjamini_hochberg_1995_example() -> None:
    # the 15 p-values of Benjamini & Hochberg (1995), section 4: at q = 0.05 BH rejects 4
    # (p_(4) = 0.0095 <= 4/15 * 0.05 = 0.0133, p_(5) = 0.0201 > 0.0167, ...) and the
    # Bonferroni-type Holm procedure rejects 3 (0.0095 * 12 = 0.114 > 0.05)
    p = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262, 0.5719,
         0.6528, 0.7590, 1.000]  # fmt: skip
    assert sum(value <= 0.05 for value in benjamini_hochberg(p)) == 4
    assert sum(value <= 0.05 for value in holm(p)) == 3
    assert holm(p)[:4] == pytest.approx([0.0015, 0.0056, 0.0247, 0.114])
    np.testing.assert_allclose(benjamini_hochberg(p), stats.false_discovery_control(p), rtol=1e-12)


def test_bh_agrees_with_scipy_on_random_p_values() -> None:
    p = np.random.default_rng(9).random(57) ** 3
    np.testing.assert_allclose(benjamini_hochberg(p.tolist()), stats.false_discovery_control(p), rtol=1e-12)
    holm_values = np.array(holm(p.tolist()))
    assert np.all(holm_values >= p) and np.all(holm_values <= 1)


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([0.1, 0.2], [0.1], "one value per query"),
        ([0.1], [0.2], "at least 2 queries"),
        ([0.1, float("nan")], [0.2, 0.3], "a[1] is not finite"),
        ([0.1, 0.2], [0.2, float("inf")], "b[1] is not finite"),
    ],
)
def test_bad_paired_input_is_named(a: list[float], b: list[float], message: str) -> None:
    for test in (paired_t_test, wilcoxon_test, permutation_test, bootstrap_interval):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            test(a, b)


def test_bad_p_values_and_settings() -> None:
    with pytest.raises(ValueError, match=r"p-value 1 is 1.5; p-values must be in \[0, 1\]"):
        holm([0.1, 1.5])
    with pytest.raises(ValueError, match="p-value 0 is nan"):
        benjamini_hochberg([float("nan")])
    with pytest.raises(ValueError, match=r"correction must be one of \['holm', 'bh', 'none'\], got 'bonf'"):
        adjust([0.1], "bonf")
    with pytest.raises(
        ValueError, match=r"significance.test must be one of \['t-test', 'wilcoxon', 'permutation'\]"
    ):
        SignificanceSettings(test="sign")
    with pytest.raises(ValueError, match=r"significance.alpha must be in \(0, 0.5\], got 0.7"):
        SignificanceSettings(alpha=0.7)
    with pytest.raises(ValueError, match=r"significance.permutations must be in \[100, 10000000\], got 5"):
        SignificanceSettings(permutations=5)


def _per_query(
    values: dict[str, list[float]], metric: str = "nDCG@10"
) -> dict[str, dict[str, dict[str, float]]]:
    return {name: {metric: {f"q{i}": v for i, v in enumerate(vals)}} for name, vals in values.items()}


def test_compare_with_baseline_corrects_across_the_report() -> None:
    rng = np.random.default_rng(0)
    base = rng.random(30)
    better = np.clip(base + 0.2 + rng.normal(0, 0.05, 30), 0, 2)
    same = base.copy()
    same[:3] += [0.01, -0.01, 0.02]  # 3 queries change, 27 ties
    report = compare_with_baseline(
        _per_query({"base": base.tolist(), "better": better.tolist(), "same": same.tolist()}),
        "base",
        ["nDCG@10"],
        SignificanceSettings(permutations=1000, bootstrap=1000),
    )
    assert report.baseline == "base" and report.family_size() == 2
    better_t = report.find("better", "nDCG@10")
    same_t = report.find("same", "nDCG@10")
    assert better_t is not None and same_t is not None
    raw = [better_t.p_value, same_t.p_value]
    assert [better_t.p_adjusted, same_t.p_adjusted] == pytest.approx(holm(raw))
    assert better_t.p_value == pytest.approx(stats.ttest_rel(better, base).pvalue)
    assert better_t.significant and report.marker("better", "nDCG@10") == "▲"
    assert not same_t.significant and report.marker("same", "nDCG@10") == ""
    assert (same_t.wins, same_t.ties, same_t.losses) == (2, 27, 1)
    assert same_t.mean_difference == pytest.approx(0.02 / 30)
    assert {c.test for c in report.comparisons} == {"t-test", "wilcoxon", "permutation"}
    worse = compare_with_baseline(
        _per_query({"base": better.tolist(), "worse": base.tolist()}),
        "base",
        ["nDCG@10"],
        SignificanceSettings(),
    )
    assert worse.marker("worse", "nDCG@10") == "▼"


def test_compare_with_baseline_rejects_different_query_sets() -> None:
    per_query = _per_query({"base": [0.1, 0.2, 0.3], "other": [0.2, 0.3, 0.4]})
    del per_query["other"]["nDCG@10"]["q2"]
    per_query["other"]["nDCG@10"]["q9"] = 0.5
    with pytest.raises(
        ValueError,
        match=r"query sets differ .* 1 only in the first, e.g. \['q9'\]; 1 only in the baseline, e.g. \['q2'\]",
    ):
        compare_with_baseline(per_query, "base", ["nDCG@10"], SignificanceSettings())
    with pytest.raises(ValueError, match=r"baseline 'nope' is not among the systems \['base', 'other'\]"):
        compare_with_baseline(per_query, "nope", ["nDCG@10"], SignificanceSettings())
