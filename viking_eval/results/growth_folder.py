"""What a growth run (``experiment=locomo_growth``, viking_eval/growth/) writes into its folder:
each step's folder (``per_query.csv``, then ``step.json``, the step's marker), then the report's
plots and pages, ``environment.json`` and ``growth.json`` last (``layout.GROWTH``: the run
finished, see ``run_folder.is_finished_output``)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from viking_eval import files
from viking_eval.results import layout, run_folder

__all__ = ["drop_step_runs", "write_growth", "write_step_record"]


def write_step_record(folder: Path, record: Mapping[str, Any]) -> None:
    """A step's ``step.json`` (atomic): written after its ``per_query.csv``, it marks the step
    finished."""
    files.write_json(folder / layout.GROWTH_STEP, dict(record))


def drop_step_runs(folder: Path) -> None:
    """A step's ``runs/`` folder, removed once its metrics are read (``growth.keep_runs=false``)."""
    shutil.rmtree(folder / layout.RUNS, ignore_errors=True)


def write_growth(
    folder: Path,
    *,
    pngs: Mapping[str, bytes],
    texts: Mapping[str, str],
    environment: Mapping[str, Any],
    document: Mapping[str, Any],
) -> None:
    """The report (``pngs`` and ``texts`` by file name), ``environment.json``, then
    ``growth.json``; a ``status.json`` an earlier failed attempt left is removed last."""
    for name, data in pngs.items():
        files.write_bytes(folder / name, data)
    for name, text in texts.items():
        files.write_text(folder / name, text)
    files.write_json(folder / layout.ENVIRONMENT, dict(environment))
    files.write_json(folder / layout.GROWTH, dict(document))
    run_folder.clear_failed(folder)
