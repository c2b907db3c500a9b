"""Where a retriever's vector search runs: the store's search backend (retrievers/backends/) when it
has one, else its faiss index with the retriever's query-time ANN knobs, or its exact index; and the
check, when a retriever is made, that every knob it sets applies to that index. The kernel
(retrievers/kernel.py) and the families that search vectors themselves (the hierarchical descent,
the semantic strategy) call :func:`search_vectors`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from retrievers.backends.base import SearchBackend
from retrievers.backends.keywords import allowed_rows
from retrievers.index import FaissVectorIndex
from retrievers.index.ann import KNOB_KINDS
from retrievers.index.vectors import Hits
from retrievers.params import ParamError
from retrievers.spans import span

if TYPE_CHECKING:
    from retrievers.filters import BoolArray
    from retrievers.store import ContextStore

__all__ = ["VectorKnobs", "check_vector_knobs", "search_vectors"]


class VectorKnobs(Protocol):
    """The query-time ANN knobs a retriever's parameters carry (retrievers.kernel.RetrieverParams)."""

    @property
    def ef_search(self) -> int | None: ...
    @property
    def nprobe(self) -> int | None: ...
    @property
    def refine_factor(self) -> int | None: ...


def check_vector_knobs(params: VectorKnobs, store: ContextStore, who: str, searches_vectors: bool) -> None:
    """ParamError unless every ANN knob set in ``params`` applies: the retriever searches vectors
    (``searches_vectors``) and the store's vector index has that knob, within its range."""
    for name in ("ef_search", "nprobe", "refine_factor"):
        value = getattr(params, name)
        if value is None:
            continue
        if not searches_vectors:
            raise ParamError(name, f"{name}={value}: {who} searches no vectors here, so no ANN knob applies")
        if isinstance(store.backend, SearchBackend):  # the backend's index has its own knobs
            try:
                store.backend.check_knob(name, value)
            except ValueError as error:
                raise ParamError(name, str(error)) from None
            continue
        index = store.vectors
        if not isinstance(index, FaissVectorIndex):
            raise ParamError(
                name,
                f"{name}={value} applies to an approximate vector index "
                f"(store.vector_index.kind={KNOB_KINDS[name]}); this store's vector index is exact",
            )
        try:
            index.check_knobs(**{name: value})
        except ValueError as error:
            raise ParamError(name, str(error)) from None


def search_vectors(
    store: ContextStore,
    queries: np.ndarray,
    k: int,
    *,
    mask: BoolArray | None,
    params: VectorKnobs,
) -> Hits:
    """The store's vector index searched for ``queries`` (top ``k`` by score desc, row asc,
    restricted to ``mask``), with the knobs of ``params`` when the index is approximate; in the
    store's search backend (retrievers/backends/) when it has one, ``mask`` its own filter."""
    if isinstance(store.backend, SearchBackend):
        rows = allowed_rows(mask, len(store))
        return store.backend.vector_search(queries, k, rows, ef_search=params.ef_search, nprobe=params.nprobe)
    index = store.vectors
    with span("vector"):
        if isinstance(index, FaissVectorIndex):
            return index.search(
                queries,
                k,
                mask=mask,
                ef_search=params.ef_search,
                nprobe=params.nprobe,
                refine_factor=params.refine_factor,
            )
        return index.search(queries, k, mask=mask)
