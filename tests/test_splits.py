"""Tune on one split, report on another."""

from __future__ import annotations

from pathlib import Path

import pytest

from viking_eval.data import load_dataset
from viking_eval.data.splits import choose_split, take_half

pytestmark = pytest.mark.needs_data  # every test here reads a shared dataset


def test_auto_tune_split_per_dataset(shared_datasets: Path) -> None:
    def choice(name: str, phase: str = "tune", tune_split: str | None = "auto"):  # type: ignore[no-untyped-def]
        return choose_split(shared_datasets / name, phase, split="test", tune_split=tune_split)  # type: ignore[arg-type]

    assert choice("scifact").label == "train"
    assert choice("cosqa").label == "dev"
    assert choice("adi").label == "test[tune half]"
    assert choice("adi", "final").label == "test[holdout half]"
    assert choice("scifact", "final").label == "test"
    assert choice("scifact", "report").label == "test"
    assert choice("scifact", tune_split=None).on_reported_split
    assert choice("scifact", tune_split="test").on_reported_split
    assert not choice("scifact").on_reported_split


def test_halves_are_disjoint_cover_and_deterministic(shared_datasets: Path) -> None:
    dataset = load_dataset(str(shared_datasets / "adi"))
    tune = take_half(dataset, "tune", key=None, seed=0)
    holdout = take_half(dataset, "holdout", key=None, seed=0)
    assert set(tune.queries).isdisjoint(holdout.queries)
    assert set(tune.queries) | set(holdout.queries) == set(dataset.queries)
    assert len(tune.queries) == (len(dataset.queries) + 1) // 2
    assert set(take_half(dataset, "tune", key=None, seed=0).queries) == set(tune.queries)
    assert set(take_half(dataset, "tune", key=None, seed=1).queries) != set(tune.queries)
    assert set(tune.qrels) == set(tune.queries)


def test_partition_by_key_keeps_conversations_whole(shared_datasets: Path) -> None:
    dataset = load_dataset(str(shared_datasets / "locomo"))
    tune = take_half(dataset, "tune", key="conversation", seed=0)
    holdout = take_half(dataset, "holdout", key="conversation", seed=0)
    tune_convs = {q.metadata["conversation"] for q in tune.queries.values()}
    holdout_convs = {q.metadata["conversation"] for q in holdout.queries.values()}
    assert tune_convs.isdisjoint(holdout_convs)
    assert len(tune_convs) == len(holdout_convs) == 5
