"""The answers section of report.md: per group the answered queries, the answer metrics and the
intervals of J and answer_F1; the queries left out; what the reader and judge cost."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from viking_eval.answers import names

__all__ = ["answer_lines"]


def _cell(entry: dict[str, Any], name: str) -> str:
    value = entry.get("metrics", {}).get(name)
    if value is None:
        return "-"
    interval = entry.get("intervals", {}).get(name)
    return f"{value:.4f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")


def answer_lines(results: Sequence[Any], group_key: str | None) -> list[str]:
    """Markdown lines (none when no result has answers)."""
    shown = [result for result in results if result.answers]
    if not shown:
        return []
    metric_names = names.answer_metric_names(shown)
    first = shown[0].answers
    lines = [
        "",
        f"## Answers (top {first['k']})",
        "",
        f"{first['n_with_answer']} queries have a gold answer (query metadata `{first['answer_key']}`); "
        f"{first['n_without_answer']} without one are left out of the answer metrics. Answers are "
        "normalised SQuAD-style (lower case, punctuation and articles removed); answer_recall: the "
        "answer found in one of the top documents; answer_token_recall: the share of its content tokens "
        f"found in them. Brackets: {first['confidence']:.0%} bootstrap intervals.",
        "",
    ]
    rows = []
    for result in shown:
        blocks = [("(all)", result.answers), *result.answers.get("groups", {}).items()]
        for group, entry in blocks:
            rows.append(
                [
                    group,
                    result.name,
                    str(entry["n_with_answer"]),
                    str(entry["n_queries"] - entry["n_with_answer"]),
                ]
                + [_cell(entry, name) for name in metric_names]
            )
    lines.append(
        tabulate(
            rows,
            headers=[group_key or "group", "retriever", "answered", "left out", *metric_names],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    priced = [result for result in shown if "llm" in result.answers]
    if priced:
        usage = priced[0].answers["llm"]
        lines += [
            "",
            f"Reader and judge: `{usage['model']}`, temperature 0, prompts `{usage['reader_prompt']}` and "
            f"`{usage['judge_prompt']}`; prices per million tokens: {usage['prices_per_mtok']['input']} in, "
            f"{usage['prices_per_mtok']['output']} out (USD). Per query: `{names.TOKENS}`, `{names.COST}` in per_query.csv.",
            "",
            tabulate(
                [
                    [
                        result.name,
                        str(result.answers["llm"]["calls"]),
                        str(result.answers["llm"]["cache_hits"]),
                        str(result.answers["llm"]["prompt_tokens"]),
                        str(result.answers["llm"]["completion_tokens"]),
                        f"{result.answers['llm']['cost_usd']:.4f}",
                        f"{result.answers['llm']['cost_usd_this_run']:.4f}",
                        str(result.answers["llm"]["usage_missing"]),
                    ]
                    for result in priced
                ],
                headers=[
                    "retriever",
                    "calls",
                    "cache hits",
                    "prompt tokens",
                    "completion tokens",
                    "cost USD",
                    "cost USD this run",
                    "replies without usage",
                ],
                tablefmt="github",
                disable_numparse=True,
            ),
        ]
    return lines
