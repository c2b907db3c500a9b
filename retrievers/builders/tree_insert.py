"""Changing a context tree in place of rebuilding it: documents inserted, documents removed.

Rules (:func:`changed_tree`):

* **Insert.** A new document goes under its nearest directory: from the root, down the
  directory children with the highest level-0 record score (the document's vector times the
  directory's abstract or centroid vector; ties to the lower URI) until a directory with no
  directory children, which takes the leaf. With ``builder: metadata_path`` the document's
  metadata path names its directory, and the directories it lacks are made (as a build makes
  them).
* **Split.** A directory that ends up with more than ``tree_split_factor x max_leaf_size`` leaves
  (kmeans trees) is split as a build splits a set (again while a part is still too large): ``min(branching_factor, ceil(size /
  max_leaf_size))`` spherical k-means clusters (:func:`~retrievers.builders.hierarchy.spherical_kmeans`,
  the tree's seed) become its subdirectories ``s0, s1, ...`` and its leaves move under them.
* **Remove.** A removed document's leaf goes; a directory left without children goes too.
* **Records.** With ``directory_vector: centroid`` every directory above a change gets its
  centroid again (the normalised sum of its leaf vectors, as a build computes it). With
  ``abstract``, existing directories keep their abstract and vector (written at build: they
  describe what the directory held then) and a new directory's abstract (its most central
  documents' snippets, no key terms) is embedded with the embedder given, or, without one, its
  centroid is its vector.
* **Writing it.** The changed tree is made column by column (:meth:`_Tree.finish`): the old
  tree's columns with the changed nodes taken out and their new versions inserted in URI order
  (:mod:`retrievers.store.row_plan`), the structure arrays renumbered, never re-validated node
  by node (tests compare it with the validating constructor).
* **Rebuild threshold.** The tree counts the documents inserted and removed since it was built
  (``info["changes_since_build"]``); when a change takes that count above ``tree_rebuild_fraction``
  of the documents the tree was built over (``info["built_documents"]``), the tree is built
  again from every document (:func:`~retrievers.builders.hierarchy.build_tree`), which needs the
  embedder. Without one the insertion is kept and the rebuild waits for a change that has one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from retrievers.builders.hierarchy import build_tree, spherical_kmeans
from retrievers.builders.tree_edit_nodes import EditNodes, subtree_sums
from retrievers.builders.tree_texts import snippet
from retrievers.store.change_config import ChangeSettings
from retrievers.store.columns import encode_metadata
from retrievers.store.hierarchy_config import HierarchyConfig
from retrievers.store.ids import IdColumn
from retrievers.store.row_plan import merge_text, plan_rows
from retrievers.store.tree import ContextTree
from retrievers.store.tree_uris import CONTEXT_TYPES, TreeError, context_type_of, uri_segment
from retrievers.types import ContextNode, Document, Embedder

__all__ = ["changed_tree"]

FloatMatrix = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


class _Tree:
    """A tree as editable nodes and records (by URI)."""

    def __init__(self, tree: ContextTree) -> None:
        self.old = tree
        #: URIs of nodes added, removed or rewritten (the others are the old tree's, unchanged)
        self.dirty: set[str] = set()
        self.nodes = EditNodes(tree)
        uris = self.nodes.uris
        self.children: dict[str, list[str]] = self.nodes.children_lists()
        #: URI -> node index in the old tree (finish() looks up every record's node)
        self.old_index: dict[str, int] = self.nodes.old_index
        self.records: dict[tuple[str, int], FloatMatrix] = {}
        if tree.record_vectors is not None:
            record_vectors = np.asarray(tree.record_vectors, dtype=np.float32)
            for node, level, vector in zip(
                tree.record_nodes.tolist(), tree.record_levels.tolist(), record_vectors, strict=True
            ):
                self.records[(uris[node], level)] = vector
        self.leaf_of: dict[str, str] = self.nodes.leaf_of()

    def dirs_under(self, uri: str) -> list[str]:
        level = self.nodes.level
        return sorted(child for child in self.children[uri] if level(child) != 2)

    def leaves_under(self, uri: str) -> list[str]:
        found: list[str] = []
        stack = [uri]
        while stack:
            current = stack.pop()
            if self.nodes.level(current) == 2:
                found.append(current)
            else:
                stack.extend(self.children[current])
        return found

    def replace(self, node: ContextNode) -> None:
        self.nodes[node.uri] = node
        self.dirty.add(node.uri)

    def add(self, node: ContextNode) -> None:
        self.dirty.add(node.uri)
        self.nodes[node.uri] = node
        self.children[node.uri] = []
        if node.parent_uri is not None:
            self.children[node.parent_uri].append(node.uri)
        if node.level == 2 and node.doc_id:
            self.leaf_of[node.doc_id] = node.uri

    def remove(self, uri: str) -> None:
        self.dirty.add(uri)
        node = self.nodes.pop(uri)
        del self.children[uri]
        self.records.pop((uri, 0), None)
        self.records.pop((uri, 1), None)
        if node.level == 2 and node.doc_id:
            self.leaf_of.pop(node.doc_id, None)
        if node.parent_uri is not None:
            siblings = self.children[node.parent_uri]
            siblings.remove(uri)
            if not siblings:
                self.remove(node.parent_uri)

    def ancestors(self, uri: str) -> list[str]:
        found = []
        parent = self.nodes.parent_uri(uri)
        while parent is not None:
            found.append(parent)
            parent = self.nodes.parent_uri(parent)
        return found

    def finish(self, info: Mapping[str, Any]) -> ContextTree:
        """The changed tree, column by column: the old tree's columns with the dirty nodes
        taken out and their new versions inserted in URI order (:mod:`retrievers.store.row_plan`:
        unchanged runs of nodes are copied as byte ranges), the structure arrays renumbered."""
        old = self.old
        dirty = sorted(self.dirty)
        old_index = self.old_index
        was_there = [uri for uri in dirty if uri in old_index]
        fresh = [self.nodes[uri] for uri in dirty if uri in self.nodes]
        plan = plan_rows(IdColumn(old.uris.fixed_width(), check=False), was_there, [n.uri for n in fresh])
        runs = plan.runs()
        texts = {
            "uri": merge_text(old.uris, plan, runs, [n.uri for n in fresh]),
            "abstract": merge_text(old.text_column("abstract"), plan, runs, [n.abstract for n in fresh]),
            "content": merge_text(old.text_column("content"), plan, runs, [n.content for n in fresh]),
            "doc_id": merge_text(old.text_column("doc_id"), plan, runs, [n.doc_id or "" for n in fresh]),
            "metadata": merge_text(
                old.text_column("metadata"),
                plan,
                runs,
                [encode_metadata(n.metadata, f"node {n.uri!r}: metadata") for n in fresh],
            ),
        }
        new_row = {n.uri: int(row) for n, row in zip(fresh, plan.new_rows.tolist(), strict=True)}
        full = plan.old_to_new.copy()  # old node -> new node, rewritten nodes included
        for uri in was_there:
            if uri in new_row:
                full[old_index[uri]] = new_row[uri]

        def index_of(uri: str) -> int:
            return new_row[uri] if uri in new_row else int(full[old_index[uri]])

        old_parents = np.asarray(old.parents)[plan.keep]
        mapped = np.where(old_parents >= 0, full[np.maximum(old_parents, 0)], -1)
        if ((old_parents >= 0) & (mapped < 0)).any():
            raise TreeError("a kept node's directory was removed (a directory with children)")
        parents = np.empty(plan.n_rows, dtype=np.int64)
        parents[plan.kept_rows] = mapped
        for node, row in zip(fresh, plan.new_rows.tolist(), strict=True):
            parents[row] = -1 if node.parent_uri is None else index_of(node.parent_uri)
        depth = plan.merge(np.asarray(old.depth), np.zeros(len(fresh), dtype=np.int64))
        for row in plan.new_rows.tolist():  # ascending = URI order: a parent comes first
            depth[row] = 0 if parents[row] < 0 else depth[parents[row]] + 1
        codes = [CONTEXT_TYPES.index(context_type_of(n.uri)) for n in fresh]
        order = np.argsort(parents, kind="stable")
        order = order[parents[order] >= 0]
        counts = np.bincount(parents[parents >= 0], minlength=plan.n_rows)
        arrays = {
            "level": plan.merge(old.levels, np.asarray([n.level for n in fresh], dtype=np.int8)),
            "parents": parents,
            "child_ptr": np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            "child_index": order.astype(np.int64),
            "depth": depth,
            "context_type": plan.merge(old.context_codes, np.asarray(codes, dtype=np.int8)),
        }
        empty = np.flatnonzero((counts == 0) & (arrays["level"] != 2))
        if empty.size:
            raise TreeError(f"directory {texts['uri'][int(empty[0])]!r} has no children")
        keys = sorted(self.records, key=lambda key: (key[1], index_of(key[0])))
        dim = next(iter(self.records.values())).shape[0] if self.records else 0
        vectors = np.zeros((len(keys), dim), dtype=np.float32)
        for i, key in enumerate(keys):
            vectors[i] = self.records[key]
        return ContextTree.from_columns(
            texts,
            arrays,
            record_nodes=np.asarray([index_of(uri) for uri, _ in keys], dtype=np.int64),
            record_levels=np.asarray([level for _, level in keys], dtype=np.int64),
            record_vectors=vectors,
            info=info,
        )


def changed_tree(
    tree: ContextTree,
    documents: Sequence[Document],
    vectors: npt.ArrayLike,
    row_of: Mapping[str, int],
    *,
    added_rows: Sequence[int],
    removed_ids: Sequence[str],
    config: HierarchyConfig,
    embedder: Embedder | None,
    settings: ChangeSettings | None = None,
) -> tuple[ContextTree, Literal["inserted", "rebuilt"]]:
    """The tree of the changed store (module docstring): ``documents``, ``vectors`` and
    ``row_of`` are the changed store's, ``added_rows`` its rows that are new, ``removed_ids`` the
    documents gone (an updated document is in both). Returns the tree and whether it was
    changed in place (``inserted``) or built again (``rebuilt``)."""
    settings = settings or ChangeSettings()
    matrix = np.asarray(vectors)
    row_of = dict(zip(row_of, range(len(row_of)), strict=True)) if not isinstance(row_of, dict) else row_of
    info = dict(tree.info)
    built_over = int(info.get("built_documents", tree.n_leaves))
    changes = int(info.get("changes_since_build", 0)) + len(added_rows) + len(removed_ids)
    if embedder is not None and changes > settings.tree_rebuild_fraction * built_over:
        folder = None if settings.source_folder is None else Path(settings.source_folder)
        rebuilt = build_tree(documents, matrix, embedder, config, source_folder=folder)
        rebuilt.info.update(built_documents=len(documents), changes_since_build=0)
        return rebuilt, "rebuilt"
    work = _Tree(tree)
    touched: set[str] = set()
    for doc_id in removed_ids:
        uri = work.leaf_of.get(doc_id)
        if uri is None:
            raise TreeError(f"document {doc_id!r} has no leaf in the tree")
        parent = work.nodes[uri].parent_uri
        work.remove(uri)
        if parent is not None and parent in work.nodes:
            touched.add(parent)
    if not work.nodes:
        raise TreeError("every document of the tree was removed: build a new store")
    made: list[str] = []
    roots = work.nodes.roots()
    for row in added_rows:
        doc = documents[row]
        home = _metadata_home(work, doc, config, made) if config.builder == "metadata_path" else None
        if home is None:
            home = _nearest_directory(work, roots, matrix[row])
        work.add(
            ContextNode(
                uri=f"{home}/{uri_segment(doc.id)}",
                level=2,
                parent_uri=home,
                abstract=snippet(doc, config.snippet_chars),
                doc_id=doc.id,
            )
        )
        touched.add(home)
    splits = 0
    if config.builder == "kmeans":
        for uri in sorted(touched):
            if uri in work.nodes and _split(work, uri, documents, matrix, row_of, config, settings, made):
                splits += 1
    _refresh(work, touched, made, documents, matrix, row_of, config, embedder)
    info.update(
        built_documents=built_over,
        changes_since_build=changes,
        n_nodes=len(work.nodes),
        n_directories=work.nodes.n_directories(),
        splits_since_build=int(info.get("splits_since_build", 0)) + splits,
    )
    return work.finish(info), "inserted"


def _nearest_directory(work: _Tree, roots: list[str], vector: npt.NDArray[Any]) -> str:
    current = _best(work, roots, vector)
    while True:
        below = work.dirs_under(current)
        if not below:
            return current
        current = _best(work, below, vector)


def _best(work: _Tree, candidates: list[str], vector: npt.NDArray[Any]) -> str:
    if len(candidates) == 1:
        return candidates[0]
    scores = [
        float(np.dot(work.records[(uri, 0)], vector)) if (uri, 0) in work.records else -np.inf
        for uri in candidates
    ]
    return candidates[int(np.argmax(scores))]  # first maximum: the lower URI


def _metadata_home(work: _Tree, doc: Document, config: HierarchyConfig, made: list[str]) -> str:
    """The directory ``root/<v1>/.../<vn>`` of ``doc``'s path values, made when missing."""
    uri = config.root_uri
    if uri not in work.nodes:
        work.add(
            ContextNode(
                uri=uri, level=0, parent_uri=None, abstract=uri, metadata={"n_documents": 0, "depth": 0}
            )
        )
        made.append(uri)
    for depth, key in enumerate(config.path_keys, start=1):
        if key not in doc.metadata:
            raise TreeError(
                f"document {doc.id!r} has no metadata key {key!r} (hierarchy.path_keys="
                f"{list(config.path_keys)}); it has {sorted(doc.metadata)}"
            )
        value = str(doc.metadata[key])
        child = f"{uri}/{uri_segment(value)}"
        if child not in work.nodes:
            work.add(
                ContextNode(
                    uri=child,
                    level=0,
                    parent_uri=uri,
                    abstract=value,
                    metadata={"n_documents": 0, "depth": depth, key: value},
                )
            )
            made.append(child)
        uri = child
    return uri


