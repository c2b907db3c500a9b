"""How a corpus is indexed: the settings of a store, validated (:mod:`retrievers.params`).

``StoreConfig`` groups the BM25 settings, the vector index, optional chunking, the context tree,
document times and edges. Changing any of it makes a different store (a different cache key); retrievers read a
built store and never change it. The components' own settings live with their artifacts
(:mod:`retrievers.store.vector_index_config`, :mod:`retrievers.store.hierarchy_config`,
:mod:`retrievers.store.edge_config`, :mod:`retrievers.timeparse.document_times`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from retrievers.params import Params, param
from retrievers.store.edge_config import EdgeConfig
from retrievers.store.hierarchy_config import HierarchyConfig
from retrievers.store.vector_index_config import VectorIndexConfig
from retrievers.timeparse.document_times import TimestampConfig

if TYPE_CHECKING:
    from retrievers.types import Document

__all__ = [
    "BM25_METHODS",
    "CHUNK_ID_SEPARATOR",
    "BM25Config",
    "ChunkingConfig",
    "StoreConfig",
]

#: bm25s scoring variants (see retrievers/index/bm25.py for the formulas)
BM25_METHODS = ("robertson", "atire", "lucene", "bm25l", "bm25+")
#: chunk ids are ``<doc_id>#<n>``
CHUNK_ID_SEPARATOR = "#"
#: a chunking token: a run of non-whitespace characters (retrievers/builders/chunking.py)
TOKEN_RE = re.compile(r"\S+")


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

    def windows(self, n_tokens: int) -> list[tuple[int, int]]:
        """The chunks of a text of ``n_tokens`` tokens as token ranges ``[start, end)``: windows
        of ``size`` tokens, consecutive ones sharing ``overlap``, the last ending at the last token;
        a text with no token gives one empty window ``(0, 0)``. The one definition the builder
        (:func:`retrievers.builders.chunking.chunk_text`) and the row count (:meth:`StoreConfig.n_rows`) use."""
        if n_tokens == 0:
            return [(0, 0)]
        stride = self.size - self.overlap
        found: list[tuple[int, int]] = []
        start = 0
        while True:
            end = min(start + self.size, n_tokens)
            found.append((start, end))
            if end == n_tokens:
                return found
            start += stride


@dataclass(frozen=True)
class StoreConfig(Params):
    """How a corpus is indexed. Changing any of it rebuilds the store (once)."""

    SECTION = "store"

    bm25: BM25Config = param(factory=BM25Config)
    #: the vector index searches go through (retrievers/index/ann.py); exact by default
    vector_index: VectorIndexConfig = param(factory=VectorIndexConfig)
    #: context tree (retrievers/store/tree.py, settings: hierarchy_config.py); None = no tree
    hierarchy: HierarchyConfig | None = param(None)
    #: document times parsed at build (retrievers/timeparse/document_times.py); None = none parsed
    timestamps: TimestampConfig | None = param(factory=TimestampConfig)
    #: document edges (retrievers/store/edge_config.py); None = none
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
        chunking = self.chunking
        return sum(len(chunking.windows(len(TOKEN_RE.findall(doc.text)))) for doc in documents)

    def check_against(self, documents: Iterable[Document], dim: Callable[[], int]) -> None:
        """ParamError naming the key when the vector index cannot be built over ``documents``
        (``dim()`` gives the embedder's width; asked only when a setting depends on it), before
        anything is embedded or built."""
        if self.vector_index.kind in ("ivf_flat", "ivf_pq"):
            self.vector_index.check_against(
                self.n_rows(documents), dim() if self.vector_index.kind == "ivf_pq" else 1
            )
