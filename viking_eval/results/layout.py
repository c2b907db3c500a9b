"""The names of the files in a run folder, a sweep folder and a benchmark folder (DESIGN.md
section 5), in one place: ``run_folder.py``, ``sweep_folder.py`` and ``benchmark_folder.py``
read and write them, and the report page lists them (``report/page.py``) without importing the
modules that write it.

Files Hydra itself writes into these folders (``.hydra/``, ``<job>.log``, ``multirun.yaml``) are
Hydra's, not the harness's.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- a run folder

CONFIG = "config.yaml"
ENVIRONMENT = "environment.json"
RUNS = "runs"  # runs/<retriever>.trec
SPANS = "spans"  # spans/<retriever>.csv: the latency queries' stage spans, one row each
MARKERS = "results"  # results/<retriever>.json: the retriever is finished
METRICS = "metrics.json"
METRICS_CSV = "metrics.csv"
PER_QUERY = "per_query.csv"
LATENCY = "latency.json"
SIGNIFICANCE = "significance.csv"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
STATUS = "status.json"  # only in a run that failed: {"status": "failed", "error": ...}
GATE_TXT = "gate.txt"
FUSE = "fuse.json"  # experiment=fuse: its result, written after runs/fused.trec
GROWTH = "growth.json"  # experiment=*growth*: every step's figures, written last
GROWTH_STEP = "step.json"  # a growth step's folder: its record, written after its per_query.csv
FINISHED = (METRICS, FUSE, GROWTH)
"""The file whose presence (without status.json) says a program finished in a folder: a run
(beside its config.yaml), a fuse or a growth run (each writes it last)."""
GATE_CSV = "gate.csv"
SWEEP_TAG = "sweep_job.json"  # a sweep job's folder: which sweep command finished it

REPORTED_FILES = (
    METRICS,
    METRICS_CSV,
    PER_QUERY,
    SIGNIFICANCE,
    LATENCY,
    f"{SPANS}/*.csv",
    f"{RUNS}/*.trec",
    ENVIRONMENT,
    CONFIG,
    REPORT_MD,
)
"""The files of a finished run that report.html names beside itself, in its order."""

# --------------------------------------------------------------------------- a sweep folder

SWEEP_CSV = "sweep.csv"
SWEEP_MD = "sweep.md"
SWEEP_HTML = "sweep.html"
BEST = "best.yaml"
BEST_FINAL = "best_final"  # run folder: the chosen job evaluated on the reported split
DEFAULT_FINAL = "default_final"  # run folder: the default configuration on the reported split

# --------------------------------------------------------------------------- a benchmark folder

BENCHMARK = "benchmark.json"
BENCHMARK_CSV = "benchmark.csv"
BENCHMARK_MD = "benchmark.md"
BENCHMARK_HTML = "benchmark.html"
