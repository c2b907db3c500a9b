"""The hierarchical retriever in the harness: configs compose and validate, a run writes the
traversal stats into metrics.json, and a multirun over alpha x max_convergence_rounds puts the
nodes-scored fraction next to quality in sweep.csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import smoke_multirun, smoke_settings
from hydra import compose, initialize_config_dir

from retrievers.types import RetrievalResult
from viking_eval.config import ConfigError, load_settings
from viking_eval.run.evaluate import provenance_stats
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
TREE = ["store=kmeans_tree", "store.hierarchy.max_leaf_size=8", "store.hierarchy.branching_factor=4"]


def test_provenance_stats_by_hand() -> None:
    def results(stats: dict[str, object] | None) -> list[RetrievalResult]:
        return [RetrievalResult("d", 1.0, provenance={} if stats is None else {"stats": stats})]

    run = {
        "q1": results({"popped": 2, "fraction": 0.5, "stop": "converged", "flag": True}),
        "q2": results({"popped": 4, "fraction": 0.25, "stop": "exhausted"}),
        "q3": results({"popped": 6, "fraction": float("nan"), "stop": "converged"}),
        "q4": [],  # no results: no stats
        "q5": results(None),
    }
    assert provenance_stats(run) == {
        "n_queries": 3,
        "popped": 4.0,  # (2 + 4 + 6) / 3
        "fraction": 0.375,  # non-finite values are left out: (0.5 + 0.25) / 2
        "stop": {"converged": 2, "exhausted": 1},
    }
    assert provenance_stats({"q": results(None)}) == {}


@pytest.mark.needs_data
def test_run_writes_traversal_stats(data_env: Path, tmp_path: Path) -> None:
    settings = smoke_settings(
        *TREE, "+retriever@retrievers.hier=hierarchical", "run.latency.n_queries=3", "run.latency.warmup=1"
    )
    run_experiment(settings, tmp_path / "run")
    document = json.loads((tmp_path / "run" / "metrics.json").read_text())
    hier = document["retrievers"]["hier"]
    assert "stats" not in document["retrievers"]["bm25"]
    stats = hier["stats"]
    assert stats["n_queries"] == hier["n_queries"] - hier["n_queries_without_results"]
    assert 0 < stats["nodes_scored_fraction"] <= 1 and stats["directories_popped"] >= 1
    assert sum(stats["stop_reason"].values()) == stats["n_queries"]
    assert 0.1 < hier["metrics"]["nDCG@10"] <= 1
    environment = json.loads((tmp_path / "run" / "environment.json").read_text())
    assert environment["store_build_seconds"]["hierarchy"] > 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "+retriever@retrievers.hier=hierarchical retrievers.hier.alpha=2",
            r"retrievers.hier: alpha must be a number in \[0, 1\], got 2$",
        ),
        (
            "+retriever@retrievers.hier=hierarchical +retrievers.hier.return_directories=true",
            r"unknown key\(s\) \['return_directories'\]",  # a find()/search() argument now
        ),
        (
            "+retriever@retrievers.hier=hierarchical +retrievers.hier.rerank_depth=20",
            "retrievers.hier: rerank_depth does not apply to the hierarchical retriever",
        ),
        ("+retriever@retrievers.hier=hierarchical +retrievers.hier.beam=3", r"unknown key\(s\) \['beam'\]"),
        ("store.hierarchy.branching_factor=1", r"branching_factor must be an integer in \[2, 256\]"),
        ("+store.hierarchy.depth=3", r"unknown store.hierarchy key\(s\) \['depth'\]"),
    ],
)
def test_bad_settings_stop_the_run_at_start(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        smoke_settings(*TREE, *override.split())


@pytest.mark.parametrize("experiment", ["hierarchical_scifact", "hierarchical_locomo", "hierarchical_sweep"])
def test_experiments_compose(experiment: str) -> None:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        settings = load_settings(compose(config_name="config", overrides=[f"experiment={experiment}"]))
    assert settings.store.hierarchy is not None
    assert any(spec.target == "retrievers.hierarchical.HierarchicalRetriever" for spec in settings.retrievers)


@pytest.mark.slow
@pytest.mark.needs_data
def test_multirun_sweep_table_shows_nodes_scored(data_env: Path, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    done = smoke_multirun(
        sweep_dir,
        *TREE,
        "+retriever@retrievers.hier=hierarchical",
        "retrievers.hier.alpha=0,1",
        "retrievers.hier.max_convergence_rounds=1,3",
        "run.latency.n_queries=3",
        "run.latency.warmup=1",
        "sweep.objective=hier.nDCG@10",
    )  # the test's own cache and VIKING_EVAL_DATA (data_env) are in os.environ
    assert done.returncode == 0, done.stderr[-3000:]
    with open(sweep_dir / "sweep.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row["retriever"] == "hier"]
    assert sorted(
        (row["retrievers.hier.alpha"], row["retrievers.hier.max_convergence_rounds"]) for row in rows
    ) == [
        ("0", "1"),
        ("0", "3"),
        ("1", "1"),
        ("1", "3"),
    ]
    fractions = {
        row["retrievers.hier.max_convergence_rounds"]: float(row["stats.nodes_scored_fraction"])
        for row in rows
        if row["retrievers.hier.alpha"] == "1"
    }
    assert 0 < fractions["1"] <= fractions["3"] <= 1  # more patience, more nodes scored
    assert all(row["stats.directories_popped"] for row in rows)
    assert (sweep_dir / "best.yaml").is_file()


@pytest.mark.needs_data
def test_export_and_load_tuned_rebuild_the_same_tree(data_env: Path, tmp_path: Path) -> None:
    from omegaconf import OmegaConf

    from retrievers import HierarchicalRetriever, load_tuned
    from viking_eval.data import load_dataset
    from viking_eval.sweep.export import export

    overrides = [
        "experiment=smoke",
        *TREE,
        "+retriever@retrievers.hier=hierarchical",
        "retrievers.hier.alpha=0.8",
    ]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, "run.latency.n_queries=0"])
    run_experiment(load_settings(cfg), tmp_path / "run", config_yaml=OmegaConf.to_yaml(cfg, resolve=True))
    path = export(tmp_path / "run", "adi-hier", retriever="hier", out_dir=tmp_path)
    dataset = load_dataset("adi")
    retriever = load_tuned(path, documents=dataset.corpus.values())
    assert isinstance(retriever, HierarchicalRetriever) and retriever.params.alpha == 0.8
    queries = list(dataset.queries.values())
    results = retriever.retrieve_batch([query.text for query in queries], 100)
    lines = (tmp_path / "run" / "runs" / "hier.trec").read_text().split("\n")
    expected = [(line.split()[0], line.split()[2]) for line in lines if line]
    got = [(query.id, r.doc_id) for query, rs in zip(queries, results, strict=True) for r in rs]
    assert got == expected  # same tree (deterministic build), same ranking
