"""Multirun summary: when a Hydra sweep ends, ``sweep.csv`` and ``sweep.md`` in the sweep folder
hold one row per (job, retriever) of the current command: the job's overrides, every metric, the
latency figures and the job's cost (``job_seconds``: the wall time of the job's work, store and
embeddings included, kept when the job is resumed).

A job folder (``<sweep dir>/<job number>``) is reused only by the same job: before any job runs,
every job of a command is compared with what its folder records (``.hydra/overrides.yaml``); a
folder holding another job (another grid, another search space sent into the same
``hydra.sweep.dir``) refuses the whole command with one line (exit 2) and nothing is written.
Resuming the same command reuses its folders, and the finished retrievers in them
(``results/<name>.json``) are not rerun. The Optuna sweeper makes the same check for each trial
before launching it (hydra_plugins/viking_optuna_sweeper).

Only the current command's jobs count. A sweep folder resumed with a command whose jobs are the
same as the folder's jobs of those numbers (a one-key grid with values added at its end, or its
first values only) still holds folders of the old command's other jobs; they are left as they
were. Each job that finishes writes ``sweep_job.json`` in its folder with the identity of the
command that ran it (``sweep_identity``: the command line's task overrides and
``hydra.sweeper.params``); the summary and ``best.yaml`` read only the folders carrying the
current identity, and report how many others they ignored (never deleting them). A resumed Optuna study with the same command keeps its earlier trials.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from tabulate import tabulate

from viking_eval.report.page import sweep_html
from viking_eval.report.sweep_plots import sweep_plots
from viking_eval.results import run_folder, sweep_folder
from viking_eval.run import ann_quality

log = logging.getLogger(__name__)

LATENCY_COLUMNS = ["p50_ms", "p95_ms", "qps"]
COST_COLUMNS = [*LATENCY_COLUMNS, "job_seconds"]


def _override_pairs(job_dir: Path) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for override in sweep_folder.read_job_overrides(job_dir):
        key, _, value = override.partition("=")
        pairs[key.lstrip("+~")] = value
    return pairs


def sweep_command(config: DictConfig) -> dict[str, Any]:
    """What defines a sweep command's jobs: its task overrides (sorted, as typed, sweep syntax
    included) and the sweeper's search space (``hydra.sweeper.params``)."""
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
    overrides = OmegaConf.select(config, "hydra.overrides.task", default=None) or []
    return {
        "task_overrides": sorted(str(override) for override in overrides),
        "sweeper_params": OmegaConf.to_container(params, resolve=True) if params is not None else None,
    }


