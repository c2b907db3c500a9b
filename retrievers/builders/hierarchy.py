"""Building context trees: recursive k-means or metadata paths, extractive abstracts, directory vectors.

Builders (chosen by :attr:`retrievers.store.hierarchy_config.HierarchyConfig.builder`):

* ``kmeans``: recursive spherical k-means over the document embeddings (flat corpora such as
  SciFact). A set of at most ``max_leaf_size`` documents becomes one directory of leaves; a larger
  set is split into ``branching_factor`` clusters, recursively. Abstracts are extractive: the
  titles (or opening words) of the directory's most central documents and its top TF-IDF terms
  (:func:`retrievers.text.fit_tfidf` over :data:`retrievers.text.LABEL_PATTERN` words); nothing is
  generated.
* ``metadata_path``: directories from metadata values, e.g. LoCoMo's conversation -> session
  (``viking://user/memories/<conversation>/<session>/<turn>``). A JSON-lines ``summaries_file``
  in the dataset folder (LoCoMo's ``sessions.jsonl``) can give a directory its abstract and
  overview through ``str.format`` templates over the record's fields (the session's date and its
  summary); other directories get the extractive abstract.

``kmeans`` splits with numpy by default; ``store.hierarchy.kmeans: faiss`` builds the same kind
of tree with faiss's k-means on a sample and bottom-up texts (:mod:`retrievers.builders.kmeans_tree`,
for big corpora; another tree than the default's).

Both are deterministic: the same documents, vectors and settings give the same tree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.builders.kmeans_tree import faiss_kmeans_nodes
from retrievers.builders.tree_texts import Extractor, leaf_nodes
from retrievers.params import is_int
from retrievers.store.hierarchy_config import HierarchyConfig
from retrievers.store.tree import ContextTree
from retrievers.store.tree_uris import TreeError, uri_segment
from retrievers.types import ContextNode, Document, Embedder

__all__ = ["build_tree", "embed_directories", "kmeans_nodes", "metadata_path_nodes", "spherical_kmeans"]

FloatMatrix = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------


def spherical_kmeans(vectors: npt.ArrayLike, k: int, *, seed: int, iterations: int = 25) -> IntArray:
    """Cluster unit vectors by cosine similarity; returns a label in ``[0, k)`` per row.

    k-means++ seeding (Arthur & Vassilvitskii, 2007) with distance ``1 - cos``, then Lloyd
    iterations on the sphere (Dhillon & Modha, 2001: centres are normalised member means) until
    no assignment changes or ``iterations`` rounds. Computed in float64 with a seeded
    ``numpy.random.Generator``: the same input and seed give the same labels. Ties in
    assignment go to the lower centre index; an empty cluster keeps its previous centre.
    """
    data = np.asarray(vectors, dtype=np.float64)
    m = data.shape[0]
    if not is_int(k) or not 1 <= k <= m:
        raise ValueError(f"k must be an integer in [1, {m}], got {k!r}")
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(m))]
    distance = np.clip(1.0 - data @ data[chosen[0]], 0.0, None)
    for _ in range(1, k):
        total = float(distance.sum())
        if total <= 0.0:  # every point coincides with a centre: take unused points in order
            unused = np.setdiff1d(np.arange(m), np.asarray(chosen))
            chosen.append(int(unused[0]))
        else:
            chosen.append(int(rng.choice(m, p=distance / total)))
        distance = np.minimum(distance, np.clip(1.0 - data @ data[chosen[-1]], 0.0, None))
    centres = data[np.asarray(chosen)].copy()
    labels = np.full(m, -1, dtype=np.int64)
    for _ in range(iterations):
        new_labels = np.argmax(data @ centres.T, axis=1).astype(np.int64)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
        for j in range(k):
            members = data[labels == j]
            if members.shape[0] == 0:
                continue
            centre = members.sum(axis=0)
            norm = float(np.linalg.norm(centre))
            centres[j] = centre / norm if norm > 0 else centre
    return labels


def kmeans_nodes(
    documents: Sequence[Document], vectors: npt.ArrayLike, config: HierarchyConfig
) -> list[ContextNode]:
    """Recursive spherical k-means tree over ``documents`` (row i of ``vectors`` is document i).

    A set of at most ``max_leaf_size`` documents becomes one directory holding them as leaves;
    a larger set is split into ``min(branching_factor, ceil(size / max_leaf_size))`` clusters,
    each a subdirectory, recursively (clusters ordered by their smallest document id, named
    ``c0, c1, ...``). When k-means cannot split a set (identical vectors), it is cut into equal
    runs in document order instead, so the recursion always ends.
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(documents):
        raise TreeError(f"vectors shape {matrix.shape} does not match {len(documents)} documents")
    if not documents:
        raise TreeError("cannot build a tree from an empty corpus")
    order = sorted(range(len(documents)), key=lambda i: documents[i].id)
    extractor = Extractor(documents, matrix, config)
    nodes: list[ContextNode] = []

    def directory(uri: str, parent: str | None, members: list[int], path: tuple[int, ...]) -> None:
        nodes.append(
            ContextNode(
                uri=uri,
                level=0,
                parent_uri=parent,
                abstract=extractor.abstract(members),
                content=extractor.overview(members),
                metadata={"n_documents": len(members), "depth": len(path)},
            )
        )
        if len(members) <= config.max_leaf_size:
            nodes.extend(leaf_nodes(documents, members, uri, config))
            return
        k = min(config.branching_factor, math.ceil(len(members) / config.max_leaf_size))
        sequence = np.random.SeedSequence(entropy=config.seed, spawn_key=path)
        labels = spherical_kmeans(
            matrix[np.asarray(members)],
            k,
            seed=int(sequence.generate_state(1)[0]),
            iterations=config.kmeans_iterations,
        )
        groups: dict[int, list[int]] = {}
        for member, label in zip(members, labels.tolist(), strict=True):
            groups.setdefault(label, []).append(member)
        clusters = list(groups.values())
        if len(clusters) < 2:
            size = math.ceil(len(members) / k)
            clusters = [members[start : start + size] for start in range(0, len(members), size)]
        clusters.sort(key=lambda cluster: documents[cluster[0]].id)  # members are in id order
        for index, cluster in enumerate(clusters):
            directory(f"{uri}/c{index}", uri, cluster, (*path, index))

    directory(config.root_uri, None, order, ())
    return nodes


