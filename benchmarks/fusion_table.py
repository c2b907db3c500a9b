"""Every fusion method of retrievers.fusion over two earlier runs of one dataset: one table row each.

    python benchmarks/fusion_table.py DATASET RUN_A.trec RUN_B.trec

The dataset's tune and holdout queries are those of ``experiment=fuse`` (the dataset config's
``tune_split``, forced to ``partition``): supervised methods learn on the tune half; weighted
methods choose their two weights on the tune half by a grid of step 0.1 (11 candidates,
maximising nDCG@10); every other parameter keeps its default (rrf k 60, rbc phi 0.8, gmnz gamma
1, logn_isr sigma 0.01, slidefuse w 6, probfuse 10 segments); min-max normalisation. Rows: each
input run, then each method, on the holdout half. Prints a Markdown table (docs/fusion.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from retrievers.fusion import METHODS, fuse_runs, ranked, train
from viking_eval.config import load_settings
from viking_eval.config.compose import compose_config, hydra_session
from viking_eval.data.splits import load_for_phase
from viking_eval.fuse.optimise import weight_grid
from viking_eval.fuse.program import read_runs
from viking_eval.measures.metrics import evaluate, parse_metrics

METRICS = parse_metrics(["nDCG@10", "R@10", "R@100", "RR@10", "AP@100"])


def main(dataset: str, paths: list[str]) -> None:
    with hydra_session():
        settings = load_settings(
            compose_config(["experiment=fuse", f"dataset={dataset}", f"fuse.runs=[{','.join(paths)}]"])
        )
    data = settings.dataset
    common = {
        "split": data.split,
        "tune_split": "partition",
        "partition_key": data.partition_key,
        "partition_seed": data.partition_seed,
    }
    tune, tune_choice = load_for_phase(data.name, "tune", **common)  # type: ignore[arg-type]
    report, report_choice = load_for_phase(data.name, "final", **common)  # type: ignore[arg-type]
    runs = read_runs(paths, report, data.name)
    tuning = [{q: docs for q, docs in run.items() if q in tune.qrels} for run in runs]
    held = [{q: docs for q, docs in run.items() if q in report.qrels} for run in runs]

    def cut(run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        return {q: dict(ranked(docs, 100)) for q, docs in run.items()}

    print(
        f"{dataset}: tuned on {tune_choice.label} ({len(tune.qrels)} queries), "
        f"reported on {report_choice.label} ({len(report.qrels)} queries)\n"
    )
    names = [m.name for m in METRICS]
    print("| run / method | weights | " + " | ".join(names) + " | seconds |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for path, run in zip(paths, held, strict=True):
        values = evaluate(cut(run), report.qrels, METRICS).aggregate
        print(f"| {Path(path).stem} (input) | | " + " | ".join(f"{values[n]:.4f}" for n in names) + " | |")
    for method, spec in METHODS.items():
        started = time.perf_counter()
        model = train(method, tuning, tune.qrels)
        weights = None
        if spec.weighted:
            best = -1.0
            for candidate in weight_grid(len(paths), 0.1):
                fused = cut(fuse_runs(tuning, method, weights=candidate, model=model))
                value = evaluate(fused, tune.qrels, METRICS[:1]).aggregate["nDCG@10"]
                if value > best:
                    best, weights = value, candidate
        fused = cut(fuse_runs(held, method, weights=weights, model=model))
        values = evaluate(fused, report.qrels, METRICS).aggregate
        label = f"{method}{' (supervised)' if spec.supervised else ''}"
        chosen = "" if weights is None else " / ".join(f"{w:g}" for w in weights)
        cells = " | ".join(f"{values[n]:.4f}" for n in names)
        print(f"| {label} | {chosen} | {cells} | {time.perf_counter() - started:.1f} |")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit("usage: python benchmarks/fusion_table.py DATASET RUN_A.trec RUN_B.trec [...]")
    main(sys.argv[1], sys.argv[2:])
