"""find() and search(): typed results by context type, the rule-based analyser, the LLM analyser
against a local OpenAI-compatible server on 127.0.0.1 (good, slow, not JSON, not a chat answer, a bad plan, HTTP errors), and merging."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
from http_servers import ChatServer

from retrievers import ContextNode, Document, StoreConfig
from retrievers.builders import build_store
from retrievers.builders.hierarchy import embed_directories
from retrievers.hierarchical import HierarchicalRetriever
from retrievers.hierarchical.intent import (
    ContextType,
    LLMIntentAnalyzer,
    Message,
    PassthroughAnalyzer,
    PlanError,
    RuleBasedAnalyzer,
    Session,
    TypedQuery,
    parse_plan,
)
from retrievers.hierarchical.matches import MatchedContext, merge_matches, priority_weight
from retrievers.types import EncodeKind

MEM, RES, SKL = "viking://user/memories", "viking://resources", "viking://agent/skills"


def unit(x: float) -> list[float]:
    return [x, math.sqrt(1.0 - x * x), 0.0]


class QueryEmbedder:
    """Documents and abstracts from a table; every query is (1, 0, 0), so a node's score is the
    first component of its vector."""

    name = "query-table"
    dim = 3
    TABLE: ClassVar[dict[str, list[float]]] = {
        "mem root": unit(0.5),
        "res root": unit(0.75),
        "skill root": unit(0.25),
        "doc m1": unit(0.5),
        "doc r1": unit(1.0),
        "doc s1": unit(0.75),
    }

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        rows = [self.TABLE[text] if kind == "document" else [1.0, 0.0, 0.0] for text in texts]
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), 3)


@pytest.fixture
def three_roots() -> HierarchicalRetriever:
    embedder = QueryEmbedder()
    docs = [Document(id=name, text=f"doc {name}") for name in ("m1", "r1", "s1")]
    store = build_store(docs, embedder, StoreConfig())
    nodes = [
        ContextNode(MEM, 0, None, abstract="mem root"),
        ContextNode(RES, 0, None, abstract="res root"),
        ContextNode(SKL, 0, None, abstract="skill root"),
        ContextNode(f"{MEM}/m1", 2, MEM, abstract="m1 memory", doc_id="m1"),
        ContextNode(f"{RES}/r1", 2, RES, abstract="r1 resource", doc_id="r1"),
        ContextNode(f"{SKL}/s1", 2, SKL, abstract="s1 skill", doc_id="s1"),
    ]
    store = store.with_parts(tree=embed_directories(nodes, embedder, store.embeddings, store.row_of))
    return HierarchicalRetriever(store, embedder, max_convergence_rounds=None)


# With alpha 0.5: m1 = .5*.5 + .5*.5 = .5, r1 = .5*1 + .5*.75 = .875, s1 = .5*.75 + .5*.25 = .5


def test_find_buckets_by_context_type(three_roots: HierarchicalRetriever) -> None:
    found = three_roots.find("anything", top_k=5)
    assert [(m.uri, m.score) for m in found.memories] == [(f"{MEM}/m1", 0.5)]
    assert [(m.uri, m.score) for m in found.resources] == [(f"{RES}/r1", 0.875)]
    assert [(m.uri, m.score) for m in found.skills] == [(f"{SKL}/s1", 0.5)]
    assert found.total == 3 and [m.doc_id for m in found] == ["m1", "r1", "s1"]
    match = found.resources[0]
    assert (match.context_type, match.level, match.abstract) == (ContextType.RESOURCE, 2, "r1 resource")
    assert match.provenance["directory_path"] == (RES,)
    assert found.plan is not None and found.plan.queries == (TypedQuery("anything", priority=1),)
    only_skills = three_roots.find("anything", top_k=5, context_type=ContextType.SKILL)
    assert (only_skills.memories, only_skills.resources) == ((), ()) and len(only_skills.skills) == 1
    assert only_skills.skills[0].provenance["stats"]["nodes_in_scope"] == 2  # the skills root and s1


def test_search_with_rule_based_analyser(three_roots: HierarchicalRetriever) -> None:
    found = three_roots.search(
        "How do I install the linter? What did I say about my trip?", analyzer=RuleBasedAnalyzer(), top_k=5
    )
    assert found.plan is not None
    assert [(q.context_type, q.priority) for q in found.plan.queries] == [
        (ContextType.SKILL, 1),
        (ContextType.MEMORY, 2),
    ]
    # the skill query has priority 1 (weight 1.0), the memory query priority 2 (weight 0.8)
    assert [(m.uri, m.score) for m in found.skills] == [(f"{SKL}/s1", 0.5)]
    assert [(m.uri, m.score) for m in found.memories] == [(f"{MEM}/m1", 0.5 * 0.8)]
    assert found.resources == ()
    assert found.memories[0].provenance["unweighted_score"] == 0.5
    assert found.memories[0].query == "What did I say about my trip?"


def test_search_defaults_to_passthrough_and_handles_an_empty_plan(three_roots: HierarchicalRetriever) -> None:
    assert three_roots.search("anything", top_k=5) == three_roots.find("anything", top_k=5)

    class Nothing:
        def analyze(self, query: str, session: Session | None = None) -> Any:
            return PassthroughAnalyzer().analyze("   ")

    empty = three_roots.search("anything", analyzer=Nothing())
    assert empty.total == 0 and empty.plan is not None and empty.plan.queries == ()


def test_rule_based_analyser() -> None:
    analyzer = RuleBasedAnalyzer()
    plan = analyzer.analyze("Steps to configure the proxy; papers about protein folding? my favourite editor")
    assert [(q.query, q.context_type, q.intent, q.priority) for q in plan.queries] == [
        ("Steps to configure the proxy", ContextType.SKILL, "procedure", 1),
        ("papers about protein folding?", None, "lookup", 2),
        ("my favourite editor", ContextType.MEMORY, "recall", 2),
    ]
    session = Session(
        messages=(Message("user", "Tell me about the Rust borrow checker"), Message("assistant", "Sure."))
    )
    resolved = analyzer.analyze("Why is it so strict?", session)
    assert [q.query for q in resolved.queries] == [
        "Why is it so strict?",
        "Why is it so strict? Tell me about the Rust borrow checker",
    ]
    assert resolved.queries[1].priority == 4
    many = analyzer.analyze("a? b? c? d? e? f? g?")
    assert len(many.queries) == 5
    assert analyzer.analyze("   ").queries == ()
    assert analyzer.analyze("x? x?").queries == (TypedQuery("x?", None, "lookup", 1),)  # repeats dropped


def _match(uri: str, kind: ContextType, score: float) -> MatchedContext:
    return MatchedContext(uri=uri, context_type=kind, level=2, abstract="", score=score)


def test_merge_dedups_weights_orders_and_limits() -> None:
    first = TypedQuery("q1", priority=1)  # weight 1.0
    third = TypedQuery("q3", priority=3)  # weight 0.6
    merged = merge_matches(
        [
            (first, [_match("r/a", ContextType.RESOURCE, 0.5), _match("r/b", ContextType.RESOURCE, 0.5)]),
            (third, [_match("r/a", ContextType.RESOURCE, 1.0), _match("r/c", ContextType.RESOURCE, -0.3)]),
            (third, [_match("m/x", ContextType.MEMORY, 0.2)]),
        ],
        limit_per_bucket=3,
    )
    # r/a: max(0.5 * 1.0, 1.0 * 0.6) = 0.6 from q3; r/b: 0.5; r/c: -0.3 / 0.6 = -0.5
    assert [(m.uri, m.score, m.query) for m in merged.resources] == [
        ("r/a", 0.6, "q3"),
        ("r/b", 0.5, "q1"),
        ("r/c", pytest.approx(-0.5), "q3"),
    ]
    assert [(m.uri, m.score) for m in merged.memories] == [("m/x", pytest.approx(0.12))]
    limited = merge_matches(
        [(first, [_match(f"r/{i}", ContextType.RESOURCE, 1.0) for i in "dcba"])], limit_per_bucket=2
    )
    assert [m.uri for m in limited.resources] == ["r/a", "r/b"]  # ties: URI order
    assert [priority_weight(p) for p in range(1, 6)] == [1.0, 0.8, 0.6, 0.4, 0.2]
    with pytest.raises(ValueError, match=r"^limit_per_bucket must be an integer in \[1, inf\], got 0$"):
        merge_matches([], limit_per_bucket=0)


def test_typed_query_validation() -> None:
    with pytest.raises(ValueError, match=r"^TypedQuery.priority must be an integer in \[1, 5\], got 6$"):
        TypedQuery("x", priority=6)
    with pytest.raises(ValueError, match=r"^TypedQuery.priority must be an integer in \[1, 5\], got True$"):
        TypedQuery("x", priority=True)
    with pytest.raises(ValueError, match="non-empty string"):
        TypedQuery(" ")


def test_parse_plan_is_strict() -> None:
    plan = parse_plan(
        '```json\n{"reasoning": "r", "queries": [{"query": "a", "context_type": "skill"}]}\n```'
    )
    assert plan.queries == (TypedQuery("a", ContextType.SKILL, "", 3),) and plan.reasoning == "r"
    assert parse_plan('{"queries": []}').queries == ()
    for bad, message in [
        ("not json", "not JSON"),
        ("[1]", "'queries' list"),
        ('{"queries": [{"query": ""}]}', r"queries\[0\].query"),
        ('{"queries": [{"query": "a", "context_type": "weather"}]}', "context_type must be"),
        ('{"queries": [{"query": "a", "priority": 9}]}', r"priority must be an integer in \[1, 5\]"),
        ('{"queries": [{"query": "a", "priority": true}]}', "priority"),
        (json.dumps({"queries": [{"query": str(i)} for i in range(6)]}), "at most 5"),
    ]:
        with pytest.raises(PlanError, match=message):
            parse_plan(bad)


# -- the LLM analyser against a local server ---------------------------------------------------------

GOOD_PLAN = {
    "reasoning": "the user asks for a procedure and a memory",
    "queries": [
        {"query": "install the linter", "context_type": "skill", "intent": "procedure", "priority": 1},
        {"query": "trip notes", "context_type": "memory", "intent": "recall", "priority": 2},
    ],
}


def plan_reply(body: dict[str, Any], mode: str) -> str:
    """A good plan, or (``badplan``) one whose query is not a string."""
    return '{"queries": [{"query": 3}]}' if mode == "badplan" else json.dumps(GOOD_PLAN)


@pytest.fixture
def server(chat_server_factory: Callable[..., ChatServer]) -> ChatServer:
    return chat_server_factory(plan_reply)


def test_llm_analyser_good_answer(server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "secret-123")
    analyzer = LLMIntentAnalyzer(server.url, "tiny-model", api_key_env="TEST_LLM_KEY", timeout=5)
    session = Session(messages=(Message("user", "I went to Lisbon"),), summary="travel chat")
    plan = analyzer.analyze("How do I install the linter, and what were my trip notes?", session)
    assert plan.fallback is None
    assert plan.queries == (
        TypedQuery("install the linter", ContextType.SKILL, "procedure", 1),
        TypedQuery("trip notes", ContextType.MEMORY, "recall", 2),
    )
    request = server.requests[-1]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer secret-123"
    assert request["body"]["model"] == "tiny-model" and request["body"]["temperature"] == 0
    prompt = request["body"]["messages"][-1]["content"]
    assert "travel chat" in prompt and "[user]: I went to Lisbon" in prompt and "trip notes?" in prompt


def test_llm_analyser_sends_no_key_when_unset(server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_LLM_KEY", raising=False)
    LLMIntentAnalyzer(server.url, "m", api_key_env="TEST_LLM_KEY").analyze("hello")
    assert "Authorization" not in server.requests[-1]["headers"]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("slow", "timeout"),
        ("error", "http"),
        ("not_json", "http"),
        ("badplan", "format"),
        ("not_chat", "format"),
    ],
)
def test_llm_analyser_falls_back_to_the_raw_query(server: ChatServer, mode: str, reason: str) -> None:
    server.mode = mode
    analyzer = LLMIntentAnalyzer(server.url, "m", timeout=0.05 if mode == "slow" else 5)
    plan = analyzer.analyze("  what did   I say? ")
    assert plan.queries == (TypedQuery("what did I say?", priority=1),)
    assert plan.fallback is not None and plan.fallback.startswith(reason), plan.fallback


def test_search_with_llm_analyser(server: ChatServer, three_roots: HierarchicalRetriever) -> None:
    found = three_roots.search("anything", analyzer=LLMIntentAnalyzer(server.url, "m"), top_k=5)
    assert [m.uri for m in found.skills] == [f"{SKL}/s1"] and [m.uri for m in found.memories] == [f"{MEM}/m1"]
    assert found.resources == ()
    server.mode = "error"
    fallback = three_roots.search("anything", analyzer=LLMIntentAnalyzer(server.url, "m"), top_k=5)
    assert fallback.plan is not None and fallback.plan.fallback is not None
    assert fallback.total == 3  # the raw query over every root


def test_llm_analyser_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="base_url must be an http"):
        LLMIntentAnalyzer("ftp://x", "m")
    with pytest.raises(ValueError, match=r"timeout must be in \(0, 600\]"):
        LLMIntentAnalyzer("http://127.0.0.1:1", "m", timeout=0)
    with pytest.raises(ValueError, match=r"^max_recent_messages must be an integer in \[0, 100\], got -1$"):
        LLMIntentAnalyzer("http://127.0.0.1:1", "m", max_recent_messages=-1)
