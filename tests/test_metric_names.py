"""Metric names (viking_eval/measures/metrics.py): every name a config or evaluate() lists gets its own
measure's value, aliases included, checked against pytrec_eval called directly on a hand-made run;
a metric deeper than run.top_k is computed, said once and marked in the outputs."""

from __future__ import annotations

import pytest
import pytrec_eval

from viking_eval.measures.metrics import (
    MetricError,
    deeper_than_run,
    depth_label,
    depth_note,
    evaluate,
    parse_metrics,
)

# two queries, distinct scores (no ties, so pytrec_eval's own tie order cannot differ from ours)
RUN = {
    "q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d4": 0.6},
    "q2": {"d5": 0.9, "d1": 0.5, "d6": 0.4},
}
QRELS = {"q1": {"d2": 1, "d4": 2, "d9": 1}, "q2": {"d5": 1}}


def _pytrec(measure: str) -> dict[str, float]:
    """``{query: value}`` of one trec_eval measure (``recall.2``, ``recip_rank``, ...), directly."""
    scores = pytrec_eval.RelevanceEvaluator(QRELS, {measure}).evaluate(RUN)
    key = measure.replace(".", "_")
    return {qid: values[key] for qid, values in scores.items()}


def test_an_alias_and_its_measure_each_get_the_right_value() -> None:
    # the bug: results were keyed by measure, so the later name took the value and R@2 stayed 0.0
    names = ["R@2", "Recall@2", "recall@2", "P@2", "MRR@10", "RR@10", "nDCG@3", "NDCG@3"]
    evaluation = evaluate(RUN, QRELS, parse_metrics(names))
    recall = _pytrec("recall.2")  # q1: d2 of {d2, d4, d9} in the top 2 -> 1/3; q2: 1
    assert recall == {"q1": pytest.approx(1 / 3), "q2": 1.0}
    for name in ("R@2", "Recall@2", "recall@2"):
        assert evaluation.per_query[name] == recall
        assert evaluation.aggregate[name] == pytest.approx((1 / 3 + 1) / 2)
    assert evaluation.per_query["P@2"] == _pytrec("P.2")
    reciprocal = _pytrec("recip_rank")  # q1: d2 at rank 2; q2: d5 at rank 1
    assert reciprocal == {"q1": 0.5, "q2": 1.0}
    assert evaluation.per_query["MRR@10"] == evaluation.per_query["RR@10"] == reciprocal
    ndcg = _pytrec("ndcg_cut.3")
    assert evaluation.per_query["nDCG@3"] == evaluation.per_query["NDCG@3"] == ndcg
    assert 0 < ndcg["q1"] < 1


def test_the_same_name_twice_is_refused_naming_it() -> None:
    with pytest.raises(MetricError, match=r"metric 'R@10' is listed twice"):
        parse_metrics(["R@10", "nDCG@10", "R@10"])


def test_metrics_deeper_than_the_run_are_found_and_described() -> None:
    metrics = parse_metrics(["nDCG@10", "R@100", "AP@100", "P@5", "AP"])
    assert deeper_than_run(metrics, 10) == {"R@100": 100, "AP@100": 100}
    assert deeper_than_run(metrics, 100) == {}
    assert deeper_than_run(metrics, 4) == {"nDCG@10": 10, "R@100": 100, "AP@100": 100, "P@5": 5}
    deeper = deeper_than_run(metrics, 10)
    assert depth_label("R@100", 10, deeper) == "R@100 (depth 10)"
    assert depth_label("nDCG@10", 10, deeper) == "nDCG@10"
    note = depth_note(10, deeper)
    assert "run.top_k=10" in note and "R@100, AP@100" in note and "run.top_k=100" in note
    assert depth_note(100, {}) == ""
