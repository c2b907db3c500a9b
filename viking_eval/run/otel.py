"""The latency queries' spans as OpenTelemetry spans (``run.latency.otel.exporter``).

Optional: the OpenTelemetry SDK is imported only when an exporter is configured (``pip install
-e '.[otel]'``, part of ``.[dev]``). Each timed query becomes one ``retrieve`` span (attributes
``viking.retriever``, ``viking.query``) with its recorded spans beneath it, named by stage
(``viking.detail`` holds a detail such as a strategy's name), nested as recorded, at the
recorded times. ``console`` prints them as JSON on standard output; ``otlp`` sends them over
OTLP/HTTP to the endpoint the standard variables name (``OTEL_EXPORTER_OTLP_ENDPOINT``,
default http://localhost:4318).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from viking_eval.run.stages import QuerySpans

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

EXPORTERS = ("none", "console", "otlp")


def span_exporter(exporter: str) -> SpanExporter | None:
    """The exporter named by ``run.latency.otel.exporter`` (None for ``none``)."""
    if exporter == "none":
        return None
    if exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    raise ValueError(f"run.latency.otel.exporter must be one of {list(EXPORTERS)}, got {exporter!r}")


def export_spans(exporter: SpanExporter, retriever: str, queries: Sequence[QuerySpans]) -> None:
    """Send one ``retrieve`` span per query, with its stage spans beneath it, to ``exporter``."""
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "viking_eval"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("viking_eval.latency")
    for query in queries:
        offset = query.epoch_offset_ns
        root = tracer.start_span(
            "retrieve",
            start_time=query.start_ns + offset,
            attributes={"viking.retriever": retriever, "viking.query": query.query},
        )
        contexts = {-1: trace.set_span_in_context(root)}
        for span in query.spans:  # by index: a parent starts before its children
            child = tracer.start_span(
                span.stage,
                context=contexts.get(span.parent, contexts[-1]),
                start_time=span.start_ns + offset,
                attributes={"viking.detail": span.detail} if span.detail else None,
            )
            child.end(end_time=span.end_ns + offset)
            contexts[span.index] = trace.set_span_in_context(child)
        root.end(end_time=query.end_ns + offset)
    provider.force_flush()
    provider.shutdown()
