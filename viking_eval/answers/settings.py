"""The ``answers.*`` and ``llm.*`` settings (docs/answers.md), declared as Params so that the
config schema types them at composition and checks ranges and choices before anything runs.

Imports nothing of the harness: :mod:`viking_eval.config.settings` holds them in its top level."""

from __future__ import annotations

from dataclasses import dataclass

from retrievers.params import Params, param

__all__ = ["AnswerSettings", "LlmSettings"]


@dataclass(frozen=True)
class AnswerSettings(Params):
    """``enabled``: evaluate answers after retrieval. ``k``: the top-k documents searched for the
    gold answer and given to the reader (at most ``run.top_k``). ``answer_key``: the query
    metadata key holding the gold answer (LoCoMo: ``answer``); a query without one is left out of
    the answer metrics and counted. ``context_keys``: document metadata keys written before each
    retrieved text in the reader's context (LoCoMo: ``session_date_time``, without which no reader
    can answer a temporal question). ``reader_prompt``, ``judge_prompt``: prompt files, a name
    under conf/prompts/ (without ``.txt``) or a path. ``max_context_chars``: the context is cut
    there (documents kept whole, in rank order)."""

    SECTION = "answers"

    enabled: bool = param(False, doc="evaluate answers after retrieval")
    k: int = param(10, low=1, high=1000, doc="top-k documents searched for the answer")
    answer_key: str = param("answer", non_empty=True, doc="query metadata key of the gold answer")
    context_keys: tuple[str, ...] = param((), doc="document metadata keys shown in the reader's context")
    reader_prompt: str = param("answer_reader", non_empty=True, doc="a name under conf/prompts/ or a path")
    judge_prompt: str = param("answer_judge", non_empty=True, doc="a name under conf/prompts/ or a path")
    max_context_chars: int = param(20_000, low=100, high=1_000_000)


@dataclass(frozen=True)
class LlmSettings(Params):
    """The reader's and judge's OpenAI-compatible endpoint: ``base_url`` (``.../v1``; null = no
    reader or judge, answer recall only) and ``model`` (both or neither), the API key read from the
    environment variable ``api_key_env`` (never from a config). Temperature is always 0.
    ``timeout_s`` bounds each request, ``max_retries`` retries a 429, a 5xx, a time-out or a
    reply that does not parse; ``concurrency`` requests at once; ``max_tokens`` per reply.
    ``price_input_per_mtok``, ``price_output_per_mtok``: US dollars per million prompt and
    completion tokens, for the costs in every output (0 = not priced)."""

    SECTION = "llm"

    base_url: str | None = param(None, non_empty=True, doc="an OpenAI-compatible endpoint, or null")
    model: str | None = param(None, non_empty=True, doc="the model name the endpoint serves")
    api_key_env: str = param("OPENAI_API_KEY", non_empty=True, doc="the environment variable of the key")
    timeout_s: float = param(60.0, low=0.0, high=600.0, low_open=True)
    max_retries: int = param(2, low=0, high=20)
    concurrency: int = param(4, low=1, high=64)
    max_tokens: int = param(256, low=1, high=100_000)
    price_input_per_mtok: float = param(0.0, low=0.0, high=10_000.0)
    price_output_per_mtok: float = param(0.0, low=0.0, high=10_000.0)

    def check(self) -> None:
        if (self.base_url is None) != (self.model is None):
            missing = "model" if self.model is None else "base_url"
            raise self.fail(missing, "must be set too: llm.base_url and llm.model go together (or both null)")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise self.fail(
                "base_url", f"must be an http(s) URL such as http://127.0.0.1:8000/v1, got {self.base_url!r}"
            )

    @property
    def configured(self) -> bool:
        return self.base_url is not None
