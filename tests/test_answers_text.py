"""Answer normalisation and matching (viking_eval/answers/text.py), against hand-worked values."""

from __future__ import annotations

import pytest

from retrievers.llm import LLMError
from viking_eval.answers.evaluate import parse_verdict
from viking_eval.answers.text import (
    answer_text,
    contains_answer,
    content_tokens,
    normalise,
    token_f1,
    token_recall,
)


def test_normalise_is_squad_style() -> None:
    assert normalise("The  Eiffel-Tower, in PARIS!") == "eiffel tower in paris"
    assert normalise("An apple a day") == "apple day"
    assert normalise("“Caroline’s” café…") == "caroline s café"  # Unicode punctuation too
    assert normalise("theatre") == "theatre"  # articles only as whole words


def test_answer_text_of_numbers_lists_and_none() -> None:
    assert answer_text(2022) == "2022"
    assert answer_text(["Paris", "France"]) == "Paris, France"
    assert answer_text(None) is None and answer_text([]) is None


def test_contains_answer_matches_whole_tokens() -> None:
    texts = [normalise("Melanie painted a sunrise in 2022."), normalise("Nothing here")]
    assert contains_answer("sunrise", texts)
    assert contains_answer("sunrise in 2022", texts)
    assert not contains_answer("sun", texts)  # a piece of a token is no match
    assert not contains_answer("202", texts)


def test_token_recall_counts_content_tokens_once() -> None:
    tokens = content_tokens(normalise("Paris and the Louvre of France"))
    assert tokens == ["paris", "louvre", "france"]  # 'and', 'of' are stop words, 'the' an article
    assert token_recall(tokens, ["paris is big", "louvre"]) == pytest.approx(2 / 3)
    assert content_tokens("to be") == ["to", "be"]  # all stop words: kept


def test_token_f1_by_hand() -> None:
    assert token_f1("paris", "paris france") == pytest.approx(2 / 3)  # P 1, R 1/2
    assert token_f1("may 7 2023", "7 may 2023") == 1.0  # a bag of tokens
    assert token_f1("", "paris") == 0.0 and token_f1("london", "paris") == 0.0


@pytest.mark.parametrize(
    ("content", "verdict"),
    [
        ('{"label": "CORRECT"}', 1.0),
        ('```json\n{"label": "wrong"}\n```', 0.0),
        ("CORRECT.", 1.0),
        ("WRONG", 0.0),
    ],
)
def test_verdicts(content: str, verdict: float) -> None:
    assert parse_verdict(content) == verdict


@pytest.mark.parametrize("content", ["maybe", '{"label": "PARTIAL"}', "[1, 2]"])
def test_a_reply_without_a_verdict_is_a_format_error(content: str) -> None:
    with pytest.raises(LLMError) as raised:
        parse_verdict(content)
    assert raised.value.kind == "format"
