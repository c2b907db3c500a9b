"""Benchmarks run in one process: pyproject.toml's ``addopts`` spread the tests over pytest-xdist
workers, and pytest-benchmark turns itself off under xdist (timings taken beside another worker
would measure the neighbour). This runs before both plugins configure themselves."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.option.dist = "no"
    config.option.numprocesses = None
