"""The faiss k-means tree (``store.hierarchy.kmeans: faiss``) and the inverted file over directory
records (``directory_search: ivf``): a valid tree, deterministic across runs and thread counts,
bottom-up texts and centroids equal to the numpy builder's top-down ones, the default tree and
store keys unchanged, and the ivf search equal to exact search when it probes every list."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import faiss
import numpy as np
import pytest
from conftest import RowEmbedder
from threadpoolctl import threadpool_limits

from retrievers import Document, StoreConfig
from retrievers.builders import build_store
from retrievers.builders.hierarchy import build_tree, kmeans_nodes
from retrievers.builders.kmeans_tree import (
    _Split,
    _SummedTexts,
    faiss_kmeans_nodes,
    faiss_spherical_kmeans,
    probed_knn,
    reassign_leaves,
)
from retrievers.builders.tree_texts import Extractor
from retrievers.hierarchical import HierarchicalRetriever
from retrievers.params import ParamError
from retrievers.store.hierarchy_config import HierarchyConfig

WORDS = [f"{a}{b}{c}" for a in "bdkmpst" for b in "aeiou" for c in "lnrx"]  # 140 words


def corpus(n: int, clusters: int = 12, seed: int = 7) -> tuple[list[Document], np.ndarray]:
    """``n`` documents (ids in shuffled row order, words tied to the cluster) and unit vectors
    around ``clusters`` centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, 32))
    labels = rng.integers(clusters, size=n)
    vectors = centres[labels] + 0.3 * rng.standard_normal((n, 32))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    ids = rng.permutation(n)
    documents = []
    for row in range(n):
        words = rng.choice(WORDS[labels[row] * 10 : labels[row] * 10 + 20], size=12).tolist()
        words += rng.choice(WORDS, size=6).tolist()
        documents.append(Document(id=f"d{ids[row]:05d}", text=" ".join(words), title=f"title {row}"))
    return documents, vectors


FAISS = {"builder": "kmeans", "kmeans": "faiss", "max_leaf_size": 16, "branching_factor": 4}


def digest(nodes: Sequence[object], centroids: dict[str, np.ndarray] | None = None) -> str:
    h = hashlib.sha256()
    for node in nodes:
        h.update(repr(node).encode())
    for uri in sorted(centroids or {}):
        h.update(uri.encode() + (centroids or {})[uri].tobytes())
    return h.hexdigest()


def test_faiss_tree_is_valid_every_document_once_sizes_within_bounds() -> None:
    documents, vectors = corpus(2000)
    config = HierarchyConfig.from_dict(FAISS)
    nodes, centroids = faiss_kmeans_nodes(documents, vectors, config)
    leaves = [node for node in nodes if node.level == 2]
    assert sorted(node.doc_id for node in leaves) == sorted(doc.id for doc in documents)
    children: dict[str, list[object]] = {}
    for node in nodes:
        if node.parent_uri is not None:
            children.setdefault(node.parent_uri, []).append(node)
    directories = [node for node in nodes if node.level == 0]
    for directory in directories:
        kids = children[directory.uri]
        kinds = {kid.level for kid in kids}  # type: ignore[attr-defined]
        assert len(kinds) == 1  # a directory holds leaves or subdirectories, never both
        if kinds == {2}:
            assert 1 <= len(kids) <= config.max_leaf_size
            assert len(kids) == directory.metadata["n_documents"]
        else:
            assert 2 <= len(kids) <= config.branching_factor
            assert sum(kid.metadata["n_documents"] for kid in kids) == directory.metadata["n_documents"]  # type: ignore[attr-defined]
        assert directory.abstract  # snippets and terms
        assert directory.uri in centroids
        assert abs(float(np.linalg.norm(centroids[directory.uri])) - 1.0) < 1e-5
    assert directories[0].metadata["n_documents"] == len(documents)
    # the tree the store gets is valid (ContextTree checks parents, URIs, one leaf per document)
    embedder = RowEmbedder(documents, vectors)
    tree = build_tree(
        documents, vectors, embedder, config.replace(directory_vector="centroid", overview=False)
    )
    assert tree.n_leaves == len(documents) and tree.info["kmeans"] == "faiss"


