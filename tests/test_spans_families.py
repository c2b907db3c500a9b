"""Spans of one query per family (graph, hierarchical, hybrid, multi-strategy), on hand-made
stores: the stage names and their nesting, as many ``hop``/``round`` spans as the traversal's own
stats count, a reranker's ``rerank`` with its ``llm`` call inside, chunk ``parents``; recording
leaves every result unchanged; the OpenTelemetry export (the SDK's in-memory exporter) has the
same names, nesting and counts under one ``retrieve`` span per query; the OTLP exporter posts
them to the endpoint OTEL_EXPORTER_OTLP_ENDPOINT names; a configured exporter whose package is
missing is refused."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from http_servers import ChatServer, LocalServer, Reply
from test_graph import QUERY, hand_store
from test_hierarchical import small_store

from retrievers import (
    ChunkingConfig,
    Document,
    Edge,
    GraphRetriever,
    HierarchicalRetriever,
    HybridRetriever,
    LLMReranker,
    MultiStrategyRetriever,
    RetrievalResult,
    StoreConfig,
    TfidfEmbedder,
)
from retrievers.builders import build_store
from retrievers.spans import Span, recording
from viking_eval.run.stages import QuerySpans, span_paths

DOCS = [
    Document("d1", "the cat sat on the mat"),
    Document("d2", "dogs chase cats in the park"),
    Document("d3", "a mat made of straw for the cat"),
    Document("d4", "stock markets fell sharply today"),
    Document("d5", "the park opens at dawn for dogs"),
]


def traced(retriever: Any, query: str, top_k: int = 5) -> tuple[list[RetrievalResult], tuple[Span, ...]]:
    """One query's results and spans; the same query unrecorded must give the same results."""
    with recording() as recorder:
        results = retriever.retrieve(query, top_k)
    assert retriever.retrieve(query, top_k) == results  # recording changes no ranking or score
    return results, recorder.spans


def paths(spans: Sequence[Span]) -> list[str]:
    return span_paths(spans)


def tfidf_store(**config: Any) -> tuple[Any, TfidfEmbedder]:
    embedder = TfidfEmbedder(dim=16).fit([doc.text for doc in DOCS])
    return build_store(DOCS, embedder, StoreConfig(timestamps=None, **config)), embedder


def test_graph_records_one_hop_span_per_hop_of_its_walk() -> None:
    store, embedder = hand_store(
        {"a": 0.9, "b": 0.5, "c": 0.3, "d": 0.1},
        [Edge("a", "b", "cites"), Edge("b", "c", "cites"), Edge("c", "d", "cites")],
    )
    for max_hops, scoring in ((3, "propagated"), (2, "propagated"), (3, "oasis")):
        retriever = GraphRetriever(store, embedder, seed_top_k=1, max_hops=max_hops, scoring=scoring)
        results, spans = traced(retriever, QUERY)
        hops = results[0].provenance["stats"]["hops"]
        assert hops == max_hops  # the chain is long enough for every hop
        assert paths(spans) == ["encode", "vector", "traverse", *["traverse/hop"] * hops], scoring


def test_graph_with_keyword_seeds_records_bm25_and_the_seed_fusion() -> None:
    store, embedder = hand_store({"a": 0.9, "b": 0.5}, [Edge("a", "b", "cites")])
    retriever = GraphRetriever(store, embedder, seed_top_k=2, max_hops=1, seed_keyword_weight=0.5)
    _, spans = traced(retriever, "document aa")
    assert paths(spans) == ["encode", "vector", "bm25", "seeds", "traverse", "traverse/hop"]


def test_hierarchical_records_the_global_search_and_one_round_per_popped_directory() -> None:
    store, embedder = small_store()
    retriever = HierarchicalRetriever(store, embedder, global_search_topk=1, max_convergence_rounds=None)
    results, spans = traced(retriever, "q", 4)
    stats = results[0].provenance["stats"]
    assert stats["rounds"] == stats["directories_popped"] == 3
    assert paths(spans) == ["encode", "traverse", "traverse/global", *["traverse/round"] * 3]


def test_hybrid_legs_nest_in_parallel_and_sit_side_by_side_in_sequence() -> None:
    store, embedder = tfidf_store()
    parallel = HybridRetriever(store, embedder, keyword_weight=0.5)
    _, spans = traced(parallel, "cat on a mat")
    found = paths(spans)
    assert found[:2] == ["encode", "legs"] and found[-1] == "fusion"
    assert sorted(found[2:-1]) == ["legs/bm25", "legs/vector"]  # the two threads, in either order
    sequential = HybridRetriever(store, embedder, keyword_weight=0.5, parallel=False)
    assert paths(traced(sequential, "cat on a mat")[1]) == ["encode", "vector", "bm25", "fusion"]
    keyword_only = HybridRetriever(store, None, keyword_weight=1.0)
    assert paths(traced(keyword_only, "cat on a mat")[1]) == ["bm25", "fusion"]


def _grades(body: dict[str, Any], mode: str) -> str:
    passages = re.findall(r"^\[\d+\]", body["messages"][1]["content"], flags=re.MULTILINE)
    return json.dumps({"scores": [5] * len(passages)})


