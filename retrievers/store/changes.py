"""Applying a change (documents added, removed, replaced) to a store: a new store, part by part.

:func:`apply_change` is what :meth:`ContextStore.add`, :meth:`~ContextStore.delete` and
:meth:`~ContextStore.update` run. The old store is never changed (retrievers over it keep seeing
what they saw); every part of the new one is made from the old part and the change:

============== =============================================================================
part           how
============== =============================================================================
documents      kept rows copied as whole byte ranges, new rows inserted in id order
               (:mod:`retrievers.store.row_plan`)
embeddings     kept rows and the new documents' vectors (embedded now, or given), merged
exact index    over the merged matrix: exact search equals a fresh build's, bit for bit
faiss index    :mod:`retrievers.index.ann_changes` (appended, relabelled or rebuilt by kind)
BM25           :meth:`retrievers.index.BM25Index.changed`: counts merged, every score
               recomputed with the new global statistics: equal to a fresh build, bit for bit
tree           :mod:`retrievers.builders.tree_insert` (nearest directory, split rule, rebuild
               threshold)
times          the new documents parsed; the report counts what is known after the change
edges          :mod:`retrievers.builders.edge_changes`
============== =============================================================================

Chunked stores (``store.chunking``) are refused: a change would have to re-chunk documents
and keep chunks and parents aligned, which is not written yet.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.index import ExactVectorIndex
from retrievers.store.change_config import ChangeSettings, RowRecord, StoreVersion
from retrievers.store.row_digests import compute_digests, known_digests, remember_digests
from retrievers.store.row_plan import RowPlan, merge_columns, plan_rows
from retrievers.timeparse.document_times import DocumentTimes
from retrievers.types import Document, Embedder

#: a :class:`~retrievers.store.context_store.ContextStore` (not imported: context_store imports
#: this module when a store changes, and the project has no import cycles)
ContextStore = Any

__all__ = ["apply_change", "content_key"]


def content_key(store: ContextStore) -> str:
    """sha256 of what a store's searches read: its rows' ids, titles, texts and metadata (the
    column bytes), its embeddings, its embedder name and settings, its tree (URIs, texts,
    structure, directory vectors), edges and times. Equal stores, however they were made (built,
    or changed step by step), have equal keys; a tree changed by insertion is not the tree a
    build makes, so such a store has another key than a fresh build of its documents."""
    digest = hashlib.sha256(b"viking_eval.ContextStore.v1\n")
    digest.update(json.dumps([store.embedder_name, store.config.to_dict()], sort_keys=True).encode())
    columns = store.documents
    digest.update(np.ascontiguousarray(columns.ids.array).tobytes())
    for column in (columns.titles, columns.texts, columns.metadata):
        digest.update(np.ascontiguousarray(column.offsets).tobytes())
        digest.update(np.ascontiguousarray(column.blob).tobytes())
    if store.has_vectors:
        digest.update(np.ascontiguousarray(store.embeddings, dtype=np.float32).tobytes())
    tree = store.tree
    if tree is not None:
        digest.update(b"tree")
        for column in (tree.uris, tree.text_column("abstract"), tree.text_column("content")):
            digest.update(np.ascontiguousarray(column.offsets).tobytes())
            digest.update(np.ascontiguousarray(column.blob).tobytes())
        for array in (tree.parents, tree.record_nodes, tree.record_levels):
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        if tree.record_vectors is not None:
            digest.update(np.ascontiguousarray(tree.record_vectors, dtype=np.float32).tobytes())
    if store.edges is not None:
        edges = store.edges
        digest.update(json.dumps(["edges", *edges.relation_names]).encode())
        for array in (edges.indptr, edges.dst, edges.relation):
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        digest.update(np.ascontiguousarray(edges.weight, dtype=np.float32).tobytes())
    if store.timestamps is not None:
        digest.update(b"times" + np.ascontiguousarray(store.timestamps.epoch_seconds).tobytes())
    return digest.hexdigest()


def _sorted_documents(documents: Iterable[Document], what: str) -> list[Document]:
    items = list(documents)
    for doc in items:
        if not isinstance(doc, Document):
            raise ValueError(f"{what} must be Document values, got {type(doc).__name__}")
    items.sort(key=lambda doc: doc.id)
    for previous, current in itertools.pairwise(items):
        if previous.id == current.id:
            raise ValueError(f"{what} hold the id {current.id!r} twice")
    return items


def _embed(
    store: ContextStore, added: list[Document], embedder: Embedder | None, embeddings: npt.ArrayLike | None
) -> np.ndarray | None:
    """The new documents' vectors (None for a store without embeddings)."""
    if not store.has_vectors:
        if embeddings is not None:
            raise ValueError("this store has no embeddings (built without an embedder): give none")
        return None
    dim = store.dim
    if embeddings is not None:
        vectors = np.asarray(embeddings, dtype=np.float32)
    elif not added:
        return np.zeros((0, dim), dtype=np.float32)
    else:
        if embedder is None:
            raise ValueError(
                f"this store holds embeddings ({store.embedder_name}): give the embedder (or the new "
                "documents' embeddings) to add documents"
            )
        if embedder.name != store.embedder_name:
            raise ValueError(
                f"embedder {embedder.name!r} is not the store's ({store.embedder_name!r}); its vectors "
                "would not be comparable"
            )
        vectors = np.asarray(
            embedder.encode([doc.full_text for doc in added], kind="document"), dtype=np.float32
        )
    if vectors.shape != (len(added), dim):
        raise ValueError(f"embeddings have shape {vectors.shape}, expected ({len(added)}, {dim})")
    if not np.isfinite(vectors).all():
        raise ValueError("embeddings of the new documents hold NaN or infinite values")
    return vectors


