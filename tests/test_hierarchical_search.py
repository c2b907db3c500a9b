"""HierarchicalSearchRetriever: search() with intent analysis through the kernel. The session comes
from the retriever's scope (a conversation), never from query metadata; typed queries merge by
document with priority weights; the passthrough analyser equals retrieve(); a plan with no query
gives no results; bad parameters are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrievers import ContextStore, Document, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.hierarchical import (
    ContextType,
    HierarchicalRetriever,
    HierarchicalSearchRetriever,
    Message,
    PassthroughAnalyzer,
    QueryPlan,
    RuleBasedAnalyzer,
    Session,
    TypedQuery,
)
from retrievers.params import ParamError
from retrievers.store import StoreConfig

TEXTS = {
    ("c1", 1): ["we planned a hike in the alps", "pack the rain jackets", "see you saturday"],
    ("c1", 2): ["the hike was wet", "my boots are still drying", "next time the lakes"],
    ("c2", 1): ["i baked sourdough bread", "the starter is a week old", "it rose overnight"],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ContextStore:
    folder = tmp_path_factory.mktemp("talks")
    docs = [
        Document(
            id=f"{conv}_s{session}_t{turn}",
            text=text,
            metadata={"conversation": conv, "session": session, "turn_index": turn},
        )
        for (conv, session), texts in TEXTS.items()
        for turn, text in enumerate(texts)
    ]
    sessions = [
        {"conversation": "c1", "session": 1, "summary": "They planned a hike."},
        {"conversation": "c1", "session": 2, "summary": "The hike was wet."},
        {"conversation": "c2", "session": 1, "summary": "Bread."},
    ]
    (folder / "sessions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in sessions))
    config = StoreConfig.from_dict(
        {
            "hierarchy": {
                "builder": "metadata_path",
                "root_uri": "viking://user/memories",
                "path_keys": ["conversation", "session"],
                "summaries_file": "sessions.jsonl",
                "abstract_template": "{summary}",
                "overview": False,
            }
        }
    )
    embedder = TfidfEmbedder(dim=8).fit([doc.full_text for doc in docs])
    built = build_store(docs, embedder, config, source_folder=folder)
    built.test_embedder = embedder  # type: ignore[attr-defined]
    return built


def _conversation(store: ContextStore, conv: str) -> ContextStore:
    return store.restricted(store.metadata_mask("conversation", conv))


def test_session_from_the_scope(store: ContextStore) -> None:
    embedder = store.test_embedder  # type: ignore[attr-defined]
    retriever = HierarchicalSearchRetriever(_conversation(store, "c1"), embedder, session_messages=4)
    # c1's six turns ordered by (session, turn_index); the last four, role user; the summary is
    # the abstract of the last message's directory (session 2)
    assert retriever.session == Session(
        messages=tuple(Message("user", text) for text in ["see you saturday", *TEXTS[("c1", 2)]]),
        summary="The hike was wet.",
    )
    assert all("bread" not in message.content for message in retriever.session.messages)
    # no view (a flat corpus): no conversation, no session; session_source none: no session
    assert HierarchicalSearchRetriever(store, embedder).session == Session()
    assert HierarchicalSearchRetriever(
        _conversation(store, "c1"), embedder, session_source="none"
    ).session == (Session())
    no_summary = HierarchicalSearchRetriever(_conversation(store, "c2"), embedder, session_summary=False)
    assert no_summary.session.summary == "" and len(no_summary.session.messages) == 3


def test_passthrough_analyzer_equals_retrieve(store: ContextStore) -> None:
    embedder = store.test_embedder  # type: ignore[attr-defined]
    view = _conversation(store, "c1")
    plain = HierarchicalRetriever(view, embedder, alpha=1.0)
    search = HierarchicalSearchRetriever(view, embedder, alpha=1.0, analyzer=PassthroughAnalyzer())
    for query in ("hike in the alps", "wet boots"):
        expected = [(r.doc_id, r.score, r.uri) for r in plain.retrieve(query, 3)]
        got = search.retrieve(query, 3)
        assert [(r.doc_id, r.score, r.uri) for r in got] == expected
        assert got[0].provenance["typed_query"] == query and got[0].provenance["priority"] == 1
        assert got[0].provenance["stats"]["typed_queries"] == 1


class TwoQueries:
    """A plan of two typed queries: the question at priority 1, a rewrite at priority 3."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Session | None]] = []

    def analyze(self, query: str, session: Session | None = None) -> QueryPlan:
        self.seen.append((query, session))
        return QueryPlan(
            queries=(TypedQuery(query, None, "lookup", 1), TypedQuery("boots drying", None, "rewrite", 3))
        )


def test_typed_queries_merge_by_document_with_priority_weights(store: ContextStore) -> None:
    embedder = store.test_embedder  # type: ignore[attr-defined]
    view = _conversation(store, "c1")
    analyzer = TwoQueries()
    search = HierarchicalSearchRetriever(view, embedder, alpha=1.0, analyzer=analyzer)
    plain = HierarchicalRetriever(view, embedder, alpha=1.0)
    first = {r.doc_id: r.score for r in plain.retrieve("hike in the alps", 6)}
    second = {r.doc_id: r.score for r in plain.retrieve("boots drying", 6)}
    # each document keeps the best of score x (6 - priority) / 5 (divided for a negative score)
    weighted: dict[str, float] = {}
    for scores, weight in ((first, 1.0), (second, 0.6)):
        for doc, score in scores.items():
            value = score * weight if score >= 0 else score / weight
            weighted[doc] = max(weighted.get(doc, value), value)
    results = search.retrieve("hike in the alps", 6)
    assert {r.doc_id: r.score for r in results} == pytest.approx(weighted)
    assert analyzer.seen == [("hike in the alps", search.session)]  # the query text and the scope's session
    boots = next(r for r in results if r.doc_id == "c1_s2_t1")
    assert boots.provenance["typed_query"] in {"hike in the alps", "boots drying"}
    assert boots.provenance["stats"]["typed_queries"] == 2


