"""The gate's verdicts: one per metric (or latency ratio) of one retriever in one check.

Verdicts on a metric, with d = observed - expected:

- ``OK``: |d| <= tolerance.
- ``IMPROVED``: d > tolerance (update the baseline: ``python -m viking_eval.gate record <file>``).
- ``OKISH``: d < -tolerance but not significantly worse: the paired test (``significance.test``)
  of the per-query values against the stored ones, p-values adjusted across every metric check of
  the gate (``significance.correction``), gives p_adj > alpha.
- ``FAIL``: d < -tolerance and significantly worse; or d < -tolerance with no per-query values to
  test (a drop that cannot be shown to be noise fails).

Latency is gated only as a ratio to a reference retriever measured in the same process on the same
queries (``search_p50_ms`` of a retriever over that of exact dense search, say), never as a time:
``FAIL`` above expected x (1 + tolerance), ``IMPROVED`` below expected / (1 + tolerance), else ``OK``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from viking_eval.gate.baseline import GateError
from viking_eval.measures.corrections import adjust
from viking_eval.measures.paired_tests import TEST_NAMES
from viking_eval.measures.significance import SignificanceSettings, aligned, run_test
from viking_eval.results import run_folder

STATUSES = ("OK", "OKISH", "FAIL", "IMPROVED")


def per_query_mean(values: Mapping[str, float]) -> float:
    """The mean of per-query values (NaN for none)."""
    return math.fsum(values.values()) / len(values) if values else math.nan


@dataclass(frozen=True)
class CheckResult:
    """One verdict: a metric (or a latency ratio) of one retriever in one check."""

    status: str
    check: str
    retriever: str
    what: str  # the metric, or "<measure>/<reference>" for latency
    observed: float
    expected: float
    tolerance: float
    p_value: float | None = None
    p_adjusted: float | None = None
    n_queries: int | None = None
    note: str = ""
    kind: str = "metric"  # or "latency": observed and expected are ratios, tolerance relative

    @property
    def is_latency(self) -> bool:
        return self.kind == "latency"

    def line(self) -> str:
        # a name longer than its column still ends in a space (multi_strategy_tuned, locomo-hybrid):
        # lines split into fields on whitespace
        head = f"{self.status:<9}{self.check:<11} {self.retriever:<11} {self.what:<24}"
        if self.is_latency:
            low, high = self.expected / (1 + self.tolerance), self.expected * (1 + self.tolerance)
            body = f"{self.observed:6.2f}x  expected {self.expected:.2f}x (ok in [{low:.2f}, {high:.2f}])"
        else:
            difference = self.observed - self.expected
            shown = 0.0 if abs(difference) < 5e-5 else difference  # no "-0.0000" for rounding noise
            body = f"{self.observed:.4f}  expected {self.expected:.4f} ±{self.tolerance:.4f}  Δ {shown:+.4f}"
            if self.p_adjusted is not None and self.p_value is not None:
                body += f"  p {self.p_value:.2g} (adj. {self.p_adjusted:.2g}, {self.n_queries} queries)"
        return head + body + (f"  {self.note}" if self.note else "")


@dataclass(frozen=True)
class GateReport:
    results: tuple[CheckResult, ...]
    significance: SignificanceSettings
    source: str

    @property
    def passed(self) -> bool:
        return all(result.status != "FAIL" for result in self.results)

    def counts(self) -> dict[str, int]:
        return {status: sum(1 for r in self.results if r.status == status) for status in STATUSES}

    def summary_line(self) -> str:
        counts = self.counts()
        parts = ", ".join(f"{counts[status]} {status}" for status in STATUSES)
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"gate {verdict}: {len(self.results)} checks ({parts}); {TEST_NAMES[self.significance.test]}, "
            f"{self.significance.correction} correction, alpha {self.significance.alpha}; {self.source}"
        )

    def text(self) -> str:
        return "\n".join([*(result.line() for result in self.results), self.summary_line()]) + "\n"

    def write(self, folder: Path) -> None:
        """gate.txt (the printed lines) and gate.csv (one row per verdict)."""
        columns = [f.name for f in dataclasses.fields(CheckResult)]
        rows = [
            columns,
            *([_csv_cell(getattr(result, column)) for column in columns] for result in self.results),
        ]
        run_folder.write_gate_report(folder, self.text(), rows)


def _csv_cell(value: object) -> str:
    if value is None:
        return ""
    text = repr(value) if isinstance(value, float) else str(value)
    return f'"{text}"' if "," in text or '"' in text else text


def metric_status(difference: float, tolerance: float, p_adjusted: float | None, alpha: float) -> str:
    """The verdict on observed - expected (see the module docstring)."""
    slack = 1e-12  # expected values and tolerances are decimals; do not fail on float noise
    if abs(difference) <= tolerance + slack:
        return "OK"
    if difference > 0:
        return "IMPROVED"
    if p_adjusted is not None and p_adjusted > alpha:
        return "OKISH"
    return "FAIL"


def latency_status(ratio: float, expected: float, tolerance: float) -> str:
    if ratio > expected * (1 + tolerance):
        return "FAIL"
    if ratio < expected / (1 + tolerance):
        return "IMPROVED"
    return "OK"


@dataclass(frozen=True)
class MetricComparison:
    """What a metric verdict needs: observed and expected means, and the per-query pairs (or None)."""

    check: str
    retriever: str
    metric: str
    observed: float
    expected: float
    tolerance: float
    current: Mapping[str, float] | None = None
    stored: Mapping[str, float] | None = None


def decide(
    comparisons: Sequence[MetricComparison],
    latency_results: Sequence[CheckResult],
    significance: SignificanceSettings,
    source: str,
) -> GateReport:
    """Paired tests where per-query values exist, adjusted across all of them, then verdicts."""
    tested: list[tuple[int, float, int]] = []  # index, p-value, n
    for index, comparison in enumerate(comparisons):
        if comparison.current is None or comparison.stored is None:
            continue
        try:
            _, current, stored = aligned(
                comparison.current,
                comparison.stored,
                f"{comparison.check}: {comparison.retriever} {comparison.metric}, this run vs the baseline",
            )
        except ValueError as error:
            raise GateError(str(error)) from None
        if current.size < 2:
            continue
        tested.append(
            (index, run_test(significance.test, current, stored, significance).p_value, current.size)
        )
    adjusted = adjust([p for _, p, _ in tested], significance.correction) if tested else []
    by_index = {index: (p, p_adj, n) for (index, p, n), p_adj in zip(tested, adjusted, strict=True)}
    results = []
    for index, comparison in enumerate(comparisons):
        p_value, p_adjusted, n_queries = by_index.get(index, (None, None, None))
        difference = comparison.observed - comparison.expected
        status = metric_status(difference, comparison.tolerance, p_adjusted, significance.alpha)
        note = ""
        if status == "FAIL" and p_adjusted is None:
            note = "(no per-query baseline to test the drop)"
        results.append(
            CheckResult(
                status=status,
                check=comparison.check,
                retriever=comparison.retriever,
                what=comparison.metric,
                observed=comparison.observed,
                expected=comparison.expected,
                tolerance=comparison.tolerance,
                p_value=p_value,
                p_adjusted=p_adjusted,
                n_queries=n_queries,
                note=note,
            )
        )
    return GateReport(
        results=tuple(results) + tuple(latency_results), significance=significance, source=source
    )


def _latency_value(
    latency: Mapping[str, Mapping[str, Any] | None], retriever: str, measure: str, where: str
) -> float:
    entry = latency.get(retriever) or {}
    value = entry.get(measure)
    if not isinstance(value, int | float) or not value > 0:
        raise GateError(
            f"{where}: no positive latency {measure!r} for {retriever!r} (got {value!r}); latency checks "
            "need run.latency.n_queries > 0"
        )
    return float(value)


def latency_ratio(
    latency: Mapping[str, Mapping[str, Any] | None], retriever: str, reference: str, measure: str, where: str
) -> float:
    """``measure`` of ``retriever`` over that of ``reference``, both from one run."""
    return _latency_value(latency, retriever, measure, where) / _latency_value(
        latency, reference, measure, where
    )
