"""Building a store: a pipeline of builders, each in its own module.

:func:`build_store` runs, in order: chunking (``chunking.py``, when ``store.chunking`` is set),
document embedding (the embedder), the vector index (``retrievers/index/ann.py``, when
``store.vector_index`` is a faiss kind), the BM25 index (``retrievers/index/bm25.py``), the context tree
(``hierarchy.py``), document times (``retrievers/timeparse/document_times.py``) and edges (``edges.py``, after the
embeddings: ``similar_to`` edges use them). The result is a :class:`~retrievers.store.ContextStore`
to save; loading one never imports this package. With ``show_progress`` each phase is a labelled
line on stderr (``store: tree (5,183 docs) [00:42]``; the BM25 index has a bar of its own, the
embedding its embedder's) through tqdm, which sentence-transformers brings (without tqdm, none),
or through the caller's factory (:mod:`retrievers.progress`).

Memory. With ``folder`` the store is built into that folder and each part goes to its files as
soon as it is made, then is memory-mapped back: documents are written column by column, the
embeddings are encoded into the memory-mapped ``embeddings.npy`` (an embedder with
``encode_into(texts, kind=, out=)``, such as the harness's cache, writes rows straight into it;
others are called :data:`ENCODE_ROWS` texts at a time), BM25 builds in chunks
(:meth:`~retrievers.index.BM25Index.build`) and is saved before the tree is built. The texts
given to the embedder and to BM25 are made from the documents when read, never copied as a
whole. A 1M-document build then holds little more than the part being built (measured in
docs/scale.md).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.builders.chunking import chunk_documents
from retrievers.builders.edges import build_edges
from retrievers.builders.hierarchy import build_tree
from retrievers.index import BM25Index, ExactVectorIndex, FaissVectorIndex
from retrievers.progress import ShowProgress, open_bar
from retrievers.store import ContextStore, StoreConfig
from retrievers.store.columns import DocumentColumns
from retrievers.store.ids import RowIndex
from retrievers.store.npy_files import save_npy
from retrievers.store.rows import RowSequence
from retrievers.timeparse.document_times import DocumentTimes
from retrievers.types import Document, Embedder

__all__ = ["ENCODE_ROWS", "FullTexts", "build_store"]

ENCODE_ROWS = 1 << 16
"""Texts per ``encode`` call when an embedder cannot write into the output itself: larger
corpora are encoded in calls of this many texts, each written into the embeddings matrix (one
call, as before, up to this size)."""


class FullTexts(RowSequence[str]):
    """``documents[i].full_text`` (title and text, as embedded and indexed), made when read."""

    def __init__(self, documents: Sequence[Document]) -> None:
        self._documents = documents

    def __len__(self) -> int:
        return len(self._documents)

    def _row(self, i: int) -> str:
        return self._documents[i].full_text

    def __iter__(self) -> Iterator[str]:
        return (doc.full_text for doc in self._documents)


def _embed(embedder: Embedder, texts: FullTexts, folder: Path | None) -> np.ndarray:
    """Document embeddings (float32, one row per text): written into ``folder/embeddings.npy``
    (memory-mapped, then reopened read-only) when ``folder`` is given, else in memory."""
    n = len(texts)
    path = None if folder is None else folder / "embeddings.npy"

    def output(dim: int) -> np.ndarray:
        if path is None:
            return np.empty((n, dim), dtype=np.float32)
        return np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, dim))

    encode_into = getattr(embedder, "encode_into", None)
    out: np.ndarray | None = None
    if callable(encode_into):
        out = output(int(embedder.dim))
        encode_into(texts, kind="document", out=out)
    else:
        for start in range(0, n, ENCODE_ROWS):
            stop = min(n, start + ENCODE_ROWS)
            block = np.asarray(embedder.encode(texts[start:stop], kind="document"), dtype=np.float32)
            if block.ndim != 2 or block.shape[0] != stop - start:
                raise ValueError(
                    f"embedder {embedder.name} returned shape {block.shape} for {stop - start} texts"
                )
            if out is None:
                if path is None and stop == n:  # one call: keep its array, as before
                    return np.ascontiguousarray(block)
                out = output(block.shape[1])
            out[start:stop] = block
    if out is None:  # never: n >= 1
        raise RuntimeError("no texts were encoded")
    if path is None:
        return out
    if isinstance(out, np.memmap):
        out.flush()
    del out
    mapped: np.ndarray = np.load(path, mmap_mode="r", allow_pickle=False)
    return mapped


def _check_unique(documents: list[Document]) -> None:
    for previous, current in itertools.pairwise(documents):
        if previous.id == current.id:
            raise ValueError(f"duplicate document id {current.id!r}")


@contextmanager
def _phase(label: str, show: ShowProgress) -> Iterator[None]:
    """One build phase as a labelled line with its time, ``store: <label> [mm:ss]`` (a caller's
    factory gets no total: a phase has no count)."""
    bar = open_bar(
        show, None if callable(show) else 1, f"store: {label}", "", bar_format="{desc} [{elapsed}]"
    )
    if bar is None:
        yield
        return
    with bar:
        yield
        if not callable(show):  # tqdm's bar: 1/1 shows its time; a caller's bar has no count
            bar.update()


def build_store(
    documents: Iterable[Document],
    embedder: Embedder | None,
    config: StoreConfig | None = None,
    *,
    show_progress: ShowProgress = False,
    source_folder: Path | None = None,
    folder: Path | None = None,
) -> ContextStore:
    """Embed and index ``documents`` (title and text joined as BEIR does). ``source_folder`` is
    the dataset folder, where components find extra files (the tree's summaries). Without an
    ``embedder`` the store has no embeddings and serves lexical retrievers only (a tree and
    similarity or LLM-neighbour edges need one). With ``folder`` the store is built into that
    folder, part by part (see the module docstring), and is saved there when this returns."""
    config = config or StoreConfig()
    if embedder is None:
        needs = [
            name
            for name, needed in (
                ("store.hierarchy", config.hierarchy is not None),
                (f"store.vector_index.kind={config.vector_index.kind}", config.vector_index.kind != "exact"),
                ("store.edges.similar_to", config.edges is not None and config.edges.similar_to is not None),
                (
                    "store.edges.llm (batching: neighbours)",
                    config.edges is not None
                    and config.edges.llm is not None
                    and config.edges.llm.batching == "neighbours",
                ),
            )
            if needed
        ]
        if needs:
            raise ValueError(f"{', '.join(needs)} need document embeddings: give an embedder")
    ordered = sorted(documents, key=lambda doc: doc.id)
    if not ordered:
        raise ValueError("cannot build a store from an empty corpus")
    parents: list[Document] | None = None
    if config.chunking is not None:  # rows become chunks; the documents are kept as parents
        _check_unique(ordered)
        parents = ordered
        ordered = sorted(chunk_documents(parents, config.chunking), key=lambda doc: doc.id)
    _check_unique(ordered)
    saved: dict[str, tuple[Path, Any]] = {}
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        DocumentColumns.write(folder / "documents", ordered)
        columns = DocumentColumns.load(folder / "documents")
        saved["documents"] = (folder / "documents", columns)
    else:
        columns = DocumentColumns.from_documents(ordered)
    texts = FullTexts(ordered)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    embeddings = None if embedder is None else _embed(embedder, texts, folder)
    seconds["embed"] = time.perf_counter() - start
    vector_index = None
    if embeddings is not None and config.vector_index.kind != "exact":
        start = time.perf_counter()
        with _phase(f"{config.vector_index.kind} index ({len(embeddings):,} vectors)", show_progress):
            vector_index = FaissVectorIndex.build(ExactVectorIndex(embeddings), config.vector_index)
            if folder is not None:  # to its file, and memory-mapped back
                vector_index.save(folder / "vector_index")
                vector_index = FaissVectorIndex.load(
                    folder / "vector_index", vector_index.exact, config.vector_index.kind, mmap=True
                )
                saved["vector_index"] = (folder / "vector_index", vector_index)
        seconds["vector_index"] = time.perf_counter() - start
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
    if folder is not None:
        bm25.save(folder / "bm25")
        bm25 = BM25Index.load(folder / "bm25", mmap=True)
        saved["bm25"] = (folder / "bm25", bm25)
    seconds["bm25"] = time.perf_counter() - start
    tree = None
    if config.hierarchy is not None:
        assert embedder is not None and embeddings is not None  # checked above
        start = time.perf_counter()
        with _phase(f"tree ({len(ordered):,} docs)", show_progress):
            tree = build_tree(ordered, embeddings, embedder, config.hierarchy, source_folder=source_folder)
        seconds["hierarchy"] = time.perf_counter() - start
    parents_part: tuple[Sequence[Document], np.ndarray] | None = None
    if parents is not None:
        parent_index = {doc.id: index for index, doc in enumerate(parents)}
        parent_of = np.fromiter(
            (parent_index[doc.metadata["parent_id"]] for doc in ordered), np.int64, len(ordered)
        )
        if folder is not None:
            DocumentColumns.write(folder / "parents" / "documents", parents)
            save_npy(folder / "parents" / "parent_of.npy", parent_of)
            parents_part = (DocumentColumns.load(folder / "parents" / "documents"), parent_of)
        else:
            parents_part = (parents, parent_of)
    if tree is not None:
        tree.leaf_rows(RowIndex(columns.ids))  # every leaf names a document of the store
    timestamps = None
    if config.timestamps is not None:
        start = time.perf_counter()
        timestamps = DocumentTimes.build(ordered, config.timestamps)
        seconds["timestamps"] = time.perf_counter() - start
    edges = None
    if config.edges is not None:  # after the embeddings: similar_to edges use them
        start = time.perf_counter()
        with _phase(f"edges ({len(ordered):,} docs)", show_progress):
            edges = build_edges(ordered, embeddings, config.edges)
        seconds["edges"] = time.perf_counter() - start
    store = ContextStore(
        columns,
        embeddings,
        bm25,
        embedder_name="" if embedder is None else embedder.name,
        config=config,
        build_seconds=seconds,
        vector_index=vector_index,
        tree=tree,
        timestamps=timestamps,
        edges=edges,
        parents=parents_part,
    )
    if folder is not None:
        if parents_part is not None:
            saved["parents"] = (folder / "parents", store.parent_documents)
        for part, (path, value) in saved.items():
            store.mark_saved(part, value, path)
        store.save(folder)
    return store
