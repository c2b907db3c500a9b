"""The run folder (DESIGN.md section 5): the only module that reads or writes its files.

A run folder holds ``config.yaml`` (resolved), ``environment.json``, ``runs/<retriever>.trec``,
``results/<retriever>.json`` (the marker that a retriever is finished, with the resume key that
produced it), ``metrics.json`` + ``metrics.csv``, ``per_query.csv``, ``latency.json``,
``significance.csv``, ``report.md`` and ``report.html`` (rendered by ``report/``), and, as a
sweep job, ``sweep_job.json`` (which sweep command finished it). A benchmark folder holds run
folders and ``benchmark.json``/``.csv``/``.md``/``.html`` (see "benchmark folders" below). ``metrics.json`` is a stable
contract::

    {"dataset": ..., "split": ..., "n_queries": ..., "data_issues": {...}, "wall_seconds": ...,
     "retrievers": {"<name>": {"metrics": {"nDCG@10": 0.67, ...},
                               "latency": {"p50_ms": ..., "p95_ms": ..., "qps": ...},
                               "n_queries": ...}}}

Readers of finished folders (the gate, export, the sweep summary, best.yaml) go through here too.
Every write is atomic (``io.py``).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import DictConfig, OmegaConf

from retrievers.ranking import sort_key
from retrievers.types import RetrievalResult
from viking_eval import files
from viking_eval.benchmark.table import comparison_record
from viking_eval.measures.metrics import deeper_than_run, depth_label, depth_note
from viking_eval.measures.significance import CSV_COLUMNS, csv_rows
from viking_eval.report.benchmark import CSV_COLUMNS as BENCHMARK_COLUMNS
from viking_eval.report.benchmark import benchmark_html, benchmark_markdown
from viking_eval.report.benchmark import csv_rows as benchmark_rows
from viking_eval.report.markdown import report_markdown
from viking_eval.report.page import report_html
from viking_eval.results.model import FinishedRetriever, ResumeKey, RetrieverResult, RunSummary
from viking_eval.run import ann_quality

if TYPE_CHECKING:
    from viking_eval.benchmark.table import BenchmarkTable
    from viking_eval.config import Settings

MARKER_FORMAT = 2  # 1: {"spec_key": <hash>, **result}; 2: key parts, cost, result
LATENCY_KEYS = ["p50_ms", "p95_ms", "p99_ms", "mean_ms", "qps", "batch_qps"]
SWEEP_TAG = "sweep_job.json"

PerQuery = dict[str, dict[str, dict[str, float]]]  # retriever -> metric -> query id -> value


class RunFolderError(ValueError):
    """A run folder file that cannot be read; the message names the file (and line)."""


# --------------------------------------------------------------------------- writing a run


def write_config(folder: Path, config_yaml: str) -> None:
    files.write_text(folder / "config.yaml", config_yaml)


def write_run(folder: Path, name: str, run: Mapping[str, Sequence[RetrievalResult]]) -> None:
    """``runs/<name>.trec``: ``qid Q0 docid rank score tag`` (tag = the retriever's name); ranks
    follow (score desc, doc id asc), whatever order the retriever returned."""
    lines = []
    for query_id, results in run.items():
        ordered = sorted(results, key=sort_key)
        lines += [f"{query_id} Q0 {r.doc_id} {rank} {r.score!r} {name}" for rank, r in enumerate(ordered, 1)]
    files.write_text(folder / "runs" / f"{name}.trec", "\n".join(lines) + ("\n" if lines else ""))


def marker_path(folder: Path, name: str) -> Path:
    return folder / "results" / f"{name}.json"


def write_finished(folder: Path, result: RetrieverResult, key: ResumeKey, cost_seconds: float) -> None:
    """The marker that ``result`` is finished: written last, after its run file."""
    files.write_json(
        marker_path(folder, result.name),
        {
            "format": MARKER_FORMAT,
            "key": key.digest,
            "key_parts": key.parts,
            "cost_seconds": round(cost_seconds, 4),
            "result": asdict(result),
        },
    )


def read_finished(folder: Path, name: str) -> FinishedRetriever | None:
    """The finished marker of retriever ``name``, None when there is none; RunFolderError when
    it exists but cannot be read (the result is then computed again)."""
    path = marker_path(folder, name)
    if not path.is_file():
        return None
    saved = _read_json(path)
    try:
        if saved.get("format") == MARKER_FORMAT:
            return FinishedRetriever(
                result=RetrieverResult(**saved["result"]),
                key_parts=dict(saved["key_parts"]),
                cost_seconds=float(saved["cost_seconds"]),
            )
        saved.pop("spec_key")  # format 1: the result's fields beside a bare hash
        return FinishedRetriever(result=RetrieverResult(**saved), key_parts=None, cost_seconds=0.0)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise RunFolderError(
            f"{path}: not a finished-retriever marker ({type(error).__name__}: {error})"
        ) from None


def metrics_document(summary: RunSummary) -> dict[str, Any]:
    n_queries = summary.results[0].n_queries if summary.results else 0
    return {
        "dataset": summary.dataset,
        "split": summary.split,
        "n_queries": n_queries,
        "data_issues": summary.data_issues,
        "phase": summary.phase,
        "tuned_on_reported_split": summary.tuned_on_reported_split,
        "wall_seconds": round(summary.wall_seconds, 3),
        "retrievers": {
            result.name: {
                "metrics": result.metrics,
                # the per-query samples stay in latency.json
                "latency": (
                    {key: value for key, value in result.latency.items() if key != "samples_ms"}
                    if result.latency
                    else result.latency
                ),
                "n_queries": result.n_queries,
                "n_queries_without_results": result.n_queries_without_results,
                "run_seconds": round(result.run_seconds, 4),
                **({"groups": result.groups} if result.groups else {}),
                **({"stats": result.stats} if result.stats else {}),
                **({"vector_search": result.vector_search} if result.vector_search else {}),
            }
            for result in summary.results
        },
    }


def _csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_per_query(
    path: Path, values: Mapping[str, Mapping[str, Mapping[str, float]]], metrics: Sequence[str]
) -> None:
    """The one per-query CSV writer (a run's ``per_query.csv``, the gate's stored baselines):
    ``retriever,query_id,<metric>...``, queries in id order, values as Python's shortest repr."""
    rows = []
    for retriever, by_metric in values.items():
        for query_id in sorted(by_metric[metrics[0]]) if metrics else []:
            rows.append([retriever, query_id, *(float(by_metric[metric][query_id]) for metric in metrics)])
    files.write_text(path, _csv_text(["retriever", "query_id", *metrics], rows))


def write_outputs(summary: RunSummary, settings: Settings, environment: dict[str, Any]) -> None:
    """metrics.json/.csv, per_query.csv, latency.json, significance.csv, environment.json,
    report.md and report.html of a finished run (``summary.output_dir``, which must be set)."""
    folder = summary.output_dir
    if folder is None:
        raise ValueError("the run has no output_dir: nothing to write")
    metric_names = [metric.name for metric in settings.metrics]
    top_k = settings.run.top_k
    deeper = deeper_than_run(settings.metrics, top_k)  # R@100 at top_k 10: marked, not hidden
    document = metrics_document(summary)
    if deeper:
        document["depth_limited"] = {
            name: {"cutoff": cutoff, "run_top_k": top_k, "note": depth_note(top_k, deeper)}
            for name, cutoff in deeper.items()
        }
    files.write_json(folder / "metrics.json", document)
    ann_names = ann_quality.metric_names(summary.results)  # ann_recall@10 beside the metrics
    rows = [
        [
            result.name,
            *(result.metrics[name] for name in metric_names),
            *(result.metrics.get(name) for name in ann_names),
            *((result.latency or {}).get(key) for key in LATENCY_KEYS),
        ]
        for result in summary.results
    ]
    files.write_text(
        folder / "metrics.csv",
        _csv_text(
            [
                "retriever",
                *(depth_label(name, top_k, deeper) for name in metric_names),
                *ann_names,
                *LATENCY_KEYS,
            ],
            rows,
        ),
    )
    write_per_query(
        folder / "per_query.csv",
        {result.name: result.per_query for result in summary.results},
        metric_names,
    )
    files.write_json(
        folder / "latency.json",
        {
            "retrievers": {result.name: result.latency for result in summary.results},
            "store": {
                key: environment.get(key)
                for key in ("store_build_seconds", "store_built_now", "store_ready_seconds", "peak_rss_mb")
            },
        },
    )
    if summary.significance is not None:
        files.write_text(folder / "significance.csv", _csv_text(CSV_COLUMNS, csv_rows(summary.significance)))
    files.write_json(folder / "environment.json", environment)
    files.write_text(folder / "report.md", report_markdown(summary, settings, environment))
    files.write_text(folder / "report.html", report_html(summary, settings, environment))


def write_gate_report(folder: Path, text: str, rows: Sequence[Sequence[str]]) -> None:
    """gate.txt (the printed verdict lines) and gate.csv (one row per verdict; cells already
    formatted by the gate)."""
    files.write_text(folder / "gate.txt", text)
    files.write_text(folder / "gate.csv", "\n".join(",".join(row) for row in rows) + "\n")


# --------------------------------------------------------------------------- benchmark folders
# A benchmark folder (viking_eval/benchmark/run.py) holds one run folder per dataset (and variant),
# written by the runner as any run, and the table over them: benchmark.json (a stable contract,
# below), benchmark.csv (one row per retriever, dataset and metric), benchmark.md, benchmark.html.

BENCHMARK_FILE = "benchmark.json"
BENCHMARK_FORMAT = 1


def benchmark_document(table: BenchmarkTable, environment: Mapping[str, Any]) -> dict[str, Any]:
    """benchmark.json::

    {"format": 1, "kind": "benchmark", "name": ..., "datasets": [...], "rows": [...],
     "baseline": ..., "metrics": [...], "variants": {name: [overrides]},
     "table": {row: {dataset: {"metrics": {...}, "latency": {"p50_ms": ...}}}},
     "mean": {row: {metric: mean over datasets}},
     "significance": {"test", "correction", "alpha", "family_size", "comparisons": [...]},
     "runs": [{"dataset", "variant", "folder", "split", "n_queries", "wall_seconds", "rows",
               "data_files"}],
     "wall_seconds": ..., "environment": {...}}
    """
    settings = table.settings
    return {
        "format": BENCHMARK_FORMAT,
        "kind": "benchmark",
        "name": table.name,
        "datasets": list(table.datasets),
        "rows": list(table.rows),
        "baseline": table.baseline,
        "metrics": list(table.metrics),
        "variants": {name: list(overrides) for name, overrides in table.variants.items()},
        "table": {
            row: {
                dataset: {"metrics": metrics, "latency": table.latency.get(row, {}).get(dataset, {})}
                for dataset, metrics in table.values.get(row, {}).items()
            }
            for row in table.rows
        },
        "mean": {row: {metric: table.mean(row, metric) for metric in table.metrics} for row in table.rows},
        "significance": {
            "test": settings.test,
            "correction": settings.correction,
            "alpha": settings.alpha,
            "family_size": table.family_size(),
            "comparisons": [
                comparison_record(dataset, comparison)
                for dataset, report in table.significance.items()
                for comparison in report.comparisons
                if comparison.test == settings.test
            ],
        },
        "runs": [asdict(run) for run in table.runs],
        "wall_seconds": round(table.wall_seconds, 3),
        "environment": dict(environment),
    }


def write_benchmark(folder: Path, table: BenchmarkTable, environment: Mapping[str, Any]) -> None:
    """benchmark.json, benchmark.csv, benchmark.md and benchmark.html of a finished benchmark."""
    files.write_json(folder / BENCHMARK_FILE, benchmark_document(table, environment))
    files.write_text(folder / "benchmark.csv", _csv_text(BENCHMARK_COLUMNS, benchmark_rows(table)))
    files.write_text(folder / "benchmark.md", benchmark_markdown(table))
    files.write_text(folder / "benchmark.html", benchmark_html(table, dict(environment)))


def is_benchmark_folder(folder: Path) -> bool:
    return (folder / BENCHMARK_FILE).is_file()


def read_benchmark(folder: Path) -> dict[str, Any]:
    """benchmark.json, checked for its format."""
    document = _read_json(folder / BENCHMARK_FILE)
    if document.get("format") != BENCHMARK_FORMAT or document.get("kind") != "benchmark":
        raise RunFolderError(f"{folder / BENCHMARK_FILE}: not a benchmark file of format {BENCHMARK_FORMAT}")
    return document


# --------------------------------------------------------------------------- reading finished runs


def is_finished_run(folder: Path) -> bool:
    """A run folder whose run completed (metrics.json and config.yaml written)."""
    return (folder / "metrics.json").is_file() and (folder / "config.yaml").is_file()


def read_metrics(folder: Path) -> dict[str, Any]:
    return _read_json(folder / "metrics.json")


def read_latency(folder: Path) -> dict[str, Any]:
    """latency.json's per-retriever entries (``{}`` when it has none)."""
    return _read_json(folder / "latency.json").get("retrievers") or {}


def read_environment(folder: Path) -> dict[str, Any]:
    """environment.json, or ``{}`` for a folder without one."""
    path = folder / "environment.json"
    return _read_json(path) if path.is_file() else {}


def read_config(folder: Path) -> dict[str, Any]:
    """config.yaml as plain data."""
    path = folder / "config.yaml"
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise RunFolderError(f"{path}: cannot be read: {error}") from None
    if not isinstance(document, dict):
        raise RunFolderError(f"{path}: expected a mapping, got {type(document).__name__}")
    return document


def load_config(folder: Path) -> DictConfig:
    """config.yaml as an OmegaConf config (to validate it again with ``load_settings``)."""
    config = OmegaConf.load(folder / "config.yaml")
    if not isinstance(config, DictConfig):
        raise RunFolderError(f"{folder / 'config.yaml'}: expected a mapping")
    return config


def _read_json(path: Path) -> dict[str, Any]:
    try:
        document = files.read_json(path)
    except OSError as error:
        raise RunFolderError(f"{path}: cannot be read: {error}") from None
    except ValueError as error:
        raise RunFolderError(f"{path}: not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise RunFolderError(f"{path}: expected a JSON object, got {type(document).__name__}")
    return document


def read_per_query(path: Path) -> PerQuery:
    """A per-query CSV (``retriever,query_id,<metric>...``) as retriever -> metric -> query -> value."""
    if not path.is_file():
        raise RunFolderError(f"{path} does not exist")
    values: PerQuery = {}
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        if columns[:2] != ["retriever", "query_id"] or len(columns) < 3:
            raise RunFolderError(
                f"{path}: expected the columns retriever, query_id, <metric>..., got {columns}"
            )
        metrics = columns[2:]
        for line, row in enumerate(reader, start=2):
            retriever, query_id = row["retriever"], row["query_id"]
            by_metric = values.setdefault(retriever, {metric: {} for metric in metrics})
            if query_id in by_metric[metrics[0]]:
                raise RunFolderError(f"{path}:{line}: query {query_id!r} of {retriever!r} appears twice")
            for metric in metrics:
                try:
                    number = float(row[metric])
                except (TypeError, ValueError):
                    raise RunFolderError(
                        f"{path}:{line}: {metric} of query {query_id!r} is not a number: {row[metric]!r}"
                    ) from None
                if not math.isfinite(number):
                    raise RunFolderError(
                        f"{path}:{line}: {metric} of query {query_id!r} is not finite: {number}"
                    )
                by_metric[metric][query_id] = number
    if not values:
        raise RunFolderError(f"{path}: no rows")
    return values


# --------------------------------------------------------------------------- sweep jobs


def job_folders(sweep_dir: Path) -> list[Path]:
    """The finished job folders of a sweep folder (Hydra's numbered sub-folders with a
    metrics.json), in job-number order."""
    return sorted(
        (
            path
            for path in sweep_dir.iterdir()
            if path.is_dir() and (path / ".hydra").is_dir() and (path / "metrics.json").is_file()
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
    (job_dir / SWEEP_TAG).unlink(missing_ok=True)


def write_sweep_tag(job_dir: Path, sweep: str, command: Mapping[str, Any], overrides: Sequence[str]) -> None:
    """``sweep_job.json``: the job finished as part of the sweep command whose identity is
    ``sweep`` (``command`` holds what the identity was computed from)."""
    files.write_json(
        job_dir / SWEEP_TAG, {"sweep": sweep, "command": dict(command), "overrides": list(overrides)}
    )


def read_sweep_tag(job_dir: Path) -> dict[str, Any] | None:
    path = job_dir / SWEEP_TAG
    if not path.is_file():
        return None
    try:
        return _read_json(path)
    except RunFolderError:
        return None


def read_best(sweep_dir: Path) -> dict[str, Any] | None:
    """A sweep folder's best.yaml, or None when the sweep wrote none."""
    path = sweep_dir / "best.yaml"
    if not path.is_file():
        return None
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise RunFolderError(f"{path}: expected a mapping, got {type(document).__name__}")
    return document
