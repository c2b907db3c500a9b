"""LLM reranker: pointwise 0-10 relevance grades from an OpenAI-compatible chat endpoint
(e.g. Sun et al., "Is ChatGPT good at search?", EMNLP 2023, compare listwise); scores = grade / 10."""

from __future__ import annotations

from collections.abc import Sequence

from retrievers.llm import ChatClient, LLMError, parse_json_content
from retrievers.params import check_int, is_number
from retrievers.rerank.policy import RerankError
from retrievers.types import RetrievalResult

__all__ = ["MAX_GRADE", "LLMReranker", "parse_grades"]


_SYSTEM_PROMPT = (
    "You grade how relevant passages are to a search query. Grade every passage on its own, "
    "from 0 (unrelated) to 10 (answers the query directly). Reply with JSON only, exactly "
    '{"scores": [g0, g1, ...]}: one number per passage, in the order given.'
)
MAX_GRADE = 10.0


def parse_grades(content: str, n_passages: int) -> list[float]:
    """The grades in an LLM answer, mapped to [0, 1] (grade / 10).

    Accepts ``{"scores": [...]}`` or a bare JSON list, optionally inside a Markdown code fence.
    Raises :class:`RerankError` unless there are exactly ``n_passages`` numbers in [0, 10]."""
    try:
        data = parse_json_content(content)
    except LLMError as error:
        raise RerankError(str(error)) from None
    grades = data.get("scores") if isinstance(data, dict) else data
    if not isinstance(grades, list):
        raise RerankError(f'answer has no "scores" list: {content[:80]!r}')
    if len(grades) != n_passages:
        raise RerankError(f"answer grades {len(grades)} passages, {n_passages} were sent")
    out: list[float] = []
    for i, grade in enumerate(grades):
        if not is_number(grade) or not 0.0 <= float(grade) <= MAX_GRADE:
            raise RerankError(f"grade {i} is {grade!r}, not a number in [0, 10]")
        out.append(float(grade) / MAX_GRADE)
    return out


class LLMReranker:
    """Pointwise relevance grades from an OpenAI-compatible ``POST {base_url}/chat/completions``
    (:class:`retrievers.llm.ChatClient`).

    Each request holds the query and up to ``batch_size`` numbered passages (each cut to
    ``max_text_chars`` characters) and asks for ``{"scores": [...]}``, one 0-10 grade per
    passage; scores are grade / 10. Grades are absolute, so batches of one query compare.
    The API key is read at call time from the environment variable ``api_key_env`` (unset or
    empty: no Authorization header, which local servers accept). ``timeout_s`` in (0, 600]
    bounds each HTTP request. Any failure (HTTP error, time-out, an answer that does not parse)
    raises :class:`RerankError`; :func:`rerank_with_fallback` turns that into a recorded fallback.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 30.0,
        batch_size: int = 20,
        max_text_chars: int = 2000,
        temperature: float = 0.0,
    ) -> None:
        self.client = ChatClient(
            base_url, model, api_key_env=api_key_env, timeout_s=timeout_s, temperature=temperature
        )
        check_int("batch_size", batch_size, 1, 1000)
        check_int("max_text_chars", max_text_chars, 1, 1_000_000)
        self.batch_size = batch_size
        self.max_text_chars = max_text_chars

    def _prompt(self, query: str, texts: Sequence[str]) -> str:
        passages = "\n".join(
            f"[{i}] {' '.join(text[: self.max_text_chars].split())}" for i, text in enumerate(texts)
        )
        return f"Query: {' '.join(query.split())}\n\nPassages:\n{passages}\n\nJSON grades for {len(texts)} passages:"

    def _grade(self, query: str, texts: Sequence[str]) -> list[float]:
        try:
            content = self.client.complete(_SYSTEM_PROMPT, self._prompt(query, texts))
        except LLMError as error:
            raise RerankError(str(error)) from None
        return parse_grades(content, len(texts))

    def rerank(self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            scores += self._grade(query, texts[start : start + self.batch_size])
        return scores

    def __repr__(self) -> str:
        return f"LLMReranker(url={self.client.url!r}, model={self.client.model!r})"
