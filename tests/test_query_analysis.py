"""The rule-based query analyser: every rule with real-looking queries, the MIXED and default
cases, identifiers of every kind, keywords, rule tables from config, and bad rule tables."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from retrievers.multi_strategy import DEFAULT_RULES, QueryAnalyzer
from retrievers.multi_strategy.identifiers import IDENTIFIER_PATTERNS, identifier_parts, split_identifier
from retrievers.params import ParamError

REPO = Path(__file__).resolve().parents[1]
ANALYZER = QueryAnalyzer()


def scores(query: str) -> dict[str, float]:
    return dict(ANALYZER.analyze(query).scores)


@pytest.mark.parametrize(
    ("query", "intent"),
    [
        # the reference implementation called this FACTUAL ("what", "are"); preferences 2.0 beats
        # coding 1.0 and the question word 1.0
        ("What are my coding preferences?", "PREFERENCE"),
        ("What is Caroline's favorite book?", "PREFERENCE"),
        ("Which coffee does the user prefer?", "PREFERENCE"),
        ("Does Melanie enjoy pottery?", "PREFERENCE"),
        ("When did Caroline go to the LGBTQ support group?", "TEMPORAL"),
        ("Which year did Audrey adopt the first three of her dogs?", "TEMPORAL"),
        ("What did I work on last week?", "TEMPORAL"),
        ("What did we decide on 8 May, 2023?", "TEMPORAL"),
        ("How long ago was Caroline's 18th birthday?", "TEMPORAL"),
        ("How long did it take James to finish his game?", "TEMPORAL"),
        ("Where is parse_config defined?", "CODE"),
        ("Why does getUserName() return None?", "CODE"),
        ("How does os.path.join handle absolute paths?", "CODE"),
        ("What's in src/retrievers/store.py?", "CODE"),
        ("python check file is readonly", "CODE"),
        ("declaring empty numpy array in python", "CODE"),
        ("Who is Caroline?", "FACTUAL"),
        ("How many pets does James have?", "FACTUAL"),
        ("Tell me about the trip to Canada", "FACTUAL"),
        ("What changed in parse_config yesterday?", "MIXED"),  # CODE 2 = TEMPORAL 2
        ("Which city was John in before traveling to Chicago?", "MIXED"),  # FACTUAL 1 = TEMPORAL 1
        ("how to write a function that reverses a string", "MIXED"),  # FACTUAL 1 = CODE 1
        ("hello there", "FACTUAL"),  # no rule fires: the default intent
    ],
)
def test_intents_of_real_queries(query: str, intent: str) -> None:
    assert ANALYZER.analyze(query).intent == intent


def test_each_default_rule_fires_on_its_own_example() -> None:
    """One query per rule, each scoring exactly that rule's weight for its intent."""
    examples = [
        ("remind me of anything from 2022", "TEMPORAL", 2.0),  # time_expression feature
        ("When did Nate win his first tournament", "TEMPORAL", 2.0),
        ("the drive took how long", "TEMPORAL", 2.0),
        ("Tim read it recently", "TEMPORAL", 1.0),
        ("look at read_file", "CODE", 2.0),  # code_identifier feature
        ("the bug report", "CODE", 1.0),
        ("the coding session", "CODE", 1.0),
        ("numpy arrays", "CODE", 1.5),
        ("preferences", "PREFERENCE", 2.0),
        ("she loves hiking", "PREFERENCE", 1.5),
        ("where was the concert", "FACTUAL", 1.0),
    ]
    assert len(examples) == len(DEFAULT_RULES)
    for (query, intent, weight), rule in zip(examples, DEFAULT_RULES, strict=True):
        assert rule["intent"] == intent and rule["weight"] == weight
        got = scores(query)
        assert got[intent] == weight, (query, got)
        assert sum(got.values()) == weight, (query, got)  # no other rule fires


def test_c_plus_plus_and_c_sharp() -> None:
    assert scores("c++ templates")["CODE"] == 1.5
    assert scores("async in C# and c++")["CODE"] == 1.5


def test_mixed_ratio_and_min_score_are_parameters() -> None:
    query = "What are my coding preferences?"  # PREFERENCE 2, CODE 1, FACTUAL 1
    assert QueryAnalyzer(mixed_ratio=0.5).analyze(query).intent == "MIXED"
    assert QueryAnalyzer(min_intent_score=2.5).analyze(query).intent == "FACTUAL"  # nothing reaches 2.5
    assert QueryAnalyzer(default_intent="MIXED").analyze("hello there").intent == "MIXED"


def test_the_rules_are_data() -> None:
    rules = [*DEFAULT_RULES, {"intent": "PREFERENCE", "pattern": r"\bcoding\b", "weight": 5.0}]
    assert QueryAnalyzer(rules=rules).analyze("Who reviewed my coding?").intent == "PREFERENCE"
    only = [{"intent": "CODE", "pattern": "stack", "weight": 1}]
    assert QueryAnalyzer(rules=only).analyze("When did the stack overflow?").intent == "CODE"


def test_config_table_equals_the_default_table() -> None:
    config = yaml.safe_load((REPO / "conf/retriever/multi_strategy.yaml").read_text())
    assert config["rules"] == [dict(rule) for rule in DEFAULT_RULES]


