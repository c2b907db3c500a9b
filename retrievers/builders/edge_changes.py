"""A store's edges after a change, computed for what changed rather than for every document.

:func:`changed_edges` keeps every old edge between rows that stay (renumbered: rows shift when
ids are inserted or removed in the middle of the id order) and recomputes, per builder:

* ``similar_to``: the rows whose nearest neighbours can have changed. Against their whole
  group (as a build computes them): the new documents, the rows that had a removed neighbour,
  and every row of a group whose size moved k (groups of k rows or fewer). By a merge: a row
  some new document beats (its cosine reaches the row's k-th kept neighbour, or ``min_sim``
  when the row has fewer than k) takes the top k of its old k and the new documents (nothing
  else can enter). Cost: the new documents against their groups, plus one group row per
  document that lost a neighbour.
* ``sequence``: the chains of the groups (``group_keys``) that gained or lost a document.
* ``references`` and ``mentions``: built again over every document (references are cheap;
  mentions depend on every document's TF-IDF weights).
* ``llm``: refused (it would call the LLM again): rebuild the store.

The result holds the edges a fresh build of the same documents holds, except where two
neighbours tie at the k-th place to float32 rounding: a cosine computed in a matrix product
of another shape can differ in its last bit, so such a tie can go the other way (tests compare
the edges; weights agree to 1e-6).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from retrievers.builders.edges import _Links, _mention_edges, _reference_edges, _sequence_edges
from retrievers.ranking import top_k_rows
from retrievers.store.columns import DocumentColumns, decode_metadata
from retrievers.store.edge_config import EdgeConfig, SimilarityEdgeConfig
from retrievers.store.edges import EdgeSet
from retrievers.types import Document

__all__ = ["changed_edges"]

IntArray = npt.NDArray[np.int64]


def _group_keys(documents: Sequence[Document], keys: Sequence[str]) -> list[tuple[str, ...] | None]:
    """Every row's group (its values of ``keys``; None when a key is missing): from the metadata
    column alone when the documents are columns (no title or text decoded)."""
    if not keys:
        return [()] * len(documents)
    column = documents.metadata if isinstance(documents, DocumentColumns) else None
    found: list[tuple[str, ...] | None] = []
    for item in column if column is not None else documents:
        metadata = decode_metadata(item) if isinstance(item, str) else item.metadata
        found.append(
            None if any(key not in metadata for key in keys) else tuple(str(metadata[key]) for key in keys)
        )
    return found


def _light(documents: Sequence[Document], rows: list[int]) -> list[Document]:
    """``documents[rows]`` with their ids and metadata only (what sequence edges read): from
    the id and metadata columns when the documents are columns (no text decoded)."""
    if not isinstance(documents, DocumentColumns):
        return [documents[row] for row in rows]
    ids, metadata = documents.ids, documents.metadata
    return [Document(ids[row], "", metadata=decode_metadata(metadata[row])) for row in rows]


def changed_edges(
    old: EdgeSet,
    documents: Sequence[Document],
    embeddings: npt.ArrayLike | None,
    config: EdgeConfig,
    *,
    old_to_new: IntArray,
    new_rows: IntArray,
) -> EdgeSet:
    """The edges of the changed store (module docstring): ``documents`` and ``embeddings`` are
    the changed store's rows, ``old_to_new[r]`` old row r's new row (-1 when removed) and
    ``new_rows`` the rows of the documents added."""
    if config.llm is not None:
        raise ValueError(
            "store.edges.llm edges cannot be kept up to date by add/delete/update (each change would "
            "ask the LLM again); build the store again instead"
        )
    n_rows = len(documents)
    src_old = old.src
    src = old_to_new[src_old]
    dst = old_to_new[np.asarray(old.dst, dtype=np.int64)]
    alive = (src >= 0) & (dst >= 0)
    names = list(old.relation_names)
    relation = np.asarray(old.relation, dtype=np.int64)
    weight = np.asarray(old.weight, dtype=np.float64)
    lost_neighbour = np.zeros(n_rows, dtype=np.bool_)
    lost_neighbour[src[(src >= 0) & (dst < 0)]] = True
    is_new = np.zeros(n_rows, dtype=np.bool_)
    is_new[new_rows] = True
    removed_old = np.flatnonzero(old_to_new < 0)
    links = _Links()
    drop_relations: set[str] = set()
    drop_sources: dict[str, npt.NDArray[np.bool_]] = {}
    if config.similar_to is not None:
        if embeddings is None:
            raise ValueError("similar_to edges need the store embeddings")
        sim = names.index("similar_to") if "similar_to" in names else -1
        mask = alive & (relation == sim)
        recomputed = _similar(
            documents,
            np.asarray(embeddings),
            config.similar_to,
            src[mask],
            dst[mask],
            weight[mask],
            is_new,
            lost_neighbour,
            removed_old.size,
            links,
        )
        drop_sources["similar_to"] = recomputed
    if config.sequence is not None:
        seq = config.sequence
        groups = _group_keys(documents, seq.group_keys)
        changed_groups = {groups[row] for row in new_rows.tolist()}
        if seq.group_keys and removed_old.size:
            # a removed row's group: that of its old neighbours in the chain, or any kept member
            seq_id = names.index("sequence") if "sequence" in names else -1
            touching = (relation == seq_id) & ((src < 0) | (dst < 0))
            for row in np.concatenate((src[touching], dst[touching])).tolist():
                if row >= 0:
                    changed_groups.add(groups[row])
        elif removed_old.size:
            changed_groups.add(())
        members = [row for row, key in enumerate(groups) if key is not None and key in changed_groups]
        local = _Links()
        _sequence_edges(_light(documents, members), seq, local)
        mapping = np.asarray(members, dtype=np.int64)
        for s, t, w, r in zip(local.sources, local.targets, local.weights, local.relations, strict=True):
            links.add(r, mapping[s], mapping[t], w)
        in_changed = np.zeros(n_rows, dtype=np.bool_)
        in_changed[mapping] = True
        drop_sources["sequence"] = in_changed
    if config.references is not None:
        row_of = {doc.id: row for row, doc in enumerate(documents)}
        _reference_edges(documents, row_of, config.references, links)
        drop_relations.add(config.references.relation)
    if config.mentions is not None:
        _mention_edges(documents, config.mentions, links)
        drop_relations.add("mentions")
    keep = alive.copy()
    for name in drop_relations:
        if name in names:
            keep &= relation != names.index(name)
    for name, recomputed in drop_sources.items():
        if name in names:
            keep &= ~(
                (relation == names.index(name)) & np.where(src >= 0, recomputed[np.maximum(src, 0)], False)
            )
    all_names = list(names)
    for name in links.relations:
        if name not in all_names:
            all_names.append(name)
    sources = [src[keep], *links.sources]
    targets = [dst[keep], *links.targets]
    weights = [weight[keep], *links.weights]
    relations = [
        relation[keep],
        *(
            np.full(s.shape, all_names.index(r), dtype=np.int64)
            for s, r in zip(links.sources, links.relations, strict=True)
        ),
    ]
    report = {"changed": True, "dropped": dict(links.report.dropped)}
    return EdgeSet.from_arrays(
        n_rows,
        np.concatenate(sources),
        np.concatenate(targets),
        np.concatenate(weights),
        np.concatenate(relations),
        all_names,
        report=report,
    )


def _similar(
    documents: Sequence[Document],
    matrix: npt.NDArray[np.float32],
    config: SimilarityEdgeConfig,
    kept_src: IntArray,
    kept_dst: IntArray,
    kept_weight: npt.NDArray[np.float64],
    is_new: npt.NDArray[np.bool_],
    lost_neighbour: npt.NDArray[np.bool_],
    n_removed: int,
    links: _Links,
) -> npt.NDArray[np.bool_]:
    """Recompute the ``similar_to`` rows that can have changed (module docstring) into
    ``links``; returns the mask of rows recomputed (their old edges are dropped)."""
    n_rows = len(documents)
    count = np.bincount(kept_src, minlength=n_rows)
    kth = np.full(n_rows, np.inf)
    np.minimum.at(kth, kept_src, kept_weight)
    by_src = np.argsort(kept_src, kind="stable")
    starts = np.concatenate(([0], np.cumsum(count)))
    if config.same_keys:
        keys = _group_keys(documents, config.same_keys)
        grouped: dict[tuple[str, ...], list[int]] = {}
        for row, key in enumerate(keys):
            if key is not None:
                grouped.setdefault(key, []).append(row)
        groups = [np.asarray(rows, dtype=np.int64) for _, rows in sorted(grouped.items())]
    else:
        groups = [np.arange(n_rows, dtype=np.int64)]
    redo = np.zeros(n_rows, dtype=np.bool_)
    for rows in groups:
        new_here = rows[is_new[rows]]
        if not new_here.size and not lost_neighbour[rows].any() and not n_removed:
            continue
        k = min(config.k, rows.size - 1)
        group = matrix[rows]
        wanted = is_new[rows] | lost_neighbour[rows]
        whole = wanted.copy()  # rows scored against their whole group
        if new_here.size:
            against_new = group @ matrix[new_here].T
            beats = against_new.max(axis=1)
            # a margin for float32 rounding across matrix shapes: one row too many is harmless
            wanted |= np.where(count[rows] >= k, beats >= kth[rows] - 1e-5, beats >= config.min_sim - 1e-5)
        if n_removed or new_here.size:  # k itself moves for groups of k rows or fewer
            old_size = rows.size - new_here.size
            if old_size - 1 < config.k or k < config.k:
                wanted[:] = True
                whole[:] = True
        redo[rows[wanted]] = True
        if new_here.size and k >= 1:
            # a row that lost no neighbour: its new top k is among its old k and the new rows
            for local_row in np.flatnonzero(wanted & ~whole).tolist():
                row = int(rows[local_row])
                mine = by_src[starts[row] : starts[row + 1]]
                candidates = np.concatenate((kept_dst[mine], new_here))
                scores = np.concatenate((kept_weight[mine], against_new[local_row].astype(np.float64)))
                order = np.lexsort((candidates, -scores))[:k]
                chosen, values = candidates[order], scores[order]
                keep = values >= config.min_sim
                links.add(
                    "similar_to", np.full(int(keep.sum()), row), chosen[keep], np.clip(values[keep], 0.0, 1.0)
                )
            wanted = whole
        if k < 1 or not wanted.any():
            continue
        local = np.flatnonzero(wanted)
        for start in range(0, local.size, 1024):
            part = local[start : start + 1024]
            block = group[part] @ group.T
            block[np.arange(part.size), part] = -np.inf
            scores, columns = top_k_rows(block, k)
            keep = np.isfinite(scores) & (scores >= config.min_sim)
            src = np.repeat(rows[part], k).reshape(-1, k)[keep]
            links.add(
                "similar_to", src, rows[columns[keep]], np.clip(scores[keep].astype(np.float64), 0.0, 1.0)
            )
    return redo
