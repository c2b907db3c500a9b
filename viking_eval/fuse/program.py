"""``experiment=fuse``: fuse run files with a named method, tuned on one half, reported on the other.

    python -m viking_eval experiment=fuse dataset=adi \\
        'fuse.runs=[reports/smoke/<time>/runs/bm25.trec,reports/smoke/<time>/runs/dense.trec]' \\
        fuse.method=wsum fuse.optimise=grid

1. Each run file is read (retrievers/run_file.py: one line naming file and line for a bad one)
   and checked to be a run of this dataset: its run folder's config.yaml, when there is one, must
   name the same dataset, and every document it ranks must be in the corpus.
2. The tuning queries are those sweeps tune on (``dataset.tune_split``: ``partition`` gives the
   tune half of ``dataset.split``, viking_eval/data/splits.py), the reported ones those a sweep's
   best configuration is reported on (the holdout half, or all of ``split``).
3. Supervised methods learn from the runs on the tuning queries; ``fuse.optimise`` chooses
   weights and parameters there (viking_eval/fuse/optimise.py), maximising ``fuse.objective``.
4. Each run and the fusion are evaluated on the reported queries with ``run.metrics``; the table
   is printed and the folder gets ``fuse.json`` (choices, tuning value, metrics) and
   ``runs/fused.trec`` (the fusion of the reported queries, depth ``run.top_k``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from retrievers.fusion import METHODS, fuse_runs, ranked, train
from retrievers.run_file import RunFileError, read_run_file
from viking_eval.config import Settings
from viking_eval.config.errors import ConfigError
from viking_eval.data import BeirDataset
from viking_eval.data.splits import load_for_phase
from viking_eval.fuse.optimise import Candidate, describe, grid_search, optuna_search
from viking_eval.measures.metrics import Metric, evaluate
from viking_eval.results import run_folder

__all__ = ["fuse_program", "read_runs"]

Run = dict[str, dict[str, float]]


def _run_folder_dataset(path: Path) -> str | None:
    """The dataset named by the config.yaml of the run folder holding ``runs/<name>.trec``."""
    config = path.parent.parent / "config.yaml"
    if path.parent.name != "runs" or not config.is_file():
        return None
    try:
        loaded = yaml.safe_load(config.read_text())
    except (OSError, yaml.YAMLError):
        return None
    dataset = loaded.get("dataset") if isinstance(loaded, dict) else None
    name = dataset.get("name") if isinstance(dataset, dict) else None
    return str(name) if name is not None else None


def _line_of(path: Path, query_id: str, doc: str) -> str:
    """``:N``, the first line of a TREC run naming ``doc`` for ``query_id`` ('' if not found)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, start=1):
                fields = line.split()
                if len(fields) >= 3 and fields[0] == query_id and fields[2] == doc:
                    return f":{number}"
    except OSError:
        return ""
    return ""


def read_runs(paths: Sequence[str], dataset: BeirDataset, dataset_name: str) -> list[Run]:
    """Each run file as ``{query: {doc: score}}``; ConfigError (``fuse.runs``) for a file that cannot
    be read or is a run of another dataset."""
    runs: list[Run] = []
    wanted = Path(dataset_name).name
    for index, text in enumerate(paths):
        key = f"fuse.runs[{index}]"
        path = Path(text).expanduser()
        named = _run_folder_dataset(path)
        if named is not None and Path(named).name != wanted:
            raise ConfigError(
                key,
                f"{path} is a run of dataset {named!r} (its run folder's config.yaml), and this fusion "
                f"is over {wanted!r}: fuse runs of one dataset, or set dataset={named}",
            )
        try:
            parsed = read_run_file(path)
        except RunFileError as error:
            raise ConfigError(key, str(error)) from None
        run: Run = {}
        for query_id, (docs, scores) in parsed.rankings.items():
            for doc in docs:
                if doc not in dataset.corpus:
                    raise ConfigError(
                        key,
                        f"{path}{_line_of(path, query_id, doc)}: query {query_id!r} ranks document "
                        f"{doc!r}, which is not in {wanted}'s corpus: a run of another dataset?",
                    )
            run[query_id] = dict(zip(docs, scores.tolist(), strict=True))
        runs.append(run)
    return runs


def _only(runs: Sequence[Run], queries: Mapping[str, Any]) -> list[Run]:
    return [{q: docs for q, docs in run.items() if q in queries} for run in runs]


def _cut(fused: Mapping[str, Mapping[str, float]], top_k: int) -> Run:
    return {q: dict(ranked(docs, top_k)) for q, docs in fused.items()}


