"""``python -m viking_eval experiment=...``: compose the config, validate it, run, print the summary."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from viking_eval.report import summary_table
from viking_eval.runner import run_experiment
from viking_eval.settings import ConfigError, load_settings

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "conf")
log = logging.getLogger("viking_eval")


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def main(cfg: DictConfig) -> dict[str, dict[str, float]]:
    try:
        settings = load_settings(cfg)
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        sys.exit(2)
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    if settings.gate.baseline is not None:  # regression gate: run the baseline file's checks instead
        from viking_eval.gate import gate_from_settings

        sys.exit(gate_from_settings(settings, output_dir))
    # jobs of a sweep or study evaluate the tuning split; the chosen one is evaluated on the
    # reported split when the sweep ends (viking_eval/sweep.py)
    phase = "tune" if hydra_cfg.mode == RunMode.MULTIRUN else "report"
    summary = run_experiment(
        settings, output_dir, config_yaml=OmegaConf.to_yaml(cfg, resolve=True), phase=phase
    )
    print(f"\n{settings.name}: {summary.dataset} ({summary.split}), {summary.results[0].n_queries} queries")
    print(summary_table(summary, settings, fmt="simple"))
    if summary.significance is not None and summary.significance.comparisons:
        print(summary.significance.legend())
    print(f"\nreport: {output_dir}/report.md and report.html")
    if settings.gate.baseline_run is not None:  # gate this run against a stored run's per-query values
        from viking_eval.gate import compare_from_settings

        sys.exit(compare_from_settings(settings, output_dir))
    # what a sweeper optimises (hydra.sweeper.objective, e.g. bm25.nDCG@10): every metric, and
    # latency for quality-vs-latency studies
    return {
        result.name: {
            **result.metrics,
            **{f"latency.{key}": result.latency[key] for key in ("p50_ms", "p95_ms") if result.latency},
        }
        for result in summary.results
    }


if __name__ == "__main__":
    main()
