"""The retrieval kernel: what every retriever family shares, written once.

A family (BM25, dense, hybrid, graph, hierarchical, multi-strategy) only says how it finds and
scores candidates for a block of queries (:meth:`KernelRetriever.candidates`); the kernel does the rest,
the same way for all of them::

    retrieve_batch(queries, top_k)
      -> check top_k and queries                              (one message for each mistake)
      -> blocks of params.query_batch_size queries
         -> encode the block once (when the family uses vectors; embedder checked at construction)
         -> family.candidates(queries, vectors, depth)    -> Candidates: store rows + scores
         -> parent resolution (chunked stores: a document scores its best chunk; families whose
            search is an exact top-k list are searched deeper until the top-k documents are settled)
         -> ranking order (score desc, doc id asc), cut to the rerank pool
         -> rerank hook: one reranker, one fallback policy (retrievers.rerank.rerank_with_fallback)
         -> ranking order, cut to top_k, the family's final filter (e.g. a minimum score)
         -> RetrievalResult with provenance (family keys, "stats", "chunk_id", rerank keys)
    retrieve(query, top_k) = retrieve_batch([query], top_k)[0]

Scope and filters: a store view (``store.allowed``, e.g. one LoCoMo conversation) and the
``filters`` parameter (:class:`retrievers.filters.MetadataFilter`) give one boolean mask,
:attr:`KernelRetriever.mask`, computed at construction; every search of every family is restricted by
it before any top-k is taken.

Vector search: families search the store's vector index through :meth:`KernelRetriever.vector_search`
(or :func:`search_vectors`), which passes the retriever's query-time ANN knobs (``ef_search``
for an HNSW index, ``nprobe`` for IVF, ``refine_factor`` for IVF-PQ; None = the index's default)
with the mask. A knob the store's index does not have is refused at construction; changing one
never changes the store.

Stages (``encode``, ``vector``, ``parents``, ``rerank``, and the families' own) are marked as spans
(:mod:`retrievers.spans`): recorded only when a harness records a query, otherwise one context
variable read each.

Every family's parameters are a :class:`RetrieverParams` subclass (:mod:`retrievers.params`):
the kernel's own (``filters``, ``reranker``, ``rerank_depth``, ``rerank_timeout``,
``query_batch_size``, ``ef_search``, ``nprobe``, ``refine_factor``) plus the family's. A
retriever is built as ``Family(store, embedder, **params)`` or
``Family(store, embedder, params=Family.Params(...))``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from retrievers.backends.base import SearchBackend
from retrievers.diversity import mmr_order
from retrievers.filters import MetadataFilter, filter_mask
from retrievers.index import FaissVectorIndex
from retrievers.index.vectors import Hits
from retrievers.params import ParamError, Params, param
from retrievers.parents import resolve_parents, search_documents
from retrievers.ranking import check_top_k, order_rows
from retrievers.rerank import rerank_with_fallback
from retrievers.spans import span
from retrievers.types import Embedder, Reranker, RetrievalResult
from retrievers.vector_search import check_vector_knobs, search_vectors

if TYPE_CHECKING:
    from retrievers.store import ContextStore

__all__ = [
    "Candidates",
    "KernelRetriever",
    "RetrieverParams",
    "check_embedder",
    "check_query",
]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: upper bound of count-like parameters
BIG = 10_000_000


def check_query(query: object) -> str:
    """``query`` if it is a string with some non-space character, else ValueError."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"query must be a non-empty string, got {query!r}")
    return query


def check_embedder(embedder: Embedder | None, store: ContextStore, who: str) -> Embedder:
    """``embedder`` if it is the one the store was built with (same ``name``: model and weights
    fingerprint), else ValueError saying why; ``who`` names what needs it."""
    if not store.has_vectors:
        raise ValueError(
            f"{who} searches vectors, but the store was built without an embedder (no embeddings); "
            "build the store with the embedder this retriever should use"
        )
    if embedder is None:
        raise ValueError(f"{who} needs an embedder (the one the store was built with); pass embedder=")
    name = getattr(embedder, "name", None)
    if name != store.embedder_name:
        raise ValueError(
            f"embedder {name!r} is not the one the store was built with ({store.embedder_name!r})"
        )
    return embedder


