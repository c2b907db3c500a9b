"""Rule-based, deterministic query analysis for the multi-strategy retriever.

:class:`QueryAnalyzer` classifies a query as TEMPORAL, CODE, PREFERENCE, FACTUAL or MIXED and
extracts what the strategies need: time expressions (:mod:`retrievers.timeparse`), code
identifiers (snake_case, camelCase, dotted paths, file names, calls) and keywords.

The classification is a table, not a chain of ifs. Each rule names an intent, a weight and
either a regular expression (searched case-insensitively in the query) or a feature
(``time_expression``: a time expression was found; ``code_identifier``: an identifier was
found). An intent's score is the sum of the weights of its rules that fire. Then:

- no intent reaches ``min_score``: ``default_intent`` (FACTUAL);
- otherwise the best intent, unless the runner-up reaches ``mixed_ratio`` x the best score
  (a tie included): MIXED.

The default table (:data:`DEFAULT_RULES`) gives "What are my coding preferences?" PREFERENCE
(``preferences`` 2.0 against ``coding`` 1.0 and the ``what`` question 1.0): the reference
implementation it replaces called it FACTUAL, because its patterns matched neither
"preferences" nor "coding" and counted "what" and "are".
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import Stemmer

from retrievers.timeparse import TimeExpression, extract_time_expressions

__all__ = [
    "ANALYZED_INTENTS",
    "DEFAULT_RULES",
    "FEATURES",
    "IDENTIFIER_PATTERNS",
    "INTENTS",
    "KEYWORD_STOPWORDS",
    "IntentRule",
    "QueryAnalysis",
    "QueryAnalyzer",
    "identifier_parts",
    "split_identifier",
]

#: every intent a query can get; MIXED is derived (several intents score alike), never a rule's
INTENTS: tuple[str, ...] = ("FACTUAL", "TEMPORAL", "CODE", "PREFERENCE", "MIXED")
ANALYZED_INTENTS: tuple[str, ...] = ("FACTUAL", "TEMPORAL", "CODE", "PREFERENCE")
FEATURES: tuple[str, ...] = ("time_expression", "code_identifier")

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

#: (kind, pattern) for code identifiers; all kinds are collected, duplicates dropped.
IDENTIFIER_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "file",
        r"(?<![\w/.-])[\w.-]*\w\.(?:py|pyi|ipynb|js|jsx|ts|tsx|java|go|rs|c|cc|cpp|h|hpp|rb|php|cs|kt|swift|scala|sh|md|json|ya?ml|toml|ini|cfg|txt|sql|html|css)\b",
    ),
    ("path", r"(?<![\w/])(?:[\w.-]+/)+[\w.-]*\w"),
    ("call", r"\b[A-Za-z_]\w*(?=\s*\()"),
    ("dotted", r"\b[A-Za-z_]\w+(?:\.[A-Za-z_]\w+)+\b"),
    ("snake", r"\b_*[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b|\b_+[A-Za-z]\w*\b"),
    ("camel", r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b"),
    ("pascal", r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b"),
)
_IDENTIFIER_RES = tuple((kind, re.compile(pattern)) for kind, pattern in IDENTIFIER_PATTERNS)

#: Words that carry no topic: dropped from keywords (BM25 itself uses the store's tokenizer).
KEYWORD_STOPWORDS: frozenset[str] = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "didn",
        "do",
        "does",
        "doesn",
        "doing",
        "don",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "isn",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "wasn",
        "we",
        "were",
        "weren",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "tell",
        "get",
        "got",
        "also",
        "ever",
        "many",
        "much",
    ]
)

_WORD_RE = re.compile(r"(?u)\b\w\w+\b")
_CAMEL_SPLIT_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_PART_RE = re.compile(r"[A-Za-z0-9]+")
_STEMMER = Stemmer.Stemmer("english")


def split_identifier(identifier: str) -> list[str]:
    """Lowercase word parts of an identifier: ``parseHTTPResponse_v2`` -> parse, http, response, v2;
    ``os.path.join`` -> os, path, join; ``src/io_utils.py`` -> src, io, utils, py."""
    parts: list[str] = []
    for chunk in _PART_RE.findall(identifier):
        parts += [piece.lower() for piece in _CAMEL_SPLIT_RE.split(chunk) if piece]
    return parts


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


def identifier_parts(words: Sequence[str]) -> frozenset[str]:
    """Stemmed parts of ``words`` plus every adjacent pair joined (``read``, ``only`` ->
    ``readonly``), so that ``readonly`` in a query meets ``is_read_only`` in a name."""
    parts = [_stem(word) for word in words if word]
    joined = [_stem(a + b) for a, b in itertools.pairwise(words)]
    return frozenset(parts + joined)


@dataclass(frozen=True)
class IntentRule:
    """One row of the rule table: ``intent`` gets ``weight`` when ``pattern`` is found in the
    query (case-insensitive) or when ``feature`` is present."""

    intent: str
    weight: float = 1.0
    pattern: str | None = None
    feature: str | None = None

    def __post_init__(self) -> None:
        if self.intent not in ANALYZED_INTENTS:
            raise ValueError(
                f"rule intent must be one of {list(ANALYZED_INTENTS)} (MIXED is derived), got {self.intent!r}"
            )
        if isinstance(self.weight, bool) or not isinstance(self.weight, int | float):
            raise ValueError(f"rule weight must be a number, got {self.weight!r}")
        if not math.isfinite(self.weight) or self.weight <= 0:
            raise ValueError(f"rule weight must be finite and > 0, got {self.weight}")
        if (self.pattern is None) == (self.feature is None):
            raise ValueError(f"a rule needs exactly one of 'pattern' or 'feature' (intent {self.intent})")
        if self.feature is not None and self.feature not in FEATURES:
            raise ValueError(f"rule feature must be one of {list(FEATURES)}, got {self.feature!r}")
        if self.pattern is not None:
            if not isinstance(self.pattern, str) or not self.pattern:
                raise ValueError(f"rule pattern must be a non-empty string, got {self.pattern!r}")
            try:
                re.compile(self.pattern)
            except re.error as error:
                raise ValueError(
                    f"rule pattern {self.pattern!r} is not a valid regular expression: {error}"
                ) from None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], index: int) -> IntentRule:
        allowed = {"intent", "weight", "pattern", "feature"}
        if not isinstance(values, Mapping):
            raise ValueError(f"rules[{index}] must be a mapping with keys {sorted(allowed)}, got {values!r}")
        unknown = sorted(set(values) - allowed)
        if unknown:
            raise ValueError(f"rules[{index}]: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
        if "intent" not in values:
            raise ValueError(f"rules[{index}]: missing 'intent'")
        try:
            return cls(**dict(values))
        except ValueError as error:
            raise ValueError(f"rules[{index}]: {error}") from None


def parse_rules(rules: Sequence[Mapping[str, Any]]) -> tuple[IntentRule, ...]:
    """Validate a rule table given as plain data (a list of mappings)."""
    if isinstance(rules, str | bytes | Mapping) or not isinstance(rules, Sequence):
        raise ValueError(f"rules must be a list of mappings, got {type(rules).__name__}")
    if not rules:
        raise ValueError("rules must hold at least one rule")
    return tuple(IntentRule.from_dict(rule, index) for index, rule in enumerate(rules))


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
    """Deterministic intent classification and extraction (see the module docstring)."""

    def __init__(
        self,
        rules: Sequence[Mapping[str, Any]] | None = None,
        *,
        mixed_ratio: float = 0.75,
        min_score: float = 1.0,
        default_intent: str = "FACTUAL",
    ) -> None:
        self.rules = parse_rules(DEFAULT_RULES if rules is None else rules)
        if (
            isinstance(mixed_ratio, bool)
            or not isinstance(mixed_ratio, int | float)
            or not 0 < mixed_ratio <= 1
        ):
            raise ValueError(f"mixed_ratio must be in (0, 1], got {mixed_ratio!r}")
        if (
            isinstance(min_score, bool)
            or not isinstance(min_score, int | float)
            or not 0 <= min_score < math.inf
        ):
            raise ValueError(f"min_score must be a finite number >= 0, got {min_score!r}")
        if default_intent not in INTENTS:
            raise ValueError(f"default_intent must be one of {list(INTENTS)}, got {default_intent!r}")
        self.mixed_ratio = float(mixed_ratio)
        self.min_score = float(min_score)
        self.default_intent = default_intent
        self._compiled = tuple(
            (rule, None if rule.pattern is None else re.compile(rule.pattern, re.IGNORECASE))
            for rule in self.rules
        )

    @staticmethod
    def identifiers(query: str) -> tuple[str, ...]:
        """Code identifiers in ``query`` (in order of appearance, each once)."""
        found: list[tuple[int, str]] = []
        seen: set[str] = set()
        for _kind, pattern in _IDENTIFIER_RES:
            for match in pattern.finditer(query):
                text = match.group(0)
                if text not in seen:
                    seen.add(text)
                    found.append((match.start(), text))
        # a name inside a longer one found at the same place (``utils`` in ``utils.py``) adds nothing
        found.sort(key=lambda item: (item[0], -len(item[1])))
        kept: list[tuple[int, str]] = []
        for start, text in found:
            if any(start >= s and start + len(text) <= s + len(t) for s, t in kept):
                continue
            kept.append((start, text))
        return tuple(text for _, text in kept)

    @staticmethod
    def keywords(query: str) -> tuple[str, ...]:
        """Lowercase words of 2+ characters that are not stopwords, each once, in order."""
        words: list[str] = []
        for word in _WORD_RE.findall(query.lower()):
            if word not in KEYWORD_STOPWORDS and word not in words:
                words.append(word)
        return tuple(words)

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
        ranked = sorted(
            ((score, intent) for intent, score in scores.items() if score >= self.min_score and score > 0),
            key=lambda item: (-item[0], ANALYZED_INTENTS.index(item[1])),
        )
        if not ranked:
            return self.default_intent
        if len(ranked) > 1 and ranked[1][0] >= self.mixed_ratio * ranked[0][0]:
            return "MIXED"
        return ranked[0][1]