@pytest.mark.parametrize(
    ("query", "identifiers"),
    [
        ("open src/io_utils.py please", ("src/io_utils.py",)),  # a path holding a file name
        ("what does loader.py import", ("loader.py",)),
        ("is readFile() async", ("readFile",)),
        ("numpy.linalg.norm vs np.sqrt", ("numpy.linalg.norm", "np.sqrt")),
        ("call parse_config and _private_helper", ("parse_config", "_private_helper")),
        ("where is getUserName", ("getUserName",)),
        ("HttpClient timeouts", ("HttpClient",)),
        ("plain words only, e.g. the U.S. in 3.5 years", ()),
    ],
)
def test_identifiers_of_every_kind(query: str, identifiers: tuple[str, ...]) -> None:
    assert QueryAnalyzer.identifiers(query) == identifiers


def test_identifier_pattern_kinds() -> None:
    assert [kind for kind, _ in IDENTIFIER_PATTERNS] == [
        "file",
        "path",
        "call",
        "dotted",
        "snake",
        "camel",
        "pascal",
    ]


def test_split_identifier_and_parts() -> None:
    assert split_identifier("parseHTTPResponse_v2") == ["parse", "http", "response", "v2"]
    assert split_identifier("os.path.join") == ["os", "path", "join"]
    assert split_identifier("src/io_utils.py") == ["src", "io", "utils", "py"]
    assert split_identifier("is_read_only") == ["is", "read", "only"]
    # stemmed parts plus adjacent pairs joined: "readonly" in a query meets is_read_only
    assert identifier_parts(["is", "read", "only"]) == {"is", "read", "onli", "isread", "readon"}
    assert identifier_parts(["readonly"]) == {"readon"}


def test_keywords_drop_stopwords_and_repeats() -> None:
    analysis = ANALYZER.analyze("What are my coding preferences? My CODING preferences!")
    assert analysis.keywords == ("coding", "preferences")
    assert ANALYZER.analyze("What did she do?").keywords == ()
    # the project's words (retrievers.text.words): punctuation separates, 1-character tokens go
    assert ANALYZER.analyze("what's NOT (p53)?").keywords == ("p53",)


def test_time_expressions_are_extracted() -> None:
    analysis = ANALYZER.analyze("What did Caroline do on 8 May, 2023 and last week?")
    assert [e.text for e in analysis.time_expressions] == ["8 May, 2023", "last week"]


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (
            [{"intent": "URGENT", "pattern": "now"}],
            r"^rules\[0\].intent must be one of \['FACTUAL', 'TEMPORAL', 'CODE', 'PREFERENCE'\], got 'URGENT'$",
        ),
        ([{"intent": "MIXED", "pattern": "and"}], r"^rules\[0\].intent must be one of .*got 'MIXED'$"),
        (
            [*DEFAULT_RULES, {"intent": "CODE", "pattern": "(unclosed"}],
            r"^rules\[11\].pattern '\(unclosed' is not a valid regular expression",
        ),
        (
            [{"intent": "CODE", "pattern": "x", "feature": "code_identifier"}],
            r"^rules\[0\].pattern or feature: a rule needs exactly one of them, got both$",
        ),
        (
            [{"intent": "CODE"}],
            r"^rules\[0\].pattern or feature: a rule needs exactly one of them, got neither$",
        ),
        ([{"intent": "CODE", "feature": "emoji"}], r"^rules\[0\].feature must be one of .*got 'emoji'"),
        (
            [{"intent": "CODE", "pattern": "x", "weight": -1}],
            r"^rules\[0\].weight must be a number in \(0, inf\], got -1$",
        ),
        ([{"intent": "CODE", "pattern": ""}], r"^rules\[0\].pattern must be a non-empty string"),
        (
            [{"intent": "CODE", "pattern": "x", "wieght": 2}],
            r"^unknown rules\[0\] key\(s\) \['wieght'\]; allowed: \['intent', 'weight', 'pattern', 'feature'\]$",
        ),
        ([{"pattern": "x"}], r"^rules\[0\].intent is required"),
        (["not a rule"], r"^rules\[0\] must be a mapping"),
        ([], "^rules must not be empty$"),
        ("not a list", "^rules must be a list or null, got 'not a list'$"),
    ],
)
def test_bad_rule_tables(rules: object, message: str) -> None:
    with pytest.raises(ParamError, match=message):
        QueryAnalyzer(rules=rules)


def test_bad_analyzer_settings() -> None:
    with pytest.raises(ParamError, match=r"^mixed_ratio must be a number in \(0, 1\], got 0$"):
        QueryAnalyzer(mixed_ratio=0)
    with pytest.raises(ParamError, match=r"^default_intent must be one of \[.*\], got 'SMALLTALK'$"):
        QueryAnalyzer(default_intent="SMALLTALK")
    with pytest.raises(ParamError, match=r"^min_intent_score must be a number in \[0, 1000000\], got -1$"):
        QueryAnalyzer(min_intent_score=-1)
    with pytest.raises(ParamError, match=r"unknown key\(s\) \['min_score'\]"):
        QueryAnalyzer(min_score=1.0)
