"""The gate runs its independent checks in worker processes (viking_eval/gate/checks.py,
``run_checks``): the summaries are the ones a one-process run gives, in the file's order, each
check's output is printed whole between its ``running`` and ``done`` lines, and a check that
fails in a worker raises its own error, as in one process."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from viking_eval.data import DataError
from viking_eval.gate.checks import PlannedCheck, gate_workers, run_checks


def _planned(*names: str) -> list[PlannedCheck]:
    return [
        PlannedCheck(SimpleNamespace(name=name, command=f"cmd-{name}"), name, "", None)  # type: ignore[arg-type]
        for name in names
    ]


def _run(settings: Any, output_dir: Path, *, config_yaml: str = "") -> dict[str, Any]:
    """A stand-in for run_experiment: a summary naming the check, its folder and process."""
    print(f"progress of {settings}", file=sys.stderr, flush=True)
    if settings == "broken":
        raise DataError(f"check {settings} has bad data")
    return {"check": settings, "folder": output_dir, "pid": os.getpid()}


def test_workers_give_the_one_process_summaries_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = ("a", "b", "c", "d", "e")
    alone = run_checks(_planned(*names), tmp_path, _run, workers=1)  # type: ignore[arg-type]
    capsys.readouterr()
    shared = run_checks(_planned(*names), tmp_path, _run, workers=2)  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert list(shared) == list(alone) == list(names)
    strip = {name: {k: v for k, v in summary.items() if k != "pid"} for name, summary in shared.items()}
    assert strip == {name: {"check": name, "folder": tmp_path / name} for name in names}
    assert {summary["pid"] for summary in alone.values()} == {os.getpid()}
    assert os.getpid() not in {summary["pid"] for summary in shared.values()}  # each ran in a worker
    lines = err.splitlines()
    assert lines[0] == "gate: 5 checks, 2 at a time"
    for number, name in enumerate(names, start=1):
        # the check's own output stands whole between its running and done lines
        done = next(
            i for i, line in enumerate(lines) if line.startswith(f"gate [{number}/5] {name}: done in ")
        )
        assert lines[done - 1] == f"progress of {name}"
        assert lines.index(f"gate [{number}/5] {name}: running cmd-{name}") < done - 1


def test_a_check_failing_in_a_worker_raises_its_own_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(DataError, match=r"^check broken has bad data$"):
        run_checks(_planned("a", "broken", "c"), tmp_path, _run, workers=2)  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "gate [2/3] broken: failed in a worker after" in err
    assert "gate [3/3] c: done in" in err  # the other checks finished first


def test_workers_default_to_the_cores_and_at_most_the_checks() -> None:
    cores = len(os.sched_getaffinity(0))
    assert gate_workers(1) == 1
    assert gate_workers(100) == cores
