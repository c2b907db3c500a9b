"""Metrics against pytrec_eval (trec_eval's C code) and hand-computed cases."""

from __future__ import annotations

import math
import random

import pytest
import pytrec_eval

from viking_eval.measures.metrics import (
    MetricError,
    accepted_measures,
    canonical_run,
    evaluate,
    parse_metric,
    parse_metrics,
)


def _random_case(seed: int) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    rng = random.Random(seed)
    docs = [f"d{i:03d}" for i in range(120)]
    run: dict[str, dict[str, float]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(40):
        qid = f"q{q}"
        # distinct scores so tie-breaking cannot differ between tools
        scores = rng.sample(range(10_000), 110)
        run[qid] = {doc: float(score) for doc, score in zip(rng.sample(docs, 110), scores, strict=True)}
        qrels[qid] = {doc: rng.choice([0, 1, 1, 2, 3]) for doc in rng.sample(docs, rng.randint(1, 15))}
    return run, qrels


@pytest.mark.parametrize("seed", [0, 1])
def test_metrics_equal_pytrec_eval(seed: int) -> None:
    run, qrels = _random_case(seed)
    ours = evaluate(run, qrels, parse_metrics(["nDCG@10", "R@100", "AP@100", "P@5", "Recall@10"]))
    reference = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg_cut.10", "recall.100", "map_cut.100", "P.5", "recall.10"}
    )
    expected = reference.evaluate(run)
    for qid in qrels:
        assert ours.per_query["nDCG@10"][qid] == pytest.approx(expected[qid]["ndcg_cut_10"], abs=1e-12)
        assert ours.per_query["R@100"][qid] == pytest.approx(expected[qid]["recall_100"], abs=1e-12)
        assert ours.per_query["AP@100"][qid] == pytest.approx(expected[qid]["map_cut_100"], abs=1e-12)
        assert ours.per_query["P@5"][qid] == pytest.approx(expected[qid]["P_5"], abs=1e-12)
        assert ours.per_query["Recall@10"][qid] == pytest.approx(expected[qid]["recall_10"], abs=1e-12)
    mean = sum(expected[qid]["ndcg_cut_10"] for qid in qrels) / len(qrels)
    assert ours.aggregate["nDCG@10"] == pytest.approx(mean, abs=1e-12)


def test_rr_at_10_by_hand() -> None:
    qrels = {"q1": {"b": 1}, "q2": {"z": 1}, "q3": {"k": 1}}
    run = {
        "q1": {"a": 3.0, "b": 2.0, "c": 1.0},  # first relevant at rank 2 -> 1/2
        "q2": {"a": 1.0},  # never found -> 0
        "q3": {f"x{i:02d}": 100.0 - i for i in range(10)} | {"k": 0.5},  # rank 11 -> outside @10 -> 0
    }
    result = evaluate(run, qrels, parse_metrics(["RR@10"]))
    assert result.per_query["RR@10"] == {"q1": 0.5, "q2": 0.0, "q3": 0.0}
    assert result.aggregate["RR@10"] == pytest.approx(0.5 / 3)


def test_ties_broken_by_doc_id_ascending() -> None:
    # all tied: (score desc, doc id asc) puts "a" first; trec_eval alone would put "c" first
    qrels = {"q": {"a": 1}}
    run = {"q": {"c": 1.0, "b": 1.0, "a": 1.0}}
    assert evaluate(run, qrels, parse_metrics(["RR@10"])).per_query["RR@10"]["q"] == 1.0
    assert list(canonical_run(run)["q"]) == ["a", "b", "c"]


def test_judged_query_missing_from_run_counts_as_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = {"q1": {"a": 1.0}}
    result = evaluate(run, qrels, parse_metrics(["nDCG@10"]))
    assert result.n_queries == 2
    assert result.n_queries_without_results == 1
    assert result.aggregate["nDCG@10"] == 0.5


def test_unjudged_queries_in_run_are_ignored() -> None:
    qrels = {"q1": {"a": 1}}
    run = {"q1": {"a": 1.0}, "q9": {"z": 5.0}}
    result = evaluate(run, qrels, parse_metrics(["nDCG@10"]))
    assert result.n_queries == 1
    assert result.aggregate["nDCG@10"] == 1.0


def test_ignore_identical_ids() -> None:
    qrels = {"q1": {"a": 1}}
    run = {"q1": {"q1": 9.0, "a": 1.0}}
    kept = evaluate(run, qrels, parse_metrics(["RR@10"]))
    dropped = evaluate(run, qrels, parse_metrics(["RR@10"]), ignore_identical_ids=True)
    assert kept.aggregate["RR@10"] == 0.5
    assert dropped.aggregate["RR@10"] == 1.0


def test_judged_at_10() -> None:
    qrels = {"q": {"a": 0, "b": 1}}
    run = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
    value = evaluate(run, qrels, parse_metrics(["Judged@10"])).aggregate["Judged@10"]
    assert value == pytest.approx(2 / 3)


def test_aliases_and_names() -> None:
    assert str(parse_metric("MRR@10").measure) == "RR@10"
    assert str(parse_metric("MAP@100").measure) == "AP@100"
    assert str(parse_metric("Recall@100").measure) == "R@100"
    assert parse_metric("Recall@100").name == "Recall@100"


@pytest.mark.parametrize("bad", ["Foo@3", "nDCG@ten", ""])
def test_unknown_metric_name(bad: str) -> None:
    with pytest.raises(MetricError, match="nDCG@10"):
        parse_metric(bad)


def test_duplicate_and_empty_metric_lists() -> None:
    with pytest.raises(MetricError, match="twice"):
        parse_metrics(["nDCG@10", "nDCG@10"])
    with pytest.raises(MetricError):
        parse_metrics([])


def test_non_finite_score_rejected() -> None:
    with pytest.raises(ValueError, match="not finite"):
        evaluate({"q": {"a": math.nan}}, {"q": {"a": 1}}, parse_metrics(["nDCG@10"]))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            "nDCG@0",
            r"metric 'nDCG@0': the cutoff after @ must be an integer >= 1, got 0",
        ),  # aborted pytrec_eval
        ("P@0", r"the cutoff after @ must be an integer >= 1, got 0"),
        ("Recall@0", r"metric 'Recall@0': the cutoff after @ must be an integer >= 1"),
        ("nDCG@10.5", r"the cutoff after @ must be an integer >= 1, got 10.5"),
        ("nDCG@-1", r"integer cutoff >= 1"),
        (
            "RBP(p=0.8)",
            r"metric 'RBP\(p=0.8\)' is not computed here .*accepted measures: Accuracy, AP, BPM, ",
        ),
        ("alpha_nDCG@10", r"is intent-aware"),
        ("SetF(beta=2)", r"metric 'SetF\(beta=2\)': invalid param beta=2"),
    ],
)
def test_bad_measure_or_cutoff_refused_before_any_retrieval(bad: str, message: str) -> None:
    with pytest.raises(MetricError, match=message):
        parse_metric(bad)


def test_accepted_measures_are_listed_and_parse() -> None:
    names = accepted_measures()
    assert {"nDCG", "R", "RR", "AP", "P", "Judged", "Success"} <= set(names)
    for name in (
        "nDCG@10",
        "R@100",
        "RR@10",
        "MRR@10",
        "AP@100",
        "P@5",
        "Judged@10",
        "Success@1",
        "AP",
        "RR",
    ):
        parse_metric(name)
