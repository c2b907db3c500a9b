"""Intent analysis for ``search()``: typed queries, sessions and the analysers (OpenViking's API).

``find(query)`` searches with the query as given. ``search(query, session)`` first asks an
*intent analyser* for 0 to 5 typed queries (text, context type, intent, priority 1 = highest ..
5), runs each, and merges the results (:mod:`retrievers.hierarchical.matches`) into a
``FindResult`` with memories / resources / skills buckets.

Analysers (all deterministic except for what an LLM answers):

* :class:`PassthroughAnalyzer`: the query unchanged, any context type (what ``find`` does).
* :class:`RuleBasedAnalyzer`: splits compound questions and types each part with cue words;
  no model, no network.
* :class:`LLMIntentAnalyzer`: asks an OpenAI-compatible chat-completions endpoint for a JSON
  query plan and validates it strictly; on any failure (HTTP error, time-out, malformed JSON, an
  invalid field) it falls back to the raw query and says why in ``QueryPlan.fallback``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from retrievers.llm import ChatClient, LLMError, parse_json_content
from retrievers.params import check_int, is_int

__all__ = [
    "MAX_TYPED_QUERIES",
    "ContextType",
    "IntentAnalyzer",
    "LLMIntentAnalyzer",
    "Message",
    "PassthroughAnalyzer",
    "PlanError",
    "QueryPlan",
    "RuleBasedAnalyzer",
    "Session",
    "TypedQuery",
    "parse_plan",
]

MAX_TYPED_QUERIES = 5
DEFAULT_PRIORITY = 3


class ContextType(StrEnum):
    """What a context is: memories (user or agent), resources, skills."""

    MEMORY = "memory"
    RESOURCE = "resource"
    SKILL = "skill"


@dataclass(frozen=True)
class TypedQuery:
    """One query of a plan. ``context_type`` None searches every root; ``priority`` 1 (highest)..5."""

    query: str
    context_type: ContextType | None = None
    intent: str = ""
    priority: int = DEFAULT_PRIORITY

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not self.query.strip():
            raise ValueError(f"TypedQuery.query must be a non-empty string, got {self.query!r}")
        if self.context_type is not None and not isinstance(self.context_type, ContextType):
            raise ValueError(
                f"TypedQuery.context_type must be a ContextType or None, got {self.context_type!r}"
            )
        check_int("TypedQuery.priority", self.priority, 1, 5)


@dataclass(frozen=True)
class QueryPlan:
    """What an analyser produced: 0..5 typed queries, its reasoning, and why it fell back (if it did)."""

    queries: tuple[TypedQuery, ...]
    reasoning: str = ""
    fallback: str | None = None


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Session:
    """Conversation context for ``search``: earlier messages (oldest first) and a running summary."""

    messages: tuple[Message, ...] = ()
    summary: str = ""


class IntentAnalyzer(Protocol):
    def analyze(self, query: str, session: Session | None = None) -> QueryPlan: ...


# --------------------------------------------------------------------------------------------
# Analysers
# --------------------------------------------------------------------------------------------


class PassthroughAnalyzer:
    """The query as it is, over every context type, priority 1 (unweighted): what ``find`` does."""

    def analyze(self, query: str, session: Session | None = None) -> QueryPlan:
        text = " ".join(query.split())
        return QueryPlan(queries=(TypedQuery(text, priority=1),) if text else ())


_SKILL_CUES = re.compile(
    r"\b(how (?:do|can|should|to)|steps? to|tool|tools|skill|skills|command|script|install|configure|"
    r"set up|setup|workflow|procedure)\b",
    re.IGNORECASE,
)
_MEMORY_CUES = re.compile(
    r"\b(i|me|my|mine|myself|we|our|us|remember|recall|last time|earlier|previously|told|"
    r"mentioned|prefer|preference|favou?rite|did (?:i|we|you))\b",
    re.IGNORECASE,
)
_ANAPHORA = re.compile(r"\b(it|that|this|they|them|those|he|she|him|her|there)\b", re.IGNORECASE)
_SPLIT = re.compile(r"(?<=\?)\s+|;\s*|\n+")


class RuleBasedAnalyzer:
    """Deterministic typed queries from cue words; no model.

    1. The query is split into parts after ``?``, at ``;`` and at line breaks (at most 5 parts,
       in order; repeated parts dropped).
    2. Each part is typed: procedural cues ("how do I", "steps to", "install", "tool", ...) give
       SKILL; first-person or recall cues ("I", "my", "remember", "last time", ...) give MEMORY;
       otherwise no type (every root is searched). Intent names the cue class.
    3. Priority: the first part 1, the next parts 2; a part that leans on the conversation
       (a pronoun such as "it"/"that") and a session with an earlier user message also yields the
       part joined with that message, at priority 4 (until 5 queries).
    """

    def analyze(self, query: str, session: Session | None = None) -> QueryPlan:
        text = " ".join(query.split()) if isinstance(query, str) else ""
        if not text:
            return QueryPlan(queries=(), reasoning="empty query")
        parts: list[str] = []
        for part in _SPLIT.split(query):
            cleaned = " ".join(part.split())
            if cleaned and cleaned.lower() not in {p.lower() for p in parts}:
                parts.append(cleaned)
        parts = parts[:MAX_TYPED_QUERIES]
        previous = ""
        if session is not None:
            for message in reversed(session.messages):
                if message.role == "user" and message.content.strip() and message.content.strip() != text:
                    previous = " ".join(message.content.split())
                    break
        queries: list[TypedQuery] = []
        reasons: list[str] = []
        for position, part in enumerate(parts):
            if _SKILL_CUES.search(part):
                kind, intent = ContextType.SKILL, "procedure"
            elif _MEMORY_CUES.search(part):
                kind, intent = ContextType.MEMORY, "recall"
            else:
                kind, intent = None, "lookup"
            queries.append(TypedQuery(part, kind, intent, 1 if position == 0 else 2))
            reasons.append(f"{part!r}: {intent}")
        for part in list(parts):
            if len(queries) >= MAX_TYPED_QUERIES:
                break
            if previous and _ANAPHORA.search(part):
                queries.append(TypedQuery(f"{part} {previous}", None, "context", 4))
                reasons.append(f"{part!r}: pronoun resolved with the previous user message")
        return QueryPlan(queries=tuple(queries), reasoning="; ".join(reasons))


_SYSTEM_PROMPT = """You plan retrieval for an assistant with three kinds of context:
memory (facts about the user or earlier conversations), resource (documents, knowledge) and
skill (procedures and tools). Given the conversation and the current message, answer with JSON only:
{"reasoning": "<one sentence>", "queries": [{"query": "<search text>", "context_type":
"memory" | "resource" | "skill", "intent": "<short label>", "priority": 1-5}]}
Use 0 to 5 queries; priority 1 is the most important; use no query when nothing needs retrieving."""


class PlanError(ValueError):
    """An LLM answer that is not a valid query plan."""


def parse_plan(content: str) -> QueryPlan:
    """Validate an LLM's JSON answer: an object with ``queries`` (a list of at most 5 objects with a
    non-empty string ``query``, ``context_type`` memory/resource/skill or null, optional string
    ``intent``, optional integer ``priority`` in [1, 5]) and optional string ``reasoning``. Any
    other shape raises :class:`PlanError`; nothing is repaired."""
    try:
        data = parse_json_content(content)
    except LLMError as error:
        raise PlanError(str(error)) from None
    if not isinstance(data, dict) or not isinstance(data.get("queries"), list):
        raise PlanError("answer must be a JSON object with a 'queries' list")
    reasoning = data.get("reasoning", "")
    if not isinstance(reasoning, str):
        raise PlanError("'reasoning' must be a string")
    items = data["queries"]
    if len(items) > MAX_TYPED_QUERIES:
        raise PlanError(f"{len(items)} queries; at most {MAX_TYPED_QUERIES} are allowed")
    queries: list[TypedQuery] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise PlanError(f"queries[{i}] must be an object")
        text = item.get("query")
        if not isinstance(text, str) or not text.strip():
            raise PlanError(f"queries[{i}].query must be a non-empty string")
        raw_type = item.get("context_type")
        if raw_type is not None and raw_type not in {kind.value for kind in ContextType}:
            raise PlanError(
                f"queries[{i}].context_type must be memory, resource, skill or null, got {raw_type!r}"
            )
        intent = item.get("intent", "")
        if not isinstance(intent, str):
            raise PlanError(f"queries[{i}].intent must be a string")
        priority = item.get("priority", DEFAULT_PRIORITY)
        if not is_int(priority) or not 1 <= priority <= 5:
            raise PlanError(f"queries[{i}].priority must be an integer in [1, 5], got {priority!r}")
        queries.append(
            TypedQuery(
                " ".join(text.split()),
                None if raw_type is None else ContextType(raw_type),
                intent,
                int(priority),
            )
        )
    return QueryPlan(queries=tuple(queries), reasoning=reasoning)


class LLMIntentAnalyzer:
    """Query plans from an OpenAI-compatible ``POST {base_url}/chat/completions``.

    ``model`` names the model; the API key is read from the environment variable ``api_key_env``
    at call time (no key: no Authorization header, which local servers accept). The prompt holds
    the session summary, the last ``max_recent_messages`` messages and the current message; the
    answer must pass :func:`parse_plan`. Any failure returns the raw query as one untyped query
    (priority 1), with the reason in ``QueryPlan.fallback`` (``timeout``, ``http``, ``format``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 10.0,
        max_recent_messages: int = 5,
    ) -> None:
        self.client = ChatClient(
            base_url, model, api_key_env=api_key_env, timeout_s=timeout, timeout_name="timeout"
        )
        check_int("max_recent_messages", max_recent_messages, 0, 100)
        self.max_recent_messages = max_recent_messages

    def _prompt(self, query: str, session: Session | None) -> str:
        summary = session.summary.strip() if session is not None else ""
        recent = session.messages[-self.max_recent_messages :] if session and self.max_recent_messages else ()
        lines = [f"[{message.role}]: {message.content}" for message in recent if message.content.strip()]
        return (
            f"Session summary: {summary or 'None'}\n"
            f"Recent messages:\n{chr(10).join(lines) if lines else 'None'}\n"
            f"Current message: {query}"
        )

    def analyze(self, query: str, session: Session | None = None) -> QueryPlan:
        text = " ".join(query.split()) if isinstance(query, str) else ""
        if not text:
            return QueryPlan(queries=(), reasoning="empty query")
        raw = QueryPlan(queries=(TypedQuery(text, priority=1),))
        try:
            return parse_plan(self.client.complete(_SYSTEM_PROMPT, self._prompt(text, session)))
        except LLMError as error:
            return QueryPlan(queries=raw.queries, fallback=f"{error.kind}: {error}")
        except PlanError as error:
            return QueryPlan(queries=raw.queries, fallback=f"format: {error}")
