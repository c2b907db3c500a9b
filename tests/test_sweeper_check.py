"""The Optuna sweeper's checks before any trial runs (hydra_plugins/viking_optuna_sweeper):
one public ``check_study`` for the sweeper and the CLI's pre-flight, and errors that carry the
setting they are about (``SweeperConfigError.key``), which the CLI prints as ``error: <key>: ...``."""

from __future__ import annotations

from typing import Any

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from hydra_plugins.viking_optuna_sweeper._checks import check_study
from hydra_plugins.viking_optuna_sweeper._errors import SweeperConfigError
from hydra_plugins.viking_optuna_sweeper._study import OptunaSweeperImpl
from viking_eval import cli
from viking_eval.config.compose import compose_config, hydra_session

STUDY = ["experiment=smoke", "run.latency.n_queries=0", "hparams_search=bm25_optuna"]


@pytest.mark.parametrize(
    ("settings", "key", "detail"),
    [
        ({"objective": None}, "hydra.sweeper.objective", "is required: the value to optimise"),
        ({"objective": "bm25.nDCG@10", "direction": "up"}, "hydra.sweeper.direction", "'up' is not one of"),
        (
            {"objective": "bm25.nDCG@10", "n_jobs": 0},
            "hydra.sweeper.n_jobs",
            "must be an integer >= 1, got 0",
        ),
        (
            {"objective": ["a.x", "a.y"], "direction": ["maximize", "minimize"], "sampler": "cmaes"},
            "hydra.sweeper.sampler",
            "cmaes optimises a single",
        ),
        (
            {"objective": "bm25.nDCG@10", "params": {"x": [1]}},
            "hydra.sweeper.params.x",
            "write the search space",
        ),
    ],
)
def test_a_bad_setting_names_its_key(settings: dict[str, Any], key: str, detail: str) -> None:
    with pytest.raises(SweeperConfigError) as caught:
        sweeper = OptunaSweeperImpl(**settings)
        check_study(sweeper, OmegaConf.create({}), [], OverridesParser.create())
    assert caught.value.key == key
    assert caught.value.detail.startswith(detail)
    assert str(caught.value).startswith(key)  # the message itself is unchanged: key first


def _study_config(*overrides: str) -> Any:
    return compose_config([*STUDY, *overrides], run_mode=RunMode.MULTIRUN, with_hydra=True)


def test_check_study_gives_the_space_and_refuses_what_every_trial_would_fail() -> None:
    with hydra_session():
        config = _study_config()
        sweeper = OptunaSweeperImpl(objective="bm25.nDCG@10", params={"store.bm25.k1": "interval(0.3, 2.0)"})
        space, fixed = check_study(sweeper, config, ["run.top_k=50"], OverridesParser.create())
        assert [param.key for param in space] == ["store.bm25.k1"] and fixed == ["run.top_k=50"]
        # a swept key the config does not have: the override names itself, the key is the sweeper's
        with pytest.raises(SweeperConfigError) as caught:
            check_study(sweeper, config, ["store.bm25.k9=interval(0,1)"], OverridesParser.create())
        assert caught.value.key == "hydra.sweeper"
        assert caught.value.detail.startswith(
            "store.bm25.k9=interval(0,1): store.bm25.k9 is not in the config"
        )
        # an objective naming no retriever of the run
        other = OptunaSweeperImpl(objective="nope.nDCG@10", params={"store.bm25.k1": "interval(0.3, 2.0)"})
        with pytest.raises(SweeperConfigError) as caught:
            check_study(other, config, [], OverridesParser.create())
        assert caught.value.key == "hydra.sweeper.objective"
        assert caught.value.detail.startswith("'nope.nDCG@10' names no retriever of this run")
        # sampler_kwargs the sampler does not take
        odd = OptunaSweeperImpl(
            objective="bm25.nDCG@10",
            sampler_kwargs={"no_such": 1},
            params={"store.bm25.k1": "interval(0.3, 2.0)"},
        )
        with pytest.raises(SweeperConfigError) as caught:
            check_study(odd, config, [], OverridesParser.create())
        assert caught.value.key == "hydra.sweeper.sampler_kwargs"


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            ["hydra.sweeper.objective=nope.nDCG@10"],
            "error: hydra.sweeper.objective: 'nope.nDCG@10' names no retriever",
        ),
        (
            ["+hydra.sweeper.sampler_kwargs.no_such=1"],
            "error: hydra.sweeper.sampler_kwargs: {'no_such': 1} do not fit",
        ),
        (
            ["store.bm25.k9=interval(0,1)"],
            "error: hydra.sweeper: store.bm25.k9=interval(0,1): store.bm25.k9 is not",
        ),
        (
            ["+hydra.sweeper.no_such=1"],
            "error: hydra.sweeper: OptunaSweeperImpl.__init__() got an unexpected",
        ),
    ],
)
def test_the_preflight_prints_the_key_the_sweeper_names(
    capsys: pytest.CaptureFixture[str], overrides: list[str], line: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.preflight(["-m", *STUDY, *overrides])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(line), err