def _times(old: DocumentTimes, plan: Any, added: list[Document], config: Any) -> DocumentTimes:
    new = DocumentTimes.build(added, config)
    epoch = plan.merge(np.asarray(old.epoch_seconds), new.epoch_seconds)
    n_parsed = int(np.count_nonzero(~np.isnan(epoch)))
    report: dict[str, Any] = {
        **{key: old.report[key] for key in ("fields", "default_timezone", "epoch_unit") if key in old.report},
        "n_documents": int(epoch.size),
        "parsed": n_parsed,
        "not_parsed": int(epoch.size) - n_parsed,
        "changed": True,
        "last_change": new.report,
    }
    return DocumentTimes(epoch, report)


def _row_record(old: ContextStore, new: ContextStore, plan: RowPlan) -> RowRecord:
    """The rows the change removed and added, with their digests (hashed now: only those rows);
    the new store's digests when the old store's are known (kept ones merged with the added)."""
    removed = np.flatnonzero(~plan.keep).astype(np.int64)
    old_digests = known_digests(old)
    removed_digests = compute_digests(old, removed) if old_digests is None else old_digests[removed]
    added_digests = compute_digests(new, plan.new_rows)
    if old_digests is not None:
        remember_digests(new, plan.merge(old_digests, added_digests))
    return RowRecord(
        removed=tuple(removed.tolist()),
        removed_digests=tuple(bytes(digest).hex() for digest in removed_digests),
        added=tuple(plan.new_rows.tolist()),
        added_digests=tuple(bytes(digest).hex() for digest in added_digests),
    )


def apply_change(
    store: ContextStore,
    *,
    removed: Sequence[str],
    added: Iterable[Document],
    embedder: Embedder | None,
    embeddings: npt.ArrayLike | None,
    settings: ChangeSettings | None,
    counts: tuple[int, int, int],
) -> ContextStore:
    """The store after removing the ids ``removed`` and adding ``added`` (see the module
    docstring); ``counts`` = (added, deleted, updated) for the history record."""
    if store.chunked:
        raise ValueError(
            "add/delete/update are not supported on chunked stores (store.chunking): rebuild the store"
        )
    if store.allowed is not None or store.backend is not None:
        raise ValueError("change the store itself, not a restricted or backend view of it")
    settings = settings or ChangeSettings()
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(part: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[part] = seconds.get(part, 0.0) + now - clock
        clock = now

    new_docs = _sorted_documents(added, "added documents")
    removed_ids = sorted(set(removed))
    if len(removed_ids) != len(removed):
        raise ValueError("the ids to delete repeat an id")
    plan = plan_rows(store.doc_ids, removed_ids, [doc.id for doc in new_docs])
    if plan.n_rows == 0:
        raise ValueError("a change cannot remove every document of a store: build a new one")
    lap("plan")
    vectors = _embed(store, new_docs, embedder, embeddings)
    lap("embed")
    documents = merge_columns(store.documents, plan, new_docs)
    lap("documents")
    matrix = None if vectors is None else plan.merge(store.embeddings, vectors)
    lap("vectors")
    vector_index = None
    if matrix is not None and store.config.vector_index.kind != "exact":
        from retrievers.index.ann_changes import changed_index

        old_index = store.vectors
        vector_index, how = changed_index(
            old_index,
            ExactVectorIndex(matrix),
            store.config.vector_index,
            old_to_new=plan.old_to_new,
            new_rows=plan.new_rows,
        )
        seconds["vector_index_" + how] = 0.0
        lap("vector_index")
    bm25 = store.bm25.changed(plan.keep, plan.new_rows, [doc.full_text for doc in new_docs])
    lap("bm25")
    timestamps = None
    if store.timestamps is not None and store.config.timestamps is not None:
        timestamps = _times(store.timestamps, plan, new_docs, store.config.timestamps)
    lap("timestamps")
    tree = None
    changed = type(store)(
        documents,
        matrix,
        bm25,
        embedder_name=store.embedder_name,
        config=store.config,
        build_seconds=store.build_seconds,
        vector_index=vector_index,
        timestamps=timestamps,
    )
    lap("store")
    if store.tree is not None and store.config.hierarchy is not None and matrix is not None:
        from retrievers.builders.tree_insert import changed_tree

        tree, tree_how = changed_tree(
            store.tree,
            documents,
            matrix,
            changed.row_of,
            added_rows=plan.new_rows.tolist(),
            removed_ids=removed_ids,
            config=store.config.hierarchy,
            embedder=embedder,
            settings=settings,
        )
        seconds["tree_" + tree_how] = 0.0
        lap("tree")
    edges = None
    if store.edges is not None and store.config.edges is not None:
        from retrievers.builders.edge_changes import changed_edges

        edges = changed_edges(
            store.edges,
            documents,
            matrix,
            store.config.edges,
            old_to_new=plan.old_to_new,
            new_rows=plan.new_rows,
        )
        lap("edges")
    result = changed.with_parts(tree=tree, edges=edges)
    rows = _row_record(store, result, plan)
    lap("row_digests")
    n_added, n_deleted, n_updated = counts
    history = store.history or (StoreVersion(1, store.content_key, len(store)),)
    result.history = (
        *history,
        StoreVersion(
            history[-1].version + 1,
            result.content_key,
            len(result),
            added=n_added,
            deleted=n_deleted,
            updated=n_updated,
            rows=rows,
        ),
    )
    lap("content_key")
    result.change_seconds = seconds
    return result