def _read_summaries(path: Path, keys: tuple[str, ...]) -> dict[tuple[str, ...], tuple[int, dict[str, Any]]]:
    """Summary records by the path they describe: the values of the longest prefix of ``keys``
    that the record holds (as strings). Returns ``{path: (line number, record)}``."""
    if not path.is_file():
        raise TreeError(f"hierarchy.summaries_file {path} does not exist")
    found: dict[tuple[str, ...], tuple[int, dict[str, Any]]] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as error:
                raise TreeError(f"{path}:{number}: not valid JSON: {error}") from None
            if not isinstance(record, dict):
                raise TreeError(f"{path}:{number}: a summary record must be a JSON object")
            prefix: list[str] = []
            for key in keys:
                if key not in record:
                    break
                prefix.append(str(record[key]))
            if not prefix:
                raise TreeError(f"{path}:{number}: the record holds none of the path keys {list(keys)}")
            described = tuple(prefix)
            if described in found:
                raise TreeError(
                    f"{path}:{number}: describes the same directory {list(described)} as line {found[described][0]}"
                )
            found[described] = (number, record)
    return found


def _fill(template: str, record: Mapping[str, Any], where: str) -> str:
    try:
        return " ".join(template.format_map(dict(record)).split())
    except (KeyError, IndexError, ValueError) as error:
        raise TreeError(
            f"{where}: template {template!r} cannot be filled from the record: {error!r}"
        ) from None


