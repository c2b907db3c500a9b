"""Incremental stores (issue 29): the tree, faiss indexes and durable versions after changes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from incremental_cases import HashEmbedder, make_doc

from retrievers import Document, StoreConfig
from retrievers.builders import build_store
from retrievers.store import ChangeSettings, ContextStore, ContextTree, StoreVersions

EMBEDDER = HashEmbedder()
TREE = StoreConfig.from_dict(
    {"hierarchy": {"max_leaf_size": 4, "branching_factor": 3, "directory_vector": "centroid"}}
)


def _validated(tree: ContextTree) -> None:
    """The tree a change made column by column equals the tree the validating constructor
    makes from its nodes (structure arrays, records)."""
    again = ContextTree(
        list(tree.nodes),
        record_nodes=tree.record_nodes,
        record_levels=tree.record_levels,
        record_vectors=tree.record_vectors,
    )
    assert list(again.uris) == list(tree.uris)
    for name in ("parents", "child_ptr", "child_index", "depth"):
        assert np.array_equal(getattr(again, name), getattr(tree, name)), name
    assert np.array_equal(again.levels, tree.levels) and np.array_equal(
        again.context_codes, tree.context_codes
    )


def _leaf_docs(store: ContextStore) -> list[str]:
    tree = store.tree
    assert tree is not None
    return sorted(str(tree.doc_ids[i]) for i in np.flatnonzero(tree.is_leaf))


def test_tree_insertion_puts_documents_under_their_nearest_directory() -> None:
    rng = np.random.default_rng(0)
    store = build_store([make_doc(rng, n) for n in range(40)], EMBEDDER, TREE)
    new = [make_doc(rng, n) for n in range(40, 44)]
    changed = store.add(new, EMBEDDER, settings=ChangeSettings(tree_rebuild_fraction=10))
    tree = changed.tree
    assert tree is not None and tree.info["changes_since_build"] == 4
    _validated(tree)
    assert _leaf_docs(changed) == sorted(changed.doc_ids)
    vectors = np.asarray(changed.embeddings)
    old = store.tree
    assert old is not None and tree.info["splits_since_build"] == 0
    level0 = {
        int(n): v
        for n, lvl, v in zip(old.record_nodes, old.record_levels, old.record_vectors, strict=True)
        if lvl == 0
    }
    for doc in new:  # the descent, by hand, over the tree before the change
        vector = vectors[changed.row_of[doc.id]]
        node = int(old.roots[0])
        while True:
            below = [int(c) for c in old.children(node) if not old.is_leaf[c]]
            if not below:
                break
            scores = [float(level0[c] @ vector) for c in below]
            node = below[int(np.argmax(scores))]
        assert f"{old.uris[node]}/{doc.id}" in tree.index_of
    # centroids are the normalised sums of the leaves below (as a build computes them)
    below = tree.subtree_leaves()
    rows = tree.leaf_rows(changed.row_of)
    for node, level, vector in zip(tree.record_nodes, tree.record_levels, tree.record_vectors, strict=True):
        if level != 0:  # level 1: the overview embedded
            continue
        centre = vectors[rows[np.asarray(below[int(node)])]].astype(np.float64).sum(axis=0)
        assert np.allclose(vector, centre / np.linalg.norm(centre), atol=1e-6)


def test_a_crowded_directory_splits_and_the_threshold_rebuilds() -> None:
    rng = np.random.default_rng(1)
    store = build_store([make_doc(rng, n) for n in range(20)], EMBEDDER, TREE)
    twin = store.documents[0]
    crowd = [Document(f"z{n:03d}", twin.text + " apple" * (n % 3), metadata={}) for n in range(12)]
    changed = store.add(
        crowd, EMBEDDER, settings=ChangeSettings(tree_rebuild_fraction=10, tree_split_factor=2)
    )
    tree = changed.tree
    assert tree is not None and tree.info["splits_since_build"] >= 1
    _validated(tree)
    assert _leaf_docs(changed) == sorted(changed.doc_ids)
    leaves_per_dir = np.bincount(tree.parents[tree.is_leaf], minlength=len(tree))
    assert leaves_per_dir.max() <= 2 * 4
    # past the threshold (5 changes > 0.2 x 20 documents) the tree is built again
    rebuilt = store.add(crowd[:5], EMBEDDER, settings=ChangeSettings(tree_rebuild_fraction=0.2))
    assert rebuilt.tree is not None and rebuilt.tree.info["changes_since_build"] == 0
    fresh = build_store([*store.documents, *crowd[:5]], EMBEDDER, TREE)
    assert rebuilt.tree.uris == fresh.tree.uris  # type: ignore[union-attr]
    # deleting documents removes leaves, and directories left empty
    emptied = changed.delete([doc.id for doc in crowd], settings=ChangeSettings(tree_rebuild_fraction=10))
    assert _leaf_docs(emptied) == sorted(emptied.doc_ids)
    assert emptied.tree is not None
    _validated(emptied.tree)
    metadata_tree = StoreConfig.from_dict({"hierarchy": {"builder": "metadata_path", "path_keys": ["conv"]}})
    by_conv = build_store([make_doc(rng, n) for n in range(12)], EMBEDDER, metadata_tree)
    grown = by_conv.add([Document("x1", "new conversation", metadata={"conv": "c9"})], EMBEDDER)
    assert grown.tree is not None and "viking://resources/c9/x1" in grown.tree.index_of
    _validated(grown.tree)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf_flat", "ivf_pq"])
def test_faiss_indexes_follow_the_rows(kind: str) -> None:
    rng = np.random.default_rng(2)
    settings = {"kind": kind, "nlist": 4} if kind.startswith("ivf") else {"kind": kind}
    if kind == "ivf_pq":
        settings.update(pq_m=4, pq_bits=4)
    config = StoreConfig.from_dict({"vector_index": settings})
    documents = [make_doc(rng, n) for n in range(300)]
    store = build_store(documents, EMBEDDER, config)
    appended = store.add([make_doc(rng, n) for n in range(300, 310)], EMBEDDER)
    shifted = appended.add([Document("a" + doc.id, doc.text) for doc in documents[:5]], EMBEDDER).delete(
        ["d00007"]
    )
    how = {key for key in shifted.change_seconds if key.startswith("vector_index_")}
    expected = {"flat": "rebuilt", "hnsw": "rebuilt", "ivf_flat": "relabelled", "ivf_pq": "relabelled"}[kind]
    assert how == {f"vector_index_{expected}"}
    if kind == "hnsw":
        assert "vector_index_appended" in appended.change_seconds
    queries = EMBEDDER.encode(["apple banana", "kilo lima", "zulu"], kind="query")
    knobs = (
        {"nprobe": 4, "refine_factor": 100}
        if kind == "ivf_pq"
        else {"nprobe": 4}
        if kind.startswith("ivf")
        else {}
    )
    if kind == "hnsw":
        knobs = {"ef_search": 400}
    for changed in (appended, shifted):
        got = changed.vectors.search(queries, 10, **knobs)  # type: ignore[call-arg]
        want = changed.exact_vectors.search(queries, 10)
        for (gs, gr), (ws, wr) in zip(got, want, strict=True):
            assert np.array_equal(gr, wr) and np.array_equal(gs, ws)


def _versions(tmp_path: Path) -> tuple[StoreVersions, dict[str, Document]]:
    rng = np.random.default_rng(3)
    documents = {doc.id: doc for doc in (make_doc(rng, n) for n in range(30))}
    store = build_store(list(documents.values()), EMBEDDER, TREE)
    return StoreVersions.create(tmp_path / "versions", store), documents


def test_versions_are_published_one_by_one_and_stay_loadable(tmp_path: Path) -> None:
    versions, _ = _versions(tmp_path)
    rng = np.random.default_rng(4)
    first = versions.load()
    second = versions.add([make_doc(rng, 100)], EMBEDDER)
    third = versions.delete(["d00002"])
    assert versions.current_version == 3
    assert [v.content_key for v in versions.history()] == [
        first.content_key,
        second.content_key,
        third.content_key,
    ]
    assert versions.load(1).content_key == first.content_key
    assert list(versions.load(2).doc_ids) == list(second.doc_ids)
    assert "d00002" not in versions.load().row_of
    with pytest.raises(ValueError, match="the next version is 4"):
        versions.commit(second)


def test_a_failure_between_writes_leaves_the_previous_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions, _ = _versions(tmp_path)
    before = versions.load().content_key
    import retrievers.store.versions as module

    def fail(folder: Path) -> None:
        raise OSError("disk full (injected)")

    monkeypatch.setattr(module, "_flush_tree", fail)
    rng = np.random.default_rng(5)
    with pytest.raises(OSError, match="injected"):
        versions.add([make_doc(rng, 200)], EMBEDDER)
    monkeypatch.undo()
    assert versions.current_version == 1 and versions.load().content_key == before
    assert (tmp_path / "versions" / ".v000002.partial").is_dir()  # the interrupted write
    versions.add([make_doc(rng, 200)], EMBEDDER)  # the next commit clears it
    assert versions.current_version == 2 and not (tmp_path / "versions" / ".v000002.partial").exists()


KILLER = """
import os, signal, sys
import numpy as np
sys.path.insert(0, {tests!r})
from incremental_cases import HashEmbedder, make_doc
import retrievers.store.versions as module
from retrievers.store import StoreVersions
stage = sys.argv[1]
real_rename, real_replace = os.rename, os.replace
def kill(*args):
    os.kill(os.getpid(), signal.SIGKILL)