class _Fusion:
    """Fusing and scoring the runs of one set of queries with the configured method."""

    def __init__(self, settings: Settings, tuning: list[Run], qrels: Mapping[str, Mapping[str, int]]) -> None:
        self.settings = settings
        self.options = settings.fuse
        self.tuning = tuning
        self.qrels = qrels
        self.models: dict[tuple[tuple[str, float], ...], Any] = {}

    def model(self, params: Mapping[str, float]) -> Any:
        key = tuple(sorted(params.items()))
        if key not in self.models:
            self.models[key] = train(self.options.method, self.tuning, self.qrels, params=params)
        return self.models[key]

    def fuse(self, runs: Sequence[Run], weights: Sequence[float] | None, params: Mapping[str, float]) -> Run:
        fused = fuse_runs(
            runs,
            self.options.method,
            norm=self.options.norm,
            weights=weights,
            params=params,
            model=self.model(params),
            missing=self.options.missing,
        )
        return _cut(fused, self.settings.run.top_k)

    def tuning_value(self, metric: Metric) -> Any:
        def value(weights: tuple[float, ...] | None, params: dict[str, float]) -> float:
            fused = self.fuse(self.tuning, weights, params)
            return evaluate(fused, self.qrels, [metric]).aggregate[metric.name]

        return value


def _objective(settings: Settings) -> Metric:
    wanted = settings.fuse.objective or settings.metrics[0].name
    for metric in settings.metrics:
        if metric.name == wanted:
            return metric
    names = [metric.name for metric in settings.metrics]
    raise ConfigError("fuse.objective", f"{wanted!r} is not in run.metrics {names}")


def _choose(settings: Settings, fusion: _Fusion, metric: Metric) -> Candidate:
    options = settings.fuse
    given_params = dict(options.params)
    objective = fusion.tuning_value(metric)
    n_legs = len(options.runs or ())
    if options.optimise == "grid":
        return grid_search(options.method, n_legs, options.step, objective)
    if options.optimise == "optuna":
        return optuna_search(
            options.method, n_legs, options.step, objective, trials=options.trials, seed=options.seed
        )
    weights = options.weights
    return Candidate(weights, given_params, objective(weights, given_params), 1)


def fuse_program(settings: Settings, output_dir: Path) -> int:
    """The fusion (see the module docstring); returns the exit status."""
    options = settings.fuse
    data = settings.dataset
    name = data.path or data.name
    common: dict[str, Any] = {
        "split": data.split,
        "tune_split": data.tune_split,
        "strict": data.strict,
        "partition_key": data.partition_key,
        "partition_seed": data.partition_seed,
        "download": data.download,
    }
    tune, tune_choice = load_for_phase(name, "tune", **common)
    report, report_choice = load_for_phase(name, "final", **common)
    runs = read_runs(options.runs or (), report, name)
    tuning = _only(runs, tune.qrels)
    if not any(tuning_run for tuning_run in tuning):
        raise ConfigError(
            "dataset.tune_split",
            f"the run files hold no query of the tuning queries ({tune_choice.label}); runs of "
            f"{data.split!r} are tuned on half of it with dataset.tune_split=partition",
        )
    metric = _objective(settings)
    fusion = _Fusion(settings, tuning, tune.qrels)
    chosen = _choose(settings, fusion, metric)
    reported = _only(runs, report.qrels)
    fused = fusion.fuse(reported, chosen.weights, chosen.params)
    labels = [Path(path).stem for path in options.runs or ()]
    table: dict[str, dict[str, float]] = {}
    for label, run in zip(labels, reported, strict=True):
        table[label] = evaluate(_cut(run, settings.run.top_k), report.qrels, settings.metrics).aggregate
    fused_label = f"fused:{options.method}"
    table[fused_label] = evaluate(fused, report.qrels, settings.metrics).aggregate
    result = {
        "method": options.method,
        "supervised": METHODS[options.method].supervised,
        "norm": options.norm,
        "missing": options.missing,
        "optimise": options.optimise,
        "weights": None if chosen.weights is None else list(chosen.weights),
        "params": chosen.params,
        "objective": metric.name,
        "tuning": {"queries": tune_choice.label, "value": chosen.value, "candidates": chosen.evaluated},
        "reported": {"queries": report_choice.label, "n_queries": len(report.qrels)},
        "runs": list(options.runs or ()),
        "metrics": table,
    }
    lines = [
        f"{q} Q0 {doc} {rank} {score:.10g} {fused_label}"
        for q in sorted(fused)
        for rank, (doc, score) in enumerate(ranked(fused[q]), start=1)
    ]
    run_folder.write_fuse_result(output_dir, result, lines)
    print(
        f"fusion {options.method} ({options.norm}; {describe(chosen.weights, chosen.params)}), chosen on "
        f"{tune_choice.label} ({metric.name} {chosen.value:.4f}, {chosen.evaluated} candidates); "
        f"reported on {report_choice.label}, {len(report.qrels)} queries:"
    )
    names = [m.name for m in settings.metrics]
    width = max(len(label) for label in table)
    print(" " * width + "  " + "  ".join(f"{n:>10}" for n in names))
    for label, values in table.items():
        cells = "  ".join(f"{values[n]:>10.4f}" if math.isfinite(values[n]) else f"{'-':>10}" for n in names)
        print(f"{label:<{width}}  {cells}")
    print(f"written: {output_dir / 'fuse.json'}, {output_dir / 'runs' / 'fused.trec'}")
    return 0