def sweep_identity(command: dict[str, Any]) -> str:
    text = json.dumps(command, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SweepJobs:
    """The finished job folders of a sweep folder, split into the current command's and the rest."""

    current: list[Path]
    ignored: list[Path]


def sweep_jobs(sweep_dir: Path, identity: str | None = None) -> SweepJobs:
    """Finished jobs of ``sweep_dir``; with ``identity``, only those a command with that identity
    finished (its ``sweep_job.json``, whose overrides must be the folder's own) are current."""
    finished = sweep_folder.job_folders(sweep_dir)
    if identity is None:
        return SweepJobs(current=finished, ignored=[])
    current: list[Path] = []
    ignored: list[Path] = []
    for job_dir in finished:
        tag = sweep_folder.read_sweep_tag(job_dir)
        mine = (
            tag is not None
            and tag.get("sweep") == identity
            and tag.get("overrides") == sweep_folder.read_job_overrides(job_dir)
        )
        (current if mine else ignored).append(job_dir)
    return SweepJobs(current=current, ignored=ignored)


def collect_sweep(sweep_dir: Path, identity: str | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """Rows of every finished job of the current command below ``sweep_dir`` (jobs are numbered
    sub-folders; ``identity`` None: every finished job)."""
    override_keys: list[str] = []
    rows: list[dict[str, Any]] = []
    for job_dir in sweep_jobs(sweep_dir, identity).current:
        pairs = _override_pairs(job_dir)
        for key in pairs:
            if key not in override_keys:
                override_keys.append(key)
        document = run_folder.read_metrics(job_dir)
        for name, entry in document["retrievers"].items():
            latency = entry.get("latency") or {}
            rows.append(
                {
                    "job": job_dir.name,
                    **pairs,
                    "retriever": name,
                    **entry["metrics"],
                    **{key: latency.get(key) for key in LATENCY_COLUMNS},
                    "job_seconds": document.get("wall_seconds"),
                    # numeric per-query stats a retriever reports (runner.provenance_stats),
                    # e.g. the fraction of tree nodes scored: the cost side of a trade-off
                    **{
                        f"stats.{key}": value
                        for key, value in (entry.get("stats") or {}).items()
                        if isinstance(value, int | float)
                        and not isinstance(value, bool)
                        and key != "n_queries"
                    },
                }
            )
    return override_keys, rows


def write_sweep_summary(sweep_dir: Path, identity: str | None = None) -> Path | None:
    """Write sweep.csv, sweep.md and sweep.html (plots embedded) from the current command's jobs;
    returns the csv path, None if no job finished."""
    override_keys, rows = collect_sweep(sweep_dir, identity)
    if not rows:
        log.warning("no finished jobs in %s; no sweep summary written", sweep_dir)
        return None
    metric_keys: list[str] = []
    for row in rows:
        for key in row:
            if key not in metric_keys and key not in {"job", "retriever", *override_keys, *COST_COLUMNS}:
                metric_keys.append(key)
    columns = ["job", *override_keys, "retriever", *metric_keys, *COST_COLUMNS]
    csv_path = sweep_folder.write_sweep_csv(sweep_dir, columns, rows)

    def cell(value: Any) -> str:
        return f"{value:.4f}" if isinstance(value, float) else "" if value is None else str(value)

    table = tabulate(
        [[cell(row.get(column)) for column in columns] for row in rows],
        headers=columns,
        tablefmt="github",
        disable_numparse=True,
    )
    swept = [key for key in override_keys if len({row.get(key) for row in rows}) > 1]
    plots = sweep_plots(rows, swept, metric_keys[0]) if swept and metric_keys else []
    # ANN recall against latency too (ef_search, nprobe, refine_factor)
    if swept and ann_quality.METRIC in metric_keys[1:]:
        plots += sweep_plots(rows, swept, ann_quality.METRIC)
    sweep_folder.write_plots(sweep_dir, plots)
    links = "\n".join(f"![{plot.stem}]({plot.name})" for plot in plots)
    sweep_folder.write_sweep_pages(
        sweep_dir,
        f"# Sweep {sweep_dir}\n\n{len(rows)} rows\n\n{table}\n\n{links}\n",
        sweep_html(sweep_dir, columns, rows, metric_keys, plots),
    )
    return csv_path


NUMBERED_SUBDIR = "${hydra.job.num}"


def numbered_job_dirs(config: DictConfig) -> Path | None:
    """The sweep folder when its job folders are named by job number (``hydra.sweep.subdir``
    ``${hydra.job.num}``, the default), None for another naming (whose folders this module does
    not predict)."""
    sweep = OmegaConf.to_container(config.hydra.sweep, resolve=False)
    if not isinstance(sweep, dict) or str(sweep.get("subdir")).strip() != NUMBERED_SUBDIR:
        return None
    return Path(str(config.hydra.sweep.dir))


@dataclass(frozen=True)
class JobFolderClash:
    """Job ``number`` of a command (``overrides``) would write into ``folder``, which ``holds``
    another job's files."""

    number: int
    overrides: tuple[str, ...]
    folder: Path
    holds: str

    def detail(self, what: str, n_clashes: int) -> str:
        more = f" ({n_clashes} jobs of this command clash)" if n_clashes > 1 else ""
        return (
            f"{what} {self.number} of this command ({' '.join(self.overrides) or 'no overrides'}) would write "
            f"into {self.folder}, which holds {self.holds}{more}; a sweep folder's job folders are reused "
            "only by the same jobs (resuming the same command): give this command another hydra.sweep.dir"
        )


def job_folder_clashes(sweep_dir: Path, jobs: Mapping[int, Sequence[str]]) -> list[JobFolderClash]:
    """The jobs (job number -> overrides) whose numbered folder in ``sweep_dir`` holds another job."""
    clashes = []
    for number, overrides in sorted(jobs.items()):
        folder = sweep_dir / str(number)
        holds = sweep_folder.job_folder_clash(folder, overrides)
        if holds is not None:
            clashes.append(JobFolderClash(number, tuple(overrides), folder, holds))
    return clashes


def refuse_clashes(clashes: Sequence[JobFolderClash], what: str = "job") -> None:
    """Exit 2 with one line naming the first clash (nothing has been written)."""
    if clashes:
        from viking_eval.exits import invalid

        invalid(f"hydra.sweep.dir: {clashes[0].detail(what, len(clashes))}")


def check_job_folders(config: DictConfig) -> None:
    """A basic-sweeper command whose job would write into a folder holding another job is refused
    (exit 2, one line) before any job runs. Other sweepers check their own jobs (the Optuna
    sweeper, per trial) or name folders otherwise."""
    from viking_eval.config.compose import BASIC_SWEEPER, job_overrides

    sweep_dir = numbered_job_dirs(config)
    if sweep_dir is None or str(config.hydra.sweeper.get("_target_", "")) != BASIC_SWEEPER:
        return
    if not sweep_dir.is_dir():
        return
    task = [str(line) for line in config.hydra.overrides.task]
    try:
        jobs = dict(enumerate(job_overrides(config, task)))
        clashes = job_folder_clashes(sweep_dir, jobs)
    except Exception:  # a Hydra callback's exception is only a warning: the jobs would run unchecked
        traceback.print_exc()
        print(
            f"the job folders of {sweep_dir} could not be checked against this command's jobs",
            file=sys.stderr,
        )
        sys.exit(1)
    refuse_clashes(clashes)


_LEFT_TO_OTHERS: dict[str, str] = {}


def leave_summary_to(sweep_dir: Path, note: str) -> None:
    """This process leaves ``sweep_dir``'s summary and best.yaml to another process (the Optuna
    sweeper's workers of one study: the worker that claims the results writes them); ``note``
    is printed instead when the multirun ends."""
    _LEFT_TO_OTHERS[str(sweep_dir.resolve())] = note


class SweepSummary(Callback):
    """Hydra callback (``hydra.callbacks.sweep_summary``): tags each finished job with the sweep
    command's identity, and writes the sweep summary and best.yaml when the sweep ends.

    The identity is computed in ``on_multirun_start``, before any job is launched, so it travels
    with this object to the job processes of parallel launchers (joblib, submitit)."""

    def __init__(self) -> None:
        self.command: dict[str, Any] | None = None
        self.identity: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_job_folders(config)  # before the sweeper writes anything
        self.command = sweep_command(config)
        self.identity = sweep_identity(self.command)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.identity is not None:  # (re)running: the folder is no one's until the job finishes
            sweep_folder.clear_sweep_tag(Path(str(config.hydra.runtime.output_dir)))

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if self.identity is None or self.command is None or job_return.status != JobStatus.COMPLETED:
            return
        job_dir = Path(str(config.hydra.runtime.output_dir))
        if run_folder.is_finished_run(job_dir):
            sweep_folder.write_sweep_tag(
                job_dir, self.identity, self.command, sweep_folder.read_job_overrides(job_dir)
            )

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not sweep_dir.is_dir() or _LEFT_TO_OTHERS.pop(str(sweep_dir.resolve()), None) is not None:
            return
        identity = self.identity or sweep_identity(sweep_command(config))
        ignored = sweep_jobs(sweep_dir, identity).ignored
        if ignored:
            names = ", ".join(path.name for path in ignored[:10]) + (", ..." if len(ignored) > 10 else "")
            message = (
                f"sweep summary: {len(ignored)} finished job folder(s) in {sweep_dir} are not jobs of this "
                f"command (another grid or search space) and are ignored, not deleted: {names}"
            )
            print(message)
        path = write_sweep_summary(sweep_dir, identity)
        if path is None:
            return
        print(f"sweep summary: {path} and {path.with_suffix('.md')}")
        sweep_cfg = config.get("sweep") or {}
        if sweep_cfg.get("evaluate_best", True):
            from viking_eval.sweep.best import write_best  # runs the chosen configuration: only when needed

            override_keys, rows = collect_sweep(sweep_dir, identity)
            best = write_best(sweep_dir, config, rows, override_keys)
            print(f"best configuration, evaluated once on the reported split: {best}")
