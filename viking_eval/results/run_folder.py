"""The run folder (DESIGN.md section 5): the only module that reads or writes its files (their
names: ``layout.py``; a sweep folder's own files: ``sweep_folder.py``; a benchmark folder's:
``benchmark_folder.py``).

A run folder holds ``config.yaml`` (resolved), ``environment.json``, ``runs/<retriever>.trec``,
``results/<retriever>.json`` (the marker that a retriever is finished, with the resume key that
produced it), ``metrics.json`` + ``metrics.csv``, ``per_query.csv``, ``latency.json``,
``significance.csv``, ``report.md`` and ``report.html`` (rendered by ``report/``), as a gate run
``gate.txt`` and ``gate.csv``, as a sweep job ``sweep_job.json`` (``sweep_folder.py``), and, when
the run failed, ``status.json`` (``{"status": "failed", "error": ..., "folder": ..., "clean":
...}``: the folder and the command that lists and removes failed runs): a failed run is not
finished, whatever earlier attempt's files it still holds; :func:`remove_run` removes one. ``metrics.json`` is a stable
contract::

    {"dataset": ..., "split": ..., "n_queries": ..., "data_issues": {...}, "wall_seconds": ...,
     "retrievers": {"<name>": {"metrics": {"nDCG@10": 0.67, ...},
                               "latency": {"p50_ms": ..., "p95_ms": ..., "qps": ...},
                               "n_queries": ...}}}

Readers of finished folders (the gate, export, the sweep summary, best.yaml) go through here too.
Every write is atomic (``viking_eval/files.py``).
"""

from __future__ import annotations

import csv
import io
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import DictConfig, OmegaConf

from retrievers.ranking import sort_key
from retrievers.types import RetrievalResult
from viking_eval import files
from viking_eval.answers.names import answer_metric_names
from viking_eval.measures.metrics import deeper_than_run, depth_label, depth_note
from viking_eval.measures.significance import CSV_COLUMNS, csv_rows
from viking_eval.report.markdown import report_markdown
from viking_eval.report.page import report_html
from viking_eval.results import layout
from viking_eval.results.model import FinishedRetriever, ResumeKey, RetrieverResult, RunSummary
from viking_eval.run import ann_quality

if TYPE_CHECKING:
    from viking_eval.config import Settings

MARKER_FORMAT = 2  # 1: {"spec_key": <hash>, **result}; 2: key parts, cost, result
LATENCY_KEYS = ["p50_ms", "p95_ms", "p99_ms", "mean_ms", "qps", "batch_qps"]
FAILED = "failed"

PerQuery = dict[str, dict[str, dict[str, float]]]  # retriever -> metric -> query id -> value


class RunFolderError(ValueError):
    """A run folder file that cannot be read; the message names the file (and line)."""


# --------------------------------------------------------------------------- writing a run


def write_config(folder: Path, config_yaml: str) -> None:
    files.write_text(folder / layout.CONFIG, config_yaml)


def write_run(folder: Path, name: str, run: Mapping[str, Sequence[RetrievalResult]]) -> None:
    """``runs/<name>.trec``: ``qid Q0 docid rank score tag`` (tag = the retriever's name); ranks
    follow (score desc, doc id asc), whatever order the retriever returned."""
    lines = []
    for query_id, results in run.items():
        ordered = sorted(results, key=sort_key)
        lines += [f"{query_id} Q0 {r.doc_id} {rank} {r.score!r} {name}" for rank, r in enumerate(ordered, 1)]
    files.write_text(folder / layout.RUNS / f"{name}.trec", "\n".join(lines) + ("\n" if lines else ""))


def write_fuse_result(folder: Path, result: Mapping[str, Any], run_lines: Sequence[str]) -> None:
    """What ``experiment=fuse`` writes (viking_eval/fuse/program.py): the fused run,
    ``runs/fused.trec``, then ``fuse.json`` (the method, the chosen weights and every run's
    metrics), whose presence says the fuse finished (:func:`is_finished_output`)."""
    files.write_text(folder / layout.RUNS / "fused.trec", "\n".join(run_lines) + ("\n" if run_lines else ""))
    files.write_json(folder / layout.FUSE, dict(result))  # last: the fuse is finished


