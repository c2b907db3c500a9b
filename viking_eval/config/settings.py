"""The harness's settings, declared once as Params, and :func:`load_settings`, which validates a
composed config before any data is read or model loaded.

The dataset, run (latency, significance), sweep and gate settings and the config's top level are
:class:`retrievers.params.Params` subclasses, like the library's retriever and store parameters:
one declaration gives the Hydra schema that type-checks them at composition
(:mod:`viking_eval.config.compose` registers :class:`ConfigFile`'s schema) and the range checks.
The nodes whose class the config chooses are checked against that class right after composition:
``store`` against :class:`retrievers.store.StoreConfig`, each ``retrievers.<name>`` against its
``_target_``'s ``Params`` dataclass, ``embedder`` and each reranker against their constructors
(:mod:`viking_eval.config.validate`). Every problem is a :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from retrievers.params import ParamError, Params, param
from retrievers.store import StoreConfig
from viking_eval.config.errors import ConfigError, from_library_error
from viking_eval.config.registry import KINDS, SLOT_KINDS, check_targets, is_allowed, resolve
from viking_eval.config.schema import init_schema, is_params_class
from viking_eval.config.validate import BM25_STORE_KEYS, typed_values
from viking_eval.measures.metrics import Metric, MetricError, parse_metrics
from viking_eval.measures.significance import SignificanceSettings

__all__ = [
    "BenchmarkSettings",
    "ConfigError",
    "ConfigFile",
    "DatasetSettings",
    "GateSettings",
    "LatencySettings",
    "RetrieverSpec",
    "RunSettings",
    "Settings",
    "SweepSettings",
    "build_object",
    "check_embedder",
    "check_retriever",
    "check_store",
    "check_sweep_objective",
    "instantiate_objects",
    "is_retriever_config",
    "load_settings",
]


@dataclass(frozen=True)
class DatasetSettings(Params):
    """What the data is: a dataset name (searched in VIKING_EVAL_DATA, then datasets/) or a
    ``path``, the qrels ``split``, BEIR's ``ignore_identical_ids``, and ``strict`` (qrels naming
    unknown documents or queries fail instead of being dropped and counted).

    ``scope_key``: a query metadata key; a query only searches documents whose metadata holds the
    same value (LoCoMo's per-conversation setting: ``conversation``). ``group_key``: a query
    metadata key whose values split the metrics into groups in the report (e.g. LoCoMo's
    ``category_name``). Only query text ever reaches a retriever, never query metadata.

    ``tune_split``, ``partition_key``, ``partition_seed``: which queries sweeps and studies
    evaluate (see viking_eval/data/splits.py). ``half``: the queries of ``split`` a single run
    evaluates: ``all``, or the ``tune``/``holdout`` half of the seeded partition sweeps use
    (only where ``tune_split`` resolves to ``partition``; multiruns need ``all``).

    ``download``: ``auto`` fetches a dataset that is found nowhere but that the registry can
    download (SciFact and the other BEIR datasets) into the data folder before the run;
    ``never`` stops with the one-line message saying how to get it (so does
    ``VIKING_EVAL_DOWNLOAD=never``). It does not change results: not part of the resume key."""

    SECTION = "dataset"

    name: str = param(non_empty=True, doc="a dataset name or folder")
    split: str = param("test", non_empty=True, doc="a qrels split such as test")
    path: str | None = param(None, non_empty=True, doc="a folder instead of a name")
    ignore_identical_ids: bool = param(False)
    strict: bool = param(False)
    scope_key: str | None = param(None, non_empty=True)
    group_key: str | None = param(None, non_empty=True)
    tune_split: str | None = param("auto", non_empty=True)
    partition_key: str | None = param(None, non_empty=True)
    partition_seed: int = param(0, low=0, high=2**32 - 1)
    half: str = param(
        "all", choices=("all", "tune", "holdout"), doc="the queries of split a single run evaluates"
    )
    download: str = param("auto", choices=("auto", "never"), doc="fetch a missing registry dataset")


@dataclass(frozen=True)
class LatencySettings(Params):
    """Per-query latency on a seeded sample: ``n_queries`` (0 = skip), ``warmup`` queries run first
    and not timed, ``blas_threads``: the BLAS threads while queries are timed one at a time (None
    = as the process has them; batch throughput always uses them all; see viking_eval/run/latency.py)."""

    SECTION = "run.latency"

    n_queries: int = param(100, low=0, high=100_000)
    warmup: int = param(10, low=0, high=1000)
    seed: int = param(0, low=0, high=2**32 - 1)
    blas_threads: int | None = param(1, low=1, high=256)


@dataclass(frozen=True)
class RunSettings(Params):
    """``top_k``: run depth (R@100 needs >= 100); ``batch_size``: queries per ``retrieve_batch``
    call; ``metrics``: ir-measures names, checked here (viking_eval/measures/metrics.py); ``baseline``: the
    retriever every other one is compared with (paired tests, significance.csv, report markers);
    None = the first one."""

    SECTION = "run"

    top_k: int = param(100, low=1, high=10_000)
    batch_size: int = param(256, low=1, high=100_000)
    metrics: tuple[str, ...] = param(("nDCG@10", "R@10", "R@100", "RR@10", "AP@100"), non_empty=True)
    latency: LatencySettings = param(factory=LatencySettings)
    resume: bool = param(True)
    baseline: str | None = param(None, non_empty=True)
    significance: SignificanceSettings = param(factory=SignificanceSettings)

    def check(self) -> None:
        try:
            parse_metrics(self.metrics)
        except MetricError as error:
            raise ParamError("run.metrics", f"run.metrics: {error}") from None


@dataclass(frozen=True)
class SweepSettings(Params):
    """Multiruns: ``objective`` (``<retriever>.<metric>`` or ``<metric>``; None = the first metric
    of the swept retriever), its ``direction``, and whether the best job and the default are
    evaluated on the reported split when the sweep ends (viking_eval/sweep/best.py)."""

    SECTION = "sweep"

    objective: str | None = param(None, non_empty=True)
    direction: Literal["maximize", "minimize"] = param("maximize")
    evaluate_best: bool = param(True)


@dataclass(frozen=True)
class GateSettings(Params):
    """The regression gate (viking_eval/gate/checks.py). ``baseline``: a baseline file
    (experiments/baselines/<name>.yaml); when set, the run executes that file's checks instead of
    the configured run. ``baseline_run``: a run folder; when set, the finished run is compared
    with that run's per-query values. ``tolerance``: absolute metric tolerance of the run-folder
    comparison; ``latency_reference``: a retriever whose latency the others' is gated against
    (ratio), ``latency_tolerance``: relative."""

    SECTION = "gate"

    baseline: str | None = param(None, non_empty=True)
    baseline_run: str | None = param(None, non_empty=True)
    tolerance: float = param(0.005, low=0.0, high=1.0)
    latency_reference: str | None = param(None, non_empty=True)
    latency_tolerance: float = param(1.0, low=0.0, high=100.0)

    def check(self) -> None:
        if self.baseline is not None and self.baseline_run is not None:
            raise self.fail(
                "baseline_run", "and gate.baseline cannot both be set: a baseline file or a run folder"
            )


@dataclass(frozen=True)
class BenchmarkSettings(Params):
    """Benchmark mode (viking_eval/benchmark/run.py): ``datasets`` set runs the configured retrievers
    over each of them, one normal run folder per dataset, and writes one table retriever x dataset
    (benchmark.json/.csv/.md/.html). An entry is a dataset config (conf/dataset/<entry>.yaml) or a
    dataset name or folder found as ``dataset.name`` is. ``variants``: more rows from the same
    datasets, each a name and the overrides that make it (``static: [embedder=static,
    '~retrievers.bm25']`` gives ``dense@static``), for what one run cannot hold (one embedder per
    store). A benchmark is one command, not a multirun: ``-m`` runs a tuning sweep."""

    SECTION = "benchmark"

    datasets: tuple[str, ...] | None = param(None, non_empty=True, unique=True, doc="null = not a benchmark")
    variants: Mapping[str, tuple[str, ...]] = param(factory=dict, doc="name -> overrides of its runs")

    def check(self) -> None:
        for name in self.variants:
            if not name or not all(char.isalnum() or char in "_-" for char in name):
                raise self.fail("variants", f"names are letters, digits, _ and -, got {name!r}")


@dataclass(frozen=True)
class ConfigFile(Params):
    """The top level of a composed config: the schema Hydra checks at composition (registered as
    ``viking_eval_schema``, the first entry of conf/config.yaml's defaults). ``store``,
    ``embedder`` and ``retrievers`` are typed here only as mappings: their classes are chosen by
    the config, and :func:`load_settings` checks them against those classes."""

    dataset: DatasetSettings = param()
    name: str = param("default", non_empty=True, doc="the experiment's name: reports/<name>/")
    embedder: Any = param(None, doc="a mapping with _target_ (conf/embedder/)")
    store: Any = param(None, doc="StoreConfig settings (conf/store/)")
    retrievers: Mapping[str, Any] = param(factory=dict, doc="name -> a mapping with _target_")
    run: RunSettings = param(factory=RunSettings)
    sweep: SweepSettings = param(factory=SweepSettings)
    gate: GateSettings = param(factory=GateSettings)
    benchmark: BenchmarkSettings = param(factory=BenchmarkSettings)
    cache_dir: str | None = param(None, doc="null = VIKING_EVAL_CACHE or ~/.cache/viking_eval")
    show_progress: bool | None = param(None, doc="null = progress bars only on a terminal")


@dataclass(frozen=True)
class RetrieverSpec:
    """One named retriever of the run: its class and validated parameters (the keys the config
    gave, typed; reranker mappings are instantiated when the retriever is built)."""

    name: str
    target: str
    params: dict[str, Any]


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
    sweep: SweepSettings = field(default_factory=SweepSettings)
    benchmark: BenchmarkSettings = field(default_factory=BenchmarkSettings)


# --------------------------------------------------------------------------- nodes the config chooses


def _target(values: Mapping[str, Any], where: str, kind: str, example: str) -> tuple[str, type]:
    """The class of node ``where``'s ``_target_``, looked up in the registry of classes a config may
    name (viking_eval/config/registry.py) before anything is imported."""
    target = values.get("_target_")
    if not target or not isinstance(target, str):
        raise ConfigError(where, f"missing _target_ (a class such as {example})", key=f"{where}._target_")
    return target, resolve(target, f"{where}._target_", kind)


def is_retriever_config(value: Any) -> bool:
    """A mapping whose ``_target_`` names a retriever class (one with ``retrieve_batch``): a
    retriever inside a retriever's parameters (e.g. a hybrid's ``keyword_leg``), built over the
    same store when the run builds the retriever that holds it (viking_eval/run/inputs.py).
    A name outside the registry is not looked at (nothing is imported): :func:`load_settings`
    refuses it before this is asked."""
    if not isinstance(value, Mapping) or not is_allowed(value.get("_target_")):
        return False
    try:
        cls = resolve(value["_target_"], "_target_")
    except ConfigError:  # whoever reads it next says so
        return False
    return callable(getattr(cls, "retrieve_batch", None))


def _check_contract(target: str, cls: type, where: str) -> None:
    """The contract of a retriever class (retrievers/types.py): ``retrieve_batch(queries, top_k)``,
    ``retrieve(query, top_k)`` and a constructor ``(store, embedder=None, **params)``."""
    for method, signature in (
        ("retrieve_batch", "retrieve_batch(queries, top_k)"),
        ("retrieve", "retrieve(query, top_k)"),
    ):
        if not callable(getattr(cls, method, None)):
            raise ConfigError(
                where,
                f"{target} has no {signature} method; a retriever class needs retrieve_batch(queries, top_k) "
                "and retrieve(query, top_k) and a constructor (store, embedder=None, **params) (retrievers/types.py)",
            )
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return  # a constructor without a signature (a C type): nothing to check
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_embedder = any(p.name == "embedder" for p in parameters) or any(
        p.kind == p.VAR_KEYWORD for p in parameters
    )
    if (not positional and not any(p.kind == p.VAR_POSITIONAL for p in parameters)) or not takes_embedder:
        shown = ", ".join(str(p) for p in parameters)
        raise ConfigError(
            where,
            f"{target}'s constructor must take (store, embedder=None, **params), it takes ({shown}) (retrievers/types.py)",
        )


def check_retriever(name: str, cfg: Mapping[str, Any]) -> RetrieverSpec:
    """``retrievers.<name>``: the class meets the retriever contract; its Params dataclass, when it
    has one, checks every key (types, then ranges), else its constructor's signature does.
    Retriever configs among the parameters (a hybrid's legs) are checked the same way."""
    where = f"retrievers.{name}"
    if not isinstance(cfg, Mapping):
        raise ConfigError(where, f"must be a mapping with _target_ (conf/retriever/), got {cfg!r}")
    check_targets(cfg, ("retrievers", name))  # every _target_ in it, before any is imported
    target, cls = _target(cfg, where, "retriever", "retrievers.baselines.DenseRetriever")
    _check_contract(target, cls, where)
    values = {key: value for key, value in cfg.items() if key != "_target_"}
    for key, value in values.items():
        if is_retriever_config(value):  # checked as a retriever of its own, kept typed
            inner = check_retriever(f"{name}.{key}", value)
            values[key] = {"_target_": inner.target, **inner.params}
    params_cls: Any = getattr(cls, "Params", None)
    if not is_params_class(params_cls):
        return _check_plain_retriever(name, target, cls, values)
    allowed = {f.name for f in dataclasses.fields(params_cls)}
    for key in values:
        if key in BM25_STORE_KEYS and key not in allowed:
            raise bm25_key_error(where, key)
    typed = typed_values(params_cls, values, where)
    built = instantiate_objects(typed, where)
    try:
        if issubclass(params_cls, Params):
            params_cls.from_dict(built)
        else:
            params_cls(**built)
    except (TypeError, ValueError) as error:
        raise from_library_error(where, error, params_cls) from None
    return RetrieverSpec(name=name, target=target, params=typed)


def _check_plain_retriever(name: str, target: str, cls: type, values: dict[str, Any]) -> RetrieverSpec:
    """A retriever without a Params dataclass: its parameters are checked against its
    constructor's keywords (names, and types where annotated); a constructor taking ``**params``
    checks them itself when the run builds it."""
    where = f"retrievers.{name}"
    parameters = inspect.signature(cls).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in parameters):
        return RetrieverSpec(name=name, target=target, params=dict(values))
    typed = typed_values(cls, values, where, init=True)
    return RetrieverSpec(name=name, target=target, params=typed)


def bm25_key_error(where: str, key: str) -> ConfigError:
    """A BM25 index setting (k1, b, method, stopwords, stemmer) given to retriever ``where``."""
    keys = ", ".join(BM25_STORE_KEYS)
    return ConfigError(
        where,
        f"{key} is a BM25 index setting, not a retriever's: bm25s computes BM25 scores when the store is "
        f"built, so {keys} are store settings (store.bm25.{key}=...), shared by every retriever of the run",
        key=f"{where}.{key}",
        detail=f"{key} is a store setting, not a retriever's: write store.bm25.{key}=<value> (bm25s computes "
        f"BM25 scores when the index is built, so {keys} are shared by every retriever of the run)",
    )


def instantiate_objects(values: Mapping[str, Any], where: str = "retrievers") -> dict[str, Any]:
    """Retriever parameters with object-valued entries built: a mapping with a ``_target_``
    (e.g. ``reranker: {_target_: retrievers.rerank.EmbeddingReranker, ...}`` composed from
    conf/reranker/) becomes the built object, after its class is found in the registry and its
    keys are checked against the class's constructor; ``_target_: null`` (conf/reranker/none.yaml)
    becomes None. Every other value passes through, for the retriever's Params to validate."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if is_retriever_config(value):  # built over the store with the retriever holding it
            out[key] = value
        elif isinstance(value, Mapping) and "_target_" in value:
            out[key] = None if value["_target_"] is None else build_object(value, f"{where}.{key}")
        else:
            out[key] = value
    return out


def build_object(values: Mapping[str, Any], where: str, kind: str | None = None) -> Any:
    """The object a ``_target_`` mapping at ``where`` describes: the class from the registry (of
    ``kind``; None = the kind ``where``'s last key implies, e.g. ``reranker``), its keys checked
    against the constructor, nested ``_target_`` mappings built the same way first."""
    slot = kind if kind is not None else SLOT_KINDS.get(where.rsplit(".", 1)[-1])
    example = "retrievers.rerank.EmbeddingReranker"
    _, cls = _target(values, where, slot or "", example) if slot else _target_any(values, where)
    if slot is not None and not callable(getattr(cls, KINDS[slot], None)):
        detail = f"{cls.__module__}.{cls.__qualname__} is not a {slot}: it has no {KINDS[slot]}() method"
        raise ConfigError(where, f"_target_ {detail}", key=f"{where}._target_", detail=detail)
    rest = {name: item for name, item in values.items() if name != "_target_"}
    typed = typed_values(cls, rest, where, init=True)
    arguments = {name: _built(item, f"{where}.{name}") for name, item in typed.items()}
    try:
        return cls(**arguments)
    except Exception as error:  # a constructor refusing its arguments
        raise from_library_error(where, _exception(error), init_schema(cls)) from None


def _target_any(values: Mapping[str, Any], where: str) -> tuple[str, type]:
    target = values.get("_target_")
    if not target or not isinstance(target, str):
        raise ConfigError(where, "missing _target_", key=f"{where}._target_")
    return target, resolve(target, f"{where}._target_")


def _built(value: Any, where: str) -> Any:
    if isinstance(value, Mapping) and "_target_" in value:
        return None if value["_target_"] is None else build_object(value, where)
    if isinstance(value, Mapping):
        return {key: _built(item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_built(item, f"{where}.{index}") for index, item in enumerate(value)]
    return value


def _exception(error: BaseException) -> Exception:
    return error if isinstance(error, Exception) else RuntimeError(str(error))


def check_embedder(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``embedder``: an embedder class of the registry, keys and types against its constructor,
    then the (lazy, cheap) constructor."""
    if not isinstance(cfg, Mapping):
        raise ConfigError("embedder", f"must be a mapping with _target_ (conf/embedder/), got {cfg!r}")
    check_targets(cfg, ("embedder",))
    target, cls = _target(cfg, "embedder", "embedder", "retrievers.embedders.SentenceTransformerEmbedder")
    typed = typed_values(
        cls, {key: value for key, value in cfg.items() if key != "_target_"}, "embedder", init=True
    )
    values = {"_target_": target, **typed}
    build_object(values, "embedder", "embedder")  # embedders validate in their constructor, load lazily
    return values


def check_store(values: Mapping[str, Any] | None) -> StoreConfig:
    """``store``: every key against :class:`retrievers.store.StoreConfig` and its nested settings."""
    typed = typed_values(StoreConfig, values or {}, "store")
    try:
        return StoreConfig.from_dict(typed)
    except (TypeError, ValueError) as error:
        raise from_library_error("store", error) from None


# --------------------------------------------------------------------------- the whole config


def _keyed(error: ConfigError) -> ConfigError:
    """A harness error as ``<dotted key>: <detail>`` (its node is its key)."""
    return ConfigError(error.key, error.detail, key=error.key, detail=error.detail)


def _plain(cfg: Any) -> dict[str, Any]:
    if isinstance(cfg, DictConfig) and "hydra" in cfg:  # composed with Hydra's own node: not ours
        cfg = OmegaConf.masked_copy(cfg, [str(key) for key in cfg if key != "hydra"])
    if isinstance(cfg, DictConfig | ListConfig):
        try:
            plain = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        except OmegaConfBaseException as error:
            key = str(error.full_key or "")
            detail = str(error.msg or error).splitlines()[0]
            raise ConfigError(key, detail, key=key) from None
    else:
        plain = cfg
    if not isinstance(plain, Mapping):
        raise ConfigError("config", f"must be a mapping, got {plain!r}")
    return {str(key): value for key, value in plain.items() if key != "hydra"}


def _config_file(plain: Mapping[str, Any]) -> ConfigFile:
    typed = typed_values(ConfigFile, plain, "", by_section=True)
    run = dict(typed.get("run") or {})
    if isinstance(run.get("significance"), Mapping):
        try:
            run["significance"] = SignificanceSettings(**run["significance"])
        except (TypeError, ValueError) as error:
            raise from_library_error("run.significance", error, SignificanceSettings) from None
    for name, cls in (("dataset", DatasetSettings), ("", ConfigFile)):
        given = typed.get(name) if name else typed
        required = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in (given or {})]
        required = [n for n in required if _required(cls, n)]
        if required:
            key = f"{name}.{required[0]}" if name else required[0]
            raise ConfigError(
                key, f"is required; choose one in conf/{required[0]}/" if not name else "is required"
            )
    try:
        return ConfigFile.from_dict({**typed, "run": run})
    except ParamError as error:
        raise _keyed(from_library_error("", error)) from None


def _required(cls: type, name: str) -> bool:
    found = next(f for f in dataclasses.fields(cls) if f.name == name)
    return found.default is dataclasses.MISSING and found.default_factory is dataclasses.MISSING


#: store settings that build the part a retriever's ``store_requires`` names, and a config that does
_STORE_PARTS = {
    "hierarchy": "store=kmeans_tree (or store=locomo_tree)",
    "edges": "store=locomo_graph (or store=cisi_citations)",
}


def check_store_parts(spec: RetrieverSpec, store: StoreConfig) -> None:
    """A retriever whose class names store parts it cannot work without (``store_requires``,
    e.g. the hierarchical retriever's context tree) is refused before the store is built when the
    store settings would not build them."""
    cls = resolve(spec.target, f"retrievers.{spec.name}._target_", "retriever")
    parts = cls.store_parts(spec.params) if callable(getattr(cls, "store_parts", None)) else ()
    for part in parts:
        if getattr(store, part, None) is None:
            hint = _STORE_PARTS.get(part, f"set store.{part}")
            raise ConfigError(
                f"retrievers.{spec.name}",
                f"{spec.target.rsplit('.', 1)[-1]} needs store.{part}, which this store does not build; "
                f"choose a store that does, e.g. {hint}",
                key=f"retrievers.{spec.name}",
            )


def load_settings(cfg: DictConfig | Mapping[str, Any]) -> Settings:
    """Validate everything in ``cfg``; raise ConfigError on the first problem."""
    plain = _plain(cfg)
    check_targets(plain)  # every _target_ against the registry, before anything is imported or built
    top = _config_file(plain)
    store = check_store(top.store)
    if not top.retrievers:
        raise ConfigError(
            "retrievers",
            "no retrievers configured; choose an experiment (experiment=quickstart) or add "
            "'+retriever@retrievers.bm25=bm25'",
        )
    retrievers = [check_retriever(str(name), spec) for name, spec in top.retrievers.items()]
    for spec in retrievers:
        check_store_parts(spec, store)
    names = [spec.name for spec in retrievers]
    if top.run.baseline is not None and top.run.baseline not in names:
        raise ConfigError(
            "run.baseline", f"{top.run.baseline!r} is not a configured retriever; configured: {names}"
        )
    if top.gate.latency_reference is not None and top.gate.latency_reference not in names:
        raise ConfigError(
            "gate.latency_reference",
            f"{top.gate.latency_reference!r} is not a configured retriever; configured: {names}",
        )
    return Settings(
        name=top.name,
        dataset=top.dataset,
        run=top.run,
        metrics=parse_metrics(top.run.metrics),
        store=store,
        embedder=check_embedder(top.embedder or {}),
        retrievers=retrievers,
        cache_dir=top.cache_dir,
        show_progress=top.show_progress,
        gate=top.gate,
        sweep=top.sweep,
        benchmark=top.benchmark,
    )


def check_sweep_objective(settings: Settings) -> None:
    """A multirun's ``sweep.objective`` must name a computed metric (``<retriever>.<metric>`` with a
    configured retriever, or ``<metric>``): checked before the first job, not after the last."""
    objective = settings.sweep.objective
    if objective is None:
        return
    names = [spec.name for spec in settings.retrievers]
    metrics = [metric.name for metric in settings.metrics]
    head, _, rest = objective.partition(".")
    metric = rest if head in names and rest else objective
    if metric not in metrics:
        raise ConfigError(
            "sweep.objective",
            f"{objective!r} names no computed metric: write <retriever>.<metric> with a retriever among "
            f"{names} and a metric among {metrics} (run.metrics), or just the metric",
        )
