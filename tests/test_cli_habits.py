"""Habits from other command lines (issue 25, items 2 and 5): ``--key value`` gets the
``key=value`` form to type, typos get a "did you mean", ``dataset=irds:<id>`` works as the docs
write it."""

from __future__ import annotations

import subprocess

import pytest
from conftest import run_cli

from viking_eval import cli
from viking_eval.config.errors import did_you_mean


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args)


@pytest.mark.parametrize(
    ("args", "refused", "typed"),
    [
        (
            ("--experiment", "smoke"),
            "--experiment",
            "experiment=smoke",
        ),  # was --experimental-rerun: a traceback
        (("--dataset", "adi"), "--dataset", "dataset=adi"),  # was Hydra's usage text
        (("--dataset=adi",), "--dataset=adi", "dataset=adi"),
        (("-m", "--run.top_k", "5"), "--run.top_k", "run.top_k=5"),
    ],
)
def test_a_key_given_as_an_option_gets_the_form_to_type(
    args: tuple[str, ...], refused: str, typed: str
) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: command line: {refused!r} is not an option; Hydra takes settings as key=value: type {typed} "
        "(python -m viking_eval --help lists the options)"
    ]


def test_hydra_flags_and_overrides_pass_unchanged_and_irds_names_become_dataset_name() -> None:
    argv = ["-m", "--config-dir", "/tmp/x", "--cfg", "job", "experiment=smoke", "run.top_k=-1"]
    assert cli.habits(argv) == argv
    assert cli.habits(["dataset=irds:beir/scifact/test", "experiment=smoke"]) == [
        "dataset.name=irds:beir/scifact/test",
        "experiment=smoke",
    ]
    assert cli.habits(["--config-name", "dataset=irds:x"]) == [
        "--config-name",
        "dataset=irds:x",
    ]  # a flag's value


def test_dataset_irds_as_the_docs_write_it_passes_the_pre_flight() -> None:
    """``dataset=irds:<id>`` was refused at composition (``no option``); now the run reads the
    collection through ir_datasets like ``dataset.name=irds:<id>`` (the pre-flight reads no data)."""
    cli.preflight(cli.habits(["experiment=smoke", "dataset=irds:cranfield"]))


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (("experiment=smokee",), "no option 'smokee' (did you mean 'smoke'?)"),
        (("dataset=adii",), "no option 'adii' (did you mean 'adi'?)"),
        (("store.bm25.k=1",), "no such key (did you mean 'k1'?)"),
        (("run.topk=5",), "no such key (did you mean 'top_k'?)"),
    ],
)
def test_a_typo_gets_a_did_you_mean(args: tuple[str, ...], suggestion: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert suggestion in line


def test_did_you_mean_names_only_close_choices() -> None:
    assert did_you_mean("k", ["k1", "b", "method"]) == " (did you mean 'k1'?)"
    assert did_you_mean("zzz", ["k1", "b", "method"]) == ""
