"""A sweep folder (DESIGN.md section 5): the only module that reads or writes its own files.

A sweep folder (``hydra.sweep.dir``) holds one run folder per job (``<job number>/``, written as
any run by ``run_folder.py``, plus ``sweep_job.json``: which sweep command finished the job),
``sweep.csv``, ``sweep.md`` and ``sweep.html`` (one row per job and retriever of the current
command), the sweep plots (``*.png``, rendered by ``report/sweep_plots.py``), ``best.yaml`` and
the run folders ``best_final/`` and ``default_final/`` (the chosen and the default configuration
evaluated once on the reported split; ``sweep/best.py``). Every write is atomic
(``viking_eval/files.py``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from viking_eval import files
from viking_eval.results import layout
from viking_eval.results.run_folder import RunFolderError, is_finished_run, read_json_object

if TYPE_CHECKING:
    from viking_eval.report.sweep_plots import Plot


def job_folders(sweep_dir: Path) -> list[Path]:
    """The finished job folders of a sweep folder (Hydra's numbered sub-folders holding a finished
    run: ``run_folder.is_finished_run``, so a job marked failed is not one), in job-number order."""
    return sorted(
        (
            path
            for path in sweep_dir.iterdir()
            if path.is_dir() and (path / ".hydra").is_dir() and is_finished_run(path)
        ),
        key=lambda path: (len(path.name), path.name),
    )


def read_job_overrides(job_dir: Path) -> list[str]:
    """The job's own overrides (Hydra's ``.hydra/overrides.yaml``)."""
    path = job_dir / ".hydra" / "overrides.yaml"
    overrides = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else []
    return [str(override) for override in overrides or []]


def job_folder_clash(job_dir: Path, overrides: Sequence[str]) -> str | None:
    """Why the sweep job with ``overrides`` may not write into ``job_dir`` (what the folder holds),
    None when it may: the folder does not exist or is empty, or it records the same job (the same
    overrides, in any order; ``.hydra/overrides.yaml``). A folder reused by another job would be
    overwritten, file by file, by a job it never held. Hydra's job log (``*.log``) alone, left by
    a job killed before it recorded its overrides, records no job."""
    if not job_dir.exists():
        return None
    if not job_dir.is_dir():
        return "a file, not a job folder"
    record = job_dir / ".hydra" / "overrides.yaml"
    if not record.is_file():
        leftovers = [
            path.name
            for path in sorted(job_dir.iterdir())
            if not (path.is_file() and path.suffix == ".log")
            and not (path.is_dir() and not any(path.iterdir()))
        ]
        return f"files of no recorded job ({', '.join(leftovers[:5])})" if leftovers else None
    try:
        recorded = read_job_overrides(job_dir)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, TypeError) as error:
        return f"a job whose {record.name} cannot be read ({type(error).__name__})"
    if sorted(recorded) == sorted(str(line) for line in overrides):
        return None
    return f"another job ({' '.join(recorded) or 'no overrides'})"


def clear_sweep_tag(job_dir: Path) -> None:
    """A job starts (again): until it finishes, the folder belongs to no sweep command."""
    (job_dir / layout.SWEEP_TAG).unlink(missing_ok=True)


def write_sweep_tag(job_dir: Path, sweep: str, command: Mapping[str, Any], overrides: Sequence[str]) -> None:
    """``sweep_job.json``: the job finished as part of the sweep command whose identity is
    ``sweep`` (``command`` holds what the identity was computed from)."""
    files.write_json(
        job_dir / layout.SWEEP_TAG, {"sweep": sweep, "command": dict(command), "overrides": list(overrides)}
    )


def read_sweep_tag(job_dir: Path) -> dict[str, Any] | None:
    path = job_dir / layout.SWEEP_TAG
    if not path.is_file():
        return None
    try:
        return read_json_object(path)
    except RunFolderError:
        return None


def read_best(sweep_dir: Path) -> dict[str, Any] | None:
    """A sweep folder's best.yaml, or None when the sweep wrote none."""
    path = sweep_dir / layout.BEST
    if not path.is_file():
        return None
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise RunFolderError(f"{path}: expected a mapping, got {type(document).__name__}")
    return document


def write_best(sweep_dir: Path, document: Mapping[str, Any]) -> Path:
    """``best.yaml``: the chosen job and both configurations on the reported split (``sweep/best.py``)."""
    path = sweep_dir / layout.BEST
    files.write_text(path, yaml.safe_dump(dict(document), sort_keys=False))
    return path


def write_sweep_csv(sweep_dir: Path, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> Path:
    """``sweep.csv``: one row per job and retriever (``columns``; a cell missing from a row is empty)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path = sweep_dir / layout.SWEEP_CSV
    files.write_text(path, buffer.getvalue())
    return path


def write_plots(sweep_dir: Path, plots: Sequence[Plot]) -> None:
    """The sweep plots, each under its own name (PNG bytes rendered by ``report/sweep_plots.py``)."""
    for plot in plots:
        files.write_bytes(sweep_dir / plot.name, plot.png)


def write_sweep_pages(sweep_dir: Path, markdown: str, page: str) -> None:
    """``sweep.md`` and ``sweep.html`` (rendered by ``sweep/summary.py`` and ``report/page.py``)."""
    files.write_text(sweep_dir / layout.SWEEP_MD, markdown)
    files.write_text(sweep_dir / layout.SWEEP_HTML, page)
