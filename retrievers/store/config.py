"""How a corpus is indexed: the settings of a store, validated (:mod:`retrievers.params`).

``StoreConfig`` groups the BM25 settings, the vector index, optional chunking, the context tree,
document times and edges. Changing any of it makes a different store (a different cache key); retrievers read a
built store and never change it. The components' own settings live with their artifacts
(:mod:`retrievers.store.tree`, :mod:`retrievers.store.edges`, :mod:`retrievers.timeparse`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from retrievers.params import Params, param
from retrievers.store.edges import EdgeConfig
from retrievers.store.tree import HierarchyConfig
from retrievers.timeparse import TimestampConfig

if TYPE_CHECKING:
    from retrievers.types import Document

__all__ = [
    "BM25_METHODS",
    "CHUNK_ID_SEPARATOR",
    "VECTOR_INDEX_KINDS",
    "BM25Config",
    "ChunkingConfig",
    "StoreConfig",
    "VectorIndexConfig",
]

#: bm25s scoring variants (see retrievers/index/bm25.py for the formulas)
BM25_METHODS = ("robertson", "atire", "lucene", "bm25l", "bm25+")
#: chunk ids are ``<doc_id>#<n>``
CHUNK_ID_SEPARATOR = "#"
#: vector index kinds (retrievers/index/ann.py): exact numpy search, or a faiss index
VECTOR_INDEX_KINDS = ("exact", "flat", "hnsw", "ivf_flat", "ivf_pq")


@dataclass(frozen=True)
class BM25Config(Params):
    """BM25 index settings. Defaults are Pyserini's BEIR "flat" settings (k1=0.9, b=0.4, Lucene
    idf) with bm25s's English stopword list and Snowball English stemming."""

    SECTION = "store.bm25"

    k1: float = param(0.9, low=0.0, low_open=True, high=100.0, doc="term frequency saturation")
    b: float = param(0.4, low=0.0, high=1.0, doc="document length normalisation")
    method: Literal["robertson", "atire", "lucene", "bm25l", "bm25+"] = param("lucene")
    stopwords: Literal["en"] | None = param("en", doc="stopword list; null keeps every word")
    stemmer: str | None = param("english", doc="a Snowball algorithm (PyStemmer); null = no stemming")

    def check(self) -> None:
        from retrievers.text import check_stemmer

        try:
            check_stemmer(self.stemmer)
        except ValueError as error:
            raise self.fail("stemmer", str(error).removeprefix("stemmer ")) from None


@dataclass(frozen=True)
class ChunkingConfig(Params):
    """Parent-child chunks (:mod:`retrievers.builders.chunking`): ``size`` whitespace tokens per
    chunk; ``overlap`` tokens shared by consecutive chunks, at most ``size - 1``."""

    SECTION = "store.chunking"

    size: int = param(128, low=1, high=100_000)
    overlap: int = param(0, low=0, high=99_999)

    def check(self) -> None:
        if self.overlap >= self.size:
            raise self.fail(
                "overlap",
                f"must be an integer in [0, size - 1] = [0, {self.size - 1}] tokens, got {self.overlap!r}",
            )


