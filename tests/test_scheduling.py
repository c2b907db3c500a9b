"""The test session's scheduling (tests/conftest.py): under ``--dist loadfile`` a file runs whole on
one pytest-xdist worker, except a file that sets ``SPREAD_OVER_WORKERS = True``, whose tests are
scheduled one by one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import conftest


class _Config:
    """What the scheduler reads of pytest's config: the --dist mode and two workers (``--tx 2*popen``)."""

    def __init__(self, dist: str) -> None:
        self.dist = dist
        self.option = type("Option", (), {"numprocesses": 2, "tx": ["2*popen"], "dist": dist})()

    def getvalue(self, name: str) -> Any:
        return getattr(self.option, name)


def test_a_spread_file_is_scheduled_test_by_test_and_any_other_file_whole() -> None:
    scheduler = conftest.pytest_xdist_make_scheduler(_Config("loadfile"), None)
    spread = "tests/test_doc_blocks.py::test_block_runs_as_written[README.md:12]"
    whole = "tests/test_scheduling.py::test_a_spread_file_is_scheduled_test_by_test_and_any_other_file_whole"
    assert scheduler._split_scope(spread) == spread
    assert scheduler._split_scope(whole) == "tests/test_scheduling.py"
    assert scheduler._split_scope("tests/test_timeparse.py::test_x[a::b]") == "tests/test_timeparse.py"
    assert conftest.pytest_xdist_make_scheduler(_Config("load"), None) is None  # xdist's own


def test_only_a_top_level_true_spreads(tmp_path: Path) -> None:
    assert conftest._spreads("tests/test_doc_blocks.py")
    assert not conftest._spreads("tests/test_scheduling.py")  # this file says it only in text
    assert not conftest._spreads("tests/no_such_file.py")
    for text, spreads in [
        ("SPREAD_OVER_WORKERS = True\n", True),
        ("x = 1\nSPREAD_OVER_WORKERS = True  # why\n", True),
        ("SPREAD_OVER_WORKERS = False\n", False),
        ("    SPREAD_OVER_WORKERS = True\n", False),  # not at the top level
        ("SPREAD_OVER_WORKERS = Truest\n", False),
    ]:
        assert (conftest.SPREAD_LINE.search(text) is not None) is spreads, text
