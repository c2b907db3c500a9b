"""Answer strings as SQuAD's evaluation compares them (Rajpurkar et al. 2016): lower case, ASCII
and Unicode punctuation removed, the articles a/an/the dropped, whitespace collapsed; then
matching an answer in a text (as whole tokens), the share of its content tokens a text holds,
and token F1 between two answers."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from retrievers.text import STOPWORDS_EN

__all__ = ["answer_text", "contains_answer", "content_tokens", "normalise", "token_f1", "token_recall"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def answer_text(value: Any) -> str | None:
    """A gold answer as text: strings as they are, numbers with ``str``, a list joined with
    ``", "``; None (or an empty list) when there is no answer."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        parts = [answer_text(item) for item in value]
        joined = ", ".join(part for part in parts if part)
        return joined or None
    return str(value)


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P") or char in "$+<=>^`|~"


def normalise(text: str) -> str:
    """SQuAD-style: lower case, punctuation removed, articles dropped, whitespace collapsed."""
    lowered = "".join(" " if _is_punctuation(char) else char for char in text.lower())
    # SQuAD deletes punctuation; a space instead keeps "2022-05-07" as three tokens and
    # "Caroline's" as "caroline s" in both the answer and the text, so matching is unchanged
    return " ".join(_ARTICLES.sub(" ", lowered).split())


def content_tokens(normalised: str) -> list[str]:
    """The tokens of a normalised answer without stop words (all of them when every one is a stop word)."""
    tokens = normalised.split()
    content = [token for token in tokens if token not in STOPWORDS_EN]
    return content or tokens


def contains_answer(normalised_answer: str, normalised_texts: Iterable[str]) -> bool:
    """Whether one of the texts holds the answer as a run of whole tokens."""
    needle = f" {normalised_answer} "
    return any(needle in f" {text} " for text in normalised_texts)


def token_recall(answer_tokens: Sequence[str], normalised_texts: Iterable[str]) -> float:
    """The share of ``answer_tokens`` (repeats count once) found among the texts' tokens."""
    wanted = set(answer_tokens)
    if not wanted:
        raise ValueError("an answer without tokens has no token recall")
    seen: set[str] = set()
    for text in normalised_texts:
        seen.update(text.split())
    return len(wanted & seen) / len(wanted)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD's token F1 of two normalised answers (bags of tokens); 0 when either is empty."""
    predicted, expected = prediction.split(), gold.split()
    common = sum((Counter(predicted) & Counter(expected)).values())
    if not predicted or not expected or common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)
