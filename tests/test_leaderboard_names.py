"""Leaderboard rows are named by what they ran (issue 25 item 7): the retriever and the embedder
(``dense · tfidf``), so two runs that differ only by embedder are told apart by name, not only by
the config hash; BM25, which never reads the embedder, is named ``bm25`` alone."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import run_cli

from viking_eval.benchmark.leaderboard import embedder_label, leaderboard_name, main

SMOKE = ["experiment=smoke", "run.latency.n_queries=0"]


@pytest.fixture(scope="module")
def two_embedders(shared_datasets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two finished ADI runs through the CLI: BM25 + dense with TF-IDF, and with the static embedder."""
    root = tmp_path_factory.mktemp("names")
    for embedder in ("tfidf", "static"):
        done = run_cli(
            *SMOKE,
            f"embedder={embedder}",
            f"hydra.run.dir={root / embedder}",
            env={"VIKING_EVAL_DATA": str(shared_datasets)},
        )
        assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.mark.needs_data
def test_runs_differing_by_embedder_have_distinct_row_names(two_embedders: Path, tmp_path: Path) -> None:
    assert main([str(two_embedders), "--csv", str(tmp_path / "lb.csv")]) == 0
    with open(tmp_path / "lb.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    by_folder = {(row["retriever"], Path(row["folder"]).name): row for row in rows}
    assert set(by_folder) == {
        ("bm25", "tfidf"),
        ("bm25", "static"),
        ("dense · tfidf", "tfidf"),
        ("dense · tokenlearn-static-model", "static"),
    }
    dense = [row for row in rows if row["retriever"].startswith("dense")]
    assert len({row["retriever"] for row in dense}) == 2
    assert dense[0]["nDCG@10"] != dense[1]["nDCG@10"]  # they are different results
    assert len({row["config"] for row in rows}) == 4  # the config hash column is kept
    # BM25 reads no embedding: the same numbers whatever the embedder, so the same name
    bm25 = [row for row in rows if row["retriever"] == "bm25"]
    assert bm25[0]["nDCG@10"] == bm25[1]["nDCG@10"]


def test_embedder_label_is_the_model_id_else_the_class() -> None:
    minilm = {
        "_target_": "retrievers.embedders.SentenceTransformerEmbedder",
        "model_name": "sentence-transformers/all-MiniLM-L6-v2",
    }
    assert embedder_label(minilm) == "all-MiniLM-L6-v2"
    assert embedder_label(
        {"_target_": "retrievers.embedders.OpenAIEmbedder", "model": "text-embedding-3-small"}
    ) == ("text-embedding-3-small")
    assert embedder_label({"_target_": "retrievers.embedders.TfidfEmbedder", "dim": 256}) == "tfidf"
    assert embedder_label(None) is None
    config = {
        "embedder": minilm,
        "retrievers": {
            "dense": {"_target_": "retrievers.baselines.DenseRetriever"},
            "bm25": {"_target_": "retrievers.baselines.BM25Retriever"},
        },
    }
    assert leaderboard_name("dense", None, config) == "dense · all-MiniLM-L6-v2"
    assert leaderboard_name("dense", "static", config) == "dense@static · all-MiniLM-L6-v2"
    assert leaderboard_name("bm25", "static", config) == "bm25@static"
    assert leaderboard_name("dense", None, {"retrievers": config["retrievers"]}) == "dense"