def metadata_path_nodes(
    documents: Sequence[Document],
    vectors: npt.ArrayLike,
    config: HierarchyConfig,
    *,
    source_folder: Path | None = None,
) -> list[ContextNode]:
    """Directories from the values of ``config.path_keys`` in each document's metadata.

    ``root_uri/<v1>/<v2>/.../<doc id>`` (values percent-escaped as URI segments). A document
    missing a path key is an error. With ``summaries_file``, a directory described by a record
    gets ``abstract_template`` (and ``overview_template``) filled from it; every other abstract
    and overview is extractive.
    """
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(documents):
        raise TreeError(f"vectors shape {matrix.shape} does not match {len(documents)} documents")
    if not documents:
        raise TreeError("cannot build a tree from an empty corpus")
    keys = config.path_keys
    members: dict[tuple[str, ...], list[int]] = {(): []}
    for i in sorted(range(len(documents)), key=lambda i: documents[i].id):
        doc = documents[i]
        values: list[str] = []
        for key in keys:
            if key not in doc.metadata:
                raise TreeError(
                    f"document {doc.id!r} has no metadata key {key!r} (hierarchy.path_keys={list(keys)}); "
                    f"it has {sorted(doc.metadata)}"
                )
            values.append(str(doc.metadata[key]))
        for depth in range(len(values) + 1):
            members.setdefault(tuple(values[:depth]), []).append(i)
    summaries: dict[tuple[str, ...], tuple[int, dict[str, Any]]] = {}
    summary_path: Path | None = None
    if config.summaries_file is not None:
        summary_path = config.input_files(source_folder)[0]
        summaries = _read_summaries(summary_path, keys)
    extractor = Extractor(documents, matrix, config)
    nodes: list[ContextNode] = []
    used = 0
    for path in sorted(members):
        uri = "/".join([config.root_uri, *(uri_segment(value) for value in path)])
        parent = None if not path else "/".join([config.root_uri, *(uri_segment(v) for v in path[:-1])])
        abstract = extractor.abstract(members[path])
        overview = extractor.overview(members[path])
        metadata: dict[str, Any] = {"n_documents": len(members[path]), "depth": len(path)}
        if path:
            metadata[keys[len(path) - 1]] = path[-1]
        if path in summaries and summary_path is not None:
            number, record = summaries[path]
            where = f"{summary_path}:{number}"
            used += 1
            if config.abstract_template is not None:
                abstract = _fill(config.abstract_template, record, where)
            if config.overview_template is not None:
                overview = _fill(config.overview_template, record, where) if config.overview else ""
            metadata["summary_line"] = number
        nodes.append(
            ContextNode(
                uri=uri, level=0, parent_uri=parent, abstract=abstract, content=overview, metadata=metadata
            )
        )
        if len(path) == len(keys):
            nodes.extend(leaf_nodes(documents, members[path], uri, config))
    if summary_path is not None and used == 0:
        raise TreeError(
            f"no record of {summary_path} matches a directory (path keys {list(keys)}); check the file and keys"
        )
    return nodes


