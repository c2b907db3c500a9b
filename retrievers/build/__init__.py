"""Building a store: a pipeline of builders, each in its own module.

:func:`build_store` runs, in order: chunking (``chunking.py``, when ``store.chunking`` is set),
document embedding (the embedder), the vector index (``retrievers/index/ann.py``, when
``store.vector_index`` is a faiss kind), the BM25 index (``retrievers/index/bm25.py``), the context tree
(``hierarchy.py``), document times (``retrievers/timeparse.py``) and edges (``edges.py``, after the
embeddings: ``similar_to`` edges use them). The result is a :class:`~retrievers.store.ContextStore`
to save; loading one never imports this package. With ``show_progress`` each phase is a labelled
line on stderr (``store: tree (5,183 docs) [00:42]``; the BM25 index has a bar of its own, the
embedding its embedder's) through tqdm, which sentence-transformers brings; without tqdm, none.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from retrievers.build.chunking import chunk_documents
from retrievers.build.edges import build_edges
from retrievers.build.hierarchy import build_tree
from retrievers.index import BM25Index, ExactVectorIndex, FaissVectorIndex
from retrievers.store import ContextStore, StoreConfig
from retrievers.timeparse import DocumentTimes
from retrievers.types import Document, Embedder

__all__ = ["build_store"]


def _check_unique(documents: list[Document]) -> None:
    for previous, current in itertools.pairwise(documents):
        if previous.id == current.id:
            raise ValueError(f"duplicate document id {current.id!r}")


@contextmanager
def _phase(label: str, show: bool) -> Iterator[None]:
    """One build phase as a labelled line with its time, ``store: <label> [mm:ss]``."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        show = False
    if not show:
        yield
        return
    with tqdm(total=1, desc=f"store: {label}", bar_format="{desc} [{elapsed}]", dynamic_ncols=True) as bar:
        yield
        bar.update()


def build_store(
    documents: Iterable[Document],
    embedder: Embedder | None,
    config: StoreConfig | None = None,
    *,
    show_progress: bool = False,
    source_folder: Path | None = None,
) -> ContextStore:
    """Embed and index ``documents`` (title and text joined as BEIR does). ``source_folder`` is
    the dataset folder, where components find extra files (the tree's summaries). Without an
    ``embedder`` the store has no embeddings and serves lexical retrievers only (a tree and
    similarity or LLM-neighbour edges need one)."""
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
    texts = [doc.full_text for doc in ordered]
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    embeddings = (
        None
        if embedder is None
        else np.ascontiguousarray(embedder.encode(texts, kind="document"), dtype=np.float32)
    )
    seconds["embed"] = time.perf_counter() - start
    vector_index = None
    if embeddings is not None and config.vector_index.kind != "exact":
        start = time.perf_counter()
        with _phase(f"{config.vector_index.kind} index ({len(embeddings):,} vectors)", show_progress):
            vector_index = FaissVectorIndex.build(ExactVectorIndex(embeddings), config.vector_index)
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
    seconds["bm25"] = time.perf_counter() - start
    tree = None
    if config.hierarchy is not None:
        assert embedder is not None and embeddings is not None  # checked above
        start = time.perf_counter()
        with _phase(f"tree ({len(ordered):,} docs)", show_progress):
            tree = build_tree(ordered, embeddings, embedder, config.hierarchy, source_folder=source_folder)
        seconds["hierarchy"] = time.perf_counter() - start
    store = ContextStore(
        ordered,
        embeddings,
        bm25,
        embedder_name="" if embedder is None else embedder.name,
        config=config,
        build_seconds=seconds,
        vector_index=vector_index,
    )
    if parents is not None:
        parent_index = {doc.id: index for index, doc in enumerate(parents)}
        store.set_parents(
            parents,
            np.fromiter((parent_index[doc.metadata["parent_id"]] for doc in ordered), np.int64, len(ordered)),
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
        with _phase(f"edges ({len(ordered):,} docs)", show_progress):
            store.edges = build_edges(ordered, embeddings, config.edges)
        store.build_seconds["edges"] = time.perf_counter() - start
    return store
