"""viking_eval.evaluate (viking_eval/api.py) and retrievers of your own (the contract in
retrievers/types.py): the Python API gives the Hydra run's numbers; an out-of-tree class works
through _target_ and through evaluate(); a class missing part of the contract is refused, naming
what is missing."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import compose_settings, run_cli
from omegaconf import OmegaConf

import viking_eval
from retrievers import BM25Retriever, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from viking_eval.benchmark.leaderboard import main as leaderboard
from viking_eval.config import ConfigError
from viking_eval.config.compose import compose_config, hydra_session
from viking_eval.data import load_dataset
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
SMOKE = ["experiment=smoke", "run.latency.n_queries=0"]

# a module outside this package: the minimal contract, one on the kernel, and two that miss a part
OUT_OF_TREE = '''
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrievers.kernel import Candidates, KernelRetriever, RetrieverParams
from retrievers.params import param
from retrievers.types import RetrievalResult


class WordOverlap:
    """Minimal contract: score = number of query words in the document, ties by doc id."""

    def __init__(self, store, embedder=None, min_overlap: int = 1):
        self.store = store
        self.min_overlap = min_overlap
        self.words = [set(doc.full_text.lower().split()) for doc in store.documents]

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        words = set(query.lower().split())
        scored = [
            RetrievalResult(doc.id, float(len(words & self.words[row])))
            for row, doc in enumerate(self.store.documents)
            if len(words & self.words[row]) >= self.min_overlap
        ]
        return sorted(scored, key=lambda r: (-r.score, r.doc_id))[:top_k]

    def retrieve_batch(self, queries, top_k: int = 10):
        return [self.retrieve(query, top_k) for query in queries]


@dataclass(frozen=True)
class LengthParams(RetrieverParams):
    weight: float = param(1.0, low=0.0, high=10.0, doc="score = weight / (1 + length)")


class ShortFirst(KernelRetriever):
    """On the kernel: candidates() only; filters, ordering and batching come from the kernel."""

    Params = LengthParams

    def uses_embedder(self) -> bool:
        return False

    def candidates(self, queries, vectors, depth):
        lengths = np.array([len(doc.full_text) for doc in self.store.documents], dtype=np.float64)
        rows = np.flatnonzero(self.scope)
        return [Candidates.of(self.params.weight / (1.0 + lengths[rows]), rows) for _ in queries]


class NoBatch:
    def __init__(self, store, embedder=None):
        pass

    def retrieve(self, query, top_k=10):
        return []


class NoEmbedderArgument:
    def __init__(self, store):
        pass

    def retrieve(self, query, top_k=10):
        return []

    def retrieve_batch(self, queries, top_k=10):
        return [[] for _ in queries]
'''


@pytest.fixture(scope="module")
def out_of_tree(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``my_retrievers`` written to a temporary folder and put on sys.path (and PYTHONPATH)."""
    folder = tmp_path_factory.mktemp("elsewhere")
    (folder / "my_retrievers.py").write_text(textwrap.dedent(OUT_OF_TREE), encoding="utf-8")
    sys.path.insert(0, str(folder))
    allowed = os.environ.get("VIKING_EVAL_ALLOW_TARGETS")
    os.environ["VIKING_EVAL_ALLOW_TARGETS"] = "my_retrievers"  # an own module a config may name
    yield str(folder)
    if allowed is None:
        os.environ.pop("VIKING_EVAL_ALLOW_TARGETS")
    else:
        os.environ["VIKING_EVAL_ALLOW_TARGETS"] = allowed
    sys.path.remove(str(folder))
    sys.modules.pop("my_retrievers", None)


def _config_yaml(*overrides: str) -> str:
    with hydra_session():
        return OmegaConf.to_yaml(compose_config([*SMOKE, *overrides]), resolve=True)


