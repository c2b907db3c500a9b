"""Multirun summary: when a Hydra sweep ends, ``sweep.csv`` and ``sweep.md`` in the sweep folder
hold one row per (job, retriever): the job's overrides, every metric, the latency figures and the
job's wall time (``job_seconds``: what a sweep point cost, store and embeddings included)."""

from __future__ import annotations

import csv
import io as text_io
import logging
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from tabulate import tabulate

from viking_eval import io
from viking_eval.report.html import sweep_html
from viking_eval.report.sweep_plots import sweep_plots

log = logging.getLogger(__name__)

LATENCY_COLUMNS = ["p50_ms", "p95_ms", "qps"]
COST_COLUMNS = [*LATENCY_COLUMNS, "job_seconds"]


def _override_pairs(job_dir: Path) -> dict[str, str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    overrides = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else []
    pairs: dict[str, str] = {}
    for override in overrides or []:
        key, _, value = str(override).partition("=")
        pairs[key.lstrip("+~")] = value
    return pairs


def collect_sweep(sweep_dir: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Rows of every finished job below ``sweep_dir`` (jobs are numbered sub-folders)."""
    jobs = sorted(
        (
            path
            for path in sweep_dir.iterdir()
            if path.is_dir() and (path / ".hydra").is_dir() and (path / "metrics.json").is_file()
        ),
        key=lambda path: (len(path.name), path.name),
    )
    override_keys: list[str] = []
    rows: list[dict[str, Any]] = []
    for job_dir in jobs:
        pairs = _override_pairs(job_dir)
        for key in pairs:
            if key not in override_keys:
                override_keys.append(key)
        document = io.read_json(job_dir / "metrics.json")
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


def write_sweep_summary(sweep_dir: Path) -> Path | None:
    """Write sweep.csv, sweep.md and sweep.html (plots embedded); returns the csv path, None if no
    job finished."""
    override_keys, rows = collect_sweep(sweep_dir)
    if not rows:
        log.warning("no finished jobs in %s; no sweep summary written", sweep_dir)
        return None
    metric_keys: list[str] = []
    for row in rows:
        for key in row:
            if key not in metric_keys and key not in {"job", "retriever", *override_keys, *COST_COLUMNS}:
                metric_keys.append(key)
    columns = ["job", *override_keys, "retriever", *metric_keys, *COST_COLUMNS]
    buffer = text_io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    io.write_text(sweep_dir / "sweep.csv", buffer.getvalue())

    def cell(value: Any) -> str:
        return f"{value:.4f}" if isinstance(value, float) else "" if value is None else str(value)

    table = tabulate(
        [[cell(row.get(column)) for column in columns] for row in rows],
        headers=columns,
        tablefmt="github",
        disable_numparse=True,
    )
    swept = [key for key in override_keys if len({row.get(key) for row in rows}) > 1]
    plots = sweep_plots(sweep_dir, rows, swept, metric_keys[0]) if swept and metric_keys else []
    links = "\n".join(f"![{path.stem}]({path.name})" for path in plots)
    io.write_text(sweep_dir / "sweep.md", f"# Sweep {sweep_dir}\n\n{len(rows)} rows\n\n{table}\n\n{links}\n")
    io.write_text(sweep_dir / "sweep.html", sweep_html(sweep_dir, columns, rows, metric_keys, plots))
    return sweep_dir / "sweep.csv"


class SweepSummary(Callback):
    """Hydra callback (``hydra.callbacks.sweep_summary``) that writes the sweep summary."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not sweep_dir.is_dir():
            return
        path = write_sweep_summary(sweep_dir)
        if path is None:
            return
        print(f"sweep summary: {path} and {path.with_suffix('.md')}")
        sweep_cfg = config.get("sweep") or {}
        if sweep_cfg.get("evaluate_best", True):
            from viking_eval.best import write_best  # imports the runner: only when needed

            override_keys, rows = collect_sweep(sweep_dir)
            best = write_best(sweep_dir, config, rows, override_keys)
            print(f"best configuration, evaluated once on the reported split: {best}")