class Silent:
    def analyze(self, query: str, session: Session | None = None) -> QueryPlan:
        return QueryPlan(queries=(), reasoning="nothing to retrieve")


def test_a_plan_without_queries_gives_no_results_and_a_typed_scope_can_empty_one(store: ContextStore) -> None:
    embedder = store.test_embedder  # type: ignore[attr-defined]
    view = _conversation(store, "c1")
    assert HierarchicalSearchRetriever(view, embedder, analyzer=Silent()).retrieve("hike", 5) == []
    # the rule analyser types "how to ..." as SKILL; this tree holds memories only: OpenViking
    # searches a typed query under its type's roots and finds nothing, typed_scope false searches all
    rules = RuleBasedAnalyzer()
    assert rules.analyze("how to pack for a hike").queries[0].context_type == ContextType.SKILL
    typed = HierarchicalSearchRetriever(view, embedder, analyzer=rules)
    assert typed.retrieve("how to pack for a hike", 5) == []
    untyped = HierarchicalSearchRetriever(view, embedder, analyzer=rules, typed_scope=False)
    assert untyped.retrieve("how to pack for a hike", 5)


def test_batch_equals_single(store: ContextStore) -> None:
    embedder = store.test_embedder  # type: ignore[attr-defined]
    search = HierarchicalSearchRetriever(_conversation(store, "c1"), embedder)
    queries = ["hike in the alps", "what did i say about it?", "how to dry boots"]
    assert search.retrieve_batch(queries, 4) == [search.retrieve(query, 4) for query in queries]


def test_bad_parameters_are_refused(store: ContextStore) -> None:
    embedder = store.test_embedder  # type: ignore[attr-defined]
    with pytest.raises(ParamError, match="analyzer must be null or an object with an analyze"):
        HierarchicalSearchRetriever(store, embedder, analyzer="rules")
    with pytest.raises(ParamError, match="session_source must be one of"):
        HierarchicalSearchRetriever(store, embedder, session_source="queries")
    with pytest.raises(ParamError, match="session_messages"):
        HierarchicalSearchRetriever(store, embedder, session_messages=-1)


def test_the_config_composes(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir

    from viking_eval.config import load_settings

    repo = Path(__file__).resolve().parents[1]
    with initialize_config_dir(config_dir=str(repo / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=hierarchical_search_locomo"])
    by_name = {spec.name: spec for spec in load_settings(cfg).retrievers}
    search = by_name["search"]
    assert search.target == "retrievers.hierarchical.HierarchicalSearchRetriever"
    assert search.params["stagnation_exit"] is False and search.params["alpha"] == 0.5  # openviking's
    assert search.params["analyzer"] is None  # the rule analyser
    assert by_name["search_no_session"].params["session_source"] == "none"


def test_llm_analyser_through_the_retriever_and_the_config(
    store: ContextStore,
    chat_server_factory,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    from hydra import compose, initialize_config_dir

    from retrievers.hierarchical import LLMIntentAnalyzer
    from viking_eval.config import instantiate_objects, load_settings

    plan = {
        "queries": [{"query": "boots drying", "context_type": "memory", "intent": "recall", "priority": 1}]
    }
    server = chat_server_factory(lambda body, mode: json.dumps(plan))
    embedder = store.test_embedder  # type: ignore[attr-defined]
    view = _conversation(store, "c1")
    search = HierarchicalSearchRetriever(view, embedder, analyzer=LLMIntentAnalyzer(server.url, "m"))
    results = search.retrieve("what about my boots?", 3)
    assert results[0].doc_id == "c1_s2_t1" and results[0].provenance["typed_query"] == "boots drying"
    prompt = server.requests[-1]["body"]["messages"][-1]["content"]
    # the session the model sees: the conversation's last turns and its latest session's summary
    assert "[user]: next time the lakes" in prompt and "The hike was wet." in prompt and "bread" not in prompt
    server.mode = "error"  # a failed plan falls back to the raw query, counted in the stats
    fallback = search.retrieve("what about my boots?", 3)
    assert fallback[0].provenance["stats"]["plan_fallback"] == "http"
    # the config: the endpoint from the environment, the analyser built by the harness
    monkeypatch.setenv("VIKING_EVAL_LLM_URL", server.url)
    monkeypatch.setenv("VIKING_EVAL_LLM_MODEL", "m")
    repo = Path(__file__).resolve().parents[1]
    with initialize_config_dir(config_dir=str(repo / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "experiment=hierarchical_search_locomo",
                "+retriever@retrievers.search_llm=openviking_search_llm",
            ],
        )
    spec = {s.name: s for s in load_settings(cfg).retrievers}["search_llm"]
    built = instantiate_objects(spec.params, "retrievers.search_llm")
    assert isinstance(built["analyzer"], LLMIntentAnalyzer)
