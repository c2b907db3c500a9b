"""The names under which answer metrics appear beside the retrieval metrics (metrics.json,
metrics.csv, per_query.csv, significance.csv, the summary table and report.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["COST", "F1", "TOKENS", "J", "answer_metric_names", "recall_name", "token_recall_name"]

J = "J"  # the judge's verdict: 1 correct, 0 wrong
F1 = "answer_F1"  # token F1 of the reader's answer against the gold one
TOKENS = "llm_tokens"  # per query: reader and judge tokens, prompt and completion
COST = "llm_cost_usd"  # per query: their price (llm.price_*)
_PREFIXES = ("answer_recall@", "answer_token_recall@")


def recall_name(k: int) -> str:
    return f"answer_recall@{k}"


def token_recall_name(k: int) -> str:
    return f"answer_token_recall@{k}"


def answer_metric_names(results: Iterable[Any], *, with_usage: bool = False) -> list[str]:
    """The answer metrics among the results' ``metrics`` (first result that has them), in a fixed
    order: recall, token recall, J, F1 (and tokens, cost when ``with_usage``)."""
    for result in results:
        metrics: Mapping[str, float] = result.metrics
        names = [name for name in metrics if name.startswith(_PREFIXES)]
        names += [name for name in (J, F1) if name in metrics]
        if with_usage:
            names += [name for name in (TOKENS, COST) if name in metrics]
        if names:
            return names
    return []