def test_faiss_tree_is_deterministic_across_runs_and_thread_counts() -> None:
    documents, vectors = corpus(3000)
    config = HierarchyConfig.from_dict({**FAISS, "overview": True})
    before = faiss.omp_get_max_threads()
    digests = []
    try:
        for threads in (1, 2, 2):
            faiss.omp_set_num_threads(threads)
            with threadpool_limits(threads):
                digests.append(digest(*faiss_kmeans_nodes(documents, vectors, config)))
    finally:
        faiss.omp_set_num_threads(before)
    assert digests[0] == digests[1] == digests[2]
    other = digest(*faiss_kmeans_nodes(documents, vectors, config.replace(seed=1)))
    assert other != digests[0]  # the seed is used


def test_split_recovers_separated_clusters_and_samples_with_the_seed() -> None:
    rng = np.random.default_rng(0)
    centres = np.eye(16, dtype=np.float32)[:3]
    truth = np.repeat(np.arange(3), 400)
    data = centres[truth] + 0.05 * rng.standard_normal((1200, 16)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    members = np.arange(1200)
    labels = faiss_spherical_kmeans(data, members, 3, seed=5, sample_per_centre=20)  # 60 of 1200 trained
    assert labels.shape == (1200,) and set(labels.tolist()) == {0, 1, 2}
    for cluster in range(3):  # each true cluster is one label
        assert len(set(labels[truth == cluster].tolist())) == 1
    # a subset of the rows is clustered in place, without copying the others
    part = faiss_spherical_kmeans(data, members[::3], 3, seed=5, sample_per_centre=20)
    assert part.shape == (400,)
    with pytest.raises(ValueError, match="k must be"):
        faiss_spherical_kmeans(data, members[:2], 3, seed=0)


def test_bottom_up_texts_and_centroids_equal_the_top_down_ones() -> None:
    documents, vectors = corpus(600)
    config = HierarchyConfig.from_dict(FAISS)
    texts = _SummedTexts(documents, vectors, config)
    extractor = Extractor(documents, vectors, config)
    groups = [np.sort(np.random.default_rng(s).choice(600, size=40, replace=False)) for s in range(3)]
    parts = [texts.leaf_sums(group) for group in groups]
    merged = texts.merged(parts)
    union = np.concatenate(groups)  # groups may overlap: the sums are over the multiset
    for group, sums in zip(groups, parts, strict=True):
        assert texts.top_terms(sums, 8) == extractor.top_terms(group.tolist(), 8)
        assert texts.central(group, sums, 3) == extractor.central(group.tolist(), 3)
    np.testing.assert_allclose(merged.vector, vectors[union].astype(np.float64).sum(axis=0), rtol=1e-9)
    # the summed term weights of the union equal the sum of the TF-IDF rows
    dense = np.asarray(extractor.matrix[union].sum(axis=0)).ravel()
    np.testing.assert_allclose(dense[merged.terms], merged.weights, rtol=1e-12)
    assert np.count_nonzero(dense) == merged.terms.size


def test_default_tree_is_the_numpy_one_and_store_keys_are_unchanged() -> None:
    default = HierarchyConfig()
    assert "kmeans" not in default.to_dict() and "kmeans_sample" not in default.to_dict()
    assert HierarchyConfig.from_dict(default.to_dict()) == default
    assert HierarchyConfig.from_dict(FAISS).to_dict()["kmeans"] == "faiss"
    documents, vectors = corpus(800)
    numpy_nodes = kmeans_nodes(documents, vectors, HierarchyConfig.from_dict({"max_leaf_size": 16}))
    faiss_nodes, _ = faiss_kmeans_nodes(documents, vectors, HierarchyConfig.from_dict(FAISS))
    assert {node.doc_id for node in numpy_nodes} == {node.doc_id for node in faiss_nodes}
    # the default tree of this corpus, recorded before the faiss builder existed (a guard that
    # the refactoring of retrievers/builders/hierarchy.py left it byte for byte)
    assert digest(numpy_nodes)[:16] == DEFAULT_DIGEST


DEFAULT_DIGEST = "82aea2274f1c202a"


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"builder": "metadata_path", "path_keys": ["a"], "kmeans": "faiss"}, "kmeans"),
        ({"kmeans_sample": 64}, "kmeans_sample"),
        ({"kmeans": "sklearn"}, "kmeans"),
    ],
)
def test_bad_kmeans_settings_name_the_key(values: dict[str, object], key: str) -> None:
    with pytest.raises(ParamError, match=key):
        HierarchyConfig.from_dict(values)


