"""The settings of the edge builders (``store.edges``): which builders run at store build and how.

:class:`EdgeConfig` holds one optional section per builder (:class:`SimilarityEdgeConfig`,
:class:`SequenceEdgeConfig`, :class:`ReferenceEdgeConfig`, :class:`MentionEdgeConfig`,
:class:`LLMEdgeConfig`); the builders themselves live in :mod:`retrievers.builders.edges` and
the edges they make in :class:`~retrievers.store.edges.EdgeSet`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from retrievers.params import Params, param

__all__ = [
    "EDGE_RELATIONS",
    "LLM_RELATIONS",
    "EdgeConfig",
    "LLMEdgeConfig",
    "MentionEdgeConfig",
    "ReferenceEdgeConfig",
    "SequenceEdgeConfig",
    "SimilarityEdgeConfig",
]

#: relation names the builders produce (an EdgeSet accepts any non-empty name)
EDGE_RELATIONS = ("similar_to", "sequence", "references", "mentions", "part_of")
#: the relations an LLM may name (oasis's eight relation types) and what they mean, as the prompt says
LLM_RELATIONS = {
    "references": "A cites or mentions content of B",
    "elaborates": "A gives more detail on B's topic",
    "depends_on": "A assumes knowledge from B",
    "contradicts": "A conflicts with B",
    "part_of": "A is a component or subset of B",
    "similar_to": "A and B cover overlapping topics",
    "sequence": "A follows B in a logical order",
    "caused_by": "A is a consequence of B",
}


@dataclass(frozen=True)
class SimilarityEdgeConfig(Params):
    """``similar_to`` edges: each document's ``k`` nearest neighbours with cosine >= ``min_sim``;
    ``same_keys``: neighbours must share these metadata values (documents lacking one of the keys
    get no edges and are counted)."""

    SECTION = "store.edges.similar_to"

    k: int = param(5, low=1, high=1000)
    min_sim: float = param(0.5, low=0.0, high=1.0)
    same_keys: tuple[str, ...] = param((), unique=True, non_empty=False)


@dataclass(frozen=True)
class SequenceEdgeConfig(Params):
    """``sequence`` edges from each document to the next one of its group: ``group_keys``
    (metadata keys; empty = the whole corpus is one sequence), ``order_key`` (a metadata key,
    numbers before strings; None = doc id order), ``weight``."""

    SECTION = "store.edges.sequence"

    group_keys: tuple[str, ...] = param((), unique=True)
    order_key: str | None = param(None, non_empty=True)
    weight: float = param(1.0, low=0.0, high=1.0)


@dataclass(frozen=True)
class ReferenceEdgeConfig(Params):
    """Edges given by the data: metadata ``fields`` naming other documents' ids (a scalar id, a
    list of ids, or a list of lists whose ``id_index``-th element is the id); ``relation`` names
    the edges (``references``; ``part_of`` for a ``parent_id`` field); ``weight``. Integer ids
    are matched as their decimal string."""

    SECTION = "store.edges.references"

    fields: tuple[str, ...] = param(("references",), non_empty=True, unique=True)
    id_index: int = param(0, low=0, high=100)
    relation: str = param("references", non_empty=True)
    weight: float = param(1.0, low=0.0, high=1.0)


@dataclass(frozen=True)
class MentionEdgeConfig(Params):
    """``mentions`` edges between documents sharing rare terms: each document's ``terms_per_doc``
    top TF-IDF terms; a term in the top terms of more than ``max_fanout`` documents links none; a
    pair needs ``min_shared`` (at most terms_per_doc) shared terms; weight = shared / terms_per_doc."""

    SECTION = "store.edges.mentions"

    terms_per_doc: int = param(10, low=1, high=1000)
    max_fanout: int = param(20, low=2, high=100_000)
    min_shared: int = param(1, low=1, high=1000)

    def check(self) -> None:
        if self.min_shared > self.terms_per_doc:
            raise self.fail(
                "min_shared",
                f"must be an integer in [1, terms_per_doc] = [1, {self.terms_per_doc}], got {self.min_shared}",
            )


@dataclass(frozen=True)
class LLMEdgeConfig(Params):
    """Edges an LLM names between the documents of a batch (oasis's LLM graph extraction).

    Batches of ``batch_size`` documents: ``batching: sequential`` (oasis: consecutive documents in
    store order, so only neighbours in that order can be linked) or ``neighbours`` (each document
    with its ``batch_size - 1`` nearest neighbours by embedding: one request per document, links
    across the whole corpus). Each request lists the batch as ``[doc id]: text`` (cut to
    ``max_text_chars``) and asks for ``{"edges": [{"source", "target", "relation", "weight"}]}``
    with ``relation`` one of ``relations`` (a subset of :data:`LLM_RELATIONS`) and ``weight`` a
    confidence in (0, 1]. An edge naming an id outside its batch, itself, another relation or a
    bad weight is dropped and counted (``llm.<reason>``), as are edges under ``min_weight``;
    ``max_edges_per_doc`` (0 = no limit) keeps each source's strongest. A batch whose request
    fails or whose answer does not parse is skipped and counted (``llm.failed_batch``); when more
    than ``max_failed_fraction`` of the batches fail, the build stops with an error, so that a
    store missing its LLM edges (say, the server was down) is never cached. ``workers`` requests
    run at once; answers are merged in batch order. ``base_url``, ``model``, ``api_key_env``,
    ``timeout_s`` and ``temperature`` go to :class:`retrievers.llm.ChatClient`."""

    SECTION = "store.edges.llm"

    base_url: str = param(doc="an http(s) URL of an OpenAI-compatible API")
    model: str = param(non_empty=True)
    api_key_env: str = param("OPENAI_API_KEY", non_empty=True)
    batch_size: int = param(5, low=2, high=50)
    batching: Literal["sequential", "neighbours"] = param("sequential")
    relations: tuple[str, ...] = param(
        tuple(LLM_RELATIONS), choices=tuple(LLM_RELATIONS), non_empty=True, unique=True
    )
    min_weight: float = param(0.0, low=0.0, high=1.0)
    max_edges_per_doc: int = param(0, low=0, high=100_000)
    max_text_chars: int = param(1000, low=1, high=1_000_000)
    timeout_s: float = param(60.0, low=0.0, high=600.0, low_open=True)
    temperature: float = param(0.0, low=0.0, high=2.0)
    workers: int = param(4, low=1, high=64)
    max_failed_fraction: float = param(0.1, low=0.0, high=1.0)

    def check(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise self.fail("base_url", f"must be an http(s) URL, got {self.base_url!r}")


@dataclass(frozen=True)
class EdgeConfig(Params):
    """Which edge builders run at store build (None = not that one). An EdgeConfig with every
    builder off gives an empty edge set: retrievers then fall back to plain vector search."""

    SECTION = "store.edges"

    similar_to: SimilarityEdgeConfig | None = param(None)
    sequence: SequenceEdgeConfig | None = param(None)
    references: ReferenceEdgeConfig | None = param(None)
    mentions: MentionEdgeConfig | None = param(None)
    llm: LLMEdgeConfig | None = param(None)
