"""Shared fixtures. Tests never touch the network or the user's cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The shared BEIR datasets folder (../shared/datasets from the repo root)."""
    if not (SHARED_DATASETS / "adi").is_dir():
        raise RuntimeError(
            f"shared datasets not found at {SHARED_DATASETS}; tests need ../shared beside the repo"
        )
    return SHARED_DATASETS


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own embedding/store cache, and the in-process memo starts empty."""
    from viking_eval.cache import clear_memo

    monkeypatch.setenv("VIKING_EVAL_CACHE", str(tmp_path_factory.mktemp("cache")))
    clear_memo()
