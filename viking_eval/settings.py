"""Validate the composed Hydra config at start-up, before any data is read or model loaded.

Unknown keys and out-of-range values raise ConfigError naming the config path, the bad value and
what is allowed. Retriever parameters are checked by the retriever's own ``Params`` dataclass
(the same validation production code gets); embedders validate in their (lazy) constructors.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from retrievers.store import StoreConfig
from viking_eval.metrics import Metric, MetricError, parse_metrics
from viking_eval.significance import SignificanceSettings


class ConfigError(ValueError):
    """A configuration that cannot run; the message says where and what is allowed."""


def _plain(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def _build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    allowed = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; allowed: {allowed}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{where}: {error}") from None


@dataclass(frozen=True)
class DatasetSettings:
    """What the data is: a dataset name (searched in VIKING_EVAL_DATA, then datasets/) or a
    ``path``, the qrels ``split``, BEIR's ``ignore_identical_ids``, and ``strict`` (qrels naming
    unknown documents or queries fail instead of being dropped and counted).

    ``scope_key``: a query metadata key; a query only searches documents whose metadata holds the
    same value (LoCoMo's per-conversation setting: ``conversation``). ``group_key``: a query
    metadata key whose values split the metrics into groups in the report (e.g. LoCoMo's
    ``category_name``). Only query text ever reaches a retriever, never query metadata.

    ``tune_split``, ``partition_key``, ``partition_seed``: which queries sweeps and studies
    evaluate (see viking_eval/splits.py); single runs always evaluate ``split``."""

    name: str
    split: str = "test"
    path: str | None = None
    ignore_identical_ids: bool = False
    strict: bool = False
    scope_key: str | None = None
    group_key: str | None = None
    tune_split: str | None = "auto"
    partition_key: str | None = None
    partition_seed: int = 0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name must be a dataset name or folder")
        if not self.split:
            raise ValueError("split must be a qrels split name such as 'test'")


@dataclass(frozen=True)
class LatencySettings:
    """Per-query latency on a seeded sample: ``n_queries`` in [0, 100000] (0 = skip),
    ``warmup`` in [0, 1000] queries run first and not timed, ``blas_threads`` in [1, 256]: the
    BLAS threads while queries are timed one at a time (None = as the process has them; batch
    throughput always uses them all; see viking_eval/latency.py)."""

    n_queries: int = 100
    warmup: int = 10
    seed: int = 0
    blas_threads: int | None = 1

    def __post_init__(self) -> None:
        if not 0 <= self.n_queries <= 100_000:
            raise ValueError(f"latency.n_queries must be in [0, 100000], got {self.n_queries}")
        if not 0 <= self.warmup <= 1000:
            raise ValueError(f"latency.warmup must be in [0, 1000], got {self.warmup}")
        if self.blas_threads is not None and (
            isinstance(self.blas_threads, bool)
            or not isinstance(self.blas_threads, int)
            or not 1 <= self.blas_threads <= 256
        ):
            raise ValueError(
                f"latency.blas_threads must be an integer in [1, 256] or null, got {self.blas_threads!r}"
            )


@dataclass(frozen=True)
class RunSettings:
    """``top_k``: run depth in [1, 10000] (R@100 needs >= 100); ``batch_size``: queries per
    ``retrieve_batch`` call in [1, 100000]. ``baseline``: the retriever every other one is
    compared with (paired tests, significance.csv, report markers); None = the first one."""

    top_k: int = 100
    batch_size: int = 256
    metrics: tuple[str, ...] = ("nDCG@10", "R@10", "R@100", "RR@10", "AP@100")
    latency: LatencySettings = field(default_factory=LatencySettings)
    resume: bool = True
    baseline: str | None = None
    significance: SignificanceSettings = field(default_factory=SignificanceSettings)

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= 10_000:
            raise ValueError(f"top_k must be in [1, 10000], got {self.top_k}")
        if not 1 <= self.batch_size <= 100_000:
            raise ValueError(f"batch_size must be in [1, 100000], got {self.batch_size}")


@dataclass(frozen=True)
class RetrieverSpec:
    """One named retriever of the run: its class and validated parameters."""

    name: str
    target: str
    params: dict[str, Any]


@dataclass(frozen=True)
class GateSettings:
    """The regression gate (viking_eval/gate.py). ``baseline``: a baseline file
    (experiments/baselines/<name>.yaml); when set, the run executes that file's checks instead of
    the configured run. ``baseline_run``: a run folder; when set, the finished run is compared
    with that run's per-query values. ``tolerance``: absolute metric tolerance of the run-folder
    comparison, in [0, 1]; ``latency_reference``: a retriever whose latency the others' is gated
    against (ratio), ``latency_tolerance``: relative, in [0, 100]."""

    baseline: str | None = None
    baseline_run: str | None = None
    tolerance: float = 0.005
    latency_reference: str | None = None
    latency_tolerance: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.tolerance <= 1.0:
            raise ValueError(f"tolerance must be in [0, 1], got {self.tolerance}")
        if not 0.0 <= self.latency_tolerance <= 100.0:
            raise ValueError(f"latency_tolerance must be in [0, 100], got {self.latency_tolerance}")
        if self.baseline is not None and self.baseline_run is not None:
            raise ValueError("set baseline (a baseline file) or baseline_run (a run folder), not both")


@dataclass(frozen=True)
class Settings:
    name: str
    dataset: DatasetSettings
    run: RunSettings
    metrics: list[Metric]
    store: StoreConfig
    embedder: dict[str, Any]
    retrievers: list[RetrieverSpec]
    cache_dir: str | None
    show_progress: bool | None
    gate: GateSettings = field(default_factory=GateSettings)


def check_retriever(name: str, cfg: Mapping[str, Any]) -> RetrieverSpec:
    where = f"retrievers.{name}"
    values = dict(cfg)
    target = values.pop("_target_", None)
    if not target:
        raise ConfigError(f"{where}: missing _target_ (a class such as retrievers.baselines.DenseRetriever)")
    try:
        cls = get_class(target)
    except Exception as error:  # hydra wraps import errors in several types
        raise ConfigError(
            f"{where}: _target_ {target!r} is not a retriever of this project ({error})"
        ) from None
    params_cls = getattr(cls, "Params", None)
    if params_cls is None or not dataclasses.is_dataclass(params_cls):
        raise ConfigError(
            f"{where}: {target} is not a retriever of this project (it has no Params dataclass)"
        )
    _build(params_cls, instantiate_objects(values, where), where)
    return RetrieverSpec(name=name, target=target, params=values)


def instantiate_objects(values: Mapping[str, Any], where: str = "retrievers") -> dict[str, Any]:
    """Retriever parameters with object-valued entries built: a mapping with a ``_target_``
    (e.g. ``reranker: {_target_: retrievers.rerank.EmbeddingReranker, ...}`` composed from
    conf/reranker/) becomes the instantiated object, ``_target_: null`` (conf/reranker/none.yaml)
    becomes None. Every other value passes through, for the retriever's Params to validate."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping) and "_target_" in value:
            if value["_target_"] is None:
                out[key] = None
                continue
            try:
                out[key] = instantiate(dict(value))
            except Exception as error:  # hydra wraps constructor errors
                cause = error.__cause__ or error
                raise ConfigError(f"{where}.{key}: {cause}") from None
        else:
            out[key] = value
    return out


def check_embedder(cfg: Mapping[str, Any]) -> dict[str, Any]:
    values = dict(cfg)
    target = values.get("_target_")
    if not target:
        raise ConfigError(
            "embedder: missing _target_ (e.g. retrievers.embedders.SentenceTransformerEmbedder)"
        )
    try:
        cls = get_class(target)
    except Exception as error:
        raise ConfigError(f"embedder: cannot import _target_ {target!r}: {error}") from None
    accepted = set(inspect.signature(cls).parameters) - {"self"}
    unknown = sorted(set(values) - accepted - {"_target_"})
    if unknown:
        raise ConfigError(f"embedder: unknown key(s) {unknown}; allowed: {sorted(accepted)}")
    try:  # embedders validate in their constructor and load models lazily, so this is cheap
        instantiate(values)
    except Exception as error:
        cause = error.__cause__ or error
        raise ConfigError(f"embedder: {cause}") from None
    return values


TOP_LEVEL_KEYS = {
    "name",
    "dataset",
    "embedder",
    "store",
    "retrievers",
    "run",
    "cache_dir",
    "show_progress",
    "sweep",
    "gate",
}


def load_settings(cfg: DictConfig) -> Settings:
    """Validate everything in ``cfg``; raise ConfigError on the first problem."""
    plain = _plain(cfg)
    unknown = sorted(set(plain) - TOP_LEVEL_KEYS)
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {unknown}; allowed: {sorted(TOP_LEVEL_KEYS)}")
    dataset = _build(DatasetSettings, plain.get("dataset") or {}, "dataset")
    run_values = dict(plain.get("run") or {})
    latency = _build(LatencySettings, run_values.pop("latency", None) or {}, "run.latency")
    significance = _build(
        SignificanceSettings, run_values.pop("significance", None) or {}, "run.significance"
    )
    if "metrics" in run_values:
        run_values["metrics"] = tuple(run_values["metrics"])
    run = _build(RunSettings, {**run_values, "latency": latency, "significance": significance}, "run")
    try:
        metrics = parse_metrics(run.metrics)
    except MetricError as error:
        raise ConfigError(f"run.metrics: {error}") from None
    try:
        store = StoreConfig.from_dict(plain.get("store"))
    except (TypeError, ValueError) as error:
        raise ConfigError(f"store: {error}") from None
    retrievers_cfg = plain.get("retrievers") or {}
    if not retrievers_cfg:
        raise ConfigError(
            "no retrievers configured; choose an experiment (experiment=quickstart) or add "
            "'+retriever@retrievers.bm25=bm25'"
        )
    retrievers = [check_retriever(name, spec) for name, spec in retrievers_cfg.items()]
    names = [spec.name for spec in retrievers]
    if run.baseline is not None and run.baseline not in names:
        raise ConfigError(
            f"run.baseline: {run.baseline!r} is not a configured retriever; configured: {names}"
        )
    gate = _build(GateSettings, plain.get("gate") or {}, "gate")
    if gate.latency_reference is not None and gate.latency_reference not in names:
        raise ConfigError(
            f"gate.latency_reference: {gate.latency_reference!r} is not a configured retriever; configured: {names}"
        )
    return Settings(
        name=str(plain.get("name") or "default"),
        dataset=dataset,
        run=run,
        metrics=metrics,
        store=store,
        embedder=check_embedder(plain.get("embedder") or {}),
        retrievers=retrievers,
        cache_dir=plain.get("cache_dir"),
        show_progress=plain.get("show_progress"),
        gate=gate,
    )