def read_rankings(folder: Path, name: str) -> dict[str, list[str]]:
    """``runs/<name>.trec`` as query id -> document ids in rank order (what answer metrics read)."""
    path = folder / layout.RUNS / f"{name}.trec"
    rankings: dict[str, list[tuple[int, str]]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise RunFolderError(f"{path}: cannot be read: {error}") from None
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if len(fields) != 6 or not fields[3].isdigit():
            raise RunFolderError(
                f"{path}:{number}: expected 'qid Q0 docid rank score tag', got {line[:80]!r}"
            )
        rankings.setdefault(fields[0], []).append((int(fields[3]), fields[2]))
    return {query_id: [doc_id for _, doc_id in sorted(ranked)] for query_id, ranked in rankings.items()}


def marker_path(folder: Path, name: str) -> Path:
    return folder / layout.MARKERS / f"{name}.json"


def write_spans(folder: Path, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """``spans/<name>.csv``: one row per recorded span of the latency queries (viking_eval/run/stages.py)."""
    files.write_text(folder / layout.SPANS / f"{name}.csv", csv_text(columns, rows))


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
    saved = read_json_object(path)
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
                # the per-query samples and the stages stay in latency.json
                "latency": (
                    {
                        key: value
                        for key, value in result.latency.items()
                        if key not in ("samples_ms", "stages")
                    }
                    if result.latency
                    else result.latency
                ),
                "n_queries": result.n_queries,
                "n_queries_without_results": result.n_queries_without_results,
                "run_seconds": round(result.run_seconds, 4),
                **({"groups": result.groups} if result.groups else {}),
                **({"stats": result.stats} if result.stats else {}),
                **({"vector_search": result.vector_search} if result.vector_search else {}),
                **({"answers": result.answers} if result.answers else {}),
            }
            for result in summary.results
        },
    }


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The CSV files' one dialect: a header row, then ``rows``; ``\\n`` line ends."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_per_query(
    path: Path, values: Mapping[str, Mapping[str, Mapping[str, float]]], metrics: Sequence[str]
) -> None:
    """The one per-query CSV writer (a run's ``per_query.csv``, the gate's stored baselines):
    ``retriever,query_id,<metric>...``, queries in id order, values as Python's shortest repr;
    an empty cell where a metric does not measure the query (answer metrics of a query without a
    gold answer)."""
    rows = []
    for retriever, by_metric in values.items():
        for query_id in sorted(by_metric[metrics[0]]) if metrics else []:
            rows.append(
                [
                    retriever,
                    query_id,
                    *(
                        float(by_metric[metric][query_id]) if query_id in by_metric[metric] else ""
                        for metric in metrics
                    ),
                ]
            )
    files.write_text(path, csv_text(["retriever", "query_id", *metrics], rows))


def write_outputs(summary: RunSummary, settings: Settings, environment: dict[str, Any]) -> None:
    """metrics.json/.csv, per_query.csv, latency.json, significance.csv, environment.json,
    report.md and report.html of a finished run (``summary.output_dir``, which must be set)."""
    folder = summary.output_dir
    if folder is None:
        raise ValueError("the run has no output_dir: nothing to write")
    metric_names = [metric.name for metric in settings.metrics]
    answer_names = answer_metric_names(summary.results, with_usage=True)  # answers.enabled
    top_k = settings.run.top_k
    deeper = deeper_than_run(settings.metrics, top_k)  # R@100 at top_k 10: marked, not hidden
    document = metrics_document(summary)
    if deeper:
        document["depth_limited"] = {
            name: {"cutoff": cutoff, "run_top_k": top_k, "note": depth_note(top_k, deeper)}
            for name, cutoff in deeper.items()
        }
    files.write_json(folder / layout.METRICS, document)
    ann_names = ann_quality.metric_names(summary.results)  # ann_recall@10 beside the metrics
    rows = [
        [
            result.name,
            *(result.metrics[name] for name in metric_names),
            *(result.metrics.get(name) for name in ann_names),
            *(result.metrics.get(name) for name in answer_names),
            *((result.latency or {}).get(key) for key in LATENCY_KEYS),
        ]
        for result in summary.results
    ]
    files.write_text(
        folder / layout.METRICS_CSV,
        csv_text(
            [
                "retriever",
                *(depth_label(name, top_k, deeper) for name in metric_names),
                *ann_names,
                *answer_names,
                *LATENCY_KEYS,
            ],
            rows,
        ),
    )
    write_per_query(
        folder / layout.PER_QUERY,
        {result.name: result.per_query for result in summary.results},
        metric_names + answer_names,
    )
    files.write_json(
        folder / layout.LATENCY,
        {
            "retrievers": {result.name: result.latency for result in summary.results},
            "store": {
                key: environment.get(key)
                for key in ("store_build_seconds", "store_built_now", "store_ready_seconds", "peak_rss_mb")
            },
        },
    )
    if summary.significance is not None:
        files.write_text(folder / layout.SIGNIFICANCE, csv_text(CSV_COLUMNS, csv_rows(summary.significance)))
    files.write_json(folder / layout.ENVIRONMENT, environment)
    files.write_text(folder / layout.REPORT_MD, report_markdown(summary, settings, environment))
    files.write_text(folder / layout.REPORT_HTML, report_html(summary, settings, environment))
    clear_failed(folder)  # last: finished now, whatever failed before


def clean_command(folder: Path) -> str:
    """The command that lists the failed runs beside ``folder`` (and removes them with ``--yes``)."""
    return f"python -m viking_eval.clean {folder.parent}"


