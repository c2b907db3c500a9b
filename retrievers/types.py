"""Values and interfaces shared by every retriever.

Values are frozen dataclasses; interfaces are ``typing.Protocol`` classes that anything can
satisfy without inheriting (mteb's ``models_protocols.py`` is the model).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

EncodeKind = Literal["query", "document"]


@dataclass(frozen=True)
class Document:
    """One corpus entry. ``metadata`` may hold ``timestamp``, ``importance``, ``path``, ``symbol``,
    ``session``, ``parent_id``, ``uri`` and anything else the dataset carries."""

    id: str
    text: str
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Document id must be a non-empty string, got {self.id!r}")

    @property
    def full_text(self) -> str:
        """Title and text joined as BEIR does before embedding: ``title + " " + text``."""
        return f"{self.title} {self.text}".strip() if self.title else self.text


@dataclass(frozen=True)
class ContextNode:
    """A node of the context tree. Leaves (level 2) map to documents or chunks; directories
    (levels 0 and 1) carry an abstract (L0) and optionally an overview (L1)."""

    uri: str
    level: int
    parent_uri: str | None
    abstract: str = ""
    content: str = ""
    doc_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.level not in (0, 1, 2):
            raise ValueError(f"ContextNode level must be 0, 1 or 2, got {self.level} for {self.uri}")


@dataclass(frozen=True)
class Edge:
    """A typed, weighted link between two documents (or chunks)."""

    src: str
    dst: str
    relation: str
    weight: float = 1.0
    description: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.weight) or self.weight < 0:
            raise ValueError(
                f"Edge weight must be finite and >= 0, got {self.weight} ({self.src}->{self.dst})"
            )


@dataclass(frozen=True)
class EdgeContext:
    """One step of the graph path that led to a result."""

    src: str
    dst: str
    relation: str
    weight: float
    hop: int


@dataclass(frozen=True)
class RetrievalResult:
    """One ranked document. ``provenance`` says how it was found: strategies, graph path
    (a tuple of ``EdgeContext``), directory path, pre-rerank score, fallbacks taken."""

    doc_id: str
    score: float
    uri: str = ""
    provenance: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into float32, L2-normalised rows. ``name`` is a stable id used in cache keys
    (model id plus revision or a fingerprint of fitted state)."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray: ...


@runtime_checkable
class Retriever(Protocol):
    """``retrieve_batch(qs)`` must equal ``[retrieve(q) for q in qs]`` exactly; it exists to be faster.

    The contract for a retriever of your own, outside this package (docs/api.md has examples):

    - **Minimal.** Any class with ``retrieve_batch(queries, top_k)`` and ``retrieve(query,
      top_k)`` returning :class:`RetrievalResult` lists, ordered by (score desc, doc id asc),
      finite scores, at most ``top_k`` each, doc ids of the corpus. To be named by ``_target_``
      in a config (``retrievers.mine: {_target_: my_pkg.MyRetriever, alpha: 0.5}``) its
      constructor is ``(store, embedder=None, **params)``: the harness passes the run's
      :class:`~retrievers.store.ContextStore` (documents, embeddings, BM25 index), the embedder
      the store was built with, and the config's keys. Without a ``Params`` class the config's
      keys are checked against the constructor's keyword parameters (their names, and types
      where annotated); with ``**params`` the class checks them itself. With
      ``viking_eval.evaluate`` a built object needs only the two methods.
    - **Validated.** A nested ``Params`` dataclass (best: a :class:`retrievers.params.Params`
      subclass declaring each field with ``param()``) gets every key checked, with its range,
      when the config is validated, before any data is read.
    - **On the kernel.** Subclass :class:`retrievers.kernel.KernelRetriever`, set ``Params`` to a
      :class:`retrievers.kernel.RetrieverParams` subclass and implement
      ``candidates(queries, vectors, depth)``: filters, scopes, chunk-to-document resolution,
      reranking, ranking order and batching come from the kernel.

    A config naming a class that misses a part is refused when it is validated, naming what is
    missing (``retrievers.mine: my_pkg.MyRetriever has no retrieve_batch(queries, top_k) method``)."""

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]: ...

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores ``candidates`` for ``query``; ``texts[i]`` is the text of ``candidates[i]``."""

    def rerank(
        self, query: str, candidates: Sequence[RetrievalResult], texts: Sequence[str]
    ) -> list[float]: ...