@dataclass(frozen=True)
class RetrieverParams(Params):
    """The kernel's parameters, shared by every family."""

    filters: MetadataFilter | None = param(
        None,
        doc="restrict every search before top-k: {doc_ids, metadata, time_range} (retrievers/filters.py)",
    )
    reranker: Any = param(None, doc="an object with rerank(query, candidates, texts) (retrievers/rerank/)")
    rerank_depth: int | None = param(
        None, low=1, high=BIG, doc="candidates the reranker sees (then cut to top_k); null = top_k"
    )
    rerank_timeout: float | None = param(
        None, low=0.0, high=3600.0, low_open=True, doc="seconds a rerank call may take; null = no limit"
    )
    query_batch_size: int = param(256, low=1, high=65536, doc="queries encoded and searched together")
    ef_search: int | None = param(
        None,
        low=1,
        high=65536,
        doc="HNSW efSearch of this retriever's vector searches (store.vector_index.kind=hnsw); null = the index's",
    )
    nprobe: int | None = param(
        None,
        low=1,
        high=1 << 20,
        doc="IVF lists probed by this retriever's vector searches (ivf_flat, ivf_pq); null = the index's",
    )
    refine_factor: int | None = param(
        None,
        low=1,
        high=1024,
        doc="IVF-PQ candidates rescored exactly per result wanted (ivf_pq); null = 10",
    )
    mmr_lambda: float | None = param(
        None,
        low=0.0,
        high=1.0,
        doc="maximal marginal relevance over the final list (retrievers/diversity.py): lambda * relevance "
        "- (1 - lambda) * max cosine to the documents already chosen; null = off",
    )
    mmr_depth: int | None = param(
        None, low=1, high=BIG, doc="candidates MMR chooses the top_k from; null = top_k (or rerank_depth)"
    )

    def check(self) -> None:
        if self.reranker is not None and not callable(getattr(self.reranker, "rerank", None)):
            raise self.fail(
                "reranker", f"must be null or an object with a rerank() method, got {self.reranker!r}"
            )


@dataclass
class Candidates:
    """One query's candidates from a family: store ``rows`` (chunks in a chunked store) with
    their ``scores``, in any order. ``provenance(i)`` gives candidate ``i``'s provenance; it is
    asked only for candidates that become results. ``stats`` describe the query's work and go
    into every result's ``provenance["stats"]``."""

    rows: IntArray
    scores: FloatArray
    provenance: Callable[[int], Mapping[str, Any]] | None = None
    stats: Mapping[str, Any] | None = None
    #: ``uri(i)``: candidate ``i``'s context URI (hierarchical leaves), for :attr:`RetrievalResult.uri`
    uri: Callable[[int], str] | None = None

    @classmethod
    def empty(cls, stats: Mapping[str, Any] | None = None) -> Candidates:
        return cls(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64), None, stats)

    @classmethod
    def of(cls, scores: npt.ArrayLike, rows: npt.ArrayLike, **extra: Any) -> Candidates:
        return cls(np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float64), **extra)


