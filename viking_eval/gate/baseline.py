"""The regression gate's baseline files (``experiments/baselines/<name>.yaml``): what each check
runs (a ``python -m viking_eval`` command of Hydra overrides), what it must score (metrics per
retriever, a tolerance, optional latency ratios) and its stored per-query values; read and
validated here, every problem a :class:`GateError` naming the file, key and value. The gate
itself (running the checks, verdicts, recording) is :mod:`viking_eval.gate.checks`.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from viking_eval.measures.significance import SignificanceSettings
from viking_eval.results import run_folder
from viking_eval.results.run_folder import RunFolderError

LATENCY_MEASURES = (
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "mean_ms",
    "encode_p50_ms",
    "search_p50_ms",
    "search_p95_ms",
    "search_mean_ms",
)

PerQuery = dict[str, dict[str, dict[str, float]]]  # retriever -> metric -> query id -> value


class GateError(ValueError):
    """A baseline file, check or run folder the gate cannot use; the message says where and why."""


# --------------------------------------------------------------------------- baseline files


@dataclass(frozen=True)
class LatencyExpectation:
    """``ratios[retriever]`` = expected ``measure`` of the retriever / ``measure`` of
    ``reference``, both from the same run; ``tolerance`` is relative."""

    measure: str
    reference: str
    tolerance: float
    ratios: dict[str, float]


@dataclass(frozen=True)
class Check:
    """One run of a baseline file: the command that produces it and what it must score."""

    name: str
    dataset: str
    command: str
    overrides: tuple[str, ...]
    tolerance: float
    metrics: dict[str, dict[str, float]]  # retriever -> metric -> expected value
    per_query: Path | None  # stored per-query values of the run that set the expectations
    latency: LatencyExpectation | None


@dataclass(frozen=True)
class BaselineFile:
    path: Path
    description: str
    tolerance: float
    significance: SignificanceSettings
    checks: tuple[Check, ...]
    measured: dict[str, Any] = field(default_factory=dict)


def _where(path: Path, key: str) -> str:
    return f"{path}: {key}"


def _keys(
    path: Path, key: str, mapping: Any, allowed: Sequence[str], required: Sequence[str] = ()
) -> dict[str, Any]:
    if not isinstance(mapping, Mapping):
        raise GateError(f"{_where(path, key)}: expected a mapping, got {type(mapping).__name__} {mapping!r}")
    unknown = sorted(str(k) for k in mapping if k not in allowed)
    if unknown:
        raise GateError(f"{_where(path, key)}: unknown key(s) {unknown}; allowed: {list(allowed)}")
    missing = [k for k in required if k not in mapping]
    if missing:
        raise GateError(f"{_where(path, key)}: missing key(s) {missing}")
    return dict(mapping)


def _number(path: Path, key: str, value: Any, low: float = -math.inf, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise GateError(f"{_where(path, key)}: expected a finite number, got {value!r}")
    if not low <= value <= high:
        raise GateError(f"{_where(path, key)}: must be in [{low}, {high}], got {value}")
    return float(value)


def parse_command(command: str, where: str) -> tuple[str, ...]:
    """The Hydra overrides of ``python -m viking_eval <overrides>``."""
    try:
        words = shlex.split(command)
    except ValueError as error:
        raise GateError(f"{where}: cannot parse the command {command!r}: {error}") from None
    if len(words) < 3 or words[0] not in ("python", "python3") or words[1:3] != ["-m", "viking_eval"]:
        raise GateError(f"{where}: the command must be 'python -m viking_eval <overrides>', got {command!r}")
    overrides = tuple(words[3:])
    flags = [word for word in overrides if word.startswith("-")]
    if flags:
        raise GateError(
            f"{where}: the command may hold Hydra overrides only (one run, no -m/--multirun or other "
            f"flags), got {flags}"
        )
    return overrides


def load_baseline(path: Path) -> BaselineFile:
    """Read and validate the structure of a baseline file (names are checked against the
    composed configurations by ``plan_checks``)."""
    if not path.is_file():
        raise GateError(f"baseline file {path} does not exist")
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise GateError(f"{path}: not valid YAML: {error}") from None
    top = _keys(
        path,
        "(top level)",
        document,
        ["description", "measured", "tolerance", "significance", "checks"],
        ["checks"],
    )
    tolerance = _number(path, "tolerance", top.get("tolerance", 0.005), 0.0, 1.0)
    significance_values = _keys(
        path,
        "significance",
        top.get("significance") or {},
        [f.name for f in dataclasses.fields(SignificanceSettings)],
    )
    try:
        significance = SignificanceSettings(**significance_values)
    except (TypeError, ValueError) as error:
        raise GateError(f"{_where(path, 'significance')}: {error}") from None
    raw_checks = top["checks"]
    if not isinstance(raw_checks, list) or not raw_checks:
        raise GateError(f"{_where(path, 'checks')}: expected a non-empty list of checks, got {raw_checks!r}")
    checks = [_parse_check(path, index, raw, tolerance) for index, raw in enumerate(raw_checks)]
    names = [check.name for check in checks]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise GateError(
            f"{_where(path, 'checks')}: check names must be unique (give 'name:'), repeated: {repeated}"
        )
    return BaselineFile(
        path=path,
        description=str(top.get("description") or ""),
        tolerance=tolerance,
        significance=significance,
        checks=tuple(checks),
        measured=dict(top.get("measured") or {}),
    )


def _parse_check(path: Path, index: int, raw: Any, default_tolerance: float) -> Check:
    key = f"checks[{index}]"
    values = _keys(
        path,
        key,
        raw,
        ["name", "dataset", "command", "tolerance", "metrics", "per_query", "latency"],
        ["dataset", "command", "metrics"],
    )
    dataset = values["dataset"]
    if not isinstance(dataset, str) or not dataset:
        raise GateError(f"{_where(path, key + '.dataset')}: expected a dataset name, got {dataset!r}")
    name = str(values.get("name") or dataset)
    key = f"checks[{index}] ({name})"
    command = values["command"]
    if not isinstance(command, str):
        raise GateError(f"{_where(path, key + '.command')}: expected a string, got {command!r}")
    overrides = parse_command(command, _where(path, key + ".command"))
    tolerance = _number(path, f"{key}.tolerance", values.get("tolerance", default_tolerance), 0.0, 1.0)
    metrics_raw = values["metrics"]
    if not isinstance(metrics_raw, Mapping) or not metrics_raw:
        raise GateError(
            f"{_where(path, key + '.metrics')}: expected a mapping retriever -> {{metric: value}}, got {metrics_raw!r}"
        )
    metrics: dict[str, dict[str, float]] = {}
    for retriever, expected in metrics_raw.items():
        where = f"{key}.metrics.{retriever}"
        if not isinstance(expected, Mapping) or not expected:
            raise GateError(f"{_where(path, where)}: expected a mapping metric -> value, got {expected!r}")
        metrics[str(retriever)] = {
            str(metric): _number(path, f"{where}.{metric}", value) for metric, value in expected.items()
        }
    per_query = values.get("per_query")
    per_query_path = None
    if per_query is not None:
        if not isinstance(per_query, str):
            raise GateError(f"{_where(path, key + '.per_query')}: expected a file path, got {per_query!r}")
        per_query_path = (path.parent / per_query).resolve()
    latency = None
    if values.get("latency") is not None:
        where = f"{key}.latency"
        lat = _keys(
            path,
            where,
            values["latency"],
            ["measure", "reference", "tolerance", "ratios"],
            ["reference", "ratios"],
        )
        measure = str(lat.get("measure", "search_p50_ms"))
        if measure not in LATENCY_MEASURES:
            raise GateError(
                f"{_where(path, where + '.measure')}: {measure!r} is not one of {list(LATENCY_MEASURES)}"
            )
        ratios_raw = lat["ratios"]
        if not isinstance(ratios_raw, Mapping) or not ratios_raw:
            raise GateError(
                f"{_where(path, where + '.ratios')}: expected a mapping retriever -> ratio, got {ratios_raw!r}"
            )
        latency = LatencyExpectation(
            measure=measure,
            reference=str(lat["reference"]),
            tolerance=_number(path, f"{where}.tolerance", lat.get("tolerance", 1.0), 0.0, 100.0),
            ratios={
                str(r): _number(path, f"{where}.ratios.{r}", value, 1e-9) for r, value in ratios_raw.items()
            },
        )
    return Check(
        name=name,
        dataset=dataset,
        command=command,
        overrides=overrides,
        tolerance=tolerance,
        metrics=metrics,
        per_query=per_query_path,
        latency=latency,
    )


# --------------------------------------------------------------------------- per-query files


def read_per_query(path: Path) -> PerQuery:
    """A per_query.csv (``retriever,query_id,<metric>...``) as retriever -> metric -> query -> value."""
    try:
        return run_folder.read_per_query(path)
    except RunFolderError as error:
        raise GateError(str(error)) from None


def write_per_query(
    path: Path, values: Mapping[str, Mapping[str, Mapping[str, float]]], metrics: Sequence[str]
) -> None:
    run_folder.write_per_query(path, values, metrics)
