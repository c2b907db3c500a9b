"""``python -m viking_eval.benchmark.leaderboard <folders...> [--csv FILE] [--md FILE]``: finished runs, side by side.

Each folder is a run folder, a benchmark folder (its dataset runs) or any folder holding them
(searched recursively; a run inside a benchmark counts once). One row per (run, retriever):
retriever, config hash, dataset, split, every metric, queries, date, git sha, folder; sorted by
dataset, then the first metric, best first.

A row is named by what it ran (:func:`leaderboard_name`): the retriever's name as its run or
benchmark table names it (``dense``, ``dense@static`` for a benchmark variant's run), then
`` · `` and the embedder (:func:`embedder_label`: the model id's last part, ``all-MiniLM-L6-v2``,
else the embedder class's short name, ``tfidf``): ``dense · all-MiniLM-L6-v2``,
``dense@static · tokenlearn-static-model``. Retrievers that never read the embedder
(``LEXICAL_TARGETS``: BM25, a run file) have no embedder in their name, since their results do not
depend on it. Two runs differing only in the embedder's parameters (TF-IDF ``dim``) share a name;
the config hash tells them apart.

Results are put side by side only when they are comparable. Rows on the same dataset and split
must have been computed from the same data (the sha256 of the corpus, queries and qrels files
each run recorded) and with the same metric settings (the judged queries evaluated, run depth
``run.top_k``, ``dataset.ignore_identical_ids``); otherwise the command refuses with one line
naming the dataset, the setting or file, both values and both folders, and exit status 2.

The config hash is the first 12 hex digits of sha256 over the retriever's config (``_target_``
and parameters), the embedder config and the store settings, each with its defaults filled in:
the same retriever on two datasets, or from the CLI and from ``viking_eval.evaluate``, has the
same hash; any change to what it is changes it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import hashlib
import inspect
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from viking_eval import files
from viking_eval.benchmark.table import row_name
from viking_eval.config import ConfigError, check_store
from viking_eval.config.registry import is_allowed, resolve
from viking_eval.results import benchmark_folder, layout, run_folder

__all__ = [
    "LeaderboardError",
    "LeaderboardRow",
    "collect",
    "embedder_label",
    "leaderboard_name",
    "main",
    "table_rows",
]

EXIT_OK = 0
EXIT_INVALID = 2

LEXICAL_TARGETS = frozenset({"retrievers.baselines.BM25Retriever", "retrievers.run_file.RunFileRetriever"})
"""Retriever classes whose ``uses_embedder()`` is always False: no embedder in their row name."""


class LeaderboardError(ValueError):
    """Folders that cannot be put side by side (or read); the message is one line."""


@dataclass(frozen=True)
class LeaderboardRow:
    retriever: str
    config_hash: str
    dataset: str
    split: str
    metrics: dict[str, float]
    n_queries: int
    date: str
    git_sha: str
    folder: Path
    data_files: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # the metric settings compared


def _with_defaults(node: Any) -> Any:
    """A ``_target_`` config with the class's defaults filled in (its Params fields, else its
    constructor's keyword defaults), so that a config that leaves a default out and one that
    writes it hash the same."""
    if not isinstance(node, dict) or not isinstance(node.get("_target_"), str):
        return node
    if not is_allowed(node["_target_"]):  # a run folder is data: nothing outside the registry is imported
        return node
    try:
        cls = resolve(node["_target_"], "_target_")
    except ConfigError:  # a class that no longer imports: its config as written
        return node
    filled = dict(node)
    params = getattr(cls, "Params", None)
    if dataclasses.is_dataclass(params):
        for item in dataclasses.fields(params):
            if item.init and item.name not in filled and item.default is not dataclasses.MISSING:
                filled[item.name] = item.default
    else:
        with contextlib.suppress(TypeError, ValueError):
            for parameter in inspect.signature(cls).parameters.values():
                if parameter.name not in filled and parameter.default is not inspect.Parameter.empty:
                    filled[parameter.name] = parameter.default
    return filled


def _store(values: Any) -> Any:
    try:
        return check_store(values or {}).to_dict()
    except ConfigError:
        return values


def config_hash(config: dict[str, Any], retriever: str) -> str:
    """sha256 (12 hex digits) of the retriever's config, the embedder config and the store
    settings, each with its defaults filled in."""
    payload = {
        "retriever": _with_defaults((config.get("retrievers") or {}).get(retriever)),
        "embedder": _with_defaults(config.get("embedder")),
        "store": _store(config.get("store")),
    }
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def embedder_label(embedder: Any) -> str | None:
    """The embedder of a run as a row name shows it: the last part of its model id
    (``model_name`` or ``model``: ``sentence-transformers/all-MiniLM-L6-v2`` -> ``all-MiniLM-L6-v2``),
    else its class's name without ``Embedder``, lower case (``TfidfEmbedder`` -> ``tfidf``); None
    when the run has no embedder config."""
    if not isinstance(embedder, dict):
        return None
    for key in ("model_name", "model"):
        model = embedder.get(key)
        if isinstance(model, str) and model.strip("/"):
            return model.rstrip("/").rsplit("/", 1)[-1]
    target = embedder.get("_target_")
    if not isinstance(target, str) or not target:
        return None
    name = target.rsplit(".", 1)[-1]
    return (name.removesuffix("Embedder") or name).lower()


def leaderboard_name(retriever: str, variant: str | None, config: dict[str, Any]) -> str:
    """``<retriever>[@<variant>] · <embedder>``; without `` · <embedder>`` for a retriever that
    never reads the embedder (``LEXICAL_TARGETS``) or a run without an embedder config."""
    name = row_name(retriever, variant)
    node = (config.get("retrievers") or {}).get(retriever)
    target = node.get("_target_") if isinstance(node, dict) else None
    label = embedder_label(config.get("embedder"))
    if label is None or target in LEXICAL_TARGETS:
        return name
    return f"{name} · {label}"


def _git(environment: dict[str, Any]) -> str:
    git = environment.get("git") if isinstance(environment.get("git"), dict) else {}
    sha = str((git or {}).get("sha") or "")[:12]
    return f"{sha}+dirty" if sha and (git or {}).get("dirty") else sha


def _run_rows(folder: Path, variant: str | None = None) -> list[LeaderboardRow]:
    metrics = run_folder.read_metrics(folder)
    environment = run_folder.read_environment(folder)
    config = run_folder.read_config(folder)
    dataset_settings = config.get("dataset") or {}
    settings = {
        "evaluated queries": metrics.get("n_queries"),
        "run.top_k": (config.get("run") or {}).get("top_k"),
        "dataset.ignore_identical_ids": dataset_settings.get("ignore_identical_ids", False),
    }
    rows = []
    for name, entry in (metrics.get("retrievers") or {}).items():
        rows.append(
            LeaderboardRow(
                retriever=leaderboard_name(name, variant, config),
                config_hash=config_hash(config, name),
                dataset=str(metrics.get("dataset")),
                split=str(metrics.get("split")),
                metrics=dict(entry.get("metrics") or {}),
                n_queries=int(entry.get("n_queries") or 0),
                date=str(environment.get("time") or ""),
                git_sha=_git(environment),
                folder=folder,
                data_files=dict(environment.get("dataset_files") or {}),
                settings=settings,
            )
        )
    return rows


def _benchmark_runs(folder: Path) -> list[tuple[Path, str | None]]:
    document = benchmark_folder.read_benchmark(folder)
    return [(folder / str(run["folder"]), run.get("variant")) for run in document.get("runs") or []]


def _found(folder: Path) -> list[tuple[Path, str | None]]:
    """The finished run folders under ``folder`` (with their benchmark variant, if any)."""
    if benchmark_folder.is_benchmark_folder(folder):
        return _benchmark_runs(folder)
    if run_folder.is_finished_run(folder):
        return [(folder, None)]
    found: list[tuple[Path, str | None]] = []
    inside_benchmarks: set[Path] = set()
    for path in sorted(folder.rglob(layout.BENCHMARK)):
        for run, variant in _benchmark_runs(path.parent):
            found.append((run, variant))
            inside_benchmarks.add(run.resolve())
    for path in sorted(folder.rglob("metrics.json")):
        run = path.parent
        if run.resolve() not in inside_benchmarks and run_folder.is_finished_run(run):
            found.append((run, None))
    return found


def collect(folders: Sequence[Path]) -> list[LeaderboardRow]:
    """Every finished run's rows, checked for comparability; LeaderboardError if not."""
    runs: list[tuple[Path, str | None]] = []
    seen: set[Path] = set()
    for folder in folders:
        if not folder.is_dir():
            raise LeaderboardError(f"{folder}: not a folder")
        found = _found(folder)
        if not found:
            raise LeaderboardError(
                f"{folder}: no finished run or benchmark folder in it (metrics.json + config.yaml)"
            )
        for run, variant in found:
            if run.resolve() not in seen:
                seen.add(run.resolve())
                runs.append((run, variant))
    rows: list[LeaderboardRow] = []
    for run, variant in runs:
        try:
            rows += _run_rows(run, variant)
        except run_folder.RunFolderError as error:
            raise LeaderboardError(str(error)) from None
    check_comparable(rows)
    return rows


