"""Context trees: validation (cycles, orphans, empty directories, URIs), the k-means and
metadata-path builders, directory records, save/load through the store, and settings."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import memory_mapped

from retrievers import ContextNode, ContextStore, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.builders.hierarchy import embed_directories, kmeans_nodes, spherical_kmeans
from retrievers.store.hierarchy_config import HierarchyConfig
from retrievers.store.tree import ContextTree
from retrievers.store.tree_uris import TreeError, context_type_of
from retrievers.types import EncodeKind


def _dir(uri: str, parent: str | None, abstract: str = "about") -> ContextNode:
    return ContextNode(uri=uri, level=0, parent_uri=parent, abstract=abstract)


def _leaf(uri: str, parent: str, doc_id: str) -> ContextNode:
    return ContextNode(uri=uri, level=2, parent_uri=parent, doc_id=doc_id)


R = "viking://resources"


def _small_tree_nodes() -> list[ContextNode]:
    return [
        _dir(R, None),
        _dir(f"{R}/a", R),
        _leaf(f"{R}/a/1", f"{R}/a", "1"),
        _leaf(f"{R}/a/2", f"{R}/a", "2"),
        _leaf(f"{R}/3", R, "3"),
    ]


def test_structure_is_indexed_in_uri_order() -> None:
    tree = ContextTree(list(reversed(_small_tree_nodes())))
    assert tree.uris == [R, f"{R}/3", f"{R}/a", f"{R}/a/1", f"{R}/a/2"]
    assert tree.roots.tolist() == [0]
    assert [tree.uris[i] for i in tree.children(0)] == [f"{R}/3", f"{R}/a"]
    assert tree.parents.tolist() == [-1, 0, 0, 2, 2]
    assert tree.depth.tolist() == [0, 1, 1, 2, 2]
    assert (tree.n_directories, tree.n_leaves) == (2, 3)
    assert tree.subtree_leaves()[0] == [1, 3, 4] or sorted(tree.subtree_leaves()[0]) == [1, 3, 4]
    assert tree.context_types == ["resource"] * 5
    assert tree.leaf_rows({"1": 5, "2": 6, "3": 7}).tolist() == [-1, 7, -1, 5, 6]
    with pytest.raises(TreeError, match="names document '3', which is not in the store"):
        tree.leaf_rows({"1": 0, "2": 1})


def test_context_types_from_roots() -> None:
    assert context_type_of("viking://user/memories/conv-26/1") == "memory"
    assert context_type_of("viking://agent/memories") == "memory"
    assert context_type_of("viking://agent/skills/search") == "skill"
    assert context_type_of("viking://resources/x") == "resource"
    with pytest.raises(TreeError, match="not under an OpenViking root"):
        context_type_of("viking://resourcesX/a")


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        (
            [_dir(R, None), _dir(f"{R}/a", f"{R}/b"), _dir(f"{R}/b", f"{R}/a"), _leaf(f"{R}/c", R, "c")],
            r"cycle in the context tree: '.*/a' -> '.*/b' -> '.*/a'",
        ),
        ([_dir(R, None), _leaf(f"{R}/x", f"{R}/gone", "x")], r"orphan node '.*/x': its parent_uri '.*/gone'"),
        (
            [_dir(R, None), _dir(f"{R}/empty", R), _leaf(f"{R}/x", R, "x")],
            r"directory '.*/empty' has no children",
        ),
        ([_dir(R, None), _leaf(f"{R}/x", R, "x"), _leaf(f"{R}/x", R, "y")], "duplicate node URI"),
        ([_dir(R, None), _leaf(f"{R}/x", R, "d"), _leaf(f"{R}/y", R, "d")], "document 'd' is in two leaves"),
        ([_dir(R, None), ContextNode(f"{R}/x", 2, R)], "has no doc_id"),
        ([ContextNode(f"{R}/x", 2, None, doc_id="x")], "has no parent directory"),
        ([_dir(R, None), ContextNode(f"{R}/x", 0, R, doc_id="x")], "only leaves"),
        (
            [_dir(R, None), _leaf(f"{R}/x", R, "x"), _leaf(f"{R}/x/y", f"{R}/x", "y")],
            "leaves have no children",
        ),
        (
            [_dir("file:///tmp", None), _leaf("file:///tmp/x", "file:///tmp", "x")],
            "not under an OpenViking root",
        ),
        ([_dir(R, None), _leaf("viking://agent/skills/x", R, "x")], "does not extend its parent's URI"),
        ([], "at least one node"),
    ],
)
def test_bad_trees_are_rejected(nodes: list[ContextNode], message: str) -> None:
    with pytest.raises(TreeError, match=message):
        ContextTree(nodes)


def test_cycle_without_root_is_reported() -> None:
    # every node has a parent: the cycle is the whole tree
    nodes = [_dir(f"{R}/a", f"{R}/b"), _dir(f"{R}/b", f"{R}/a")]
    with pytest.raises(TreeError, match="cycle"):
        ContextTree(nodes)


class MapEmbedder:
    """Vectors from a table (unknown texts: a fixed vector), so tests can work scores out."""

    name = "map"

    def __init__(self, table: dict[str, Sequence[float]], dim: int = 3) -> None:
        self.table = table
        self.dim = dim
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        self.calls.append(list(texts))
        rows = [self.table.get(text, [0.0] * (self.dim - 1) + [1.0]) for text in texts]
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)


def test_directory_records_abstract_overview_and_centroid() -> None:
    nodes = [
        ContextNode(R, 0, None, abstract="root", content="root overview"),
        ContextNode(f"{R}/a", 0, R, abstract="dir a"),
        _leaf(f"{R}/a/1", f"{R}/a", "1"),
        _leaf(f"{R}/a/2", f"{R}/a", "2"),
    ]
    embedder = MapEmbedder({"root": [1, 0, 0], "dir a": [0, 1, 0], "root overview": [0, 0, 1]})
    docs = np.asarray([[1, 0, 0], [0, 1, 0]], dtype=np.float32)
    tree = embed_directories(nodes, embedder, docs, {"1": 0, "2": 1})
    # one call; level-0 records first, then level-1 records
    assert embedder.calls == [["root", "dir a", "root overview"]]
    assert tree.record_nodes.tolist() == [0, 1, 0] and tree.record_levels.tolist() == [0, 0, 1]
    np.testing.assert_array_equal(tree.record_vectors, [[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    centred = embed_directories(
        nodes, MapEmbedder({"root overview": [0, 0, 1]}), docs, {"1": 0, "2": 1}, directory_vector="centroid"
    )
    half = np.float32(1 / np.sqrt(2))
    # both directories hold leaves 1 and 2 below them: centroid (1, 1, 0) / sqrt(2)
    np.testing.assert_allclose(centred.record_vectors[:2], [[half, half, 0], [half, half, 0]], rtol=1e-6)
    with pytest.raises(TreeError, match="empty abstract"):
        embed_directories(
            [ContextNode(R, 0, None, abstract=" "), _leaf(f"{R}/1", R, "1")], embedder, docs[:1], {"1": 0}
        )


def test_spherical_kmeans_is_deterministic_and_separates_clusters() -> None:
    rng = np.random.default_rng(3)
    centres = np.eye(4)
    points = np.repeat(centres, 10, axis=0) + rng.normal(scale=0.05, size=(40, 4))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    labels = spherical_kmeans(points, 4, seed=7)
    assert np.array_equal(labels, spherical_kmeans(points, 4, seed=7))
    assert all(len(set(labels[i * 10 : (i + 1) * 10].tolist())) == 1 for i in range(4))
    assert len(set(labels.tolist())) == 4
    identical = np.ones((5, 3)) / np.sqrt(3)
    assert spherical_kmeans(identical, 2, seed=0).tolist() == [0] * 5  # cannot split: one cluster
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 5\]"):
        spherical_kmeans(identical, 6, seed=0)


def _corpus(n: int = 60) -> list[Document]:
    topics = ["protein folding enzyme", "galaxy star telescope", "court law judge", "football goal match"]
    return [
        Document(
            id=f"d{i:03d}",
            title=f"{topics[i % 4].split()[0]} study {i}",
            text=f"{topics[i % 4]} report number {i}",
        )
        for i in range(n)
    ]


def test_kmeans_builder_sizes_names_and_extractive_abstracts() -> None:
    docs = _corpus()
    embedder = TfidfEmbedder(dim=16, seed=0).fit([doc.full_text for doc in docs])
    vectors = embedder.encode([doc.full_text for doc in docs], kind="document")
    config = HierarchyConfig(builder="kmeans", branching_factor=4, max_leaf_size=10, abstract_terms=3)
    nodes = kmeans_nodes(docs, vectors, config)
    assert nodes == kmeans_nodes(docs, vectors, config)  # deterministic
    tree = ContextTree(nodes)
    assert tree.n_leaves == 60 and {node.doc_id for node in nodes if node.level == 2} == {d.id for d in docs}
    for i, node in enumerate(tree.nodes):
        if tree.is_leaf[i]:
            continue
        children = tree.children(i)
        if tree.is_leaf[children].any():  # a directory of leaves holds at most max_leaf_size
            assert tree.is_leaf[children].all() and len(children) <= 10
        else:
            assert 2 <= len(children) <= 4
        # extractive: every snippet is a title of the corpus, every term a word of it
        snippets, _, terms = node.abstract.partition("Key terms: ")
        titles = {doc.title for doc in docs}
        assert all(part.strip() in titles for part in snippets.rstrip(". ").split("; ") if part.strip())
        words = {word for doc in docs for word in doc.full_text.lower().split()}
        assert terms and all(term in words for term in terms.rstrip(".").split(", "))
    assert {node.uri.rsplit("/", 1)[-1] for node in nodes if node.parent_uri == R} <= {"c0", "c1", "c2", "c3"}
    other_seed = kmeans_nodes(
        docs, vectors, HierarchyConfig(builder="kmeans", branching_factor=4, max_leaf_size=10, seed=1)
    )
    assert len(ContextTree(other_seed)) > 60


def test_small_corpus_is_one_directory_of_leaves() -> None:
    docs = _corpus(5)
    vectors = np.eye(5, dtype=np.float32)
    nodes = kmeans_nodes(docs, vectors, HierarchyConfig(builder="kmeans", max_leaf_size=5))
    assert [node.uri for node in nodes] == [R, *(f"{R}/{doc.id}" for doc in docs)]


def _locomo_like(tmp_path: Path) -> tuple[list[Document], Path]:
    docs = [
        Document(
            id=f"c{c}_s{s}_t{t}",
            text=f"{['hiking', 'cooking'][c - 1]} {['morning', 'evening'][s - 1]} {['rain', 'sun'][t - 1]} talk",
            metadata={"conv": f"c{c}", "session": s},
        )
        for c in (1, 2)
        for s in (1, 2)
        for t in (1, 2)
    ]
    folder = tmp_path / "data"
    folder.mkdir()
    lines = [
        {"conv": "c1", "session": 1, "date": "8 May 2023", "summary": "They planned a hike."},
        {"conv": "c1", "session": 2, "date": "9 May 2023", "summary": "They went hiking."},
        {"conv": "c2", "date": "2024", "summary": "A whole conversation."},
    ]
    (folder / "sessions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return docs, folder


def test_metadata_path_builder_with_summaries(tmp_path: Path) -> None:
    docs, folder = _locomo_like(tmp_path)
    config = StoreConfig.from_dict(
        {
            "hierarchy": {
                "builder": "metadata_path",
                "root_uri": "viking://user/memories",
                "path_keys": ["conv", "session"],
                "summaries_file": "sessions.jsonl",
                "abstract_template": "{date}: {summary}",
                "overview": False,
            }
        }
    )
    embedder = TfidfEmbedder(dim=4).fit([doc.full_text for doc in docs])
    store = build_store(docs, embedder, config, source_folder=folder)
    tree = store.tree
    assert tree is not None
    by_uri = {node.uri: node for node in tree.nodes}
    memories = "viking://user/memories"
    assert by_uri[f"{memories}/c1/1"].abstract == "8 May 2023: They planned a hike."
    assert by_uri[f"{memories}/c1/2"].abstract == "9 May 2023: They went hiking."
    assert by_uri[f"{memories}/c2"].abstract == "2024: A whole conversation."  # a conversation-level record
    # no summary record: extractive (both turns' opening words, then the top TF-IDF terms)
    assert by_uri[f"{memories}/c2/1"].abstract == (
        "cooking morning rain talk; cooking morning sun talk. Key terms: cooking, morning, talk, rain, sun."
    )
    assert by_uri[f"{memories}/c1/1/c1_s1_t2"].doc_id == "c1_s1_t2"
    assert set(tree.context_types) == {"memory"}
    assert int(np.count_nonzero(tree.record_levels == 1)) == 0  # overview off: level-0 records only
    assert config.input_files(folder) == [folder / "sessions.jsonl"]
    # round trip through the store folder, memory-mapped
    store.save(tmp_path / "store")
    loaded = ContextStore.load(tmp_path / "store")
    assert loaded.tree is not None and loaded.tree.nodes == tree.nodes
    assert memory_mapped(loaded.tree.record_vectors) and type(loaded.tree.record_vectors) is np.ndarray
    np.testing.assert_array_equal(loaded.tree.record_vectors, tree.record_vectors)
    assert not list((tmp_path / "store").rglob("*.pkl"))


def test_metadata_path_errors(tmp_path: Path) -> None:
    docs, folder = _locomo_like(tmp_path)
    embedder = TfidfEmbedder(dim=4).fit([doc.full_text for doc in docs])
    base = {
        "builder": "metadata_path",
        "root_uri": "viking://user/memories",
        "path_keys": ["conv", "session"],
    }
    with pytest.raises(TreeError, match=r"document 'c1_s1_t1' has no metadata key 'speaker'"):
        build_store(docs, embedder, StoreConfig.from_dict({"hierarchy": {**base, "path_keys": ["speaker"]}}))
    with pytest.raises(TreeError, match="needs the dataset folder"):
        build_store(
            docs, embedder, StoreConfig.from_dict({"hierarchy": {**base, "summaries_file": "sessions.jsonl"}})
        )
    bad = {**base, "summaries_file": "sessions.jsonl", "abstract_template": "{weather}"}
    with pytest.raises(TreeError, match=r"sessions.jsonl:1: template '\{weather\}' cannot be filled"):
        build_store(docs, embedder, StoreConfig.from_dict({"hierarchy": bad}), source_folder=folder)
    (folder / "broken.jsonl").write_text('{"conv": "c1", "session": 1}\nnot json\n')
    broken = {**base, "summaries_file": "broken.jsonl"}
    with pytest.raises(TreeError, match=r"broken\.jsonl:2: not valid JSON"):
        build_store(docs, embedder, StoreConfig.from_dict({"hierarchy": broken}), source_folder=folder)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"builder": "random"}, r"builder must be one of \['kmeans', 'metadata_path'\]"),
        ({"branching_factor": 1}, r"branching_factor must be an integer in \[2, 256\]"),
        ({"max_leaf_size": 0}, r"max_leaf_size must be an integer in \[1, 1000000\]"),
        ({"root_uri": "http://x"}, "not under an OpenViking root"),
        ({"directory_vector": "mean"}, r"directory_vector must be one of \['abstract', 'centroid'\]"),
        ({"builder": "metadata_path"}, "path_keys must name at least one metadata key"),
        ({"path_keys": ["a"]}, "are for builder metadata_path"),
        ({"colour": "red"}, r"unknown store.hierarchy key\(s\) \['colour'\]; allowed: \['builder'"),
        (
            {"builder": "metadata_path", "path_keys": ["a"], "summaries_file": "/abs/s.jsonl"},
            "relative to the dataset folder",
        ),
        ({"abstract_snippets": 0, "abstract_terms": 0}, "cannot both be 0"),
    ],
)
def test_bad_settings(values: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HierarchyConfig.from_dict(values)


def test_store_config_round_trip_and_cache_key_changes() -> None:
    plain = StoreConfig.from_dict({})
    with_tree = StoreConfig.from_dict({"hierarchy": {"builder": "kmeans", "max_leaf_size": 16}})
    assert plain.hierarchy is None and plain.input_files(None) == []
    assert with_tree.hierarchy == HierarchyConfig(max_leaf_size=16)
    assert StoreConfig.from_dict(json.loads(json.dumps(with_tree.to_dict()))) == with_tree
    assert json.dumps(plain.to_dict(), sort_keys=True) != json.dumps(with_tree.to_dict(), sort_keys=True)
