"""Metric computation time on SciFact-sized runs (300 queries x 100 documents)."""

from __future__ import annotations

import random

from viking_eval.measures.metrics import evaluate, parse_metrics


def test_bench_metrics_scifact_size(benchmark) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(0)
    docs = [str(i) for i in range(5183)]
    run = {f"q{q}": {doc: rng.random() for doc in rng.sample(docs, 100)} for q in range(300)}
    qrels = {f"q{q}": {doc: 1 for doc in rng.sample(docs, 2)} for q in range(300)}
    metrics = parse_metrics(["nDCG@10", "R@10", "R@100", "RR@10", "AP@100"])
    result = benchmark(evaluate, run, qrels, metrics)
    assert result.n_queries == 300
