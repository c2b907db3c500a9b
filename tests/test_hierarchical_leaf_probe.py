"""The leaf-directory probe of the hierarchical retriever (``leaf_probe: P``,
retrievers/hierarchical/leaf_probe.py): with every leaf directory probed it is exact search
(checked against a float64 brute force), its members' scores do not depend on how many are
scored at once (unlike BLAS's products), its propagation is the traversal's formula, it keeps to
the retriever's scope, batch equals single, bad values are refused by key, and with the probe off
(the default) the retriever's results are the ones recorded before the probe existed."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from conftest import RowEmbedder

from retrievers import Document, StoreConfig
from retrievers.builders import build_store
from retrievers.hierarchical import HierarchicalRetriever
from retrievers.hierarchical.directory_index import DirectoryHNSW, DirectoryIVF
from retrievers.hierarchical.leaf_probe import row_dots
from retrievers.hierarchical.scoring import NodeScores
from retrievers.params import ParamError
from retrievers.store import ContextStore
from retrievers.types import RetrievalResult

WORDS = [f"{a}{b}{c}" for a in "bdkmpst" for b in "aeiou" for c in "lnrx"]
N_DOCS = 2000
TREE = {
    "builder": "kmeans",
    "kmeans": "faiss",
    "max_leaf_size": 16,
    "branching_factor": 4,
    "directory_vector": "centroid",
    "overview": False,
}


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def synthetic() -> tuple[ContextStore, RowEmbedder, np.ndarray, list[str]]:
    return make_synthetic()


def make_synthetic() -> tuple[ContextStore, RowEmbedder, np.ndarray, list[str]]:
    """A store of N_DOCS clustered 32-d documents with a faiss k-means tree, its embedder, the
    query vectors and the document ids by row."""
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((20, 32))
    labels = rng.integers(20, size=N_DOCS)
    vectors = _unit(centres[labels] + 0.4 * rng.standard_normal((N_DOCS, 32)))
    queries = _unit(vectors + 0.2 * rng.standard_normal((N_DOCS, 32)))
    ids = rng.permutation(N_DOCS)
    documents = [
        Document(id=f"d{ids[row]:05d}", text=" ".join(rng.choice(WORDS, size=10).tolist()), title=f"t{row}")
        for row in range(N_DOCS)
    ]
    embedder = RowEmbedder(documents, vectors, queries)
    config = StoreConfig.from_dict({"hierarchy": TREE, "timestamps": None})
    store = build_store(documents, embedder, config)
    return store, embedder, queries, [doc.id for doc in documents]


QUERIES = [f"q{row}" for row in range(0, N_DOCS, 41)]


def brute_force(queries: np.ndarray, ids: list[str], vectors: np.ndarray, k: int) -> list[list[str]]:
    """Each query's top k documents by float64 inner product, ties by id."""
    order_ids = np.asarray(ids)
    tops = []
    for query in queries:
        scores = vectors.astype(np.float64) @ query.astype(np.float64)
        tops.append(order_ids[np.lexsort((order_ids, -scores))[:k]].tolist())
    return tops


def ranked(results: Sequence[Sequence[RetrievalResult]]) -> list[list[tuple[str, float]]]:
    return [[(r.doc_id, r.score) for r in rs] for rs in results]


def test_probing_every_leaf_directory_is_exact_search(synthetic: Any) -> None:
    store, embedder, queries, ids = synthetic
    retriever = HierarchicalRetriever(store, embedder, alpha=1.0, leaf_probe=1_000_000)
    found = retriever.retrieve_batch(QUERIES, 10)
    rows = [int(q[1:]) for q in QUERIES]
    truth = brute_force(queries[rows], ids, embedder.vectors, 10)
    assert [[r.doc_id for r in rs] for rs in found] == truth
    for rs, row in zip(found, rows, strict=True):
        expected = (
            np.asarray(store.embeddings)[[store.row_of[r.doc_id] for r in rs]].astype(np.float64)
            @ queries[row]
        )
        np.testing.assert_allclose([r.score for r in rs], expected, rtol=0, atol=1e-6)
        assert rs[0].provenance["found_by"] == "leaf_probe"
        assert (
            rs[0].provenance["stats"]["leaf_directories_probed"]
            == retriever.index.leaf_directories.nodes.size
        )  # type: ignore[union-attr]
    # the default descent does not find them all on these data: the probe is what changes it
    default = HierarchicalRetriever(store, embedder, alpha=1.0).retrieve_batch(QUERIES, 10)
    assert [[r.doc_id for r in rs] for rs in default] != truth


