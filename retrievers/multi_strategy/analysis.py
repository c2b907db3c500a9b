"""Rule-based, deterministic query analysis for the multi-strategy retriever.

:class:`QueryAnalyzer` classifies a query as TEMPORAL, CODE, PREFERENCE, FACTUAL or MIXED and
extracts what the strategies need: time expressions (:mod:`retrievers.timeparse`), code
identifiers (:mod:`retrievers.multi_strategy.identifiers`) and keywords (the project's words,
:func:`retrievers.text.words`, minus :data:`KEYWORD_STOPWORDS`, at least ``keyword_min_length``
characters long, the first ``max_keywords``: Memory-Arc keeps words longer than 2, at most 10).

The classification is a table, not a chain of ifs. Each rule (:class:`IntentRule`) names an
intent, a weight and either a regular expression (searched case-insensitively in the query) or a
feature (``time_expression``: a time expression was found; ``code_identifier``: an identifier was
found). An intent's score is the sum of the weights of its rules that fire. Then:

- no intent reaches ``min_intent_score``: ``default_intent`` (FACTUAL; Memory-Arc's analyser gives
  CONVERSATIONAL there, which its preset sets, with its own row of weights);
- otherwise the best intent, unless the runner-up reaches ``mixed_ratio`` x the best score
  (a tie included): MIXED.

The default table (:data:`DEFAULT_RULES`) gives "What are my coding preferences?" PREFERENCE
(``preferences`` 2.0 against ``coding`` 1.0 and the ``what`` question 1.0): the reference
implementation it replaces called it FACTUAL, because its patterns matched neither
"preferences" nor "coding" and counted "what" and "are".
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from retrievers.multi_strategy.identifiers import find_identifiers, identifier_parts, split_identifier
from retrievers.params import ParamError, Params, param
from retrievers.text import words
from retrievers.timeparse.expressions import TimeExpression, extract_time_expressions

__all__ = [
    "ANALYZED_INTENTS",
    "DEFAULT_RULES",
    "FEATURES",
    "INTENTS",
    "KEYWORD_STOPWORDS",
    "REQUIRED_INTENTS",
    "AnalyzerParams",
    "IntentRule",
    "QueryAnalysis",
    "QueryAnalyzer",
    "parse_rules",
]

Intent = Literal["FACTUAL", "TEMPORAL", "CODE", "PREFERENCE", "MIXED", "CONVERSATIONAL"]
AnalyzedIntent = Literal["FACTUAL", "TEMPORAL", "CODE", "PREFERENCE"]
Feature = Literal["time_expression", "code_identifier"]

#: every intent a query can get; MIXED is derived (several intents score alike), never a rule's;
#: CONVERSATIONAL (Memory-Arc's intent of a query no pattern matched) is only ever a default_intent
INTENTS: tuple[str, ...] = typing.get_args(Intent)
#: the intents every ``weights`` table needs a row for (CONVERSATIONAL only when it is the default)
REQUIRED_INTENTS: tuple[str, ...] = tuple(intent for intent in INTENTS if intent != "CONVERSATIONAL")
ANALYZED_INTENTS: tuple[str, ...] = typing.get_args(AnalyzedIntent)
FEATURES: tuple[str, ...] = typing.get_args(Feature)

#: The default rule table (the same table is spelled out in conf/retriever/multi_strategy.yaml).
DEFAULT_RULES: tuple[Mapping[str, Any], ...] = (
    # TEMPORAL: the question asks for a time, mentions one, or asks about order or recency
    {"intent": "TEMPORAL", "feature": "time_expression", "weight": 2.0},
    {
        "intent": "TEMPORAL",
        "pattern": r"^\W*(when|what time|what date|what day|what year|which year|which month|which day|how long ago|since when)\b",
        "weight": 2.0,
    },
    {"intent": "TEMPORAL", "pattern": r"\bhow long\b", "weight": 2.0},
    {
        "intent": "TEMPORAL",
        "pattern": r"\b(recent|recently|lately|latest|newest|oldest|earliest|last time|first time|ago|earlier|before|after|since|until)\b",
        "weight": 1.0,
    },
    # CODE: identifiers, programming vocabulary, language and library names
    {"intent": "CODE", "feature": "code_identifier", "weight": 2.0},
    {
        "intent": "CODE",
        "pattern": r"\b(functions?|methods?|class(es)?|modules?|packages?|librar(y|ies)|api|variables?|parameters?|arguments?|exceptions?|traceback|stack ?trace|bugs?|compile[rd]?|imports?|scripts?|regex|implement(ation|ed|s)?|def|snippet|refactor(ing)?|debug(ging)?)\b",
        "weight": 1.0,
    },
    {"intent": "CODE", "pattern": r"\b(code|coding|program|programming|programmer)\b", "weight": 1.0},
    {
        "intent": "CODE",
        "pattern": r"\b(python|javascript|typescript|java|golang|rust|ruby|php|kotlin|swift|sql|bash|numpy|pandas|django|flask|pytorch|tensorflow|json|yaml|regexp?)\b|\bc(\+\+|#)(?!\w)",
        "weight": 1.5,
    },
    # PREFERENCE: likes, dislikes, favourites, tastes
    {
        "intent": "PREFERENCE",
        "pattern": r"\b(prefer|prefers|preferred|preference|preferences|favorite|favourite|favorites|favourites)\b",
        "weight": 2.0,
    },
    {
        "intent": "PREFERENCE",
        "pattern": r"\b(like|likes|love|loves|enjoy|enjoys|hate|hates|dislike|dislikes|fond of|rather|taste|tastes|style|opinion|opinions)\b",
        "weight": 1.5,
    },
    # FACTUAL: a question for a fact
    {
        "intent": "FACTUAL",
        "pattern": r"^\W*(what|who|whom|whose|where|which|how many|how much|how|is|are|was|were|does|do|did|define|explain|describe|tell me about|name)\b",
        "weight": 1.0,
    },
)

_KEYWORD_STOPWORD_TEXT = """a about above after again against all am an and any are aren as at be because been before
    being below between both but by can could did didn do does doesn doing don down during each few
    for from further had has have having he her here hers herself him himself his how i if in into
    is isn it its itself just me more most my myself no nor not now of off on once only or other
    our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was wasn we
    were weren what when where which while who whom whose why will with would you your yours
    yourself yourselves tell get got also ever many much"""
#: Words that carry no topic: dropped from keywords (BM25 itself uses the store's tokenizer).
KEYWORD_STOPWORDS: frozenset[str] = frozenset(_KEYWORD_STOPWORD_TEXT.split())


@dataclass(frozen=True)
class IntentRule(Params):
    """One row of the rule table: ``intent`` gets ``weight`` when ``pattern`` is found in the
    query (case-insensitive) or when ``feature`` is present."""

    intent: AnalyzedIntent = param(doc="the intent the rule votes for (MIXED is derived, never a rule's)")
    weight: float = param(1.0, low=0.0, low_open=True, doc="added to the intent's score when the rule fires")
    pattern: str | None = param(None, non_empty=True, doc="a regular expression (give pattern or feature)")
    feature: Feature | None = param(None, doc="time_expression | code_identifier (give pattern or feature)")

    def check(self) -> None:
        if (self.pattern is None) == (self.feature is None):
            given = "both" if self.pattern is not None else "neither"
            raise self.fail("pattern", f"or feature: a rule needs exactly one of them, got {given}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as error:
                raise self.fail(
                    "pattern", f"{self.pattern!r} is not a valid regular expression: {error}"
                ) from None


def parse_rules(rules: Sequence[Mapping[str, Any]]) -> tuple[IntentRule, ...]:
    """A rule table given as plain data (a list of mappings), validated; an error names the rule
    and its key (``rules[2].weight must be ...``)."""
    parsed = []
    for index, rule in enumerate(rules):
        where = f"rules[{index}]"
        if isinstance(rule, Mapping) and "intent" not in rule:
            raise ParamError(
                f"{where}.intent", f"{where}.intent is required: one of {list(ANALYZED_INTENTS)}"
            )
        try:
            parsed.append(IntentRule.from_dict(rule, where=where))
        except ParamError as error:
            if error.key.startswith(where):
                raise
            raise ParamError(f"{where}.{error.key}", f"{where}.{error}") from None
    return tuple(parsed)


@dataclass(frozen=True)
class AnalyzerParams(Params):
    """The analyser's settings (the multi-strategy retriever's parameters include them)."""

    rules: tuple[Mapping[str, Any], ...] | None = param(
        None,
        non_empty=True,
        doc="the rule table: [{intent, weight, pattern | feature}]; null = DEFAULT_RULES",
    )
    mixed_ratio: float = param(
        0.75, low=0.0, high=1.0, low_open=True, doc="MIXED when the runner-up reaches this x the best score"
    )
    min_intent_score: float = param(
        1.0, low=0.0, high=1e6, doc="below it no intent is chosen: default_intent"
    )
    default_intent: Intent = param(
        "FACTUAL",
        doc="the intent when no rule reaches min_intent_score (CONVERSATIONAL: Memory-Arc's, which runs "
        "its own weights row)",
    )
    keyword_min_length: int = param(
        1, low=1, high=100, doc="keywords shorter than this are dropped (Memory-Arc: 3, its len(word) > 2)"
    )
    max_keywords: int | None = param(
        None, low=1, high=10_000, doc="keep only the first this many keywords (Memory-Arc: 10); null = all"
    )

    def check(self) -> None:
        if self.rules is not None:
            parse_rules(self.rules)


@dataclass(frozen=True)
class QueryAnalysis:
    """What the analyser found in one query."""

    query: str
    intent: str
    scores: tuple[tuple[str, float], ...]  # per analysed intent, in ANALYZED_INTENTS order
    time_expressions: tuple[TimeExpression, ...]
    identifiers: tuple[str, ...]
    keywords: tuple[str, ...]

    @property
    def structural_terms(self) -> frozenset[str]:
        """Stemmed identifier parts of the identifiers and keywords, for the structural strategy."""
        parts: set[str] = set()
        for identifier in self.identifiers:
            parts |= identifier_parts(split_identifier(identifier))
        parts |= identifier_parts(list(self.keywords))
        return frozenset(parts)


class QueryAnalyzer:
    """Deterministic intent classification and extraction (see the module docstring).

    Built as ``QueryAnalyzer(**settings)`` (``rules``, ``mixed_ratio``, ``min_intent_score``,
    ``default_intent``: see :class:`AnalyzerParams`) or ``QueryAnalyzer(params)`` with an
    :class:`AnalyzerParams` (a retriever passes its own parameters)."""

    def __init__(self, params: AnalyzerParams | None = None, /, **settings: Any) -> None:
        if params is not None and settings:
            raise ParamError(
                sorted(settings)[0], "give the analyser's settings as params or as keywords, not both"
            )
        self.params = params if params is not None else AnalyzerParams.from_dict(settings)
        self.rules = parse_rules(DEFAULT_RULES if self.params.rules is None else self.params.rules)
        self._compiled = tuple(
            (rule, None if rule.pattern is None else re.compile(rule.pattern, re.IGNORECASE))
            for rule in self.rules
        )

    @staticmethod
    def identifiers(query: str) -> tuple[str, ...]:
        """Code identifiers in ``query`` (in order of appearance, each once)."""
        return find_identifiers(query)

    def keywords(self, query: str) -> tuple[str, ...]:
        """The query's words (:func:`retrievers.text.words`) that are not stopwords and have at least
        ``keyword_min_length`` characters, each once, in order; the first ``max_keywords`` of them."""
        minimum = self.params.keyword_min_length
        found = tuple(
            dict.fromkeys(
                word for word in words(query) if word not in KEYWORD_STOPWORDS and len(word) >= minimum
            )
        )
        limit = self.params.max_keywords
        return found if limit is None else found[:limit]

    def analyze(self, query: str) -> QueryAnalysis:
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {type(query).__name__}")
        time_expressions = extract_time_expressions(query)
        identifiers = self.identifiers(query)
        features = {"time_expression": bool(time_expressions), "code_identifier": bool(identifiers)}
        scores = dict.fromkeys(ANALYZED_INTENTS, 0.0)
        for rule, pattern in self._compiled:
            fired = (
                features[rule.feature]
                if rule.feature is not None
                else bool(pattern and pattern.search(query))
            )
            if fired:
                scores[rule.intent] += rule.weight
        return QueryAnalysis(
            query=query,
            intent=self.classify(scores),
            scores=tuple(scores.items()),
            time_expressions=time_expressions,
            identifiers=identifiers,
            keywords=self.keywords(query),
        )

    def classify(self, scores: Mapping[str, float]) -> str:
        """The intent for per-intent ``scores`` (see the module docstring)."""
        minimum = self.params.min_intent_score
        ranked = sorted(
            ((score, intent) for intent, score in scores.items() if score >= minimum and score > 0),
            key=lambda item: (-item[0], ANALYZED_INTENTS.index(item[1])),
        )
        if not ranked:
            return self.params.default_intent
        if len(ranked) > 1 and ranked[1][0] >= self.params.mixed_ratio * ranked[0][0]:
            return "MIXED"
        return ranked[0][1]
