"""The tests' in-process command line (tests/conftest.py: ``run_cli``, ``cli_in_this_process``)
is what a user's ``python -m viking_eval`` is: the same exit status, the same error line, the same
run files, and nothing of the command is left in the test worker afterwards."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import IN_THIS_PROCESS, child_environment, cli_in_this_process, run_cli

SMOKE = ("experiment=smoke", "run.latency.n_queries=0", "show_progress=false")


@pytest.mark.needs_data
def test_a_run_here_writes_the_files_a_child_process_writes(data_env: Path, tmp_path: Path) -> None:
    here = run_cli(*SMOKE, f"hydra.run.dir={tmp_path / 'here'}")
    child = run_cli(*SMOKE, f"hydra.run.dir={tmp_path / 'child'}", fresh_process=True)
    assert here.returncode == child.returncode == 0, here.stderr[-2000:] + child.stderr[-2000:]
    assert (here.args[0], child.args[0]) == (IN_THIS_PROCESS, sys.executable)
    for name in ("runs/bm25.trec", "runs/dense.trec", "per_query.csv", "significance.csv"):
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "child" / name).read_bytes(), name
    # the summary table (the run times nothing: its latency columns are '-') and the report's path
    assert here.stdout.replace(str(tmp_path / "here"), "RUN") == child.stdout.replace(
        str(tmp_path / "child"), "RUN"
    )


@pytest.mark.needs_data
@pytest.mark.parametrize(
    "overrides",
    [("run.top_k=0",), ("dataset=adii",), ("+retrievers.x._target_=nope.mod.Cls",)],
    ids=["bad value", "typo", "bad target"],
)
def test_a_refused_command_is_the_same_line_and_status_here(
    data_env: Path, tmp_path: Path, overrides: tuple[str, ...]
) -> None:
    argv = (*SMOKE, *overrides, f"hydra.run.dir={tmp_path / 'run'}")
    here, child = run_cli(*argv), run_cli(*argv, fresh_process=True)
    assert (here.returncode, here.stderr, here.stdout) == (child.returncode, child.stderr, child.stdout)
    assert here.returncode == 2 and here.stderr.startswith("error: ") and here.stderr.count("\n") == 1


@pytest.mark.needs_data
def test_nothing_of_the_command_stays_in_the_worker(data_env: Path, tmp_path: Path) -> None:
    root = logging.getLogger()
    before = (dict(os.environ), os.getcwd(), list(sys.argv), list(root.handlers), root.level)
    done = cli_in_this_process(
        [*SMOKE, f"hydra.run.dir={tmp_path / 'run'}"], env=child_environment({"VIKING_EVAL_PROBE": "1"})
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "run" / "metrics.json").is_file()
    assert (dict(os.environ), os.getcwd(), list(sys.argv), list(root.handlers), root.level) == before
    assert "VIKING_EVAL_PROBE" not in os.environ


@pytest.mark.needs_data
def test_a_launcher_command_runs_in_a_child(data_env: Path, tmp_path: Path) -> None:
    # a launcher's processes must not outlive the command in the worker: run_cli starts a child
    done = run_cli(
        "-m", *SMOKE, f"hydra.sweep.dir={tmp_path / 'sweep'}", "hydra/launcher=basic", "store.bm25.k1=0.9"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.args[:3] == [sys.executable, "-m", "viking_eval"]
    assert (tmp_path / "sweep" / "0" / "metrics.json").is_file()


def test_a_command_over_its_time_is_stopped_as_a_child_would_be(monkeypatch: pytest.MonkeyPatch) -> None:
    from viking_eval import cli

    cwd = os.getcwd()
    monkeypatch.setattr(cli, "main", lambda: threading.Event().wait())  # a command that never ends
    with pytest.raises(subprocess.TimeoutExpired) as stopped:
        cli_in_this_process(["experiment=smoke"], env=child_environment(), timeout=1)
    assert stopped.value.timeout == 1 and stopped.value.cmd == [IN_THIS_PROCESS, "experiment=smoke"]
    assert os.getcwd() == cwd and signal.getsignal(signal.SIGALRM) == signal.SIG_DFL and signal.alarm(0) == 0