def test_ivf_probing_every_list_equals_the_exact_probe(synthetic: Any) -> None:
    store, embedder, _, _ = synthetic
    common = {"alpha": 0.7, "leaf_probe": 12}
    exact = HierarchicalRetriever(store, embedder, **common)
    ivf = HierarchicalRetriever(store, embedder, **common, directory_search="ivf", directory_nprobe=100_000)
    assert ivf.index.leaf_directories is not None
    assert isinstance(ivf.index.leaf_directories.approximate, DirectoryIVF)
    assert ivf.index.record_ivf is None  # the probe replaces the search over every record
    assert ranked(exact.retrieve_batch(QUERIES, 10)) == ranked(ivf.retrieve_batch(QUERIES, 10))


def test_hnsw_ranking_finds_the_exact_probes_directories(synthetic: Any) -> None:
    store, embedder, _, _ = synthetic
    common = {"alpha": 0.7, "leaf_probe": 12}
    exact = ranked(HierarchicalRetriever(store, embedder, **common).retrieve_batch(QUERIES, 10))
    hnsw = HierarchicalRetriever(store, embedder, **common, directory_search="hnsw")
    assert hnsw.index.leaf_directories is not None
    assert isinstance(hnsw.index.leaf_directories.approximate, DirectoryHNSW)
    found = ranked(hnsw.retrieve_batch(QUERIES, 10))
    # the graph walk finds the best 12 leaf directories for (nearly) every query; same scores
    assert sum(a == b for a, b in zip(exact, found, strict=True)) >= 0.9 * len(QUERIES)
    # built on one thread: another retriever over the same tree gives the same rankings
    again = HierarchicalRetriever(store, embedder, **common, directory_search="hnsw")
    assert ranked(again.retrieve_batch(QUERIES, 10)) == found


def test_row_dots_do_not_depend_on_the_other_rows() -> None:
    rng = np.random.default_rng(3)
    matrix = _unit(rng.standard_normal((5000, 384)))
    vector = _unit(rng.standard_normal((1, 384)))[0]
    rows = rng.permutation(5000)[:3001].astype(np.int64)
    together = row_dots(matrix, rows, vector)
    pieces, start, sizes = [], 0, [1, 3, 16, 5, 32, 7, 29]
    while start < rows.size:
        size = sizes[len(pieces) % len(sizes)]
        pieces.append(row_dots(matrix, rows[start : start + size], vector))
        start += size
    assert together.tobytes() == np.concatenate(pieces).tobytes()  # bit for bit
    # BLAS's product of the gathered block is what differs (the reason for row_dots)
    blas_pieces = [
        (matrix[rows[s : s + n]] @ vector).astype(np.float64)
        for s, n in zip(np.cumsum([0, *[p.size for p in pieces[:-1]]]), [p.size for p in pieces], strict=True)
    ]
    np.testing.assert_allclose(together, np.concatenate(blas_pieces), atol=1e-6)
    # the numpy fallback (a matrix faiss cannot read) is also per row
    as64 = matrix.astype(np.float64)
    np.testing.assert_allclose(row_dots(as64, rows, vector), together, atol=1e-6)
    assert row_dots(as64, rows[:10], vector).tobytes() == row_dots(as64, rows, vector)[:10].tobytes()


def test_probe_scores_equal_the_descents_scores_bit_for_bit(synthetic: Any) -> None:
    store, embedder, queries, _ = synthetic
    retriever = HierarchicalRetriever(store, embedder, leaf_probe=9)
    index = retriever.index
    leaf_directories = index.leaf_directories
    assert leaf_directories is not None
    scope = retriever._scope(None)
    for row in (0, 700, 1999):
        probe = index.probe(queries[row], scope, 9, 16)
        assert probe.directories.size == 9 and probe.members.size > 9 * 8
        # each directory popped on its own, as the descent scores its children
        scores = NodeScores(index, scope)
        for position, directory in enumerate(probe.directories.tolist()):
            children = index.tree.children(directory)
            index.score_missing(queries[row], children, scores)
            mine = probe.members[probe.owners == position]
            assert mine.tolist() == sorted(children.tolist())
            assert scores.get(mine).tobytes() == probe.vector_scores[probe.owners == position].tobytes()
        index.score_missing(queries[row], probe.directories, scores)
        assert scores.get(probe.directories).tobytes() == probe.directory_scores.tobytes()
        # the best directories by score (desc), ties by node
        assert np.all(np.diff(probe.directory_scores) <= 0)


