"""ContextStore: the built, immutable artifact every retriever reads.

Built once from a corpus, an embedder and store settings; saved to a folder of ``.npy``, JSON and
bm25s files (never pickle); loaded with ``mmap``. Retrievers are cheap objects over a store, so a
sweep over query-time parameters builds one store and many retrievers.

Documents are kept sorted by id: row ``i`` of every matrix and index is ``documents[i]``, so
breaking score ties by the lower row index is breaking them by doc id, as the ranking rule asks.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.chunking import ChunkingConfig, chunk_documents
from retrievers.edges import EdgeConfig, EdgeSet, build_edges
from retrievers.hierarchy import ContextTree, HierarchyConfig, build_tree
from retrievers.index import BM25Index, ExactVectorIndex
from retrievers.timeparse import DocumentTimes, TimestampConfig
from retrievers.types import Document, Embedder

STORE_FORMAT = 1


def _reject_unknown(cls: type, values: Mapping[str, Any], where: str) -> None:
    allowed = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise ValueError(f"unknown {where} key(s) {unknown}; allowed: {sorted(allowed)}")


@dataclass(frozen=True)
class BM25Config:
    """BM25 index settings. Defaults are Pyserini's BEIR "flat" settings (k1=0.9, b=0.4, Lucene
    idf) with an English stopword list and Snowball stemming."""

    k1: float = 0.9
    b: float = 0.4
    method: str = "lucene"
    stopwords: str | None = "en"
    stemmer: str | None = "english"

    def __post_init__(self) -> None:
        if not self.k1 > 0:
            raise ValueError(f"bm25.k1 must be > 0, got {self.k1}")
        if not 0.0 <= self.b <= 1.0:
            raise ValueError(f"bm25.b must be in [0, 1], got {self.b}")


@dataclass(frozen=True)
class StoreConfig:
    """How a corpus is indexed. Changing any of it rebuilds the store (once)."""

    bm25: BM25Config = field(default_factory=BM25Config)
    #: context tree (retrievers/hierarchy.py); None = no tree
    hierarchy: HierarchyConfig | None = None
    #: document times parsed at build (retrievers/timeparse.py); None = none parsed
    timestamps: TimestampConfig | None = field(default_factory=TimestampConfig)
    #: document edges (retrievers/edges.py): kNN similarity, sequence, references, mentions, LLM; None = none
    edges: EdgeConfig | None = None
    #: parent-child chunks (retrievers/chunking.py): {size, overlap} in whitespace tokens; None = whole documents
    chunking: ChunkingConfig | None = None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> StoreConfig:
        values = dict(values or {})
        _reject_unknown(cls, values, "store")
        bm25 = dict(values.get("bm25") or {})
        _reject_unknown(BM25Config, bm25, "store.bm25")
        hierarchy = values.get("hierarchy")
        timestamps = values.get("timestamps", {})
        edges = values.get("edges")
        chunking = values.get("chunking")
        return cls(
            bm25=BM25Config(**bm25),
            hierarchy=None if hierarchy is None else HierarchyConfig.from_dict(hierarchy),
            timestamps=None if timestamps is None else TimestampConfig.from_dict(timestamps),
            edges=None if edges is None else EdgeConfig.from_dict(edges),
            chunking=None if chunking is None else ChunkingConfig.from_dict(chunking),
        )

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        if values.get("chunking") is None:  # unchunked stores keep the cache keys they had before chunking
            values.pop("chunking", None)
        if values.get("edges") is not None and values["edges"].get("llm") is None:
            values["edges"].pop("llm")  # and stores without LLM edges the keys they had before them
        return values

    def input_files(self, source_folder: Path | None) -> list[Path]:
        """Files a build reads besides the corpus (e.g. the tree's summaries file); their content
        belongs in the store's cache key."""
        return [] if self.hierarchy is None else self.hierarchy.input_files(source_folder)


class ContextStore:
    """Documents, their embeddings (one float32 matrix, rows = documents) and a BM25 index."""

    def __init__(
        self,
        documents: list[Document],
        embeddings: np.ndarray,
        bm25: BM25Index,
        *,
        embedder_name: str,
        config: StoreConfig,
        build_seconds: Mapping[str, float] | None = None,
    ) -> None:
        if embeddings.ndim != 2 or embeddings.shape[0] != len(documents):
            raise ValueError(f"embeddings shape {embeddings.shape} does not match {len(documents)} documents")
        if bm25.size != len(documents):
            raise ValueError(f"BM25 index has {bm25.size} documents, store has {len(documents)}")
        self.documents = documents
        self.doc_ids = [doc.id for doc in documents]
        if any(a >= b for a, b in itertools.pairwise(self.doc_ids)):
            raise ValueError("store documents must be sorted by id without duplicates")
        self.row_of = {doc_id: row for row, doc_id in enumerate(self.doc_ids)}
        self.embeddings = embeddings
        self.vectors = ExactVectorIndex(embeddings)
        self.bm25 = bm25
        self.embedder_name = embedder_name
        self.config = config
        self.build_seconds = dict(build_seconds or {})
        #: rows a search may return (None = all); set on views made by ``restricted``
        self.allowed: np.ndarray | None = None
        #: the context tree (hierarchy.py), None when ``config.hierarchy`` is None
        self.tree: ContextTree | None = None
        #: epoch seconds per row and the parse report (timeparse.py); None when ``config.timestamps`` is None
        self.timestamps: DocumentTimes | None = None
        #: typed, weighted document edges in CSR form (edges.py); None when ``config.edges`` is None
        self.edges: EdgeSet | None = None
        # Parent documents (chunking.py). A chunked store's rows are chunks and these are the
        # documents they came from; otherwise they are the rows themselves.
        self.parent_documents: list[Document] = documents
        self.parent_ids: list[str] = self.doc_ids
        self.parent_row_of: dict[str, int] = self.row_of
        #: row -> index into ``parent_ids`` (int64)
        self.parent_of: np.ndarray = np.arange(len(documents), dtype=np.int64)

    @property
    def chunked(self) -> bool:
        """Whether rows are chunks of documents (results are then resolved to documents)."""
        return self.parent_documents is not self.documents

    def set_parents(self, parents: list[Document], parent_of: np.ndarray) -> None:
        """Declare the rows chunks of ``parents`` (sorted by id): ``parent_of[row]`` indexes
        ``parents``. Every parent must own at least one row, and each row's metadata
        ``parent_id`` (when present) must name its parent."""
        parent_ids = [doc.id for doc in parents]
        if any(a >= b for a, b in itertools.pairwise(parent_ids)):
            raise ValueError("parent documents must be sorted by id without duplicates")
        mapping = np.asarray(parent_of, dtype=np.int64)
        if mapping.shape != (len(self.documents),):
            raise ValueError(f"parent_of has shape {mapping.shape}, expected ({len(self.documents)},)")
        if mapping.size and (mapping.min() < 0 or mapping.max() >= len(parents)):
            raise ValueError(f"parent_of holds indices outside [0, {len(parents) - 1}]")
        if np.unique(mapping).size != len(parents):
            raise ValueError("every parent document needs at least one chunk row")
        for row, doc in enumerate(self.documents):
            named = doc.metadata.get("parent_id")
            if named is not None and named != parent_ids[mapping[row]]:
                raise ValueError(
                    f"row {doc.id!r} says parent_id {named!r}, parent_of says {parent_ids[mapping[row]]!r}"
                )
        self.parent_documents = parents
        self.parent_ids = parent_ids
        self.parent_row_of = {doc_id: index for index, doc_id in enumerate(parent_ids)}
        self.parent_of = mapping

    def __len__(self) -> int:
        return len(self.documents)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def metadata_mask(self, key: str, value: Any) -> np.ndarray:
        """Rows whose ``metadata[key]`` equals ``value`` (compared as strings)."""
        wanted = str(value)
        return np.fromiter(
            (key in doc.metadata and str(doc.metadata[key]) == wanted for doc in self.documents),
            dtype=bool,
            count=len(self.documents),
        )

    def restricted(self, allowed: np.ndarray) -> ContextStore:
        """A view sharing every array whose searches only return rows where ``allowed`` is True
        (combined with this store's own restriction). Used to scope a query to its own
        conversation, as LoCoMo's per-conversation setting asks."""
        mask = np.asarray(allowed, dtype=bool)
        if mask.shape != (len(self.documents),):
            raise ValueError(f"allowed mask has shape {mask.shape}, expected ({len(self.documents)},)")
        if self.allowed is not None:
            mask = mask & self.allowed
        view = copy.copy(self)
        mask.setflags(write=False)
        view.allowed = mask
        return view

    @classmethod
    def build(
        cls,
        documents: Iterable[Document],
        embedder: Embedder,
        config: StoreConfig | None = None,
        *,
        show_progress: bool = False,
        source_folder: Path | None = None,
    ) -> ContextStore:
        """Embed and index ``documents`` (title and text joined as BEIR does). ``source_folder``
        is the dataset folder, where components find extra files (the tree's summaries)."""
        config = config or StoreConfig()
        ordered = sorted(documents, key=lambda doc: doc.id)
        if not ordered:
            raise ValueError("cannot build a store from an empty corpus")
        parents: list[Document] | None = None
        if config.chunking is not None:  # rows become chunks; the documents are kept as parents
            for previous, current in itertools.pairwise(ordered):
                if previous.id == current.id:
                    raise ValueError(f"duplicate document id {current.id!r}")
            parents = ordered
            ordered = sorted(chunk_documents(parents, config.chunking), key=lambda doc: doc.id)
        for previous, current in itertools.pairwise(ordered):
            if previous.id == current.id:
                raise ValueError(f"duplicate document id {current.id!r}")
        texts = [doc.full_text for doc in ordered]
        seconds: dict[str, float] = {}
        start = time.perf_counter()
        embeddings = np.ascontiguousarray(embedder.encode(texts, kind="document"), dtype=np.float32)
        seconds["embed"] = time.perf_counter() - start
        start = time.perf_counter()
        bm25 = BM25Index.build(
            texts,
            k1=config.bm25.k1,
            b=config.bm25.b,
            method=config.bm25.method,
            stopwords=config.bm25.stopwords,
            stemmer=config.bm25.stemmer,
            show_progress=show_progress,
        )
        seconds["bm25"] = time.perf_counter() - start
        tree = None
        if config.hierarchy is not None:
            start = time.perf_counter()
            tree = build_tree(ordered, embeddings, embedder, config.hierarchy, source_folder=source_folder)
            seconds["hierarchy"] = time.perf_counter() - start
        store = cls(
            ordered, embeddings, bm25, embedder_name=embedder.name, config=config, build_seconds=seconds
        )
        if parents is not None:
            parent_index = {doc.id: index for index, doc in enumerate(parents)}
            store.set_parents(
                parents,
                np.fromiter(
                    (parent_index[doc.metadata["parent_id"]] for doc in ordered), np.int64, len(ordered)
                ),
            )
        if tree is not None:
            tree.leaf_rows(store.row_of)  # every leaf names a document of the store
            store.tree = tree
        if config.timestamps is not None:
            start = time.perf_counter()
            store.timestamps = DocumentTimes.build(ordered, config.timestamps)
            store.build_seconds["timestamps"] = time.perf_counter() - start
        if config.edges is not None:  # after the embeddings: similar_to edges use them
            start = time.perf_counter()
            store.edges = build_edges(ordered, embeddings, config.edges)
            store.build_seconds["edges"] = time.perf_counter() - start
        return store

    def save(self, folder: Path) -> None:
        """Write the store into ``folder`` (created if needed): JSON, npy and bm25s files."""
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": STORE_FORMAT,
            "embedder_name": self.embedder_name,
            "n_documents": len(self.documents),
            "dim": self.dim,
            "config": self.config.to_dict(),
            "build_seconds": self.build_seconds,
        }
        (folder / "store.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        with open(folder / "documents.jsonl", "w", encoding="utf-8") as handle:
            for doc in self.documents:
                record = {"_id": doc.id, "title": doc.title, "text": doc.text, "metadata": dict(doc.metadata)}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        np.save(folder / "embeddings.npy", np.ascontiguousarray(self.embeddings), allow_pickle=False)
        self.bm25.save(folder / "bm25")
        if self.tree is not None:
            self.tree.save(folder / "tree")
        if self.timestamps is not None:
            self.timestamps.save(folder / "timestamps")
        if self.edges is not None:
            self.edges.save(folder / "edges")
        if self.chunked:
            (folder / "parents").mkdir(exist_ok=True)
            _write_documents(folder / "parents" / "documents.jsonl", self.parent_documents)
            np.save(folder / "parents" / "parent_of.npy", self.parent_of, allow_pickle=False)

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> ContextStore:
        meta = json.loads((folder / "store.json").read_text(encoding="utf-8"))
        if meta.get("format") != STORE_FORMAT:
            raise ValueError(f"{folder}: store format {meta.get('format')} is not {STORE_FORMAT}; rebuild it")
        documents = []
        with open(folder / "documents.jsonl", encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                documents.append(
                    Document(
                        id=record["_id"],
                        text=record["text"],
                        title=record["title"],
                        metadata=record["metadata"],
                    )
                )
        embeddings = np.load(folder / "embeddings.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
        bm25 = BM25Index.load(folder / "bm25", mmap=mmap)
        store = cls(
            documents,
            embeddings,
            bm25,
            embedder_name=meta["embedder_name"],
            config=StoreConfig.from_dict(meta["config"]),
            build_seconds=meta.get("build_seconds"),
        )
        if (folder / "tree").is_dir():
            tree = ContextTree.load(folder / "tree", mmap=mmap)
            tree.leaf_rows(store.row_of)
            store.tree = tree
        if (folder / "timestamps").is_dir():
            store.timestamps = DocumentTimes.load(folder / "timestamps", len(documents), mmap=mmap)
        if (folder / "edges").is_dir():
            store.edges = EdgeSet.load(folder / "edges", mmap=mmap, n_nodes=len(documents))
        if (folder / "parents").is_dir():
            store.set_parents(
                _read_documents(folder / "parents" / "documents.jsonl"),
                np.load(folder / "parents" / "parent_of.npy", allow_pickle=False),
            )
        return store


def _write_documents(path: Path, documents: Iterable[Document]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for doc in documents:
            record = {"_id": doc.id, "title": doc.title, "text": doc.text, "metadata": dict(doc.metadata)}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def _read_documents(path: Path) -> list[Document]:
    with open(path, encoding="utf-8") as handle:
        return [
            Document(
                id=record["_id"], text=record["text"], title=record["title"], metadata=record["metadata"]
            )
            for record in map(json.loads, handle)
        ]
