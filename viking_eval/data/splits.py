"""Tune on one split, report on another.

A sweep or study evaluates every job on the *tuning* split; the chosen configuration is then
evaluated once on the reported split. ``dataset.tune_split``:

- a split name (``train``, ``dev``): that qrels file;
- ``auto`` (default): ``train`` if the dataset has it, else ``dev``, else ``partition``;
- ``partition``: the reported split's queries are divided in two halves by a seeded hash of
  ``partition_key`` (a query metadata key such as LoCoMo's ``conversation``, so that whole
  conversations fall on one side) or of the query id; sweeps see the ``tune`` half, the final
  evaluation the ``holdout`` half;
- ``null`` or the reported split itself: tuning on the reported split. Allowed, but it overfits
  that split: a warning is printed and the report is marked.

A single run evaluates all of ``split`` (``dataset.half: all``) or one half of that same seeded
partition (``tune`` or ``holdout``: exactly the queries a sweep's jobs, or its ``best.yaml``,
evaluate), so that a configuration chosen on the tune half is reported on the queries it was not
chosen on. A half exists only where ``tune_split`` resolves to ``partition``; elsewhere the sweeps
tuned on another split and the whole of ``split`` is held out (``dataset.half`` must be ``all``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from viking_eval.data.dataset import BeirDataset
from viking_eval.data.resolve import find_or_download, load_dataset

log = logging.getLogger(__name__)

Phase = Literal["report", "tune", "final"]
HALVES = ("all", "tune", "holdout")  # dataset.half: the queries of the reported split a single run evaluates


@dataclass(frozen=True)
class SplitChoice:
    """Which qrels split a phase evaluates, and which half of its queries (None = all)."""

    split: str
    half: Literal["tune", "holdout"] | None = None
    on_reported_split: bool = False  # tuning evaluates the split that is reported: overfits it

    @property
    def label(self) -> str:
        return self.split if self.half is None else f"{self.split}[{self.half} half]"


def available_splits(folder: Path) -> list[str]:
    return sorted(path.stem for path in (folder / "qrels").glob("*.tsv"))


def resolve_tune_split(folder: Path, split: str, tune_split: str | None) -> str | None:
    """``tune_split`` with ``auto`` replaced by what it means for the dataset in ``folder``."""
    if tune_split != "auto":
        return tune_split
    splits = available_splits(folder)
    return next((name for name in ("train", "dev") if name in splits and name != split), "partition")


def _half_error(detail: str) -> Exception:
    """The ConfigError of a ``dataset.half`` that cannot be evaluated. Imported when raised: the
    config package loads Hydra and OmegaConf, which code that only loads a dataset or takes a
    half (a service evaluating a tuned retriever, tests/test_tuned_presets.py) must not pay for."""
    from viking_eval.config.errors import ConfigError

    return ConfigError("dataset.half", detail)


def check_half_for_sweep(half: str) -> None:
    """A sweep picks its halves itself (jobs: ``tune``, ``best.yaml``: ``holdout``): a multirun
    with ``dataset.half`` other than ``all`` is refused."""
    if half != "all":
        raise _half_error(
            f"{half!r} is for a single run; the jobs of a sweep or study evaluate the tune half and "
            "best.yaml the holdout half themselves: set dataset.half=all",
        )


def choose_split(
    folder: Path,
    phase: Phase,
    *,
    split: str,
    tune_split: str | None,
    partition_key: str | None = None,
    half: str = "all",
) -> SplitChoice:
    """The split a ``phase`` evaluates: ``report`` (a single run) -> ``split``, or its ``half``
    (``tune``/``holdout``) of the partition a sweep uses; ``tune`` (a sweep job) -> the tuning
    split; ``final`` (the chosen configuration after a sweep) -> ``split``, or its holdout half
    when tuning used the other half. A ``half`` that no sweep would make raises ConfigError."""
    if half not in HALVES:
        raise _half_error(f"{half!r} is not one of {', '.join(HALVES)}")
    if phase == "report":
        if half == "all":
            return SplitChoice(split)
        resolved = resolve_tune_split(folder, split, tune_split)
        if resolved != "partition":
            raise _half_error(
                f"{half!r}: {folder.name} has no {half} half of {split!r}: dataset.tune_split "
                f"{tune_split!r} resolves to {resolved!r}, so sweeps tune on "
                f"{'the reported split itself' if resolved in (None, split) else repr(resolved)}, "
                f"not on half of {split!r}; set dataset.half=all (or dataset.tune_split=partition)",
            )
        return SplitChoice(split, "tune" if half == "tune" else "holdout")
    check_half_for_sweep(half)
    resolved = resolve_tune_split(folder, split, tune_split)
    if phase == "final":
        return SplitChoice(split, "holdout" if resolved == "partition" else None)
    if resolved == "partition":
        return SplitChoice(split, "tune")
    if resolved is None or resolved == split:
        return SplitChoice(split, None, on_reported_split=True)
    return SplitChoice(resolved)


def _rank(seed: int, value: str) -> str:
    return hashlib.sha256(f"{seed}:{value}".encode()).hexdigest()


def take_half(
    dataset: BeirDataset, half: Literal["tune", "holdout"], *, key: str | None, seed: int
) -> BeirDataset:
    """The queries (and their judgments) of one half of a seeded partition. Groups (values of
    ``key``, or single query ids) are ordered by sha256(seed, group); the first ceil(n/2) groups
    form the ``tune`` half."""
    group_of = {
        qid: (str(query.metadata.get(key, qid)) if key is not None else qid)
        for qid, query in dataset.queries.items()
    }
    groups = sorted(set(group_of.values()), key=lambda group: (_rank(seed, group), group))
    tune_groups = set(groups[: (len(groups) + 1) // 2])
    keep = [qid for qid in dataset.queries if (group_of[qid] in tune_groups) == (half == "tune")]
    selection = f"{half} half of a partition by {key or 'query id'}, seed {seed}"
    return dataclasses.replace(
        dataset,
        split=f"{dataset.split}[{half} half]",
        # the label above does not name the key and seed; the subset does, so the dataset's
        # fingerprint (a resume key) changes with them
        subset=f"{dataset.subset}; {selection}" if dataset.subset else selection,
        queries={qid: dataset.queries[qid] for qid in keep},
        qrels={qid: dataset.qrels[qid] for qid in keep},
    )


def load_for_phase(
    name_or_path: str,
    phase: Phase,
    *,
    split: str,
    tune_split: str | None,
    strict: bool = False,
    partition_key: str | None = None,
    partition_seed: int = 0,
    download: str = "never",
    half: str = "all",
) -> tuple[BeirDataset, SplitChoice]:
    """The dataset a ``phase`` evaluates (``half``: ``dataset.half``, see choose_split).
    ``download="auto"`` first fetches a dataset that is found nowhere but that the registry can
    download (viking_eval.data.resolve.find_or_download)."""
    folder = find_or_download(name_or_path, download=download)
    choice = choose_split(
        folder, phase, split=split, tune_split=tune_split, partition_key=partition_key, half=half
    )
    if choice.on_reported_split:
        log.warning(
            "tuning on the reported split %r overfits it; set dataset.tune_split (e.g. train, dev or partition)",
            split,
        )
    dataset = load_dataset(name_or_path, choice.split, strict=strict)
    if choice.half is not None:
        dataset = take_half(dataset, choice.half, key=partition_key, seed=partition_seed)
    return dataset, choice
