"""Every config group option composes, validates and instantiates (lightning-hydra-template style)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from hydra.utils import instantiate
from omegaconf import DictConfig

from viking_eval.config import ConfigError, load_settings

CONF = Path(__file__).resolve().parents[1] / "conf"


def _compose(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def _options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONF / group).glob("*.yaml"))


def test_default_is_quickstart_bm25_and_dense_on_scifact() -> None:
    settings = load_settings(_compose([]))
    assert settings.name == "quickstart"
    assert settings.dataset.name == "scifact" and settings.dataset.split == "test"
    assert [spec.name for spec in settings.retrievers] == ["bm25", "dense"]
    assert settings.embedder["model_name"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert settings.embedder["max_seq_length"] == 256
    assert [metric.name for metric in settings.metrics] == ["nDCG@10", "R@10", "R@100", "RR@10", "AP@100"]


@pytest.mark.parametrize("experiment", _options("experiment"))
def test_every_experiment_validates(experiment: str) -> None:
    extra = ["fuse.runs=[a.trec,b.trec]"] if experiment == "fuse" else []  # a fusion names its run files
    settings = load_settings(_compose([f"experiment={experiment}", *extra]))
    assert settings.retrievers or settings.fuse.runs


@pytest.mark.needs_data
@pytest.mark.parametrize("dataset", _options("dataset"))
def test_every_dataset_config_validates(dataset: str, shared_datasets: Path) -> None:
    settings = load_settings(_compose([f"dataset={dataset}"]))
    assert (shared_datasets / settings.dataset.name).is_dir()


@pytest.mark.parametrize("store", _options("store"))
def test_every_store_config_validates(store: str) -> None:
    settings = load_settings(_compose([f"store={store}"]))
    assert settings.store.bm25 is not None


@pytest.mark.parametrize("embedder", _options("embedder"))
def test_every_embedder_instantiates_lazily(embedder: str) -> None:
    cfg = _compose([f"embedder={embedder}"])
    load_settings(cfg)
    instance = instantiate(cfg.embedder)
    assert callable(instance.encode)


@pytest.mark.parametrize("retriever", _options("retriever"))
def test_every_retriever_config_validates(retriever: str, tmp_path: Path) -> None:
    # a store that builds every part any retriever needs (the hierarchical retriever's tree)
    overrides = ["store=kmeans_tree", f"+retriever@retrievers.extra={retriever}"]
    if retriever == "run_file":  # the run file is the user's to give
        (tmp_path / "run.trec").write_text("q1 Q0 d1 1 2.5 mine\n", encoding="utf-8")
        overrides.append(f"retrievers.extra.path={tmp_path / 'run.trec'}")
    settings = load_settings(_compose(overrides))
    assert "extra" in [spec.name for spec in settings.retrievers]


@pytest.mark.parametrize("reranker", _options("reranker"))
def test_every_reranker_config_validates(reranker: str) -> None:
    overrides = ["experiment=smoke", "+retriever@retrievers.hybrid=hybrid_rrf"]
    settings = load_settings(_compose([*overrides, f"+reranker@retrievers.hybrid.reranker={reranker}"]))
    spec = {spec.name: spec for spec in settings.retrievers}["hybrid"]
    assert "_target_" in spec.params["reranker"]


@pytest.mark.parametrize("study", _options("hparams_search"))
def test_every_hparams_search_config_validates(study: str) -> None:
    cfg = _compose([f"hparams_search={study}"])
    load_settings(cfg)
    assert cfg.sweep.objective


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "+retrievers.dense.bogus=1",
            r"retrievers.dense: unknown key\(s\) \['bogus'\]; allowed: \[.*'query_batch_size', 'ef_search', 'nprobe', 'refine_factor', 'mmr_lambda', 'mmr_depth'\]",
        ),
        ("retrievers.dense.query_batch_size=0", r"query_batch_size must be an integer in \[1, 65536\]"),
        ("run.top_k=0", r"run.top_k: must be an integer in \[1, 10000\], got 0"),
        ("run.latency.warmup=-1", r"run.latency.warmup: must be an integer in \[0, 1000\]"),
        (
            "run.metrics=[nDCG@10,Foo@3]",
            r"run.metrics: unknown metric 'Foo@3'; accepted measures: Accuracy, AP, ",
        ),
        ("store.bm25.b=1.5", r"store: bm25.b must be a number in \[0, 1\], got 1.5"),
        ("+store.bm25.k3=1", r"unknown store.bm25 key\(s\) \['k3'\]"),
        ("+dataset.colour=red", r"dataset: unknown key\(s\) \['colour'\]"),
        ("+embedder.pooling=mean", r"embedder: unknown key\(s\) \['pooling'\]"),
        (
            "+retrievers.x._target_=os.system",
            r"retrievers.x: _target_ 'os.system' is not a retriever class",
        ),
        ("sweep.direction=upwards", r"sweep.direction: must be one of \['maximize', 'minimize'\]"),
        ("gate.tolerance=2", r"gate.tolerance: must be a number in \[0, 1\]"),
    ],
)
def test_bad_config_is_rejected_at_start(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(_compose([override]))


def test_unknown_top_level_override_rejected_by_hydra() -> None:
    with pytest.raises(HydraException, match="nonexistent"):
        _compose(["nonexistent=1"])


def test_embedder_range_checked_at_start() -> None:
    with pytest.raises(ConfigError, match=r"embedder: .*max_seq_length") as caught:
        load_settings(_compose(["embedder.max_seq_length=0"]))
    assert caught.value.line().startswith("embedder.max_seq_length: ")