def mark_failed(folder: Path, message: str) -> None:
    """``status.json`` ``{"status": "failed", "error": message, "folder": ..., "clean": ...}``:
    the run failed, so the files an earlier attempt left in ``folder`` do not make it a finished
    run (:func:`is_finished_run`); ``folder`` and ``clean`` say where it is and how to list and
    remove failed runs (``python -m viking_eval.clean``). Removed when a later run in the folder
    finishes (:func:`write_outputs`)."""
    files.write_json(
        folder / layout.STATUS,
        {"status": FAILED, "error": message, "folder": str(folder), "clean": clean_command(folder)},
    )


def clear_failed(folder: Path) -> None:
    """Remove the ``status.json`` an earlier failed attempt left: the program in ``folder`` has
    just finished (its last file is written)."""
    (folder / layout.STATUS).unlink(missing_ok=True)


def read_error(folder: Path) -> str:
    """The error line ``status.json`` records ('' when there is none or it cannot be read)."""
    try:
        error = read_json_object(folder / layout.STATUS).get("error")
    except RunFolderError as problem:
        return str(problem)
    return error if isinstance(error, str) else ""


def is_finished_output(folder: Path) -> bool:
    """A folder where a program finished: a run (:func:`is_finished_run`), a fuse or a growth run
    (``fuse.json`` or ``growth.json``, each written last; no status.json)."""
    if is_finished_run(folder):
        return True
    if not any((folder / name).is_file() for name in (layout.FUSE, layout.GROWTH)):
        return False
    try:
        return read_status(folder) is None
    except RunFolderError:
        return False


def holds_finished_run(folder: Path) -> bool:
    """``folder`` is a finished run, fuse or growth run, or holds one anywhere below it (a sweep's
    job, a benchmark's dataset run, ``best_final/``)."""
    if is_finished_output(folder):
        return True
    return any(is_finished_output(path.parent) for name in layout.FINISHED for path in folder.rglob(name))


class RemoveRefused(RunFolderError):
    """A folder :func:`remove_run` will not remove (finished, or holding a finished run)."""


def remove_run(folder: Path) -> None:
    """Remove a run folder that did not finish (failed or abandoned), with everything in it.
    RemoveRefused when it is a finished run or holds one (a sweep or benchmark folder with
    finished jobs): a finished run is never removed."""
    if holds_finished_run(folder):
        raise RemoveRefused(f"{folder}: a finished run is in it; not removed")
    shutil.rmtree(folder)


def read_status(folder: Path) -> str | None:
    """The status ``status.json`` records (``failed``), None when the folder has none."""
    path = folder / layout.STATUS
    if not path.is_file():
        return None
    status = read_json_object(path).get("status")
    if not isinstance(status, str):
        raise RunFolderError(f"{path}: expected a status string, got {status!r}")
    return status


def write_gate_report(folder: Path, text: str, rows: Sequence[Sequence[str]]) -> None:
    """gate.txt (the printed verdict lines) and gate.csv (one row per verdict; cells already
    formatted by the gate)."""
    files.write_text(folder / layout.GATE_TXT, text)
    files.write_text(folder / layout.GATE_CSV, "\n".join(",".join(row) for row in rows) + "\n")


# --------------------------------------------------------------------------- reading finished runs


def is_finished_run(folder: Path) -> bool:
    """A run folder whose run completed: metrics.json and config.yaml written, and no status.json
    (a run marked failed, or one whose status cannot be read, is not finished)."""
    if not ((folder / layout.METRICS).is_file() and (folder / layout.CONFIG).is_file()):
        return False
    try:
        return read_status(folder) is None
    except RunFolderError:
        return False


def read_metrics(folder: Path) -> dict[str, Any]:
    return read_json_object(folder / layout.METRICS)


def read_latency(folder: Path) -> dict[str, Any]:
    """latency.json's per-retriever entries (``{}`` when it has none)."""
    return read_json_object(folder / layout.LATENCY).get("retrievers") or {}


def read_environment(folder: Path) -> dict[str, Any]:
    """environment.json, or ``{}`` for a folder without one."""
    path = folder / layout.ENVIRONMENT
    return read_json_object(path) if path.is_file() else {}


def read_config(folder: Path) -> dict[str, Any]:
    """config.yaml as plain data."""
    path = folder / layout.CONFIG
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise RunFolderError(f"{path}: cannot be read: {error}") from None
    if not isinstance(document, dict):
        raise RunFolderError(f"{path}: expected a mapping, got {type(document).__name__}")
    return document


def load_config(folder: Path) -> DictConfig:
    """config.yaml as an OmegaConf config (to validate it again with ``load_settings``)."""
    config = OmegaConf.load(folder / layout.CONFIG)
    if not isinstance(config, DictConfig):
        raise RunFolderError(f"{folder / layout.CONFIG}: expected a mapping")
    return config


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON file of the folders holding an object; RunFolderError naming the file otherwise."""
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
                if row[metric] == "" and metric != metrics[0]:
                    continue  # not measured for this query (an answer metric without a gold answer)
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