def _split(
    work: _Tree,
    uri: str,
    documents: Sequence[Document],
    matrix: npt.NDArray[Any],
    row_of: Mapping[str, int],
    config: HierarchyConfig,
    settings: ChangeSettings,
    made: list[str],
) -> bool:
    leaves = sorted(child for child in work.children[uri] if work.nodes.level(child) == 2)
    if work.dirs_under(uri) or len(leaves) <= settings.tree_split_factor * config.max_leaf_size:
        return False
    rows = [row_of[str(work.nodes[leaf].doc_id)] for leaf in leaves]
    k = min(config.branching_factor, math.ceil(len(rows) / config.max_leaf_size))
    labels = spherical_kmeans(
        matrix[np.asarray(rows)], k, seed=config.seed, iterations=config.kmeans_iterations
    )
    groups: dict[int, list[str]] = {}
    for leaf, label in zip(leaves, labels.tolist(), strict=True):
        groups.setdefault(label, []).append(leaf)
    clusters = sorted(groups.values(), key=lambda group: group[0])
    if len(clusters) < 2:  # k-means cannot split it (identical vectors): equal runs in id order
        size = math.ceil(len(leaves) / k)
        clusters = [leaves[start : start + size] for start in range(0, len(leaves), size)]
    parent = work.nodes[uri]
    depth = int(parent.metadata.get("depth", 0)) + 1
    children: list[str] = []
    for index, members in enumerate(clusters):
        child = f"{uri}/s{index}"
        children.append(child)
        work.add(ContextNode(uri=child, level=0, parent_uri=uri, abstract=child, metadata={"depth": depth}))
        made.append(child)
        for leaf in members:
            node = work.nodes[leaf]
            work.remove(leaf)
            work.add(
                ContextNode(
                    uri=f"{child}/{leaf.rsplit('/', 1)[1]}",
                    level=2,
                    parent_uri=child,
                    abstract=node.abstract,
                    doc_id=node.doc_id,
                    metadata=node.metadata,
                )
            )
    for child in children:  # a cluster still too large is split again
        _split(work, child, documents, matrix, row_of, config, settings, made)
    return True