@pytest.mark.needs_data
def test_evaluate_gives_the_hydra_runs_numbers(data_env: Path, tmp_path: Path) -> None:
    hydra_run = run_experiment(compose_settings(*SMOKE), tmp_path / "hydra", config_yaml=_config_yaml())
    configs = {
        "bm25": {"_target_": "retrievers.baselines.BM25Retriever"},
        "dense": {"_target_": "retrievers.baselines.DenseRetriever", "query_batch_size": 256},
    }
    api_run = viking_eval.evaluate(
        configs, "adi", embedder="tfidf", latency_queries=0, output_dir=tmp_path / "api"
    )
    assert type(api_run) is type(hydra_run)
    assert [r.name for r in api_run.results] == ["bm25", "dense"]
    for mine, theirs in zip(api_run.results, hydra_run.results, strict=True):
        assert mine.metrics == theirs.metrics and mine.per_query == theirs.per_query
    assert api_run.significance == hydra_run.significance
    assert (api_run.dataset, api_run.split) == ("adi", "test")
    for name in ("metrics.json", "per_query.csv", "runs/bm25.trec", "results/dense.json", "report.html"):
        assert (tmp_path / "api" / name).is_file(), name
    assert (tmp_path / "api" / "runs" / "bm25.trec").read_bytes() == (
        tmp_path / "hydra" / "runs" / "bm25.trec"
    ).read_bytes()
    # nothing written without output_dir; the leaderboard takes the API's folder beside the CLI's
    assert (
        viking_eval.evaluate(configs["bm25"], "adi", embedder="tfidf", latency_queries=0).output_dir is None
    )
    assert (
        leaderboard([str(tmp_path / "api"), str(tmp_path / "hydra"), "--csv", str(tmp_path / "lb.csv")]) == 0
    )
    hashes = {
        line.split(",")[1]
        for line in (tmp_path / "lb.csv").read_text().splitlines()[1:]
        if line.startswith("bm25,")
    }
    assert len(hashes) == 1  # the same config from the CLI and from Python: one config hash


@pytest.mark.needs_data
def test_built_objects_and_loaded_datasets(data_env: Path, tmp_path: Path) -> None:
    dataset = load_dataset("adi")
    docs = sorted(dataset.corpus.values(), key=lambda doc: doc.id)
    store = build_store(
        docs, TfidfEmbedder(dim=16).fit([doc.full_text for doc in docs]), StoreConfig.from_dict({})
    )
    summary = viking_eval.evaluate(
        [BM25Retriever(store), {"_target_": "retrievers.baselines.BM25Retriever"}],
        dataset,
        embedder="tfidf",
        metrics=["nDCG@10", "P@5"],
        latency_queries=3,
        output_dir=tmp_path / "out",
    )
    built, configured = summary.results
    assert (built.name, configured.name) == ("bm25retriever", "bm25retriever_2")
    assert built.metrics == configured.metrics and set(built.metrics) == {"nDCG@10", "P@5"}
    assert built.latency is not None and built.latency["encode_p50_ms"] == 0.0  # its embedder is its own
    config = (tmp_path / "out" / "config.yaml").read_text()
    assert "built: true" in config and not (tmp_path / "out" / "results" / "bm25retriever.json").exists()
    by_path = viking_eval.evaluate(
        BM25Retriever(store), str(data_env / "adi"), metrics=["nDCG@10"], latency_queries=0
    )
    assert by_path.results[0].metrics["nDCG@10"] == built.metrics["nDCG@10"]