def test_ivf_directory_search_probing_every_list_equals_exact_search() -> None:
    documents, vectors = corpus(1500)
    queries = [f"q{row}" for row in range(0, 1500, 50)]
    config = StoreConfig.from_dict(
        {"hierarchy": {**FAISS, "directory_vector": "centroid", "overview": False}, "timestamps": None}
    )
    store = build_store(documents, RowEmbedder(documents, vectors), config)
    embedder = RowEmbedder(documents, vectors)
    common = {"alpha": 1.0, "global_search_topk": 15, "max_convergence_rounds": 5}
    exact = HierarchicalRetriever(store, embedder, **common)
    ivf_all = HierarchicalRetriever(
        store, embedder, **common, directory_search="ivf", directory_nprobe=10_000
    )
    assert ivf_all.index.record_ivf is not None
    for a, b in zip(exact.retrieve_batch(queries, 10), ivf_all.retrieve_batch(queries, 10), strict=True):
        assert [(r.doc_id, r.score) for r in a] == [(r.doc_id, r.score) for r in b]
    # probing one list finds fewer start points but scores them exactly (a subset of the rankings' scores)
    one = HierarchicalRetriever(store, embedder, **common, directory_search="ivf", directory_nprobe=1)
    found = one.retrieve_batch(queries, 10)
    assert all(len(results) == 10 for results in found)
    with pytest.raises(ParamError, match="directory_nprobe"):
        HierarchicalRetriever(store, embedder, directory_nprobe=4)


# --------------------------------------------------------------------------- leaf_reassign

#: the faiss tree of ``corpus(3000)`` with FAISS and overviews, recorded from the builder before it
#: was split into partition, reassignment and texts: with ``leaf_reassign`` off, the same tree
FAISS_TREE_3000 = "d59445219dda80e96e50e4101549543bc87cb49136c3a8492947c3455b0d7230"


def test_the_faiss_tree_without_reassignment_is_the_recorded_one() -> None:
    documents, vectors = corpus(3000)
    config = HierarchyConfig.from_dict({**FAISS, "overview": True})
    assert digest(*faiss_kmeans_nodes(documents, vectors, config)) == FAISS_TREE_3000
    assert (
        digest(*faiss_kmeans_nodes(documents, vectors, config.replace(leaf_reassign=0.0))) == FAISS_TREE_3000
    )