def _refresh(
    work: _Tree,
    touched: set[str],
    made: list[str],
    documents: Sequence[Document],
    matrix: npt.NDArray[Any],
    row_of: Mapping[str, int],
    config: HierarchyConfig,
    embedder: Embedder | None,
) -> None:
    """Counts, texts and records of the directories a change touched (module docstring)."""
    above: set[str] = set()
    for uri in [*touched, *made]:
        if uri in work.nodes:
            above.add(uri)
            above.update(work.ancestors(uri))
    new = [uri for uri in made if uri in work.nodes]
    texts: list[tuple[str, int, str]] = []
    sums, counts = subtree_sums(work.nodes, work.children, sorted(above), matrix, row_of)
    for uri in sorted(above):
        node = work.nodes[uri]
        metadata = {**node.metadata, "n_documents": counts[uri]}
        abstract, content = node.abstract, node.content
        if uri in new:
            rows = [row_of[str(work.nodes[leaf].doc_id)] for leaf in work.leaves_under(uri)]
            central = _central(matrix, rows, config.abstract_snippets or 1)
            abstract = "; ".join(snippet(documents[r], config.snippet_chars) for r in central) + "."
            if config.overview:
                chosen = _central(matrix, rows, config.overview_snippets)
                content = "; ".join(snippet(documents[r], config.snippet_chars) for r in chosen) + "."
        work.replace(
            ContextNode(
                uri=uri,
                level=node.level,
                parent_uri=node.parent_uri,
                abstract=abstract,
                content=content,
                metadata=metadata,
            )
        )
        norm = float(np.linalg.norm(sums[uri]))
        centre = (sums[uri] / norm).astype(np.float32) if norm > 0 else None
        if config.directory_vector == "centroid" or (uri in new and embedder is None):
            if centre is not None:
                work.records[(uri, 0)] = centre
        elif uri in new:
            texts.append((uri, 0, abstract))
        if uri in new and content.strip() and embedder is not None:
            texts.append((uri, 1, content))
    if texts and embedder is not None:
        encoded = np.asarray(
            embedder.encode([text for _, _, text in texts], kind="document"), dtype=np.float32
        )
        for (uri, level, _), vector in zip(texts, encoded, strict=True):
            work.records[(uri, level)] = vector
    for uri in new:
        if (uri, 0) not in work.records:
            raise TreeError(f"new directory {uri!r} got no vector (its documents' vectors sum to zero)")


def _central(matrix: npt.NDArray[Any], rows: Sequence[int], count: int) -> list[int]:
    """Up to ``count`` of ``rows`` closest to their normalised mean (ties: lower row)."""
    if count <= 0 or not rows:
        return []
    picked = np.asarray(rows, dtype=np.int64)
    block = np.asarray(matrix[picked], dtype=np.float64)
    centre = block.mean(axis=0)
    norm = float(np.linalg.norm(centre))
    if norm > 0:
        centre /= norm
    similarity = np.round(block @ centre, 6)
    order = np.lexsort((picked, -similarity))[:count]
    return [int(picked[i]) for i in order]
