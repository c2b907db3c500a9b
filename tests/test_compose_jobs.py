"""A sweep's pre-flight composes each distinct set of config-group choices once and sets the other
jobs' values on a copy (``viking_eval.config.compose.job_configs``): every job's config must equal
Hydra composing that job on its own, and a job Hydra refuses must be refused with Hydra's words."""

from __future__ import annotations

import pytest
from conftest import preflight_error
from hydra.types import RunMode
from omegaconf import OmegaConf

from viking_eval.config.compose import compose_config, hydra_session, job_configs, job_overrides
from viking_eval.config.settings import RunSettings
from viking_eval.config.validate import typed_values


def _jobs(*overrides: str) -> tuple[list[list[str]], list[str]]:
    base = compose_config(list(overrides), run_mode=RunMode.MULTIRUN, with_hydra=True)
    task = [str(line) for line in base.hydra.overrides.task]
    hydra = [str(line) for line in base.hydra.overrides.hydra]
    return job_overrides(base, task), hydra


@pytest.mark.parametrize(
    "overrides",
    [
        # a grid of values over two config-group choices (embedder), with an added key (composed in full)
        (
            "experiment=smoke",
            "embedder=tfidf,static",
            "retrievers.dense.query_batch_size=16,32",
            "+retrievers.bm25.k1=0.9,1.2",
            "run.top_k=10,20",
        ),
        # a key set by value and again by ++ after it: Hydra's order decides, so composed in full
        ("experiment=smoke", "run.top_k=10,20", "++run.top_k=7"),
        # a documented sweep: values only (alpha x convergence rounds)
        ("experiment=hierarchical_sweep",),
    ],
)
def test_every_job_equals_composing_it_alone(overrides: tuple[str, ...]) -> None:
    with hydra_session():
        jobs, hydra = _jobs(*overrides)
        assert len(jobs) > 1
        configs = list(job_configs(jobs, hydra))
        assert len(configs) == len(jobs)
        for number, (job, (given, cfg)) in enumerate(zip(jobs, configs, strict=True)):
            assert given == [*hydra, *job]
            assert not isinstance(cfg, Exception), cfg
            if number % 11 not in (0, 1) and number != len(jobs) - 1:
                continue  # composing each alone takes a second: the first two, every 11th, the last
            alone = compose_config(given)
            assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(alone), job
            assert OmegaConf.to_container(cfg, resolve=True) == OmegaConf.to_container(alone, resolve=True)


def test_a_value_of_the_wrong_type_in_a_later_job_is_hydras_error(capsys: pytest.CaptureFixture[str]) -> None:
    # the first job composes the template; the second's value must still be type-checked
    line = preflight_error(capsys, "-m", "experiment=smoke", "run.top_k=10,abc")
    assert line == (
        "error: run.top_k: must be an integer in [1, 10000], got 'abc' "
        "(job 1 of the sweep: experiment=smoke run.top_k=abc)"
    )


def test_a_key_the_config_lacks_in_a_later_job_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    line = preflight_error(capsys, "-m", "experiment=smoke", "run.top_k=10", "run.no_such_key=1,2")
    assert "run.no_such_key" in line and "job 0 of the sweep" in line


def test_remembered_checks_tell_apart_values_python_calls_equal() -> None:
    # 1 == 1.0 == True in Python; the schema's answers differ, so the remembered results must too
    assert typed_values(RunSettings, {"top_k": 10}, "run") == {"top_k": 10}
    with pytest.raises(Exception, match="top_k"):
        typed_values(RunSettings, {"top_k": 10.5}, "run")
    with pytest.raises(Exception, match="top_k"):
        typed_values(RunSettings, {"top_k": True}, "run")
    # a result handed out is a copy: changing it changes no later answer
    first = typed_values(RunSettings, {"top_k": 10}, "run")
    first["top_k"] = 99
    assert typed_values(RunSettings, {"top_k": 10}, "run") == {"top_k": 10}
