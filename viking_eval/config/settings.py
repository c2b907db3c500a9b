"""The harness's settings, declared once as Params. :func:`viking_eval.config.load.load_settings`
validates a composed config into them before any data is read or model loaded.

The dataset, run (latency, significance), sweep and gate settings and the config's top level are
:class:`retrievers.params.Params` subclasses, like the library's retriever and store parameters:
one declaration gives the Hydra schema that type-checks them at composition
(:mod:`viking_eval.config.compose` registers :class:`ConfigFile`'s schema) and the range checks.
The nodes whose class the config chooses are checked against that class right after composition:
``store`` against :class:`retrievers.store.StoreConfig`, each ``retrievers.<name>`` against its
``_target_``'s ``Params`` dataclass, ``embedder`` and each reranker against their constructors
(:mod:`viking_eval.config.validate`; the checks are in :mod:`viking_eval.config.load`, the building
of ``_target_`` objects in :mod:`viking_eval.config.objects`). Every problem is a :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from retrievers.backends.config import BackendConfig
from retrievers.params import ParamError, Params, param
from retrievers.store import StoreConfig
from viking_eval.answers.settings import AnswerSettings, LlmSettings
from viking_eval.config.fuse_settings import FuseSettings
from viking_eval.config.growth_settings import GrowthSettings
from viking_eval.measures.metrics import Metric, MetricError, parse_metrics
from viking_eval.measures.significance import SignificanceSettings

__all__ = [
    "BenchmarkSettings",
    "ConfigFile",
    "DatasetSettings",
    "GateSettings",
    "LatencySettings",
    "RetrieverSpec",
    "RunSettings",
    "Settings",
    "SweepSettings",
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


_OTLP_HTTP = "opentelemetry.exporter.otlp.proto.http"


@dataclass(frozen=True)
class OtelSettings(Params):
    """``exporter``: where the latency queries' spans go as OpenTelemetry spans (``none``,
    ``console``, ``otlp``; viking_eval/run/otel.py). The SDK is optional: a configured exporter
    whose package is missing is refused before the run starts."""

    SECTION = "run.latency.otel"

    exporter: str = param("none", choices=("none", "console", "otlp"))

    def check(self) -> None:
        needed = {"console": ("opentelemetry.sdk",), "otlp": ("opentelemetry.sdk", _OTLP_HTTP)}
        for module in needed.get(self.exporter, ()):
            try:
                found = importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                raise self.fail(
                    "exporter",
                    f"exporter={self.exporter!r} needs the Python module {module}, which is not installed "
                    "(pip install -e '.[otel]')",
                )


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
    otel: OtelSettings = param(factory=OtelSettings)


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
    redundancy: int | None = param(
        None, low=1, high=10_000, doc="report redundancy@k (mean pairwise cosine of the top k); null = off"
    )

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
    answers: AnswerSettings = param(factory=AnswerSettings)
    llm: LlmSettings = param(factory=LlmSettings)
    fuse: FuseSettings = param(factory=FuseSettings)
    growth: GrowthSettings = param(factory=GrowthSettings)
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
    answers: AnswerSettings = field(default_factory=AnswerSettings)
    llm: LlmSettings = field(default_factory=LlmSettings)
    fuse: FuseSettings = field(default_factory=FuseSettings)
    growth: GrowthSettings = field(default_factory=GrowthSettings)
    #: where the store's searches run (store.backend*; not part of the store or its key)
    backend: BackendConfig = field(default_factory=BackendConfig)
