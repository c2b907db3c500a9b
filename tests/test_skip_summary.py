"""Without the shared datasets, the tests that need them skip with one summary line, however
many there are (issue 25 item 8; the reason used to be printed once per test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_absent_data_is_one_skip_line(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIKING_EVAL_NO_SKIP", "VIKING_EVAL_DATA", "VIKING_EVAL_RAW", "PYTEST_ADDOPTS")
    }
    env.update(VIKING_EVAL_DATA=str(tmp_path / "none"), XDG_DATA_HOME=str(tmp_path / "data-home"))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_splits.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED [")]
    assert len(skips) == 1, skips
    count = int(skips[0].split("[", 1)[1].split("]", 1)[0])
    assert count >= 2 and "tests/conftest.py: needs the shared datasets" in skips[0]