@dataclass(frozen=True)
class VectorIndexConfig(Params):
    """The index every vector search of the store goes through (:mod:`retrievers.index.ann`).

    ``exact`` is :class:`~retrievers.index.ExactVectorIndex` (numpy, no extra file). The other
    kinds are faiss indexes over the same embeddings, inner-product metric, built once with the
    store and saved beside it: ``flat`` (``IndexFlatIP``, brute force in faiss), ``hnsw``
    (``IndexHNSWFlat``: ``hnsw_m`` links per node, ``ef_construction``), ``ivf_flat`` and
    ``ivf_pq`` (``nlist`` k-means lists trained on ``train_size`` rows sampled with ``seed``;
    IVF-PQ stores ``pq_m`` codes of ``pq_bits`` bits per vector). Query-time knobs (HNSW
    ``efSearch``, IVF ``nprobe``, IVF-PQ's candidates rescored per result) are retriever
    parameters (``ef_search``, ``nprobe``, ``refine_factor``): changing them never rebuilds the
    store."""

    SECTION = "store.vector_index"

    kind: Literal["exact", "flat", "hnsw", "ivf_flat", "ivf_pq"] = param("exact")
    hnsw_m: int = param(32, low=2, high=256, doc="HNSW: links per node (M)")
    ef_construction: int = param(100, low=1, high=4096, doc="HNSW: candidate list size while inserting")
    nlist: int | None = param(
        None, low=1, high=1 << 20, doc="IVF: k-means lists; null = min(4 sqrt(rows), rows / 39)"
    )
    pq_m: int | None = param(
        None, low=1, high=4096, doc="IVF-PQ: sub-quantizers, must divide the dimension; null = dim / 8"
    )
    pq_bits: int = param(8, low=1, high=16, doc="IVF-PQ: bits per sub-quantizer code")
    train_size: int | None = param(
        None,
        low=1,
        high=100_000_000,
        doc="IVF: rows sampled to train k-means (and PQ); null = min(rows, 64 x max(nlist, 2^pq_bits))",
    )
    seed: int = param(0, low=0, high=2**31 - 1, doc="training sample, k-means and HNSW levels")

    def check(self) -> None:
        unused = {
            "hnsw_m": self.kind == "hnsw",
            "ef_construction": self.kind == "hnsw",
            "nlist": self.kind in ("ivf_flat", "ivf_pq"),
            "pq_m": self.kind == "ivf_pq",
            "train_size": self.kind in ("ivf_flat", "ivf_pq"),
        }
        defaults = VectorIndexConfig.__dataclass_fields__
        for name, used in unused.items():
            if not used and getattr(self, name) != defaults[name].default:
                raise self.fail(name, f"does not apply to kind {self.kind!r}; remove it or change the kind")

    def check_against(self, n_rows: int, dim: int) -> None:
        """ParamError naming the key when these settings cannot index ``n_rows`` vectors of width
        ``dim`` (IVF lists, PQ sub-quantizers, training rows: ``check_vector_settings`` of
        :mod:`retrievers.index.ann`); nothing to check for ``exact``, ``flat`` and ``hnsw``."""
        from retrievers.index.ann import check_vector_settings

        check_vector_settings(self, n_rows, dim)


@dataclass(frozen=True)
class StoreConfig(Params):
    """How a corpus is indexed. Changing any of it rebuilds the store (once)."""

    SECTION = "store"

    bm25: BM25Config = param(factory=BM25Config)
    #: the vector index searches go through (retrievers/index/ann.py); exact by default
    vector_index: VectorIndexConfig = param(factory=VectorIndexConfig)
    #: context tree (retrievers/store/tree.py); None = no tree
    hierarchy: HierarchyConfig | None = param(None)
    #: document times parsed at build (retrievers/timeparse.py); None = none parsed
    timestamps: TimestampConfig | None = param(factory=TimestampConfig)
    #: document edges (retrievers/store/edges.py); None = none
    edges: EdgeConfig | None = param(None)
    #: parent-child chunks; None = whole documents
    chunking: ChunkingConfig | None = param(None)

    def input_files(self, source_folder: Path | None) -> list[Path]:
        """Files a build reads besides the corpus (e.g. the tree's summaries file); their content
        belongs in the store's cache key."""
        return [] if self.hierarchy is None else self.hierarchy.input_files(source_folder)

    def n_rows(self, documents: Iterable[Document]) -> int:
        """How many rows a store of ``documents`` indexes: the documents, or their chunks."""
        if self.chunking is None:
            return sum(1 for _ in documents)
        from retrievers.builders.chunking import chunk_documents

        return len(chunk_documents(documents, self.chunking))

    def check_against(self, documents: Iterable[Document], dim: Callable[[], int]) -> None:
        """ParamError naming the key when the vector index cannot be built over ``documents``
        (``dim()`` gives the embedder's width; asked only when a setting depends on it), before
        anything is embedded or built."""
        if self.vector_index.kind in ("ivf_flat", "ivf_pq"):
            self.vector_index.check_against(
                self.n_rows(documents), dim() if self.vector_index.kind == "ivf_pq" else 1
            )
