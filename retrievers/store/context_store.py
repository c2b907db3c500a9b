"""ContextStore: the built, immutable artifact every retriever reads.

Built once from a corpus, an embedder and store settings (:mod:`retrievers.build`); saved to a
folder of ``.npy``, JSON and bm25s files (never pickle; a faiss index file when
``store.vector_index`` is an ANN kind); loaded with ``mmap``. Loading imports no
build code (no k-means, TF-IDF or LLM client). Retrievers are cheap objects over a store, so a
sweep over query-time parameters builds one store and many retrievers.

Documents are kept sorted by id: row ``i`` of every matrix and index is ``documents[i]``, so
breaking score ties by the lower row index is breaking them by doc id, as the ranking rule asks.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.index import BM25Index, ExactVectorIndex, FaissVectorIndex
from retrievers.store.config import StoreConfig
from retrievers.store.edges import EdgeSet
from retrievers.store.tree import ContextTree
from retrievers.timeparse import DocumentTimes
from retrievers.types import Document, Embedder

__all__ = ["STORE_FORMAT", "ContextStore"]

STORE_FORMAT = 2


class ContextStore:
    """Documents, their embeddings (one float32 matrix, rows = documents) and a BM25 index.

    A store built without an embedder (``embeddings=None``, ``embedder_name=""``) serves lexical
    retrievers only; asking it for vectors raises a ValueError that says so.

    ``vector_index`` is the faiss index over the embeddings when ``config.vector_index.kind`` is
    an ANN kind (built by :mod:`retrievers.build`, loaded by :meth:`load`); :attr:`vectors` is
    then that index and :attr:`exact_vectors` the exact one."""

    def __init__(
        self,
        documents: list[Document],
        embeddings: np.ndarray | None,
        bm25: BM25Index,
        *,
        embedder_name: str,
        config: StoreConfig,
        build_seconds: Mapping[str, float] | None = None,
        vector_index: FaissVectorIndex | None = None,
    ) -> None:
        if embeddings is not None and (embeddings.ndim != 2 or embeddings.shape[0] != len(documents)):
            raise ValueError(f"embeddings shape {embeddings.shape} does not match {len(documents)} documents")
        if bm25.size != len(documents):
            raise ValueError(f"BM25 index has {bm25.size} documents, store has {len(documents)}")
        self.documents = documents
        self.doc_ids = [doc.id for doc in documents]
        if any(a >= b for a, b in itertools.pairwise(self.doc_ids)):
            raise ValueError("store documents must be sorted by id without duplicates")
        self.row_of = {doc_id: row for row, doc_id in enumerate(self.doc_ids)}
        self._embeddings = embeddings
        kind = config.vector_index.kind
        if (vector_index is None) != (kind == "exact" or embeddings is None):
            raise ValueError(
                f"store.vector_index.kind is {kind!r} but "
                + ("no faiss index was given" if vector_index is None else "a faiss index was given")
            )
        if vector_index is not None:
            assert embeddings is not None  # checked above
            if vector_index.kind != kind or (vector_index.size, vector_index.dim) != embeddings.shape:
                raise ValueError(
                    f"the faiss index ({vector_index.kind}, {vector_index.size} x {vector_index.dim}) must "
                    f"be of kind {kind!r} over this store's {embeddings.shape[0]} x {embeddings.shape[1]} embeddings"
                )
        # the exact index the faiss index rescores with, or a new one
        self._vectors = (
            vector_index.exact
            if vector_index is not None
            else None
            if embeddings is None
            else ExactVectorIndex(embeddings)
        )
        self._ann = vector_index
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
    def has_vectors(self) -> bool:
        """Whether the store holds document embeddings (it was built with an embedder)."""
        return self._embeddings is not None

    def _no_vectors(self) -> ValueError:
        return ValueError(
            "this store has no embeddings (it was built without an embedder): only lexical "
            "retrievers (BM25) can search it; build it with an embedder for vector search"
        )

    @property
    def embeddings(self) -> np.ndarray:
        """Document embeddings, float32 ``(rows, dim)``, L2-normalised (memory-mapped when loaded)."""
        if self._embeddings is None:
            raise self._no_vectors()
        return self._embeddings

    @property
    def vectors(self) -> ExactVectorIndex | FaissVectorIndex:
        """The configured vector index over :attr:`embeddings` (``store.vector_index``): exact
        by default, a faiss ANN index otherwise. Both search with the same contract."""
        if self._vectors is None:
            raise self._no_vectors()
        return self._vectors if self._ann is None else self._ann

    @property
    def exact_vectors(self) -> ExactVectorIndex:
        """Exact inner-product search over :attr:`embeddings`, whatever the configured index
        (the reference an ANN index's recall is measured against)."""
        if self._vectors is None:
            raise self._no_vectors()
        return self._vectors

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
        embedder: Embedder | None,
        config: StoreConfig | None = None,
        *,
        show_progress: bool = False,
        source_folder: Path | None = None,
    ) -> ContextStore:
        """Embed and index ``documents``: :func:`retrievers.build.build_store` (imported only
        when a store is built)."""
        from retrievers.build import build_store

        return build_store(
            documents, embedder, config, show_progress=show_progress, source_folder=source_folder
        )

    def save(self, folder: Path) -> None:
        """Write the store into ``folder`` (created if needed): JSON, npy and bm25s files."""
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": STORE_FORMAT,
            "embedder_name": self.embedder_name,
            "n_documents": len(self.documents),
            "dim": self.dim if self.has_vectors else None,
            "config": self.config.to_dict(),
            "build_seconds": self.build_seconds,
        }
        (folder / "store.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        with open(folder / "documents.jsonl", "w", encoding="utf-8") as handle:
            for doc in self.documents:
                record = {"_id": doc.id, "title": doc.title, "text": doc.text, "metadata": dict(doc.metadata)}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        if self.has_vectors:
            np.save(folder / "embeddings.npy", np.ascontiguousarray(self.embeddings), allow_pickle=False)
        if self._ann is not None:
            self._ann.save(folder / "vector_index")
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
        embeddings = (
            np.load(folder / "embeddings.npy", mmap_mode="r" if mmap else None, allow_pickle=False)
            if meta.get("dim") is not None
            else None
        )
        bm25 = BM25Index.load(folder / "bm25", mmap=mmap)
        config = StoreConfig.from_dict(meta["config"])
        vector_index = None
        if embeddings is not None and config.vector_index.kind != "exact":
            vector_index = FaissVectorIndex.load(
                folder / "vector_index", ExactVectorIndex(embeddings), config.vector_index.kind, mmap=mmap
            )
        store = cls(
            documents,
            embeddings,
            bm25,
            embedder_name=meta["embedder_name"],
            config=config,
            build_seconds=meta.get("build_seconds"),
            vector_index=vector_index,
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