def embed_directories(
    nodes: Sequence[ContextNode],
    embedder: Embedder,
    doc_vectors: npt.ArrayLike,
    row_of: Mapping[str, int],
    *,
    directory_vector: str = "abstract",
    info: Mapping[str, Any] | None = None,
    centroids: Mapping[str, FloatMatrix] | None = None,
) -> ContextTree:
    """A :class:`ContextTree` of ``nodes`` with directory records.

    Level 0: the abstract embedded (``directory_vector="abstract"``; an empty abstract is an
    error) or the normalised mean of the directory's leaf vectors (``"centroid"``; a directory
    without leaves below it, or whose mean is zero, gets its abstract embedded instead). Level 1:
    the overview (``content``) embedded, for directories that have one. All texts go to the
    embedder in one call, as documents. ``centroids`` (directory URI -> unit vector) gives the
    centroids already computed by the builder (:mod:`retrievers.builders.kmeans_tree`); a
    directory missing from it falls back to its abstract, as above.
    """
    if directory_vector not in ("abstract", "centroid"):
        raise TreeError(f"directory_vector must be one of ['abstract', 'centroid'], got {directory_vector!r}")
    tree = ContextTree(nodes, info=info)
    matrix = np.asarray(doc_vectors)
    rows = tree.leaf_rows(row_of)
    below = tree.subtree_leaves() if directory_vector == "centroid" and centroids is None else []
    record_nodes: list[int] = []
    record_levels: list[int] = []
    texts: list[str] = []
    centroids_at: dict[int, FloatMatrix] = {}
    abstracts = tree.text_column("abstract")
    overviews = tree.text_column("content")
    directories = np.flatnonzero(~tree.is_leaf).tolist()
    for i in directories:
        if directory_vector == "centroid" and centroids is not None:
            given = centroids.get(tree.uris[i])
            if given is not None:
                centroids_at[len(record_nodes)] = np.asarray(given, dtype=np.float32)
                record_nodes.append(i)
                record_levels.append(0)
                continue
        elif directory_vector == "centroid" and below[i]:
            centre = matrix[rows[np.asarray(below[i])]].astype(np.float64).sum(axis=0)
            norm = float(np.linalg.norm(centre))
            if norm > 0:
                centroids_at[len(record_nodes)] = (centre / norm).astype(np.float32)
                record_nodes.append(i)
                record_levels.append(0)
                continue
        abstract = abstracts[i]
        if not abstract.strip():
            raise TreeError(f"directory {tree.uris[i]!r} has an empty abstract; it cannot be embedded")
        record_nodes.append(i)
        record_levels.append(0)
        texts.append(abstract)
    for i in directories:
        overview = overviews[i]
        if overview.strip():
            record_nodes.append(i)
            record_levels.append(1)
            texts.append(overview)
    dim = matrix.shape[1]
    encoded = (
        np.asarray(embedder.encode(texts, kind="document"), dtype=np.float32)
        if texts
        else np.zeros((0, dim), dtype=np.float32)
    )
    if encoded.shape != (len(texts), dim):
        raise TreeError(f"embedder returned shape {encoded.shape} for {len(texts)} texts; expected dim {dim}")
    vectors = np.empty((len(record_nodes), dim), dtype=np.float32)
    next_text = 0
    for position in range(len(record_nodes)):
        if position in centroids_at:
            vectors[position] = centroids_at[position]
        else:
            vectors[position] = encoded[next_text]
            next_text += 1
    if not np.isfinite(vectors).all():
        raise TreeError("directory vectors contain NaN or infinite values")
    return tree.with_records(
        np.asarray(record_nodes, dtype=np.int64), np.asarray(record_levels, dtype=np.int64), vectors
    )


def build_tree(
    documents: Sequence[Document],
    doc_vectors: npt.ArrayLike,
    embedder: Embedder,
    config: HierarchyConfig,
    *,
    source_folder: Path | None = None,
) -> ContextTree:
    """Build the tree ``config`` asks for over ``documents`` (row i of ``doc_vectors`` is
    document i, as in the store) and embed its directories."""
    centroids: dict[str, FloatMatrix] | None = None
    if config.builder == "kmeans" and config.kmeans == "faiss":
        nodes, centroids = faiss_kmeans_nodes(documents, doc_vectors, config)
    elif config.builder == "kmeans":
        nodes = kmeans_nodes(documents, doc_vectors, config)
    else:
        nodes = metadata_path_nodes(documents, doc_vectors, config, source_folder=source_folder)
    row_of = {doc.id: row for row, doc in enumerate(documents)}
    info = {
        "builder": config.builder,
        **({"kmeans": "faiss"} if config.builder == "kmeans" and config.kmeans == "faiss" else {}),
        "n_nodes": len(nodes),
        "n_directories": sum(1 for node in nodes if node.level != 2),
        "max_depth": max(int(node.metadata.get("depth", 0)) for node in nodes if node.level != 2),
    }
    return embed_directories(
        nodes,
        embedder,
        doc_vectors,
        row_of,
        directory_vector=config.directory_vector,
        info=info,
        centroids=centroids if config.directory_vector == "centroid" else None,
    )
