"""The graph retriever in the harness: experiments compose and validate, a CISI run writes the
traversal stats into metrics.json and the edge report into environment.json, a scoped
(per-conversation) run never crosses a conversation, config errors stop the run at start, and a
multirun over hop_decay x max_hops writes the stats next to quality in sweep.csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import compose_settings, run_cli, shared_data_env
from omegaconf import OmegaConf

from retrievers import load_tuned
from viking_eval.config import ConfigError, load_settings
from viking_eval.config.compose import compose_config, hydra_session
from viking_eval.data import load_dataset
from viking_eval.measures.metrics import evaluate, parse_metrics
from viking_eval.run.experiment import run_experiment
from viking_eval.sweep.export import export

REPO = Path(__file__).resolve().parents[1]
FAST = ["embedder=tfidf", "embedder.dim=48", "run.latency.n_queries=5", "run.latency.warmup=1"]
ALL_QUERIES = ["dataset.half=all", "~retrievers.graph_tuned"]  # the experiments report the held-out half


@pytest.mark.parametrize("experiment", ["graph_cisi", "graph_locomo"])
def test_experiments_compose_and_validate(experiment: str) -> None:
    settings = compose_settings(f"experiment={experiment}")
    by_name = {spec.name: spec for spec in settings.retrievers}
    assert set(by_name) == {
        "bm25",
        "dense",
        "graph",
        "graph_oasis",
        "graph_rescored",
        "graph_walks",
        "graph_tuned",
    }
    assert settings.dataset.half == "holdout"  # graph_tuned was tuned on the other half
    assert by_name["graph"].target == "retrievers.graph.GraphRetriever"
    assert by_name["graph_oasis"].params["scoring"] == "oasis"
    # the oasis preset: its documented blend (a graph-found document's own cosine counts), no fill
    assert by_name["graph_oasis"].params["rescore_reached"] is True
    assert by_name["graph_oasis"].params["vector_fill"] is False
    assert (
        by_name["graph"].params["rescore_reached"] is True and by_name["graph"].params["vector_fill"] is True
    )
    assert settings.store.edges is not None
    if experiment == "graph_cisi":
        assert settings.store.edges.references is not None
        assert settings.store.edges.references.fields == ("xrefs",)
    else:
        assert settings.dataset.scope_key == "conversation"
        assert settings.store.edges.sequence is not None and settings.store.edges.similar_to is not None
        assert settings.store.edges.similar_to.same_keys == ("conversation",)
        assert by_name["graph"].params["bidirectional"] is True


@pytest.fixture(scope="module")
def cisi_run(shared_datasets: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    with shared_data_env(shared_datasets), hydra_session():
        cfg = compose_config(["experiment=graph_cisi", *FAST, *ALL_QUERIES])
        out = tmp_path_factory.mktemp("cisi") / "run"
        summary = run_experiment(load_settings(cfg), out, config_yaml=OmegaConf.to_yaml(cfg, resolve=True))
    return summary, out


@pytest.mark.slow
@pytest.mark.needs_data
def test_cisi_run_writes_stats_and_edge_report(cisi_run) -> None:  # type: ignore[no-untyped-def]
    summary, out = cisi_run
    tmp_path = out.parent
    document = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert document["n_queries"] == 76  # only CISI's judged queries
    assert "stats" not in document["retrievers"]["dense"]
    for name in ("graph", "graph_oasis"):
        entry = document["retrievers"][name]
        stats = entry["stats"]
        assert stats["n_queries"] == 76 and stats["seeds"] == 10.0
        assert stats["edges_followed"] > 1000 and stats["graph_found"] > 90 and stats["hops"] == 2.0
        assert {"p50_ms", "p95_ms"} <= set(entry["latency"])
        assert 0.05 < entry["metrics"]["nDCG@10"] < 1
    metrics = summary.metrics()
    assert metrics["graph"]["R@100"] != metrics["graph_oasis"]["R@100"]  # the 90 graph slots differ
    # vector fill: the default's list holds what dense ranks within it, plus graph-found documents
    assert metrics["graph"]["R@100"] >= metrics["graph_walks"]["R@100"]
    environment = json.loads((tmp_path / "run" / "environment.json").read_text())
    edges = environment["edges"]
    assert edges["by_relation"] == {"references": 77344}
    assert edges["dropped"] == {"references.duplicate": 1427, "references.self_loop": 1550}
    assert environment["store_build_seconds"]["edges"] > 0


@pytest.mark.slow
@pytest.mark.needs_data
@pytest.mark.parametrize("name", ["graph", "graph_oasis"])
def test_exported_graph_retriever_loads_without_hydra_and_reproduces_metrics(
    cisi_run, shared_datasets: Path, tmp_path: Path, name: str
) -> None:  # type: ignore[no-untyped-def]
    _, out = cisi_run
    path = export(out, f"graph-cisi-{name}", retriever=name, out_dir=tmp_path)
    dataset = load_dataset(str(shared_datasets / "cisi"))
    retriever = load_tuned(path, documents=dataset.corpus.values())
    queries = [query for query in dataset.queries.values() if query.id in dataset.qrels]
    results = retriever.retrieve_batch([query.text for query in queries], 100)
    run = {query.id: {r.doc_id: r.score for r in rs} for query, rs in zip(queries, results, strict=True)}
    metrics = parse_metrics(["nDCG@10", "R@10", "R@100", "RR@10", "AP@100"])
    expected = json.loads((out / "metrics.json").read_text())["retrievers"][name]["metrics"]
    assert evaluate(run, dataset.qrels, metrics).aggregate == expected


def _write_conversations(folder: Path) -> Path:
    """Two conversations of four turns; the answer to each question is the turn after the one
    the question matches, and the other conversation holds a decoy with the same words."""
    turns = {
        "A": ["we went hiking in the alps", "it rained every single day", "lunch was pasta", "bye"],
        "B": ["we went hiking in the alps too", "sunny weather all week", "dinner was soup", "ciao"],
    }
    folder.mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as handle:
        for conversation, texts in turns.items():
            for index, text in enumerate(texts):
                metadata = {"conversation": conversation, "session": 1, "turn_index": index}
                record = {"_id": f"{conversation}{index}", "title": "", "text": text, "metadata": metadata}
                handle.write(json.dumps(record) + "\n")
    with open(folder / "queries.jsonl", "w") as handle:
        for qid, conversation in (("qa", "A"), ("qb", "B")):
            handle.write(
                json.dumps(
                    {"_id": qid, "text": "hiking in the alps", "metadata": {"conversation": conversation}}
                )
                + "\n"
            )
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nqa\tA1\t1\nqb\tB1\t1\n")
    return folder


def test_scoped_run_follows_sequence_edges_within_the_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _write_conversations(tmp_path / "talks")
    settings = compose_settings(
        "experiment=graph_locomo",
        *FAST,
        *ALL_QUERIES,
        "embedder.dim=4",
        f"dataset.path={folder}",
        "dataset.group_key=null",
        "retrievers.graph.seed_top_k=1",
        "retrievers.graph_oasis.seed_top_k=1",
        "retrievers.graph_rescored.seed_top_k=1",
        "retrievers.graph_walks.seed_top_k=1",
        "store.edges.similar_to=null",
    )
    run_experiment(settings, tmp_path / "run")
    for name in ("graph", "graph_oasis", "graph_rescored", "graph_walks"):
        lines = [
            line.split() for line in (tmp_path / "run" / "runs" / f"{name}.trec").read_text().splitlines()
        ]
        by_query: dict[str, list[str]] = {}
        for qid, _, doc_id, *_ in lines:
            by_query.setdefault(qid, []).append(doc_id)
        # the seed (turn 0) and the turns the sequence reaches in 2 hops, never the other
        # conversation; with vector fill (the default) the rest of the conversation follows
        expected = {"qa": ["A0", "A1", "A2"], "qb": ["B0", "B1", "B2"]}
        if name == "graph":
            assert {qid: docs[:3] for qid, docs in by_query.items()} == expected, name
            assert by_query == {"qa": ["A0", "A1", "A2", "A3"], "qb": ["B0", "B1", "B2", "B3"]}
        else:
            assert by_query == expected, name
    document = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert document["retrievers"]["graph"]["metrics"]["R@10"] == 1.0
    assert document["retrievers"]["dense"]["metrics"]["R@10"] == 1.0  # 4 turns: dense finds all


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["retrievers.graph.max_hops=-1"],
            r"retrievers.graph: max_hops must be an integer in \[0, 10\], got -1",
        ),
        (
            ["retrievers.graph.hop_decay=[1.0,1.5]"],
            r"retrievers.graph: hop_decay\[1\] must be a number in \[0, 1\], got 1.5",
        ),
        (["retrievers.graph.scoring=best"], r"scoring must be one of \['propagated', 'oasis'\]"),
        (["+retrievers.graph.hops=3"], r"retrievers.graph: unknown key\(s\) \['hops'\]"),
        (
            ["+store.edges.similar_to.k=0"],
            r"edges.similar_to.k must be an integer in \[1, 1000\], got 0",
        ),
        (["+store.edges.citations.fields=[x]"], r"unknown store.edges key\(s\) \['citations'\]"),
        (["+store.edges.references.ids=[x]"], r"unknown store.edges.references key\(s\) \['ids'\]"),
        (["store.edges.references.weight=-0.5"], r"edges.references.weight must be a number in \[0, 1\]"),
    ],
)
def test_config_errors_stop_the_run_at_start(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compose_settings("experiment=graph_cisi", *overrides)


@pytest.mark.slow
@pytest.mark.needs_data
def test_multirun_sweeps_hop_decay_and_max_hops(data_env: Path, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    done = run_cli(
        "-m",
        "experiment=graph_cisi",
        *FAST[:2],
        "dataset.half=all",
        "run.latency.n_queries=0",
        "~retrievers.dense",
        "~retrievers.graph_oasis",
        "~retrievers.graph_rescored",
        "~retrievers.graph_walks",
        "~retrievers.bm25",
        "~retrievers.graph_tuned",
        "retrievers.graph.hop_decay=0.0,1.0",
        "retrievers.graph.max_hops=0,1",
        "sweep.evaluate_best=false",
        f"hydra.sweep.dir={sweep_dir}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open(sweep_dir / "sweep.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["retriever"] for row in rows} == {"graph"}
    grid = {(row["retrievers.graph.hop_decay"], row["retrievers.graph.max_hops"]): row for row in rows}
    assert set(grid) == {("0.0", "0"), ("0.0", "1"), ("1.0", "0"), ("1.0", "1")}
    assert float(grid[("1.0", "1")]["stats.edges_followed"]) > 0
    assert float(grid[("1.0", "0")]["stats.edges_followed"]) == 0
    # without hops the decay changes nothing
    assert grid[("0.0", "0")]["nDCG@10"] == grid[("1.0", "0")]["nDCG@10"]
