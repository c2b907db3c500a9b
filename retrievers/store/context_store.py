"""ContextStore: the built, immutable artifact every retriever reads.

Built once from a corpus, an embedder and store settings (:mod:`retrievers.builders`); saved to a
folder of ``.npy``, JSON and bm25s files (never pickle; a faiss index file when
``store.vector_index`` is an ANN kind); loaded with ``mmap``. Loading imports no
build code (no k-means, TF-IDF or LLM client). Retrievers are cheap objects over a store, so a
sweep over query-time parameters builds one store and many retrievers.

Documents are kept sorted by id: row ``i`` of every matrix and index is ``documents[i]``, so
breaking score ties by the lower row index is breaking them by doc id, as the ranking rule asks.

Documents are columns (:mod:`retrievers.store.columns`), memory-mapped when loaded: ``documents``
is a ``Sequence[Document]`` decoding a row when it is read, ``doc_ids`` a sequence of ids and
``row_of`` a binary search over them, so loading costs the same at 1M documents as at 1k
(format 3; a store of an older format is refused with a message to rebuild it).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.index import BM25Index, ExactVectorIndex, FaissVectorIndex
from retrievers.store.change_config import ChangeSettings, StoreVersion
from retrievers.store.columns import DocumentColumns, decode_metadata
from retrievers.store.config import StoreConfig
from retrievers.store.edges import EdgeSet
from retrievers.store.ids import IdColumn, RowIndex
from retrievers.store.npy_files import save_array, save_npy
from retrievers.store.tree import ContextTree
from retrievers.timeparse.document_times import DocumentTimes
from retrievers.types import Document, Embedder

__all__ = ["STORE_FORMAT", "ContextStore"]

#: 3: documents and tree nodes as memory-mapped columns (2: JSON lines)
STORE_FORMAT = 3


class ContextStore:
    """Documents, their embeddings (one float32 matrix, rows = documents) and a BM25 index.

    A store built without an embedder (``embeddings=None``, ``embedder_name=""``) serves lexical
    retrievers only; asking it for vectors raises a ValueError that says so.

    ``vector_index`` is the faiss index over the embeddings when ``config.vector_index.kind`` is
    an ANN kind (built by :mod:`retrievers.builders`, loaded by :meth:`load`); :attr:`vectors` is
    then that index and :attr:`exact_vectors` the exact one."""

    def __init__(
        self,
        documents: Sequence[Document],
        embeddings: np.ndarray | None,
        bm25: BM25Index,
        *,
        embedder_name: str,
        config: StoreConfig,
        build_seconds: Mapping[str, float] | None = None,
        vector_index: FaissVectorIndex | None = None,
        tree: ContextTree | None = None,
        timestamps: DocumentTimes | None = None,
        edges: EdgeSet | None = None,
        parents: tuple[Sequence[Document], np.ndarray] | None = None,
        check_parents: bool = True,
    ) -> None:
        columns = _columns(documents, "store documents")
        if embeddings is not None and (embeddings.ndim != 2 or embeddings.shape[0] != len(columns)):
            raise ValueError(f"embeddings shape {embeddings.shape} does not match {len(columns)} documents")
        if bm25.size != len(columns):
            raise ValueError(f"BM25 index has {bm25.size} documents, store has {len(columns)}")
        #: the documents, row order (a Sequence[Document] decoding each row when read)
        self.documents: DocumentColumns = columns
        #: document id of every row (sorted)
        self.doc_ids: IdColumn = columns.ids
        #: doc id -> row (a binary search over ``doc_ids``)
        self.row_of: RowIndex = RowIndex(columns.ids)
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
        #: the search backend (retrievers/backends/) a view made by :meth:`with_search` searches
        #: in; None = this store's own indexes (store.backend=local)
        self.backend: object | None = None
        self.embedder_name = embedder_name
        self.config = config
        self.build_seconds = dict(build_seconds or {})
        #: rows a search may return (None = all); set on views made by ``restricted``
        self.allowed: np.ndarray | None = None
        #: the context tree (hierarchy.py), None when ``config.hierarchy`` is None
        self.tree: ContextTree | None = tree
        #: epoch seconds per row and the parse report (timeparse/document_times.py); None when ``config.timestamps`` is None
        self.timestamps: DocumentTimes | None = timestamps
        #: typed, weighted document edges in CSR form (edges.py); None when ``config.edges`` is None
        self.edges: EdgeSet | None = edges
        #: the versions this store comes from, oldest first, itself last (empty for a store that
        #: was built and never changed: :attr:`content_key` names it); see :meth:`add`
        self.history: tuple[StoreVersion, ...] = ()
        #: seconds per part of the change that made this store (:meth:`add`); empty when built
        self.change_seconds: dict[str, float] = {}
        self._content_key: str | None = None
        # metadata key -> {value as a string: its rows} (metadata_mask); views share it, as they
        # share the documents
        self._metadata_groups: dict[str, dict[str, np.ndarray]] = {}
        # part name -> (folder it lives in, the object): parts save() need not write again
        self._saved: dict[str, tuple[Path, object]] = {}
        # Parent documents (chunking.py). A chunked store's rows are chunks and these are the
        # documents they came from; otherwise they are the rows themselves.
        self.parent_documents: DocumentColumns = columns
        self.parent_ids: IdColumn = self.doc_ids
        self.parent_row_of: RowIndex = self.row_of
        #: row -> index into ``parent_ids`` (int64)
        self.parent_of: np.ndarray = np.arange(len(columns), dtype=np.int64)
        if parents is not None:
            self._set_parents(*parents, check=check_parents)

    @property
    def chunked(self) -> bool:
        """Whether rows are chunks of documents (results are then resolved to documents)."""
        return self.parent_documents is not self.documents

    def _set_parents(self, parents: Sequence[Document], parent_of: np.ndarray, *, check: bool) -> None:
        """Declare the rows chunks of ``parents`` (sorted by id): ``parent_of[row]`` indexes
        ``parents``. Every parent must own at least one row, and each row's metadata
        ``parent_id`` (when present) must name its parent (``check=False``, for a store being
        loaded, skips that per-row check: it held when the store was built). Called only by
        ``__init__``: a store is finished when made."""
        columns = _columns(parents, "parent documents")
        parent_ids = columns.ids
        mapping = np.asarray(parent_of, dtype=np.int64)
        if mapping.shape != (len(self.documents),):
            raise ValueError(f"parent_of has shape {mapping.shape}, expected ({len(self.documents)},)")
        if mapping.size and (mapping.min() < 0 or mapping.max() >= len(parents)):
            raise ValueError(f"parent_of holds indices outside [0, {len(parents) - 1}]")
        if np.unique(mapping).size != len(parents):
            raise ValueError("every parent document needs at least one chunk row")
        for row, doc in enumerate(self.documents if check else ()):
            named = doc.metadata.get("parent_id")
            if named is not None and named != parent_ids[mapping[row]]:
                raise ValueError(
                    f"row {doc.id!r} says parent_id {named!r}, parent_of says {parent_ids[mapping[row]]!r}"
                )
        self.parent_documents = columns
        self.parent_ids = parent_ids
        self.parent_row_of = RowIndex(parent_ids)
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
        """Rows whose ``metadata[key]`` equals ``value`` (compared as strings). The first ask for
        ``key`` groups every row by its value in one pass over the metadata (a row at a time);
        later asks (the next conversation, the next retriever over this store or a view of it)
        read the groups."""
        groups = self._metadata_groups.get(key)
        if groups is None:
            quoted = json.dumps(key, ensure_ascii=False)  # rows whose JSON cannot hold it: unparsed
            grouped: dict[str, list[int]] = {}
            for row, text in enumerate(self.documents.metadata):
                if quoted in text and key in (metadata := decode_metadata(text)):
                    grouped.setdefault(str(metadata[key]), []).append(row)
            groups = {name: np.asarray(rows, dtype=np.int64) for name, rows in grouped.items()}
            self._metadata_groups[key] = groups
        mask = np.zeros(len(self.documents), dtype=bool)
        mask[groups.get(str(value), np.empty(0, dtype=np.int64))] = True
        return mask

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

    def with_search(self, backend: object, keywords: BM25Index) -> ContextStore:
        """A view sharing every array whose vector searches go to ``backend`` (the kernel routes
        them) and whose keyword index is ``keywords`` (the backend's keyword search): made by
        :func:`retrievers.backends.attach`, once the backend holds this store."""
        view = copy.copy(self)
        view._saved = {}
        view.backend = backend
        view.bm25 = keywords
        return view

    def with_parts(
        self,
        *,
        tree: ContextTree | None = None,
        timestamps: DocumentTimes | None = None,
        edges: EdgeSet | None = None,
    ) -> ContextStore:
        """A new store sharing this one's arrays, with ``tree``, ``timestamps`` or ``edges``
        replaced (those given; the others kept). This store is left as it is: stores are never
        changed once made, so a retriever over this one keeps seeing what it saw. Building a store
        is :func:`retrievers.builders.build_store`'s job; this is for parts made by hand (tests,
        benchmarks, a tree embedded separately)."""
        if tree is not None:
            tree.leaf_rows(self.row_of)  # every leaf names a document of the store
        view = copy.copy(self)
        view._saved = {}
        view._content_key = None
        if tree is not None:
            view.tree = tree
        if timestamps is not None:
            view.timestamps = timestamps
        if edges is not None:
            view.edges = edges
        return view

    @property
    def content_key(self) -> str:
        """sha256 of what searches read (ids, texts, metadata, embeddings, embedder, settings):
        the same for equal stores however they were made (:func:`retrievers.store.changes.content_key`)."""
        if self._content_key is None:
            from retrievers.store.changes import content_key

            self._content_key = content_key(self)
        return self._content_key

    def add(
        self,
        documents: Iterable[Document],
        embedder: Embedder | None = None,
        *,
        embeddings: npt.ArrayLike | None = None,
        settings: ChangeSettings | None = None,
    ) -> ContextStore:
        """A new store version holding this store's documents and ``documents`` (ids not in the
        store; else ValueError naming one). The new documents are embedded with ``embedder``
        (the store's own, by name) unless their ``embeddings`` are given (rows in the order of
        ``documents`` sorted by id). This store is left as it is. Exact search and BM25 over the
        result equal a fresh build of the same documents bit for bit; the tree, edges, times and
        faiss index are updated as :mod:`retrievers.store.changes` says; ``settings`` holds the
        tree's split and rebuild rules. The result's :attr:`history` ends with its version;
        :attr:`change_seconds` has the time of each part. Durable versions on disk:
        :class:`retrievers.store.versions.StoreVersions`."""
        from retrievers.store.changes import apply_change

        added = list(documents)
        changed: ContextStore = apply_change(
            self, removed=(), added=added, embedder=embedder, embeddings=embeddings,
            settings=settings, counts=(len(added), 0, 0),
        )  # fmt: skip
        return changed

    def delete(
        self, ids: Iterable[str], embedder: Embedder | None = None, *, settings: ChangeSettings | None = None
    ) -> ContextStore:
        """A new store version without the documents ``ids`` (each must be in the store, else
        ValueError naming one; a store cannot lose every document). ``embedder`` is only used
        when the tree reaches its rebuild threshold. See :meth:`add`."""
        from retrievers.store.changes import apply_change

        removed = list(ids)
        changed: ContextStore = apply_change(
            self, removed=removed, added=(), embedder=embedder, embeddings=None,
            settings=settings, counts=(0, len(removed), 0),
        )  # fmt: skip
        return changed

    def update(
        self,
        documents: Iterable[Document],
        embedder: Embedder | None = None,
        *,
        embeddings: npt.ArrayLike | None = None,
        settings: ChangeSettings | None = None,
    ) -> ContextStore:
        """A new store version where each of ``documents`` replaces the stored document of its
        id (each id must be in the store): a delete and an add in one version. See :meth:`add`."""
        from retrievers.store.changes import apply_change

        replaced = list(documents)
        changed: ContextStore = apply_change(
            self, removed=[doc.id for doc in replaced], added=replaced, embedder=embedder,
            embeddings=embeddings, settings=settings, counts=(0, 0, len(replaced)),
        )  # fmt: skip
        return changed

    def save(self, folder: Path) -> None:
        """Write the store into ``folder`` (created if needed): JSON, npy and bm25s files. Parts
        that already live there (loaded from ``folder``, or a store built into it) are not
        written again: they may be memory-mapped from those very files."""
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": STORE_FORMAT,
            "embedder_name": self.embedder_name,
            "n_documents": len(self.documents),
            "dim": self.dim if self.has_vectors else None,
            "config": self.config.to_dict(),
            "build_seconds": self.build_seconds,
            "history": [version.to_dict(with_rows=True) for version in self.history],
        }
        parts: list[tuple[str, Any, Any]] = [
            ("documents", self.documents, self.documents.save),
            ("bm25", self.bm25, self.bm25.save),
        ]
        if self._ann is not None:
            parts.append(("vector_index", self._ann, self._ann.save))
        if self.tree is not None:
            tree = self.tree
            parts.append(("tree", tree, lambda path: tree.save(path, row_of=self.row_of)))
        if self.timestamps is not None:
            parts.append(("timestamps", self.timestamps, self.timestamps.save))
        if self.edges is not None:
            parts.append(("edges", self.edges, self.edges.save))
        if self.chunked:
            parts.append(("parents", self.parent_documents, lambda path: self._save_parents(path)))
        for name, value, write in parts:
            if not self._lives_at(name, value, folder / name):
                write(folder / name)
                self.mark_saved(name, value, folder / name)
        if self.has_vectors:
            save_array(folder / "embeddings.npy", self.embeddings)
        # last: a folder with store.json is a complete store
        (folder / "store.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    def _save_parents(self, path: Path) -> None:
        self.parent_documents.save(path / "documents")
        save_npy(path / "parent_of.npy", self.parent_of)

    def _lives_at(self, part: str, value: object, path: Path) -> bool:
        """Whether ``value`` (this store's ``part``) was read from, or written to, ``path``."""
        entry = self._saved.get(part)
        return entry is not None and entry[1] is value and _same_path(entry[0], path)

    def mark_saved(self, part: str, value: object, path: Path) -> None:
        """Record that ``part`` (its current ``value``) lives in ``path``: :meth:`save` into
        that folder will not write it again (used by loading and by builds into a folder)."""
        self._saved[part] = (path, value)

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> ContextStore:
        """Read a store written by :meth:`save`; arrays and document columns are memory-mapped
        when ``mmap``. A store of another format is refused, saying to rebuild it."""
        meta_path = folder / "store.json"
        if not meta_path.is_file():
            raise ValueError(f"{folder} is not a saved ContextStore (missing store.json)")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != STORE_FORMAT:
            raise ValueError(
                f"{folder}: store format {meta.get('format')} is not {STORE_FORMAT} (this version keeps "
                "documents and tree nodes as memory-mapped columns); rebuild the store (the harness "
                "does so by itself: its cache key names the format)"
            )
        documents = DocumentColumns.load(folder / "documents", mmap=mmap)
        if len(documents) != meta.get("n_documents"):
            raise ValueError(
                f"{folder}: store.json says {meta.get('n_documents')} documents, the columns hold {len(documents)}"
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
        parents_folder = folder / "parents"
        store = cls(
            documents,
            embeddings,
            bm25,
            embedder_name=meta["embedder_name"],
            config=config,
            build_seconds=meta.get("build_seconds"),
            vector_index=vector_index,
            tree=(
                ContextTree.load(folder / "tree", mmap=mmap, row_of=RowIndex(documents.ids))
                if (folder / "tree").is_dir()
                else None
            ),
            timestamps=(
                DocumentTimes.load(folder / "timestamps", len(documents), mmap=mmap)
                if (folder / "timestamps").is_dir()
                else None
            ),
            edges=(
                EdgeSet.load(folder / "edges", mmap=mmap, n_nodes=len(documents))
                if (folder / "edges").is_dir()
                else None
            ),
            parents=(
                (
                    DocumentColumns.load(parents_folder / "documents", mmap=mmap),
                    np.load(parents_folder / "parent_of.npy", allow_pickle=False),
                )
                if parents_folder.is_dir()
                else None
            ),
            check_parents=False,
        )
        store.history = tuple(StoreVersion.from_dict(entry) for entry in meta.get("history") or ())
        for name, value in (
            ("documents", store.documents),
            ("bm25", store.bm25),
            ("vector_index", store._ann),
            ("tree", store.tree),
            ("timestamps", store.timestamps),
            ("edges", store.edges),
            ("parents", store.parent_documents if store.chunked else None),
        ):
            if value is not None:
                store.mark_saved(name, value, folder / name)
        return store


def _columns(documents: Sequence[Document], what: str) -> DocumentColumns:
    """``documents`` as columns: as given, or encoded in memory from a sorted list."""
    if isinstance(documents, DocumentColumns):
        return documents
    for previous, current in itertools.pairwise(documents):
        if previous.id >= current.id:
            raise ValueError(
                f"{what} must be sorted by id without duplicates: {previous.id!r} comes before {current.id!r}"
            )
    return DocumentColumns.from_documents(documents, what.removesuffix("s"))


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