class KernelRetriever:
    """Base of the retriever families: the kernel (see the module docstring).

    Subclasses set ``Params`` (a :class:`RetrieverParams` subclass), implement :meth:`candidates`,
    and may override :meth:`setup` (checks and structures built at construction),
    :meth:`uses_embedder`, :meth:`final_filter`. Class flags: ``exact_depth`` (the family's
    search returns an exact top-``depth`` list, so a chunked store is searched deeper until the
    top-k documents are settled), ``reranks_itself`` (the family consumes ``reranker`` inside
    its own algorithm, so the kernel's rerank hook is off), ``store_requires`` (store parts it
    cannot work without, e.g. ``("hierarchy",)``). ``ALGORITHM_VERSION`` changes
    whenever the same parameters would rank differently; results are reused only when it matches.
    """

    Params: ClassVar[type[RetrieverParams]] = RetrieverParams
    ALGORITHM_VERSION: ClassVar[int] = 1
    exact_depth: ClassVar[bool] = False
    reranks_itself: ClassVar[bool] = False
    #: store parts (``StoreConfig`` fields) the family cannot work without, checked by harnesses
    #: before a store is built (:meth:`store_parts` adds parts that depend on parameters)
    store_requires: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        store: ContextStore,
        embedder: Embedder | None = None,
        *,
        params: RetrieverParams | None = None,
        **values: Any,
    ) -> None:
        if params is not None and values:
            raise ParamError(sorted(values)[0], "give parameters as params= or as keywords, not both")
        if params is None:
            params = self.Params.from_dict(values)
        elif not isinstance(params, self.Params):
            raise ParamError(
                "params", f"params must be a {self.Params.__name__}, got {type(params).__name__}"
            )
        self.params = params
        self.store = store
        self.embedder: Embedder | None = (
            check_embedder(embedder, store, type(self).__name__) if self.uses_embedder() else embedder
        )
        self.reranker: Reranker | None = params.reranker
        chosen = params.filters
        # the rows any search may return: the store's own scope, narrowed by the filters
        # (computed once; a filter that cannot match warns here, at construction)
        self.mask: BoolArray | None = (
            store.allowed if chosen is None or chosen.is_empty else filter_mask(store, chosen)
        )
        check_vector_knobs(params, store, type(self).__name__, self.uses_embedder())
        if params.mmr_lambda is not None and not store.has_vectors:
            raise ParamError(
                "mmr_lambda",
                "mmr_lambda: MMR compares document vectors, and this store has none: build it with an embedder",
            )
        if isinstance(store.backend, SearchBackend) and self.uses_embedder():
            store.backend.check_scope(self.mask is not None)  # a filter it cannot express: refused now
        self.setup()

    @classmethod
    def store_parts(cls, params: Mapping[str, Any]) -> tuple[str, ...]:
        """The store parts a retriever with these (plain, config) parameters needs: the class's
        ``store_requires``, plus those an option asks for (``context_weight`` > 0: edges)."""
        parts = list(cls.store_requires)
        weight = params.get("context_weight")
        if isinstance(weight, int | float) and not isinstance(weight, bool) and weight > 0:
            parts.append("edges")
        return tuple(dict.fromkeys(parts))

    # -- what a family provides -------------------------------------------------------------------

    def setup(self) -> None:
        """Family checks and structures built once per retriever (default: none)."""

    def uses_embedder(self) -> bool:
        """Whether queries are encoded (then the embedder must be the store's)."""
        return True

    def candidates(self, queries: Sequence[str], vectors: np.ndarray | None, depth: int) -> list[Candidates]:
        """Candidates for each query of a block; ``depth`` is how many the kernel will use."""
        raise NotImplementedError

    def final_filter(self, scores: FloatArray) -> BoolArray | None:
        """Which final results to keep (after rerank and the top_k cut); None = all."""
        return None

    def index_parts(self) -> tuple[str, ...]:
        """The store parts its queries read (``vectors``, ``bm25``, ``edges``, ``hierarchy``): what
        a harness counts as this retriever's index memory. Families that search BM25 add it."""
        parts = ["vectors"] if self.uses_embedder() else []
        parts += self.store_parts({"context_weight": getattr(self.params, "context_weight", None)})
        return tuple(dict.fromkeys(parts))

    # -- helpers for families --------------------------------------------------------------------

    @property
    def scope(self) -> BoolArray:
        """:attr:`mask` as an array (all True when nothing is restricted)."""
        if self.mask is None:
            return np.ones(len(self.store), dtype=np.bool_)
        return np.asarray(self.mask, dtype=np.bool_)

    def encode(self, queries: Sequence[str]) -> np.ndarray:
        """Query vectors, float32 ``(len(queries), dim)``; the shape and finiteness are checked."""
        assert self.embedder is not None
        with span("encode"):
            vectors = np.ascontiguousarray(
                self.embedder.encode(list(queries), kind="query"), dtype=np.float32
            )
        if vectors.shape != (len(queries), self.store.dim):
            raise ValueError(
                f"embedder returned shape {vectors.shape}, expected ({len(queries)}, {self.store.dim})"
            )
        return vectors

    def vector_search(self, vectors: np.ndarray, k: int) -> Hits:
        """The store's vector index searched within :attr:`mask`, with this retriever's ANN
        knobs (``ef_search``, ``nprobe``, ``refine_factor``): what families call instead of
        ``store.vectors.search``."""
        return search_vectors(self.store, vectors, k, mask=self.mask, params=self.params)

    @property
    def approximate_vectors(self) -> bool:
        """Whether this retriever's vector searches are approximate (the store's index is ANN)."""
        backend = self.store.backend
        return (
            self.uses_embedder()
            and self.store.has_vectors
            and (
                backend.index != "exact"
                if isinstance(backend, SearchBackend)
                else isinstance(self.store.vectors, FaissVectorIndex)
            )
        )

    def encode_block(self, queries: Sequence[str]) -> np.ndarray | None:
        """The block's query vectors, or None when this retriever does not use them."""
        return self.encode(queries) if self.uses_embedder() else None

    # -- the public API ---------------------------------------------------------------------------

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        return self.retrieve_batch([query], top_k)[0]

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        """``[retrieve(q, top_k) for q in queries]``, computed a block of ``query_batch_size``
        queries at a time."""
        top_k = check_top_k(top_k)
        if isinstance(queries, str) or not isinstance(queries, Sequence):
            raise ValueError(f"queries must be a list of strings, got {type(queries).__name__}")
        texts = [check_query(query) for query in queries]
        results: list[list[RetrievalResult]] = []
        size = self.params.query_batch_size
        for start in range(0, len(texts), size):
            results += self._block(texts[start : start + size], top_k)
        return results

    # -- the pipeline -----------------------------------------------------------------------------

    def _pool_size(self, top_k: int) -> int:
        """How many documents reach the rerank hook (and so how deep a family is asked)."""
        pool = top_k
        if self.reranker is not None and not self.reranks_itself:
            pool = max(top_k, self.params.rerank_depth or top_k)
        if self.params.mmr_lambda is not None:
            pool = max(pool, self.params.mmr_depth or pool)
        return pool

    def _block(self, queries: list[str], top_k: int) -> list[list[RetrievalResult]]:
        vectors = self.encode_block(queries)
        pool = self._pool_size(top_k)
        store = self.store
        if store.chunked and self.exact_depth:
            found: list[Candidates | None] = [None] * len(queries)

            def deeper(picked: Sequence[int], k: int) -> list[tuple[FloatArray, IntArray]]:
                subset = None if vectors is None else vectors[list(picked)]
                hits = self.candidates([queries[i] for i in picked], subset, k)
                for i, candidates in zip(picked, hits, strict=True):
                    found[i] = candidates
                return [(candidates.scores, candidates.rows) for candidates in hits]

            settled = search_documents(deeper, len(queries), pool, store.parent_of)
            return [
                self._finish(query, found[i] or Candidates.empty(), top_k, settled=parents)
                for i, (query, parents) in enumerate(zip(queries, settled, strict=True))
            ]
        return [
            self._finish(query, candidates, top_k)
            for query, candidates in zip(queries, self.candidates(queries, vectors, pool), strict=True)
        ]

    def _finish(
        self, query: str, candidates: Candidates, top_k: int, settled: Any = None
    ) -> list[RetrievalResult]:
        store = self.store
        pool = self._pool_size(top_k)
        if store.chunked:
            with span("parents"):
                hits = (
                    settled
                    if settled is not None
                    else resolve_parents(store.parent_of, candidates.rows, candidates.scores)
                )
                hits = hits.head(pool)
            doc_rows = hits.parents
            scores = np.asarray(hits.scores, dtype=np.float64)
            source = hits.rows  # the chunk each document scored with
            ids = store.parent_ids
        else:
            order = order_rows(candidates.rows, candidates.scores)[:pool]
            doc_rows = candidates.rows[order]
            scores = np.asarray(candidates.scores[order], dtype=np.float64)
            source = doc_rows
            ids = store.doc_ids
        if not len(doc_rows):
            return []
        # where each kept document came from among the candidates (for its provenance)
        position = {int(row): i for i, row in enumerate(candidates.rows.tolist())}
        doc_ids = ids.take(doc_rows)
        final = scores.tolist()
        fallback: str | None = None
        reranked = self.reranker is not None and not self.reranks_itself
        if reranked:
            assert self.reranker is not None
            texts = [
                (store.parent_documents if store.chunked else store.documents)[int(row)].full_text
                for row in doc_rows.tolist()
            ]
            incoming = [RetrievalResult(doc_id=d, score=s) for d, s in zip(doc_ids, final, strict=True)]
            final, fallback = rerank_with_fallback(
                self.reranker, query, incoming, texts, timeout_s=self.params.rerank_timeout
            )
        entries = sorted(range(len(doc_ids)), key=lambda i: (-final[i], doc_ids[i]))
        diverse = self.params.mmr_lambda is not None
        if diverse:  # chosen by MMR; scores become len - rank so the order is the ranking order
            entries = mmr_order(
                self.store.embeddings[source[entries]],
                [final[i] for i in entries],
                self.params.mmr_lambda or 0.0,
                top_k,
                entries,
            )
        entries = entries[:top_k]
        kept_scores = np.asarray([final[i] for i in entries], dtype=np.float64)
        keep = self.final_filter(kept_scores)
        stats = dict(candidates.stats) if candidates.stats is not None else None
        if reranked:
            stats = {**(stats or {}), "rerank_fallbacks": int(fallback is not None)}
        results = []
        for rank, i in enumerate(entries):
            if keep is not None and not keep[rank]:
                continue
            provenance: dict[str, Any] = {}
            at = position.get(int(source[i]))
            if candidates.provenance is not None and at is not None:
                provenance.update(candidates.provenance(at))
            uri = candidates.uri(at) if candidates.uri is not None and at is not None else ""
            if store.chunked:
                provenance["chunk_id"] = store.doc_ids[int(source[i])]
            if reranked:
                provenance["pre_rerank_score"] = float(scores[i])
                provenance["rerank_fallback"] = fallback
            if stats is not None:
                provenance["stats"] = stats
            score = float(final[i])
            if diverse:
                provenance["pre_mmr_score"] = score
                score = float(len(entries) - rank)
            results.append(RetrievalResult(doc_id=doc_ids[i], score=score, uri=uri, provenance=provenance))
        return results
