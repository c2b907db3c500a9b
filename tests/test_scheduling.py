"""The test session's scheduling (tests/conftest.py): under ``--dist loadfile`` a file runs whole on
one pytest-xdist worker, except a file that sets ``SPREAD_OVER_WORKERS = True``, whose tests are
scheduled one by one; a file that sets ``START_FIRST = True`` is sent to a worker before the others."""

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


class _Node:
    """A worker that records the test indexes it is sent."""

    def __init__(self) -> None:
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(indexes)


def test_files_that_start_first_are_sent_before_the_larger_scopes() -> None:
    scheduler = conftest.pytest_xdist_make_scheduler(_Config("loadfile"), None)
    scopes = {  # as xdist orders them: most tests first
        "tests/test_configs.py": ["tests/test_configs.py::a", "tests/test_configs.py::b"],
        "tests/test_ray_cluster_jobs.py": ["tests/test_ray_cluster_jobs.py::c"],
        "tests/test_scheduling.py": ["tests/test_scheduling.py::d"],
        "tests/test_tuned_presets.py": ["tests/test_tuned_presets.py::e"],
    }
    collection = [nodeid for nodeids in scopes.values() for nodeid in nodeids]
    for scope, nodeids in scopes.items():
        scheduler.workqueue[scope] = dict.fromkeys(nodeids, False)
    node = _Node()
    scheduler.registered_collections[node] = collection
    for _ in scopes:
        scheduler._assign_work_unit(node)
    sent = [[collection[index] for index in indexes] for indexes in node.sent]
    # both files that set START_FIRST, in the queue's order, then the rest in the queue's order
    assert [nodeids[0].split("::")[0] for nodeids in sent] == [
        "tests/test_ray_cluster_jobs.py",
        "tests/test_tuned_presets.py",
        "tests/test_configs.py",
        "tests/test_scheduling.py",
    ]
    assert sent[2] == scopes["tests/test_configs.py"]  # a file's tests go together
    assert conftest._file_sets("tests/test_tuned_presets.py", conftest.FIRST_LINE)
    assert not conftest._file_sets("tests/test_scheduling.py", conftest.FIRST_LINE)  # said only in text