def check_comparable(rows: Sequence[LeaderboardRow]) -> None:
    """Rows on one dataset and split share their data checksums and metric settings."""
    first: dict[tuple[str, str], LeaderboardRow] = {}
    for row in rows:
        key = (row.dataset, row.split)
        other = first.setdefault(key, row)
        if other is row or other.folder == row.folder:
            continue
        where = f"{row.dataset} ({row.split})"
        for name in sorted(set(other.data_files) | set(row.data_files)):
            mine, theirs = row.data_files.get(name), other.data_files.get(name)
            if mine != theirs:
                raise LeaderboardError(
                    f"{where}: data checksums differ: {name} sha256 {str(theirs)[:12]} in {other.folder} vs "
                    f"{str(mine)[:12]} in {row.folder}; results on different data are not comparable"
                )
        for name in other.settings:
            if other.settings[name] != row.settings.get(name):
                raise LeaderboardError(
                    f"{where}: metric settings differ: {name} {other.settings[name]!r} in {other.folder} vs "
                    f"{row.settings.get(name)!r} in {row.folder}"
                )


def table_rows(rows: Sequence[LeaderboardRow]) -> tuple[list[str], list[list[Any]]]:
    """The header and rows, sorted by dataset, split, first metric (best first), retriever."""
    metrics: list[str] = []
    for row in rows:
        metrics += [name for name in row.metrics if name not in metrics]
    primary = metrics[0] if metrics else None
    ordered = sorted(
        rows,
        key=lambda row: (
            row.dataset,
            row.split,
            -(row.metrics.get(primary, float("-inf")) if primary else 0.0),
            row.retriever,
            str(row.folder),
        ),
    )
    header = ["retriever", "config", "dataset", "split", *metrics, "queries", "date", "git", "folder"]
    body = [
        [
            row.retriever,
            row.config_hash,
            row.dataset,
            row.split,
            *(row.metrics.get(name) for name in metrics),
            row.n_queries,
            row.date,
            row.git_sha,
            str(row.folder),
        ]
        for row in ordered
    ]
    return header, body


