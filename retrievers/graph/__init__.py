"""The graph retriever family (moved from retrievers/graph.py; split into modules next)."""

from retrievers.graph.retriever import GraphParams, GraphRetriever

__all__ = ["GraphParams", "GraphRetriever"]
