"""The k-means context tree built with faiss (``store.hierarchy.kmeans: faiss``), for big corpora.

The same recursion as :func:`retrievers.builders.hierarchy.kmeans_nodes` (a set of at most
``max_leaf_size`` documents is one directory of leaves; a larger one is split into
``min(branching_factor, ceil(size / max_leaf_size))`` clusters, ordered by their smallest
document id and named ``c0, c1, ...``; a set k-means cannot split is cut into equal runs), with
three changes that make a million documents cheap:

* **The split** (:func:`faiss_spherical_kmeans`): faiss's spherical k-means (float32, random
  initial centres drawn with the seed) is trained on a seeded sample of at most ``kmeans_sample``
  members per centre, then every member goes to its most similar centre (ties: the lower centre),
  scored in blocks of :data:`BLOCK` rows. Only the sample and one block are copied, never the whole
  set in float64.
* **Directory texts** are summed bottom-up: a directory's TF-IDF term weights and vector sum are
  its children's added up (a leaf directory's from its documents), so each document's row is read
  once for the terms instead of once per level (the weights are :func:`~retrievers.text.fit_tfidf`'s,
  counted without scikit-learn: :class:`~retrievers.builders.label_terms.LabelTerms`; children's
  sums covering an eighth of the vocabulary are added in a dense array, the same sums bit for
  bit). The central documents are found against the
  normalised vector sum, scanning the members in blocks (similarities in float32, compared at
  1e-6, ties to the lower position, as in the numpy builder).
* **Centroid directory vectors** are the normalised vector sums above, handed to
  :func:`~retrievers.builders.hierarchy.embed_directories`, which then does not gather every
  directory's leaves again.

The build runs in three steps: the members are split (:func:`_partition`; the seeds come from
each directory's path), optionally moved between leaf directories (``leaf_reassign``,
:func:`reassign_leaves`), then each directory's texts and centroid are made bottom-up and the
nodes written in the order the recursion visits them.

Deterministic: the seeds come from ``config.seed`` and the directory's path, and faiss runs on one
OpenMP thread inside the split (a sum's order must not depend on the thread count), so the same
documents, vectors and settings give the same tree on any machine with the same faiss build.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.builders.label_terms import LabelTerms
from retrievers.builders.tree_texts import leaf_nodes, snippet
from retrievers.index.faiss_calls import one_faiss_thread
from retrievers.params import is_int
from retrievers.store.hierarchy_config import HierarchyConfig
from retrievers.store.tree_uris import TreeError
from retrievers.types import ContextNode, Document

__all__ = ["BLOCK", "faiss_kmeans_nodes", "faiss_spherical_kmeans", "probed_knn", "reassign_leaves"]

FloatMatrix = npt.NDArray[np.float32]
FloatVector = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: rows scored at once when members are assigned to centres or ranked by centrality
BLOCK = 65_536
#: children's term sums are added in a dense array when they hold at least 1/DENSE_MERGE of the terms
DENSE_MERGE = 8


def faiss_spherical_kmeans(
    matrix: npt.ArrayLike,
    members: npt.ArrayLike,
    k: int,
    *,
    seed: int,
    iterations: int = 25,
    sample_per_centre: int = 256,
) -> IntArray:
    """Labels in ``[0, k)`` of rows ``members`` of ``matrix`` (unit vectors): faiss's spherical
    k-means trained on a seeded sample of at most ``k * sample_per_centre`` of them (kept in
    member order), then each member assigned to its most similar centre (ties: lower index)."""
    import faiss

    data = np.asarray(matrix)
    rows = np.asarray(members, dtype=np.int64)
    m = rows.size
    if not is_int(k) or not 1 <= k <= m:
        raise ValueError(f"k must be an integer in [1, {m}], got {k!r}")
    rng = np.random.default_rng(seed)
    limit = k * sample_per_centre
    sample = rows if m <= limit else rows[np.sort(rng.choice(m, size=limit, replace=False))]
    train = np.ascontiguousarray(data[sample], dtype=np.float32)
    kmeans = faiss.Kmeans(
        train.shape[1],
        k,
        niter=iterations,
        seed=int(rng.integers(2**31 - 1)),
        spherical=True,
        verbose=False,
        min_points_per_centroid=1,
        max_points_per_centroid=max(sample_per_centre, math.ceil(train.shape[0] / k)),
    )
    with one_faiss_thread():
        kmeans.train(train)
    centres = np.asarray(kmeans.centroids, dtype=np.float32)
    if sample is rows:  # every member was trained on: its rows are gathered already
        trained: IntArray = np.argmax(train @ centres.T, axis=1).astype(np.int64)
        return trained
    labels = np.empty(m, dtype=np.int64)
    for start in range(0, m, BLOCK):
        block = np.asarray(data[rows[start : start + BLOCK]], dtype=np.float32)
        labels[start : start + BLOCK] = np.argmax(block @ centres.T, axis=1)
    return labels


@dataclass
class _Sums:
    """What a directory's texts and centroid are made of: the sum of its documents' vectors
    (float64) and of their TF-IDF rows (sparse: sorted term ids and their weights)."""

    vector: FloatVector
    terms: IntArray
    weights: FloatVector


def _merge_terms(
    parts: Sequence[tuple[IntArray, FloatVector]], n_terms: int, *, unique_parts: bool = False
) -> tuple[IntArray, FloatVector]:
    """The sums of the weights of each term over ``parts`` (sorted terms), added in the parts'
    order. ``unique_parts``: no term repeats within a part, so when the parts are large against
    the vocabulary they are added into one dense array (the same additions in the same order as
    the sort, the same sums bit for bit)."""
    total = sum(part[0].size for part in parts)
    if unique_parts and total * DENSE_MERGE >= n_terms:
        summed = np.zeros(n_terms, dtype=np.float64)
        present = np.zeros(n_terms, dtype=bool)
        for terms, weights in parts:
            summed[terms] += weights
            present[terms] = True
        unique = np.flatnonzero(present)
        return unique.astype(np.int64), summed[unique]
    terms = np.concatenate([part[0] for part in parts])
    weights = np.concatenate([part[1] for part in parts])
    unique, inverse = np.unique(terms, return_inverse=True)
    summed = np.bincount(inverse, weights=weights, minlength=unique.size).astype(np.float64)
    return unique.astype(np.int64), summed


class _SummedTexts:
    """Extractive abstracts and overviews from a directory's :class:`_Sums` (the texts of
    :class:`~retrievers.builders.tree_texts.Extractor`, computed bottom-up)."""

    def __init__(self, documents: Sequence[Document], matrix: FloatMatrix, config: HierarchyConfig) -> None:
        self.documents = documents
        self.matrix = matrix
        self.config = config
        self.labels: LabelTerms | None = None
        if max(config.abstract_terms, config.overview_terms if config.overview else 0) > 0:
            labels = LabelTerms.count(doc.full_text for doc in documents)
            self.labels = labels if labels.terms else None  # no term anywhere: snippets only

    def leaf_sums(self, members: IntArray) -> _Sums:
        vector = np.asarray(self.matrix[members], dtype=np.float64).sum(axis=0)
        if self.labels is None:
            return _Sums(vector, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
        terms, weights = _merge_terms([self.labels.rows(members)], len(self.labels.terms))
        return _Sums(vector, terms, weights)

    def merged(self, parts: Sequence[_Sums]) -> _Sums:
        vector = np.sum([part.vector for part in parts], axis=0)
        n_terms = len(self.labels.terms) if self.labels is not None else 0
        terms, weights = _merge_terms(
            [(part.terms, part.weights) for part in parts], n_terms, unique_parts=True
        )
        return _Sums(vector, terms, weights)

    def central(self, members: IntArray, sums: _Sums, count: int) -> list[int]:
        if count <= 0 or members.size == 0:
            return []
        centre = sums.vector / members.size
        norm = float(np.linalg.norm(centre))
        if norm > 0:
            centre = centre / norm
        centre32 = centre.astype(np.float32)
        similarity = np.empty(members.size, dtype=np.float64)
        for start in range(0, members.size, BLOCK):
            block = np.asarray(self.matrix[members[start : start + BLOCK]], dtype=np.float32)
            similarity[start : start + BLOCK] = block @ centre32
        similarity = np.round(similarity, 6)
        if members.size > 4 * count:  # only the best few can be chosen: sort those alone
            best = np.argpartition(-similarity, count - 1)[:count]
            cut = similarity[best].min()
            keep = np.flatnonzero(similarity >= cut)
        else:
            keep = np.arange(members.size)
        order = keep[np.lexsort((members[keep], -similarity[keep]))][:count]
        return [int(members[i]) for i in order]

    def top_terms(self, sums: _Sums, count: int) -> list[str]:
        if count <= 0 or sums.terms.size == 0 or self.labels is None:
            return []
        positive = np.flatnonzero(sums.weights > 0)
        if positive.size > 4 * count:  # only the best few can be chosen: sort those alone
            best = np.argpartition(-sums.weights[positive], count - 1)[:count]
            positive = positive[sums.weights[positive] >= sums.weights[positive[best]].min()]
        order = positive[np.lexsort((sums.terms[positive], -sums.weights[positive]))][:count]
        return [self.labels.terms[int(sums.terms[i])] for i in order]

    def text(self, members: IntArray, sums: _Sums, snippets: int, terms: int) -> str:
        parts: list[str] = []
        chosen = [
            snippet(self.documents[i], self.config.snippet_chars)
            for i in self.central(members, sums, snippets)
        ]
        chosen = [text for text in chosen if text]
        if chosen:
            parts.append("; ".join(chosen) + ".")
        words = self.top_terms(sums, terms)
        if words:
            parts.append("Key terms: " + ", ".join(words) + ".")
        return " ".join(parts)


@dataclass
class _Split:
    """A directory of the partition: its members (rows, in id order) and its child directories
    (none: a leaf directory, whose members are its documents)."""

    members: IntArray
    children: list[_Split]


def _partition(
    documents: Sequence[Document], matrix: FloatMatrix, members: IntArray, config: HierarchyConfig
) -> _Split:
    """The recursion of the module docstring, members only (no text, no vector sum yet)."""

    def split(members: IntArray, path: tuple[int, ...]) -> _Split:
        if members.size <= config.max_leaf_size:
            return _Split(members, [])
        k = min(config.branching_factor, math.ceil(members.size / config.max_leaf_size))
        sequence = np.random.SeedSequence(entropy=config.seed, spawn_key=path)
        labels = faiss_spherical_kmeans(
            matrix,
            members,
            k,
            seed=int(sequence.generate_state(1)[0]),
            iterations=config.kmeans_iterations,
            sample_per_centre=config.kmeans_sample,
        )
        clusters = [members[labels == label] for label in np.unique(labels).tolist()]
        if len(clusters) < 2:
            size = math.ceil(members.size / k)
            clusters = [members[start : start + size] for start in range(0, members.size, size)]
        clusters.sort(key=lambda cluster: documents[int(cluster[0])].id)  # members are in id order
        return _Split(members, [split(cluster, (*path, index)) for index, cluster in enumerate(clusters)])

    return split(members, ())


def _leaves(root: _Split) -> list[_Split]:
    """The leaf directories under ``root``, in order."""
    found: list[_Split] = []
    pending = [root]
    while pending:
        node = pending.pop()
        if node.children:
            pending.extend(reversed(node.children))
        else:
            found.append(node)
    return found


def reassign_leaves(root: _Split, matrix: FloatMatrix, rank: IntArray, config: HierarchyConfig) -> int:
    """``leaf_reassign``: the documents whose similarity to their leaf directory's centroid is
    below ``config.leaf_reassign`` times the median such similarity (those a split sent away
    from their neighbours) are moved, in id order, to the leaf directory whose centroid is most
    similar to them among the 8 an inverted file over the centroids finds (:func:`probed_knn`,
    8 lists probed), when it has room
    (``max_leaf_size``) and is more similar than their own; then every directory's members are
    gathered again from its leaves (id order: ``rank`` is each row's position in it) and emptied
    directories are dropped (a directory may then hold a single child). Answers how many
    documents moved. Deterministic: the inverted file trained with a seed on one faiss thread,
    ties to the lower leaf."""
    import faiss

    leaves = _leaves(root)
    n_rows = matrix.shape[0]
    leaf_of = np.full(n_rows, -1, dtype=np.int64)
    for number, leaf in enumerate(leaves):
        leaf_of[leaf.members] = number
    rows = np.flatnonzero(leaf_of >= 0)
    centroids = np.empty((len(leaves), matrix.shape[1]), dtype=np.float32)
    for number, leaf in enumerate(leaves):
        total = np.asarray(matrix[leaf.members], dtype=np.float64).sum(axis=0)
        norm = float(np.linalg.norm(total))
        centroids[number] = total / norm if norm > 0 else total
    own = np.zeros(n_rows, dtype=np.float32)  # each document's similarity to its leaf's centroid
    for start in range(0, rows.size, BLOCK):
        block = rows[start : start + BLOCK]
        own[block] = np.einsum(
            "ij,ij->i", np.asarray(matrix[block], dtype=np.float32), centroids[leaf_of[block]]
        )
    limit = config.leaf_reassign * float(np.median(own[rows]))
    strays = rows[own[rows] < limit]
    strays = strays[np.argsort(rank[strays], kind="stable")]  # id order
    if strays.size == 0 or len(leaves) < 2:
        return 0
    n_lists = max(1, min(int(math.sqrt(len(leaves))), len(leaves) // 39))
    quantizer = faiss.IndexFlatIP(centroids.shape[1])
    index = faiss.IndexIVFFlat(quantizer, centroids.shape[1], n_lists, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = config.seed
    index.cp.min_points_per_centroid = 1
    with one_faiss_thread():  # k-means sums in one order
        index.train(centroids)
    queries = np.ascontiguousarray(matrix[strays], dtype=np.float32)
    found_scores, found = probed_knn(quantizer, centroids, queries, min(n_lists, 8), 8)
    sizes = np.array([leaf.members.size for leaf in leaves], dtype=np.int64)
    np.subtract.at(sizes, leaf_of[strays], 1)  # every stray leaves first, then each joins one
    best_first = np.lexsort((found, -found_scores), axis=1)  # most similar first, ties: lower leaf
    candidates = np.take_along_axis(found, best_first, axis=1).tolist()
    scores = np.take_along_axis(found_scores, best_first, axis=1).tolist()
    moved = 0
    for row, leaves_found, leaf_scores in zip(strays.tolist(), candidates, scores, strict=True):
        home = int(leaf_of[row])
        destination = home
        for leaf, score in zip(leaves_found, leaf_scores, strict=True):
            if leaf < 0 or score <= own[row]:
                break  # the rest are no more similar than its own leaf directory
            if sizes[leaf] < config.max_leaf_size:
                destination = leaf
                break
        sizes[destination] += 1
        if destination != home:
            leaf_of[row] = destination
            moved += 1
    if moved:
        by_leaf = np.argsort(leaf_of[rows] * n_rows + rank[rows], kind="stable")
        ordered = rows[by_leaf]
        bounds = np.searchsorted(leaf_of[ordered], np.arange(len(leaves) + 1))
        for number, leaf in enumerate(leaves):
            leaf.members = ordered[bounds[number] : bounds[number + 1]]
        _gather(root, rank)
    return moved


def probed_knn(
    quantizer: Any, base: FloatMatrix, queries: FloatMatrix, nprobe: int, k: int
) -> tuple[FloatMatrix, IntArray]:
    """What an inverted file over ``base`` with ``quantizer``'s lists finds when it probes
    ``nprobe`` lists per query: each query's ``k`` rows of ``base`` with the largest inner
    product among the members of its probed lists (ties: the lower row; -1 and -inf when fewer).
    Each list is scanned once for all the queries that probe it, by faiss's exhaustive search
    (a matrix product), not query by query as ``IndexIVFFlat.search`` scans (5-10x slower at 1M
    documents: 100k strays against 58k leaf directories). The same queries give the same answer
    on any thread count; the scores may differ from ``IndexIVFFlat``'s in the last bit."""
    import faiss

    n_lists = int(quantizer.ntotal)
    list_of = quantizer.assign(base, 1).ravel()
    probes = quantizer.assign(queries, nprobe)
    members = np.argsort(list_of, kind="stable")
    member_bounds = np.searchsorted(list_of[members], np.arange(n_lists + 1))
    pairs = np.argsort(probes.ravel(), kind="stable")  # (query, probe) pairs grouped by list
    pair_bounds = np.searchsorted(probes.ravel()[pairs], np.arange(n_lists + 1))
    scores = np.full((queries.shape[0], nprobe * k), -np.inf, dtype=np.float32)
    ids = np.full((queries.shape[0], nprobe * k), -1, dtype=np.int64)
    for number in range(n_lists):
        in_list = members[member_bounds[number] : member_bounds[number + 1]]
        probing = pairs[pair_bounds[number] : pair_bounds[number + 1]]
        if in_list.size == 0 or probing.size == 0:
            continue
        query = probing // nprobe
        found_scores, found = faiss.knn(
            queries[query], base[in_list], min(k, in_list.size), faiss.METRIC_INNER_PRODUCT
        )
        columns = (probing % nprobe)[:, None] * k + np.arange(found.shape[1])
        scores[query[:, None], columns] = found_scores
        ids[query[:, None], columns] = np.where(found >= 0, in_list[np.maximum(found, 0)], -1)
    missing = ids < 0
    best = np.lexsort((np.where(missing, np.iinfo(np.int64).max, ids), -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, best, axis=1), np.take_along_axis(ids, best, axis=1)


def _gather(node: _Split, rank: IntArray) -> None:
    """Each directory's members again from its children (id order), emptied ones dropped."""
    if not node.children:
        return
    for child in node.children:
        _gather(child, rank)
    node.children = [child for child in node.children if child.members.size]
    if not node.children:  # every leaf below it emptied: its parent drops it
        node.members = np.zeros(0, dtype=np.int64)
        return
    merged = np.concatenate([child.members for child in node.children])
    node.members = merged[np.argsort(rank[merged], kind="stable")]


def faiss_kmeans_nodes(
    documents: Sequence[Document], vectors: npt.ArrayLike, config: HierarchyConfig
) -> tuple[list[ContextNode], dict[str, FloatMatrix]]:
    """The k-means tree of ``documents`` split by faiss (see the module docstring), and the
    centroid (normalised mean of its leaf vectors, float32) of every directory by URI."""
    matrix = np.asarray(vectors)
    if matrix.ndim != 2 or matrix.shape[0] != len(documents):
        raise TreeError(f"vectors shape {matrix.shape} does not match {len(documents)} documents")
    if not documents:
        raise TreeError("cannot build a tree from an empty corpus")
    order = np.asarray(sorted(range(len(documents)), key=lambda i: documents[i].id), dtype=np.int64)
    root = _partition(documents, matrix, order, config)
    if config.leaf_reassign > 0:
        rank = np.empty(len(documents), dtype=np.int64)
        rank[order] = np.arange(len(documents), dtype=np.int64)
        reassign_leaves(root, matrix, rank, config)
    texts = _SummedTexts(documents, matrix, config)
    return _directory_nodes(documents, root, texts, config)


def _directory_nodes(
    documents: Sequence[Document], root: _Split, texts: _SummedTexts, config: HierarchyConfig
) -> tuple[list[ContextNode], dict[str, FloatMatrix]]:
    """The nodes of the partition under ``root`` (each directory followed by its subtree, leaf
    directories by their leaves) with their texts and centroids, summed bottom-up."""
    nodes: list[ContextNode | None] = []
    centroids: dict[str, FloatMatrix] = {}

    def directory(uri: str, parent: str | None, split: _Split, depth: int) -> _Sums:
        slot = len(nodes)
        nodes.append(None)  # the directory's own node, filled once its children are built
        members = split.members
        if not split.children:
            sums = texts.leaf_sums(members)
            nodes.extend(leaf_nodes(documents, members.tolist(), uri, config))
        else:
            children = sorted(split.children, key=lambda child: documents[int(child.members[0])].id)
            sums = texts.merged(
                [directory(f"{uri}/c{index}", uri, child, depth + 1) for index, child in enumerate(children)]
            )
        nodes[slot] = ContextNode(
            uri=uri,
            level=0,
            parent_uri=parent,
            abstract=texts.text(members, sums, config.abstract_snippets, config.abstract_terms),
            content=(
                texts.text(members, sums, config.overview_snippets, config.overview_terms)
                if config.overview
                else ""
            ),
            metadata={"n_documents": int(members.size), "depth": depth},
        )
        norm = float(np.linalg.norm(sums.vector))
        if norm > 0:
            centroids[uri] = (sums.vector / norm).astype(np.float32)
        return sums

    directory(config.root_uri, None, root, 0)
    built = [node for node in nodes if node is not None]
    if len(built) != len(nodes):  # every slot is filled on the way back up
        raise TreeError("internal error: a directory of the faiss k-means tree was left unfilled")
    return built, centroids