@pytest.mark.needs_data
def test_an_out_of_tree_retriever_through_target_and_evaluate(
    out_of_tree: str, data_env: Path, tmp_path: Path
) -> None:
    through_config = run_experiment(
        compose_settings(
            *SMOKE,
            "+retrievers.mine._target_=my_retrievers.WordOverlap",
            "+retrievers.short._target_=my_retrievers.ShortFirst",
        ),
        tmp_path / "cli",
    )
    by_name = {result.name: result for result in through_config.results}
    import my_retrievers

    dataset = load_dataset("adi")
    docs = sorted(dataset.corpus.values(), key=lambda doc: doc.id)
    store = build_store(docs, None, StoreConfig.from_dict({}))
    through_api = viking_eval.evaluate(
        {
            "mine": my_retrievers.WordOverlap(store),
            "mine_config": {"_target_": "my_retrievers.WordOverlap", "min_overlap": 1},
            "short": {"_target_": "my_retrievers.ShortFirst", "weight": 2.0},
        },
        "adi",
        embedder="tfidf",
        latency_queries=0,
    )
    api = {result.name: result for result in through_api.results}
    assert api["mine"].metrics == api["mine_config"].metrics == by_name["mine"].metrics
    assert 0 < api["mine"].metrics["nDCG@10"] < 1
    assert api["short"].metrics == by_name["short"].metrics  # the kernel's order: weight does not reorder


def test_a_class_missing_part_of_the_contract_is_refused(out_of_tree: str) -> None:
    with pytest.raises(ConfigError) as caught:
        compose_settings(*SMOKE, "+retrievers.mine._target_=my_retrievers.NoBatch")
    assert caught.value.line().startswith(
        "retrievers.mine: my_retrievers.NoBatch has no retrieve_batch(queries, top_k) method; a retriever class needs"
    )
    with pytest.raises(
        ConfigError,
        match=r"my_retrievers.NoEmbedderArgument's constructor must take \(store, embedder=None, \*\*params\), it takes \(store\)",
    ):
        compose_settings(*SMOKE, "+retrievers.mine._target_=my_retrievers.NoEmbedderArgument")
    with pytest.raises(ConfigError, match=r"retrievers.mine: unknown key\(s\) \['colour'\]"):
        compose_settings(
            *SMOKE, "+retrievers.mine._target_=my_retrievers.WordOverlap", "+retrievers.mine.colour=red"
        )
    with pytest.raises(ConfigError, match=r"weight must be a number in \[0, 10\], got 11"):
        compose_settings(
            *SMOKE, "+retrievers.mine._target_=my_retrievers.ShortFirst", "+retrievers.mine.weight=11"
        )
    import my_retrievers

    with pytest.raises(
        ConfigError,
        match=r"retrievers.mine: my_retrievers.NoBatch has no retrieve_batch\(queries, top_k\) method",
    ):
        viking_eval.evaluate({"mine": my_retrievers.NoBatch(None)}, "adi")
    with pytest.raises(ConfigError, match=r"retrievers.mine: my_retrievers.NoBatch has no retrieve_batch"):
        viking_eval.evaluate({"mine": {"_target_": "my_retrievers.NoBatch"}}, "adi")


def test_the_cli_refuses_it_before_any_work(out_of_tree: str, tmp_path: Path) -> None:
    done = run_cli(
        *SMOKE,
        "+retrievers.mine._target_=my_retrievers.NoBatch",
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"PYTHONPATH": out_of_tree},
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "error: retrievers.mine: my_retrievers.NoBatch has no retrieve_batch(queries, top_k) method"
        )
    )
    assert not (tmp_path / "run").exists()


def test_bad_api_arguments_are_refused_before_any_data(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown metric 'nDCG@ten'"):
        viking_eval.evaluate({"_target_": "retrievers.baselines.BM25Retriever"}, "adi", metrics=["nDCG@ten"])
    with pytest.raises(ConfigError, match=r"embedder: no option 'tfidff'"):
        viking_eval.evaluate({"_target_": "retrievers.baselines.BM25Retriever"}, "adi", embedder="tfidff")
    with pytest.raises(ConfigError, match=r"run.baseline: 'x' is not one of the retrievers"):
        viking_eval.evaluate({"_target_": "retrievers.baselines.BM25Retriever"}, "adi", baseline="x")
    with pytest.raises(TypeError, match="retrievers: give a retriever"):
        viking_eval.evaluate(42, "adi")  # type: ignore[arg-type]
