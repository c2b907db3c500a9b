"""After a sweep: pick the best job on the tuning split, evaluate it and the default
configuration once on the reported split, compare them with a paired test, write ``best.yaml``.

The objective is ``sweep.objective``: ``<retriever>.<metric>`` or just ``<metric>`` (then the
retriever whose parameters were swept, or the first one). ``sweep.direction``: maximize/minimize.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from viking_eval.config import load_settings
from viking_eval.results import layout, run_folder, sweep_folder
from viking_eval.results.model import RunSummary
from viking_eval.run.experiment import run_experiment

log = logging.getLogger(__name__)


def _objective(
    config: DictConfig, rows: list[dict[str, Any]], override_keys: list[str]
) -> tuple[str, str, str]:
    sweep_cfg = config.get("sweep") or {}
    objective = sweep_cfg.get("objective")
    direction = str(sweep_cfg.get("direction") or "maximize")
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"sweep.direction must be maximize or minimize, got {direction!r}")
    retrievers = list(dict.fromkeys(row["retriever"] for row in rows))
    metrics = list(config.run.metrics)
    if objective and "." in str(objective) and str(objective).split(".", 1)[0] in retrievers:
        retriever, metric = str(objective).split(".", 1)
    else:
        metric = str(objective or metrics[0])
        swept = [
            name for name in retrievers if any(key.startswith(f"retrievers.{name}.") for key in override_keys)
        ]
        retriever = swept[0] if swept else retrievers[0]
    if metric not in rows[0]:
        raise ValueError(f"sweep.objective metric {metric!r} is not among the run's metrics {metrics}")
    return retriever, metric, direction


def _paired(best: RunSummary, default: RunSummary, retriever: str, metric: str) -> dict[str, Any]:
    """Paired t-test (scipy.stats.ttest_rel) of per-query values, best minus default."""
    best_values = next(r for r in best.results if r.name == retriever).per_query[metric]
    default_values = next(r for r in default.results if r.name == retriever).per_query[metric]
    query_ids = sorted(best_values)
    a = [best_values[q] for q in query_ids]
    b = [default_values[q] for q in query_ids]
    diff = sum(x - y for x, y in zip(a, b, strict=True)) / len(a)
    if all(x == y for x, y in zip(a, b, strict=True)):
        p_value = 1.0
    else:
        from scipy import stats  # here, not at import: scipy.stats takes a second to load

        p_value = float(stats.ttest_rel(a, b).pvalue)
        p_value = 1.0 if math.isnan(p_value) else p_value
    return {
        "test": "paired t-test",
        "metric": metric,
        "n_queries": len(a),
        "mean_difference": diff,
        "p_value": p_value,
    }


def write_best(
    sweep_dir: Path, config: DictConfig, rows: list[dict[str, Any]], override_keys: list[str]
) -> Path:
    # the swept parameters: overrides whose value differs between jobs
    override_keys = [key for key in override_keys if len({row.get(key) for row in rows}) > 1]
    retriever, metric, direction = _objective(config, rows, override_keys)
    candidates = [row for row in rows if row["retriever"] == retriever and isinstance(row.get(metric), float)]
    sign = -1.0 if direction == "maximize" else 1.0
    best_row = sorted(candidates, key=lambda row: (sign * row[metric], len(row["job"]), row["job"]))[0]
    job_dir = sweep_dir / best_row["job"]
    best_settings = load_settings(run_folder.load_config(job_dir))
    default_cfg = OmegaConf.masked_copy(
        config, [key for key in config if isinstance(key, str) and key != "hydra"]
    )
    default_settings = load_settings(default_cfg)
    best_final = run_experiment(best_settings, sweep_dir / layout.BEST_FINAL, phase="final")
    default_final = run_experiment(default_settings, sweep_dir / layout.DEFAULT_FINAL, phase="final")
    tuned_metrics = run_folder.read_metrics(job_dir)
    document = {
        "objective": f"{retriever}.{metric}",
        "direction": direction,
        "job": best_row["job"],
        "retriever": retriever,
        "overrides": {key: best_row[key] for key in override_keys if key in best_row},
        "tuned_on": {
            "split": tuned_metrics["split"],
            "value": best_row[metric],
            "metrics": tuned_metrics["retrievers"][retriever]["metrics"],
            "tuned_on_reported_split": tuned_metrics.get("tuned_on_reported_split", False),
        },
        "evaluated_on": {
            "split": best_final.split,
            "metrics": best_final.metrics()[retriever],
        },
        "default_evaluated_on": {"split": default_final.split, "metrics": default_final.metrics()[retriever]},
        "best_vs_default": _paired(best_final, default_final, retriever, metric),
    }
    return sweep_folder.write_best(sweep_dir, document)
