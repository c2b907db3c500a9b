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
from retrievers.builders.kmeans_tree import _SummedTexts, faiss_kmeans_nodes, faiss_spherical_kmeans
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
