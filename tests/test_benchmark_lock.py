"""Two benchmark runs into one folder: the second refuses with one line and exit 2 while the
first holds ``benchmark.lock``, before it runs anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from viking_eval.benchmark.run import LOCK_FILE

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.needs_data
def test_a_second_benchmark_into_a_busy_folder_refuses(shared_datasets: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench"
    out.mkdir()
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "VIKING_EVAL_DATA": str(shared_datasets)}
    environment.pop("VIKING_EVAL_DEBUG", None)
    command = [
        sys.executable,
        "-m",
        "viking_eval",
        "experiment=smoke",
        "benchmark.datasets=[adi]",
        "run.latency.n_queries=0",
        "show_progress=false",
        f"hydra.run.dir={out}",
    ]
    with FileLock(str(out / LOCK_FILE)):  # the first run, still working
        done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        f"error: {out}: another benchmark is running into this folder (it holds {out / LOCK_FILE}); wait "
        "for it to finish, or give this one another hydra.run.dir"
    ]
    assert not (out / "adi").exists() and not (out / "benchmark.json").exists()  # nothing ran
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]  # free again: the run goes ahead
    assert (out / "benchmark.json").is_file()