def test_a_reranker_and_its_llm_call_are_spans_and_chunks_resolve_in_parents(
    chat_server_factory: Callable[..., ChatServer],
) -> None:
    server = chat_server_factory(_grades)
    store, embedder = tfidf_store(chunking=ChunkingConfig(size=3, overlap=0))
    assert store.chunked
    reranker = LLMReranker(server.url, "grader", timeout_s=5)
    retriever = HybridRetriever(store, embedder, keyword_weight=0.5, parallel=False, reranker=reranker)
    results, spans = traced(retriever, "cat on a mat", 3)
    assert results and all(r.provenance["rerank_fallback"] is None for r in results)
    assert paths(spans) == ["encode", "vector", "bm25", "fusion", "parents", "rerank", "rerank/llm"]


def test_multi_strategy_records_analysis_each_strategy_in_its_thread_and_fusion() -> None:
    store, embedder = tfidf_store()
    retriever = MultiStrategyRetriever(store, embedder, strategies=["semantic", "fulltext"])
    results, spans = traced(retriever, "cat on a mat")
    found = paths(spans)
    assert found[:3] == ["encode", "analysis", "strategies"] and found[-1] == "fusion"
    strategies = sorted(path for path in found if path.startswith("strategies/"))
    assert strategies == [
        "strategies/strategy[fulltext]",
        "strategies/strategy[semantic]",
        "strategies/strategy[semantic]/vector",
    ]
    assert results[0].provenance["stats"]["strategies_run"] == 2


def _one_query_per_family() -> dict[str, QuerySpans]:
    graph_store, graph_embedder = hand_store(
        {"a": 0.9, "b": 0.5, "c": 0.3}, [Edge("a", "b", "cites"), Edge("b", "c", "cites")]
    )
    tree_store, tree_embedder = small_store()
    store, embedder = tfidf_store()
    cases = {
        "graph": (GraphRetriever(graph_store, graph_embedder, seed_top_k=1, max_hops=2), QUERY),
        "hierarchical": (
            HierarchicalRetriever(
                tree_store, tree_embedder, global_search_topk=1, max_convergence_rounds=None
            ),
            "q",
        ),
        "hybrid": (HybridRetriever(store, embedder, parallel=False), "cat on a mat"),
        "multi_strategy": (
            MultiStrategyRetriever(store, embedder, strategies=["semantic", "fulltext"]),
            "cat on a mat",
        ),
    }
    found = {}
    for name, (retriever, query) in cases.items():
        with recording() as recorder:
            start = time.perf_counter_ns()
            retriever.retrieve(query, 3)
            end = time.perf_counter_ns()
        found[name] = QuerySpans(0, start, end, recorder.epoch_offset_ns, recorder.spans)
    return found


def test_opentelemetry_export_has_the_recorded_names_nesting_and_counts() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra (.[dev] includes it)")
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from viking_eval.run.otel import export_spans

    for name, query in _one_query_per_family().items():
        exporter = InMemorySpanExporter()
        export_spans(exporter, name, [query])
        exported = exporter.get_finished_spans()
        roots = [s for s in exported if s.parent is None]
        assert len(roots) == 1 and roots[0].name == "retrieve"
        assert roots[0].attributes is not None and roots[0].attributes["viking.retriever"] == name
        by_id = {s.context.span_id: s for s in exported}

        def otel_path(span: Any, by_id: dict[int, Any] = by_id) -> str:
            parent = by_id.get(span.parent.span_id) if span.parent is not None else None
            if parent is None or parent.name == "retrieve":
                return str(span.name)
            return f"{otel_path(parent)}/{span.name}"

        expected = [
            path.replace("strategy[semantic]", "strategy").replace("strategy[fulltext]", "strategy")
            for path in span_paths(query.spans)
        ]
        assert sorted(otel_path(s) for s in exported if s.name != "retrieve") == sorted(expected), name
        assert len({s.context.trace_id for s in exported}) == 1  # one trace per query
        for span in exported:  # the recorded times, in epoch nanoseconds
            assert span.start_time is not None and span.end_time is not None
            assert span.start_time <= span.end_time
        if name == "graph":
            assert sum(s.name == "hop" for s in exported) == 2
        if name == "hierarchical":
            assert sum(s.name == "round" for s in exported) == 3
        if name == "multi_strategy":
            details = sorted(
                str((s.attributes or {}).get("viking.detail")) for s in exported if s.name == "strategy"
            )
            assert details == ["fulltext", "semantic"]


def test_the_otlp_exporter_posts_the_spans_to_the_configured_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip(
        "opentelemetry.exporter.otlp.proto.http", reason="the otel extra (.[dev] includes it)"
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from viking_eval.run.otel import export_spans, span_exporter

    collector = LocalServer(lambda request: Reply(200, b"", {"Content-Type": "application/x-protobuf"}))
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.base_url)
        query = _one_query_per_family()["graph"]
        exporter = span_exporter("otlp")
        assert exporter is not None
        export_spans(exporter, "graph", [query])
    finally:
        collector.close()
    received = [(request["path"], request["data"]) for request in collector.requests]
    assert received and all(path == "/v1/traces" for path, _ in received)
    names = []
    for _, body in received:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        names += [s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert sorted(names) == sorted(["retrieve", *(s.stage for s in query.spans)])
    assert names.count("hop") == 2


def test_a_configured_exporter_without_its_package_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from retrievers.params import ParamError
    from viking_eval.config.settings import OtelSettings

    assert OtelSettings(exporter="none").exporter == "none"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        ParamError, match=r"exporter='otlp' needs the Python module opentelemetry\.sdk.*\.\[otel\]"
    ):
        OtelSettings(exporter="otlp")
    assert OtelSettings(exporter="none").exporter == "none"  # nothing to import
