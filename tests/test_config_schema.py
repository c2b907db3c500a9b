"""Structured-config schemas derived from Params (viking_eval/config/schema.py) and the typed
settings they give: every config value is type-checked before any data is read (issue 12, item 4)."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from retrievers.params import Params, param
from retrievers.store import StoreConfig
from viking_eval.config import ConfigError, ConfigFile, load_settings
from viking_eval.config.compose import SCHEMA_NAME, explain
from viking_eval.config.schema import schema_of
from viking_eval.config.validate import typed_values

CONF = Path(__file__).resolve().parents[1] / "conf"


def _compose(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=["experiment=smoke", *overrides])


def _error(*overrides: str) -> ConfigError:
    """The one-line error a command line gets for ``overrides`` (at composition or validation)."""
    try:
        load_settings(_compose(*overrides))
    except ConfigError as error:
        return error
    except HydraException as error:
        return explain(error, ["experiment=smoke", *overrides])
    raise AssertionError(f"{overrides} composed and validated")


# --------------------------------------------------------------------------- schema derivation


@dataclass(frozen=True)
class Inner(Params):
    SECTION = "outer.inner"

    size: int = param(3, low=1, high=10)


@dataclass(frozen=True)
class Outer(Params):
    SECTION = "outer"

    flag: bool = param(False)
    count: int = param(1, low=0, high=5)
    ratio: float = param(0.5, low=0.0, high=1.0)
    mode: Literal["a", "b"] = param("a")
    label: str | None = param(None)
    names: tuple[str, ...] = param(("x", "y"))
    weights: Mapping[str, Mapping[str, float]] = param(factory=dict)
    inner: Inner = param(factory=Inner)
    maybe_inner: Inner | None = param(None)
    either: str | float = param("latest")
    anything: Any = param(None)


@dataclass(frozen=True)
class OldStyle:  # a family Params not yet ported to retrievers.params: a plain dataclass
    alpha: float = 0.5
    levels: tuple[int, ...] = (0, 1)


def test_schema_maps_every_annotation_to_an_omegaconf_type() -> None:
    types = {field.name: field.type for field in dataclasses.fields(schema_of(Outer))}
    assert types["flag"] is bool and types["count"] is int and types["ratio"] is float
    assert types["mode"] is str  # the choices are the Params class's to check
    assert str(types["label"]) == "typing.Optional[str]"
    assert str(types["names"]) == "typing.List[str]"
    assert str(types["weights"]) == "typing.Dict[str, typing.Any]"  # nested containers: Any
    assert types["inner"] is schema_of(Inner)
    assert str(types["maybe_inner"]).startswith("typing.Optional[")
    assert types["either"] is Any and types["anything"] is Any
    assert OmegaConf.to_container(OmegaConf.structured(schema_of(Outer)))["inner"] == {"size": 3}


def test_schema_of_a_plain_dataclass() -> None:
    cfg = OmegaConf.merge(OmegaConf.structured(schema_of(OldStyle)), {"levels": [2, "1"]})
    assert OmegaConf.to_container(cfg) == {"alpha": 0.5, "levels": [2, 1]}


def test_schemas_pickle_by_reference() -> None:
    """joblib and submitit launchers send composed configs (which carry the schema) to workers."""
    cfg = OmegaConf.structured(schema_of(ConfigFile))
    assert OmegaConf.to_container(pickle.loads(pickle.dumps(cfg))) == OmegaConf.to_container(cfg)
    assert schema_of(ConfigFile).__module__ == "viking_eval.config.schema"


def test_keys_schema_checks_only_the_keys_given() -> None:
    assert typed_values(StoreConfig, {"bm25": {"k1": "1.2"}}, "store") == {"bm25": {"k1": 1.2}}
    assert OmegaConf.is_missing(OmegaConf.structured(schema_of(StoreConfig, with_defaults=False)), "bm25")


@pytest.mark.parametrize(
    ("values", "line"),
    [
        ({"count": "abc"}, r"outer.count: must be an integer in \[0, 5\], got 'abc'"),
        ({"count": 1.5}, r"outer.count: must be an integer in \[0, 5\], got 1.5"),
        ({"count": True}, r"outer.count: must be an integer in \[0, 5\], got True"),
        ({"ratio": True}, r"outer.ratio: must be a number in \[0, 1\], got True"),
        ({"flag": "maybe"}, r"outer.flag: must be true or false, got 'maybe'"),
        ({"inner": {"size": "big"}}, r"outer.inner.size: must be an integer in \[1, 10\], got 'big'"),
        ({"inner": {"colour": 1}}, r"outer.inner.colour: unknown key; outer.inner has: size"),
    ],
)
def test_wrong_types_are_one_line_naming_the_key(values: dict[str, Any], line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        typed_values(Outer, values, "outer")
    assert __import__("re").fullmatch(line, caught.value.line())


def test_boolean_words_read_as_omegaconf_reads_them() -> None:
    for word, value in (("no", False), ("off", False), ("0", False), ("yes", True), ("true", True)):
        assert typed_values(Outer, {"flag": word}, "outer") == {"flag": value}


# --------------------------------------------------------------------------- the root schema


def test_root_schema_is_first_in_the_defaults() -> None:
    defaults = OmegaConf.load(CONF / "config.yaml").defaults
    assert defaults[0] == SCHEMA_NAME


def test_ignore_identical_ids_no_is_exactly_false() -> None:
    """Issue 12 item 4: ``no`` was a non-empty string, so True; the schema reads it as False."""
    cfg = _compose("dataset.ignore_identical_ids=no", "dataset.strict=off")
    assert cfg.dataset.ignore_identical_ids is False and cfg.dataset.strict is False
    settings = load_settings(cfg)
    assert settings.dataset.ignore_identical_ids is False and settings.dataset.strict is False
    assert load_settings(_compose("dataset.strict=yes")).dataset.strict is True


@pytest.mark.parametrize(
    ("override", "line"),
    [
        # booleans
        ("dataset.strict=maybe", "dataset.strict: must be true or false, got 'maybe'"),
        ("run.resume=perhaps", "run.resume: must be true or false, got 'perhaps'"),
        ("+retrievers.bm25.rerank_depth=20", None),  # a valid value composes and validates
        # integers: strings, floats, booleans
        ("run.top_k=abc", "run.top_k: must be an integer in [1, 10000], got 'abc'"),
        ("run.top_k=10.5", "run.top_k: must be an integer in [1, 10000], got 10.5"),
        ("run.top_k=true", "run.top_k: must be an integer in [1, 10000], got True"),
        (
            "run.latency.n_queries=many",
            "run.latency.n_queries: must be an integer in [0, 100000], got 'many'",
        ),
        # numbers
        ("gate.tolerance=tight", "gate.tolerance: must be a number in [0, 1], got 'tight'"),
        ("store.bm25.k1=abc", "store.bm25.k1: must be a number in (0, 100], got 'abc'"),
        # enums
        ("sweep.direction=up", "sweep.direction: must be one of ['maximize', 'minimize'], got 'up'"),
        (
            "run.significance.test=sign",
            "run.significance.test: must be one of ['t-test', 'wilcoxon', 'permutation'], got 'sign'",
        ),
        (
            "store.bm25.method=okapi",
            "store.bm25.method: must be one of ['robertson', 'atire', 'lucene', 'bm25l', 'bm25+'], got 'okapi'",
        ),
        ("store.bm25.stopwords=fr", "store.bm25.stopwords: must be one of ['en'] or null, got 'fr'"),
        # ranges
        ("run.top_k=0", "run.top_k: must be an integer in [1, 10000], got 0"),
    ],
)
def test_harness_and_store_values_are_typed_before_any_data(override: str, line: str | None) -> None:
    if line is None:
        load_settings(_compose(override))
        return
    assert _error(override).line() == line


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            ["+foo=1"],
            "foo: unknown key; the top level has: dataset, name, embedder, store, retrievers, run, sweep, gate, benchmark, answers, llm, fuse, growth, cache_dir, show_progress",
        ),
        (
            ["+dataset.colour=red"],
            "dataset.colour: unknown key; dataset has: name, split, path, ignore_identical_ids, strict, scope_key, group_key, tune_split, partition_key, partition_seed, half, download",
        ),
        (
            ["+run.significance.tests=3"],
            "run.significance.tests: unknown key (did you mean 'test'?); run.significance has: test, correction, alpha, permutations, bootstrap, bootstrap_method, confidence, seed",
        ),
        (
            ["+store.bm25.k3=1"],
            "store.bm25.k3: unknown key; store.bm25 has: k1, b, method, stopwords, stemmer",
        ),
        (["+store.hierarchy.depth=3", "store=kmeans_tree"], None),
        (
            ["+retrievers.dense.bogus=1"],
            "retrievers.dense.bogus: unknown key; retrievers.dense has: filters, reranker, rerank_depth, rerank_timeout, query_batch_size, ef_search, nprobe, refine_factor, mmr_lambda, mmr_depth",
        ),
        (["+embedder.pooling=mean"], None),
        (
            [
                "+retriever@retrievers.hybrid=hybrid_rrf",
                "+reranker@retrievers.hybrid.reranker=embedding",
                "+retrievers.hybrid.reranker.colour=red",
            ],
            None,
        ),
    ],
)
def test_unknown_keys_at_every_level(overrides: list[str], line: str | None) -> None:
    error = _error(*overrides)
    if line is not None:
        assert error.line() == line
    else:
        assert ": unknown key; " in error.line()
        key = (
            overrides[0].split("=", 1)[0].lstrip("+")
            if "colour" not in overrides[-1]
            else "retrievers.hybrid.reranker.colour"
        )
        assert error.line().startswith(f"{key}: " if "depth" not in key else "store.hierarchy.depth: ")


def test_retriever_values_typed_against_their_params() -> None:
    assert _error("retrievers.dense.query_batch_size=abc").line() == (
        "retrievers.dense.query_batch_size: must be an integer in [1, 65536], got 'abc'"
    )
    hybrid = "+retriever@retrievers.hybrid=hybrid_rrf"
    assert _error(hybrid, "retrievers.hybrid.fusion=borda").line() == (
        "retrievers.hybrid.fusion: must be one of ['rrf', 'convex', 'combsum', 'combmnz'], got 'borda'"
    )
    spec = {s.name: s for s in load_settings(_compose(hybrid, "retrievers.hybrid.parallel=no")).retrievers}
    assert spec["hybrid"].params["parallel"] is False


def test_bm25_settings_on_a_retriever_say_where_they_belong() -> None:
    """Issue 12 item 7: k1 on a second BM25 retriever changed nothing (two identical rows)."""
    for overrides in (
        ["+retriever@retrievers.bm25b=bm25", "retrievers.bm25b.k1=1.2"],  # no +: Hydra refuses
        ["+retriever@retrievers.bm25b=bm25", "+retrievers.bm25b.k1=1.2"],  # +: our check refuses
        ["+retrievers.dense.b=0.5"],
    ):
        line = _error(*overrides).line()
        key = overrides[-1].split("=", 1)[0].lstrip("+")
        name = key.rsplit(".", 1)[1]
        assert line.startswith(
            f"{key}: {name} is a store setting, not a retriever's: write store.bm25.{name}="
        )
        assert "shared by every retriever of the run" in line


def test_hydra_mistakes_are_one_line() -> None:
    assert (
        _error("experiment=quickstrat")
        .line()
        .startswith(
            "experiment: no option 'quickstrat' (did you mean 'quickstart'?); the options are: benchmark, ci_regression, "
        )
    )
    assert "quickstart, smoke (conf/experiment/)" in _error("experiment=quickstrat").line()
    assert _error("dataset=nope").line().startswith("dataset: no option 'nope'; the options are: adi, cisi")
    assert _error("run.foo=1").line() == (
        "run.foo: no such key; run has: top_k, batch_size, metrics, latency, resume, baseline, significance, redundancy"
    )
    assert _error("retrievers.dense.rerank_depth=5").line() == (
        "retrievers.dense.rerank_depth: is not set by the config: add it with +retrievers.dense.rerank_depth=<value>"
    )
    assert (
        _error("+run.top_k=5").line()
        == "run.top_k: is already in the config: write run.top_k=<value> without the +"
    )
    assert _error("~run.top_k").line().startswith("run.top_k: cannot be deleted")
    assert "\n" not in _error("dataset=nope").line()


def test_metric_names_checked_at_start() -> None:
    assert _error("run.metrics=[nDCG@0]").line() == (
        "run.metrics: metric 'nDCG@0': the cutoff after @ must be an integer >= 1, got 0"
    )
    assert (
        _error("run.metrics=[nDCG@10,Foo@3]")
        .line()
        .startswith("run.metrics: unknown metric 'Foo@3'; accepted measures: Accuracy, AP, BPM, Bpref, ")
    )


def test_hand_built_config_gets_the_same_checks() -> None:
    """A config read back from a run folder (no schema) is typed the same way."""
    plain = OmegaConf.to_container(_compose(), resolve=True)
    plain["dataset"]["strict"] = "no"
    assert load_settings(plain).dataset.strict is False
    plain["run"]["top_k"] = "10.5"
    with pytest.raises(ConfigError, match=r"run.top_k: must be an integer in \[1, 10000\], got '10.5'"):
        load_settings(plain)


def test_a_retriever_needing_a_tree_is_refused_before_the_store_is_built() -> None:
    error = _error("experiment=smoke", "+retriever@retrievers.hier=hierarchical")
    assert error.line().startswith("retrievers.hier: HierarchicalRetriever needs store.hierarchy")
    assert "store=kmeans_tree" in error.line()
    load_settings(
        _compose("experiment=smoke", "store=kmeans_tree", "+retriever@retrievers.hier=hierarchical")
    )


def test_an_option_needing_edges_is_refused_before_the_store_is_built() -> None:
    error = _error(
        "experiment=smoke", "+retriever@retrievers.h=hybrid_rrf", "retrievers.h.context_weight=0.5"
    )
    assert error.line().startswith("retrievers.h: HybridRetriever needs store.edges")
    load_settings(
        _compose(
            "experiment=smoke",
            "store=locomo_graph",
            "+retriever@retrievers.h=hybrid_rrf",
            "retrievers.h.context_weight=0.5",
        )
    )
