"""MMR (retrievers/diversity.py, the kernel's ``mmr_lambda``) and the redundancy measure: the order
MMR picks on a hand-made store equals a hand computation; lambda = 1 and the default (off) leave
the ranking as it was; redundancy is the mean pairwise cosine, checked by hand."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from retrievers import DenseRetriever, Document, StoreConfig
from retrievers.builders import build_store
from retrievers.diversity import mmr_order, redundancy
from retrievers.params import ParamError

# a, b: near duplicates close to the query; c: a little less relevant, different; d: far
VECTORS = {
    "alpha": [1.0, 0.0, 0.0],
    "bravo": [0.99, 0.14106736, 0.0],
    "charlie": [0.8, 0.0, 0.6],
    "delta": [0.0, 1.0, 0.0],
    "query": [1.0, 0.1, 0.3],
}
NAMES = {"a": "alpha", "b": "bravo", "c": "charlie", "d": "delta", "query": "query"}


class TableEmbedder:
    """Each text's vector from :data:`VECTORS` (texts are the keys)."""

    name = "table-embedder"
    dim = 3

    def encode(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        rows = np.asarray([VECTORS[text.strip()] for text in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def store():  # type: ignore[no-untyped-def]
    documents = [Document(id=name, text=NAMES[name]) for name in ("a", "b", "c", "d")]
    return build_store(documents, TableEmbedder(), StoreConfig())


def test_mmr_picks_the_different_document_before_the_near_duplicate(store) -> None:  # type: ignore[no-untyped-def]
    plain = DenseRetriever(store, TableEmbedder()).retrieve("query", 3)
    assert [r.doc_id for r in plain] == ["b", "a", "c"]
    diverse = DenseRetriever(store, TableEmbedder(), mmr_lambda=0.5, mmr_depth=4).retrieve("query", 3)
    # by hand: relevance = the cosine to the query min-max normalised over the 4 candidates; b is
    # first; then each pick maximises 0.5 * relevance - 0.5 * (max cosine to those chosen)
    unit = {k: np.asarray(VECTORS[v]) / np.linalg.norm(VECTORS[v]) for k, v in NAMES.items()}
    rel = {k: float(unit[k] @ unit["query"]) for k in "abcd"}
    low, high = min(rel.values()), max(rel.values())
    norm = {k: (v - low) / (high - low) for k, v in rel.items()}
    chosen = ["b"]
    while len(chosen) < 3:
        left = [k for k in "abcd" if k not in chosen]
        value = {k: 0.5 * norm[k] - 0.5 * max(float(unit[k] @ unit[s]) for s in chosen) for k in left}
        chosen.append(max(left, key=lambda k: (value[k], -"abcd".index(k))))
    assert [r.doc_id for r in diverse] == chosen
    assert chosen == ["b", "c", "a"]  # the near duplicate a is pushed below c (margin 0.09 vs 0.003)
    assert [r.score for r in diverse] == [3.0, 2.0, 1.0]
    assert diverse[0].provenance["pre_mmr_score"] == pytest.approx(plain[0].score)


def test_lambda_one_keeps_the_relevance_order(store) -> None:  # type: ignore[no-untyped-def]
    plain = DenseRetriever(store, TableEmbedder()).retrieve("query", 4)
    same = DenseRetriever(store, TableEmbedder(), mmr_lambda=1.0).retrieve("query", 4)
    assert [r.doc_id for r in same] == [r.doc_id for r in plain]


def test_mmr_needs_vectors() -> None:
    from retrievers import BM25Retriever

    lexical = build_store([Document(id="a", text="alpha beta")], None, StoreConfig())
    with pytest.raises(ParamError, match="mmr_lambda"):
        BM25Retriever(lexical, None, mmr_lambda=0.5)


def test_mmr_order_by_hand() -> None:
    vectors = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    # lambda 0.3: second pick: the duplicate: 0.3 * 0.5 - 0.7 * 1 < the orthogonal: 0.3 * 0 - 0
    assert mmr_order(vectors, [1.0, 0.5, 0.0], 0.3, 3, ["x", "dup", "other"]) == ["x", "other", "dup"]
    assert mmr_order(vectors, [1.0, 0.5, 0.0], 1.0, 2, ["x", "dup", "other"]) == ["x", "dup"]
    with pytest.raises(ValueError, match="mmr_lambda must be in"):
        mmr_order(vectors, [1.0, 0.5, 0.0], 1.5, 2, ["x", "dup", "other"])


def test_redundancy_is_the_mean_pairwise_cosine() -> None:
    vectors = [[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]]
    # pairs: (0,1) 1, (0,2) 0, (1,2) 0
    assert redundancy(vectors) == pytest.approx(1 / 3)
    assert redundancy([[1.0, 0.0]]) == 0.0


def test_run_redundancy_is_the_mean_over_queries_of_each_top_k(store) -> None:  # type: ignore[no-untyped-def]
    from retrievers.types import RetrievalResult
    from viking_eval.run.redundancy import Redundancy

    retriever = DenseRetriever(store, TableEmbedder())
    collected = Redundancy("dense", 2)
    collected.add(retriever, [RetrievalResult(doc_id="a", score=2.0), RetrievalResult(doc_id="b", score=1.0)])
    collected.add(retriever, [RetrievalResult(doc_id="a", score=2.0), RetrievalResult(doc_id="d", score=1.0)])
    collected.add(retriever, [RetrievalResult(doc_id="c", score=1.0)])  # one result: 0
    cos_ab = 0.99 / float(np.linalg.norm(VECTORS["bravo"]))
    assert collected.metrics() == {"redundancy@2": pytest.approx((cos_ab + 0.0 + 0.0) / 3)}
    assert Redundancy("dense", None).metrics() == {}


@pytest.mark.needs_data
def test_redundancy_is_reported_with_the_metrics_when_asked(data_env, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Through the experiment loop (as ``python -m viking_eval experiment=smoke`` runs it)."""
    import json

    from conftest import smoke_settings

    from viking_eval.run.experiment import run_experiment

    run_experiment(smoke_settings("run.latency.n_queries=0"), tmp_path)
    # the same folder again, now asking for redundancy: the finished results must not be resumed
    run_experiment(smoke_settings("run.latency.n_queries=0", "run.redundancy=5"), tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for name in ("bm25", "dense"):  # both searched a store with TF-IDF vectors
        assert 0.0 < metrics["retrievers"][name]["metrics"]["redundancy@5"] < 1.0