if stage == "flush":
    module._flush_tree = kill
elif stage == "rename":
    module.os.rename = kill
elif stage == "pointer":
    module.os.replace = kill
versions = StoreVersions.open({root!r})
versions.add([make_doc(np.random.default_rng(9), 300 + len(stage))], HashEmbedder())
print("not killed")
"""


@pytest.mark.parametrize("stage", ["flush", "rename", "pointer"])
def test_a_killed_update_leaves_the_previous_version_loadable(tmp_path: Path, stage: str) -> None:
    versions, documents = _versions(tmp_path)
    before = versions.load().content_key
    script = KILLER.format(tests=str(Path(__file__).parent), root=str(tmp_path / "versions"))
    done = subprocess.run(
        [sys.executable, "-c", script, stage], capture_output=True, text=True, env={**os.environ}, timeout=120
    )
    assert done.returncode == -9, done.stderr[-2000:]  # SIGKILL, mid-commit
    reopened = StoreVersions.open(tmp_path / "versions")
    assert reopened.current_version == 1
    store = reopened.load()
    assert store.content_key == before and sorted(store.doc_ids) == sorted(documents)
    after = reopened.add([make_doc(np.random.default_rng(10), 400)], EMBEDDER)
    assert reopened.current_version == 2 and "d00400" in after.row_of