def _formatted(body: list[list[Any]]) -> list[list[str]]:
    return [
        [f"{cell:.4f}" if isinstance(cell, float) else "" if cell is None else str(cell) for cell in row]
        for row in body
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m viking_eval.benchmark.leaderboard",
        description="Finished run and benchmark folders in one table; refuses results on different data "
        "or with different metric settings.",
    )
    parser.add_argument(
        "folders", nargs="+", type=Path, help="run folders, benchmark folders, or folders holding them"
    )
    parser.add_argument("--csv", type=Path, help="also write the table as CSV (full precision)")
    parser.add_argument("--md", type=Path, help="also write the table as markdown")
    args = parser.parse_args(argv)
    try:
        rows = collect(args.folders)
    except LeaderboardError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    header, body = table_rows(rows)
    print(tabulate(_formatted(body), headers=header, tablefmt="simple", disable_numparse=True))
    if args.csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([["" if cell is None else cell for cell in row] for row in body])
        files.write_text(args.csv, buffer.getvalue())
    if args.md:
        table = tabulate(_formatted(body), headers=header, tablefmt="github", disable_numparse=True)
        files.write_text(
            args.md, f"# Leaderboard\n\n{len(body)} rows from {len(args.folders)} folder(s)\n\n{table}\n"
        )
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