def test_propagation_is_the_traversals_formula(synthetic: Any) -> None:
    store, embedder, queries, _ = synthetic
    alpha = 0.3
    retriever = HierarchicalRetriever(store, embedder, alpha=alpha, leaf_probe=6, max_convergence_rounds=1)
    leaf_directories = retriever.index.leaf_directories
    assert leaf_directories is not None
    row = 123
    probe = retriever.index.probe(queries[row], retriever._scope(None), 6, 16)
    expected = {
        store.documents[int(retriever.index.leaf_rows[member])].id: alpha * float(score)
        + (1.0 - alpha) * float(probe.directory_scores[owner])
        for member, score, owner in zip(
            probe.members.tolist(), probe.vector_scores.tolist(), probe.owners.tolist(), strict=True
        )
    }
    results = retriever.retrieve(f"q{row}", 10)
    probed = [r for r in results if r.provenance["found_by"] == "leaf_probe"]
    assert len(probed) >= 5
    for result in probed:
        assert result.score == expected[result.doc_id]  # the same float operations, bit for bit
    best = sorted(expected.items(), key=lambda item: (-item[1], item[0]))[:10]
    assert [(r.doc_id, r.score) for r in results][: len(probed)] == best[: len(probed)]


def test_the_probe_keeps_to_the_scope(synthetic: Any) -> None:
    store, embedder, queries, ids = synthetic
    allowed = sorted(ids)[::3]
    retriever = HierarchicalRetriever(
        store, embedder, alpha=1.0, leaf_probe=1_000_000, filters={"doc_ids": allowed}
    )
    found = retriever.retrieve_batch(QUERIES, 10)
    keep = np.isin(np.asarray(ids), allowed)
    rows = [int(q[1:]) for q in QUERIES]
    kept_ids = [i for i, k in zip(ids, keep, strict=True) if k]
    truth = brute_force(queries[rows], kept_ids, embedder.vectors[keep], 10)
    assert [[r.doc_id for r in rs] for rs in found] == truth


@pytest.mark.parametrize("params", [{"leaf_probe": 5}, {"leaf_probe": 5, "directory_search": "ivf"}])
def test_batch_equals_single(synthetic: Any, params: dict[str, Any]) -> None:
    store, embedder, _, _ = synthetic
    retriever = HierarchicalRetriever(store, embedder, query_batch_size=7, **params)
    single = [retriever.retrieve(query, 10) for query in QUERIES]
    assert retriever.retrieve_batch(QUERIES, 10) == single


def test_bad_values_name_the_key(synthetic: Any) -> None:
    store, embedder, _, _ = synthetic

    class Reranker:
        def rerank(self, query: str, candidates: Any, texts: Any) -> Any:
            return candidates

    for bad in (-1, 1.5, "all", True):
        with pytest.raises(ParamError, match="leaf_probe"):
            HierarchicalRetriever(store, embedder, leaf_probe=bad)
    with pytest.raises(ParamError, match="directory_search"):
        HierarchicalRetriever(store, embedder, directory_search="hnsw")
    with pytest.raises(ParamError, match=r"leaf_probe.*reranker"):
        HierarchicalRetriever(store, embedder, leaf_probe=4, reranker=Reranker())
    # mode quick does not call the reranker inside the traversal: allowed
    HierarchicalRetriever(store, embedder, leaf_probe=4, reranker=Reranker(), mode="quick")


def _digest(results: Sequence[Sequence[RetrievalResult]]) -> str:
    text = repr([[(r.doc_id, r.score.hex()) for r in rs] for rs in results])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: the rankings (ids and float.hex() scores) of the retriever without the probe on the fixture's
#: store, recorded with the code before leaf_probe existed (commit fd0b181)
DEFAULT_DIGESTS = {
    "default": "ade7f2b3e9ab2168",
    "alpha1_rounds20": "56d6cf55048394d5",
    "ivf": "d7f362a3cc2629c4",
}
OFF_PARAMS: dict[str, dict[str, Any]] = {
    "default": {},
    "alpha1_rounds20": {"alpha": 1.0, "max_convergence_rounds": 20, "global_search_levels": [0, 1, 2]},
    "ivf": {"directory_search": "ivf", "directory_nprobe": 1, "global_search_topk": 5},
}


@pytest.mark.parametrize("name", sorted(OFF_PARAMS))
def test_probe_off_leaves_the_rankings_as_they_were(synthetic: Any, name: str) -> None:
    store, embedder, _, _ = synthetic
    retriever = HierarchicalRetriever(store, embedder, **OFF_PARAMS[name])
    assert retriever.index.leaf_directories is None and not retriever.index.rowwise
    found = retriever.retrieve_batch(QUERIES, 10)
    assert "leaf_directories_probed" not in found[0][0].provenance["stats"]
    assert _digest(found) == DEFAULT_DIGESTS[name]