def _unit(rows: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _skeleton(groups: list[list[int]]) -> _Split:
    """A root over one leaf directory per group of rows (in id order: row i is the i-th id)."""
    leaves = [_Split(np.asarray(group, dtype=np.int64), []) for group in groups]
    return _Split(np.arange(sum(map(len, groups)), dtype=np.int64), leaves)


def test_a_document_far_from_its_leaf_moves_to_the_leaf_with_the_nearest_centroid() -> None:
    # leaf 0: three rows along x and row 3 along y (a stray); leaf 1: rows along y; leaf 2: along z
    vectors = _unit(
        [
            [1, 0.1, 0],
            [1, 0, 0.1],
            [1, 0.05, 0.05],
            [0.05, 1, 0],
            [0, 1, 0.1],
            [0.1, 1, 0],
            [0, 0.1, 1],
            [0.1, 0, 1],
        ]
    )
    root = _skeleton([[0, 1, 2, 3], [4, 5], [6, 7]])
    rank = np.arange(8, dtype=np.int64)
    config = HierarchyConfig.from_dict({**FAISS, "leaf_reassign": 0.9, "max_leaf_size": 4})
    assert reassign_leaves(root, vectors, rank, config) == 1
    assert [leaf.members.tolist() for leaf in root.children] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert root.members.tolist() == list(range(8))
    # leaf 1 full: the stray stays (leaf 2 is no more similar to it than its own)
    root = _skeleton([[0, 1, 2, 3], [4, 5], [6, 7]])
    full = config.replace(max_leaf_size=2)
    assert reassign_leaves(root, vectors, rank, full) == 0
    assert [leaf.members.tolist() for leaf in root.children] == [[0, 1, 2, 3], [4, 5], [6, 7]]
    # off below the threshold: at 0.1 of the median no document is a stray
    root = _skeleton([[0, 1, 2, 3], [4, 5], [6, 7]])
    assert reassign_leaves(root, vectors, rank, config.replace(leaf_reassign=0.1)) == 0


def test_a_leaf_emptied_by_reassignment_is_dropped_and_members_stay_in_id_order() -> None:
    # leaf [1, 5] mixes a y row and a z row (its centroid is far from both): each goes home
    vectors = _unit(
        [
            [1, 0.1, 0],
            [0.05, 1, 0],
            [1, 0, 0.1],
            [0, 1, 0.1],
            [0.1, 1, 0],
            [0.1, 0, 1],
            [0, 0.1, 1],
            [0.05, 0.05, 1],
        ]
    )
    first, second = _skeleton([[0, 2], [1, 5]]), _skeleton([[3, 4], [6, 7]])
    first.members, second.members = np.asarray([0, 1, 2, 5]), np.asarray([3, 4, 6, 7])
    root = _Split(np.arange(8, dtype=np.int64), [first, second])
    rank = np.asarray([7, 6, 5, 4, 3, 2, 1, 0], dtype=np.int64)  # ids in reverse row order
    config = HierarchyConfig.from_dict({**FAISS, "leaf_reassign": 0.9, "max_leaf_size": 4})
    assert reassign_leaves(root, vectors, rank, config) == 2
    first, second = root.children
    assert [leaf.members.tolist() for leaf in first.children] == [[2, 0]]  # [1, 5] emptied, dropped
    assert first.members.tolist() == [2, 0]
    assert [leaf.members.tolist() for leaf in second.children] == [[4, 3, 1], [7, 6, 5]]
    assert second.members.tolist() == [7, 6, 5, 4, 3, 1]
    assert root.members.tolist() == [7, 6, 5, 4, 3, 2, 1, 0]


def tight_clusters(
    n: int = 3000, clusters: int = 150, seed: int = 3
) -> tuple[list[Document], np.ndarray, np.ndarray]:
    """Many tight clusters (48-d, noise 0.12), as the synthetic corpus at 1M has: a split into 4
    sends a cluster's members to different directories, whose leaves then mix clusters. Also 64
    queries drawn from the same clusters."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, 48))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.integers(clusters, size=n + 64)
    rows = centres[labels] + 0.12 * rng.standard_normal((n + 64, 48))
    rows = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    ids = rng.permutation(n)
    documents = [
        Document(id=f"d{ids[row]:05d}", text=" ".join([*rng.choice(WORDS, size=8).tolist(), f"row{row}"]))
        for row in range(n)
    ]
    return documents, rows[:n], rows[n:]


def test_reassigned_tree_is_valid_deterministic_and_its_leaves_hold_the_neighbours() -> None:
    documents, vectors, queries = tight_clusters()
    plain = HierarchyConfig.from_dict({**FAISS, "overview": True})
    config = plain.replace(leaf_reassign=0.55)
    before = faiss.omp_get_max_threads()
    digests = []
    try:
        for threads in (1, 2):
            faiss.omp_set_num_threads(threads)
            with threadpool_limits(threads):
                digests.append(digest(*faiss_kmeans_nodes(documents, vectors, config)))
    finally:
        faiss.omp_set_num_threads(before)
    assert digests[0] == digests[1] != digest(*faiss_kmeans_nodes(documents, vectors, plain))
    nodes, _ = faiss_kmeans_nodes(documents, vectors, config)
    leaves = [node for node in nodes if node.level == 2]
    assert sorted(node.doc_id for node in leaves) == sorted(doc.id for doc in documents)
    counts: dict[str, int] = {}
    for node in leaves:
        counts[node.parent_uri] = counts.get(node.parent_uri, 0) + 1  # type: ignore[index]
    assert max(counts.values()) <= config.max_leaf_size
    by_uri = {node.uri: node for node in nodes if node.level == 0}
    for uri, n in counts.items():
        assert by_uri[uri].metadata["n_documents"] == n
    row_of = {doc.id: row for row, doc in enumerate(documents)}
    truth = np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :10]

    def probed_recall(config: HierarchyConfig, probe: int) -> tuple[float, float]:
        """R@10 of scoring the members of the ``probe`` leaf directories whose centroids are most
        similar to each query (the leaf probe's ceiling), and the lowest similarity of a
        document to its leaf directory's centroid."""
        built, found = faiss_kmeans_nodes(documents, vectors, config)
        parent = {row_of[n.doc_id]: n.parent_uri for n in built if n.level == 2}
        uris = sorted({uri for uri in parent.values() if uri is not None})
        matrix = np.stack([found[uri] for uri in uris])
        best = np.argsort(-(queries @ matrix.T), axis=1, kind="stable")[:, :probe]
        hits = [
            len(
                {int(r) for r in truth[q]}
                & {r for r, uri in parent.items() if uri in {uris[i] for i in best[q]}}
            )
            for q in range(len(queries))
        ]
        lowest = min(float(vectors[r] @ found[uri]) for r, uri in parent.items() if uri is not None)
        return sum(hits) / (10 * len(queries)), lowest

    plain_recall, plain_lowest = probed_recall(plain, 8)
    moved_recall, moved_lowest = probed_recall(config, 8)
    assert moved_recall > plain_recall and moved_lowest > plain_lowest
    # the full tree as the store gets it
    tree = build_tree(
        documents,
        vectors,
        RowEmbedder(documents, vectors),
        config.replace(directory_vector="centroid", overview=False),
    )
    assert tree.n_leaves == len(documents)


def test_leaf_reassign_is_for_the_faiss_builder_and_keeps_old_store_keys() -> None:
    with pytest.raises(ParamError, match="leaf_reassign"):
        HierarchyConfig.from_dict({"builder": "kmeans", "leaf_reassign": 0.5})
    assert "leaf_reassign" not in HierarchyConfig.from_dict(FAISS).to_dict()
    assert HierarchyConfig.from_dict({**FAISS, "leaf_reassign": 0.5}).to_dict()["leaf_reassign"] == 0.5
    with pytest.raises(ParamError, match="leaf_reassign"):
        HierarchyConfig.from_dict({**FAISS, "leaf_reassign": 1.5})


def test_probed_knn_finds_what_faiss_ivf_flat_finds() -> None:
    """The stray search of ``leaf_reassign``: every list scanned once for the queries probing it
    gives the IVF's answer (the top k inner products among the probed lists' members, checked
    against faiss's IndexIVFFlat and a brute-force scan of those members)."""

    rng = np.random.default_rng(11)
    base = rng.standard_normal((3000, 32)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    queries = rng.standard_normal((700, 32)).astype(np.float32)
    quantizer = faiss.IndexFlatIP(32)
    index = faiss.IndexIVFFlat(quantizer, 32, 40, faiss.METRIC_INNER_PRODUCT)
    index.train(base)
    index.add(base)
    index.nprobe = 3
    expected_scores, expected = index.search(queries, 8)
    scores, found = probed_knn(quantizer, base, queries, 3, 8)
    assert np.array_equal(np.sort(found, axis=1), np.sort(expected, axis=1))
    np.testing.assert_allclose(np.sort(scores, axis=1), np.sort(expected_scores, axis=1), rtol=0, atol=1e-5)
    # brute force over the probed lists, ties to the lower row
    list_of = quantizer.assign(base, 1).ravel()
    probes = quantizer.assign(queries, 3)
    for q in range(0, 700, 37):
        allowed = np.flatnonzero(np.isin(list_of, probes[q]))
        exact = allowed[np.lexsort((allowed, -(base[allowed] @ queries[q])))][:8]
        assert found[q].tolist() == exact.tolist()
    # a list smaller than k: the missing places are -1 and -inf, after the real ones
    small_scores, small = probed_knn(quantizer, base, queries[:5], 1, 400)
    for row, row_scores in zip(small, small_scores, strict=True):
        n_real = int((row >= 0).sum())
        assert n_real < 400 and (row[n_real:] == -1).all() and np.isneginf(row_scores[n_real:]).all()
        assert (np.diff(row_scores[:n_real]) <= 0).all()
