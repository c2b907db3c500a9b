"""How every retriever calls a reranker: one fallback policy.

A reranker is anything with ``rerank(query, candidates, texts) -> list[float]``
(:class:`retrievers.types.Reranker`): one score per candidate, higher is better.
:func:`rerank_with_fallback` is the only way the kernel (:mod:`retrievers.kernel`) and the
hierarchical traversal call one. A reranker that raises, times out (:mod:`retrievers.timeouts`),
returns None, a list of the wrong length or any non-finite (or non-numeric) score is not trusted
at all: the incoming scores come back unchanged, so the incoming order is kept, with a reason to
record in provenance (``rerank_fallback``). One bad item voids the whole answer rather than only
that item: reranker scores and first-stage scores are on different scales, and mixing them in one
list would order that item arbitrarily against the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from retrievers.params import is_number
from retrievers.spans import span
from retrievers.timeouts import call_with_timeout
from retrievers.types import Reranker, RetrievalResult

__all__ = ["RerankError", "fallback_summary", "rerank_with_fallback"]


class RerankError(RuntimeError):
    """A reranker could not produce scores (bad HTTP answer, unparseable grades, ...)."""


def rerank_with_fallback(
    reranker: Reranker,
    query: str,
    candidates: Sequence[RetrievalResult],
    texts: Sequence[str],
    *,
    timeout_s: float | None = None,
) -> tuple[list[float], str | None]:
    """Scores for ``candidates`` from ``reranker``, or their own scores and the reason why not.

    Returns ``(scores, None)`` on success, ``scores[i]`` being the reranker's score of
    ``candidates[i]``; ``(incoming scores, reason)`` when the reranker raises, exceeds
    ``timeout_s`` seconds, returns None, not a list, a list of the wrong length, or a value that
    is not a finite number (see the module docstring). Candidates whose text is empty or blank
    are not sent; they get the lowest reranker score minus 1 (after every reranked candidate,
    tied among themselves, so the doc id breaks their ties). No candidate with text: incoming
    scores and a reason. ``texts[i]`` is the text of ``candidates[i]``.
    """
    if len(texts) != len(candidates):
        raise ValueError(f"got {len(texts)} texts for {len(candidates)} candidates")
    incoming = [float(candidate.score) for candidate in candidates]
    if not candidates:
        return incoming, None
    sent = [i for i, text in enumerate(texts) if isinstance(text, str) and text.strip()]
    if not sent:
        return incoming, "no candidate has text to rerank"
    sent_candidates = [candidates[i] for i in sent]
    sent_texts = [texts[i] for i in sent]
    with span("rerank"):
        answer, failure = call_with_timeout(
            lambda: reranker.rerank(query, sent_candidates, sent_texts), timeout_s
        )
    if failure is not None:
        return incoming, failure
    if answer is None:
        return incoming, "returned None"
    if isinstance(answer, np.ndarray):
        answer = answer.tolist()
    if isinstance(answer, str | bytes) or not isinstance(answer, Sequence):
        return incoming, f"returned {type(answer).__name__}, not a list of scores"
    if len(answer) != len(sent):
        return incoming, f"returned {len(answer)} scores for {len(sent)} candidates"
    values: list[float] = []
    for candidate, value in zip(sent_candidates, answer, strict=True):
        if not is_number(value) or not math.isfinite(float(value)):
            return incoming, f"returned {value!r} for {candidate.doc_id!r}, not a finite number"
        values.append(float(value))
    if len(sent) == len(candidates):
        return values, None
    scores = [min(values) - 1.0] * len(candidates)
    for i, value in zip(sent, values, strict=True):
        scores[i] = value
    return scores, None


def fallback_summary(run: Mapping[str, Sequence[RetrievalResult]]) -> str | None:
    """One line saying on how many of the run's queries a reranker fell back, and the commonest
    reason (``fell back on 134 of 134 queries (raised EndpointError: HTTP 500 ...)``), or None
    when it never did or nothing was reranked. Read from what the retrievers record: per query,
    ``provenance["stats"]["rerank_fallbacks"]`` (calls that fell back) and the reason in
    ``provenance["rerank_fallback"]`` of its results."""
    reranked = fell_back = 0
    reasons: dict[str, int] = {}
    for results in run.values():
        stats = results[0].provenance.get("stats") if results else None
        if not isinstance(stats, Mapping) or "rerank_fallbacks" not in stats:
            continue
        reranked += 1
        if not stats["rerank_fallbacks"]:
            continue
        fell_back += 1
        reason = next(
            (str(r.provenance["rerank_fallback"]) for r in results if r.provenance.get("rerank_fallback")),
            "reason not recorded",
        )
        reasons[reason] = reasons.get(reason, 0) + 1
    if not fell_back:
        return None
    common = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))[0][0]
    if len(common) > 200:
        common = common[:200] + "..."
    others = f"; {len(reasons) - 1} other reasons" if len(reasons) > 1 else ""
    return f"fell back on {fell_back} of {reranked} reranked queries ({common}{others})"
