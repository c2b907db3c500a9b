"""Checking a composed config: :func:`load_settings` validates every node (the top level and its
sections as Params, ``store`` against :class:`retrievers.store.StoreConfig`, each retriever against
its class's contract and Params, the embedder against its constructor) and returns
:class:`~viking_eval.config.settings.Settings`; every problem is a :class:`ConfigError` naming the
key."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from retrievers.backends.config import BackendConfig
from retrievers.params import ParamError, Params
from retrievers.store import StoreConfig
from viking_eval.config.errors import ConfigError, from_library_error
from viking_eval.config.objects import build_object, instantiate_objects, is_retriever_config, target_class
from viking_eval.config.registry import check_targets, resolve
from viking_eval.config.schema import is_params_class
from viking_eval.config.settings import ConfigFile, DatasetSettings, RetrieverSpec, Settings
from viking_eval.config.validate import BM25_STORE_KEYS, typed_values
from viking_eval.measures.metrics import parse_metrics
from viking_eval.measures.significance import SignificanceSettings


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
    target, cls = target_class(cfg, where, "retriever", "retrievers.baselines.DenseRetriever")
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


#: ``embedder`` keys that choose where a corpus is encoded, not what the vectors are
#: (viking_eval/run/ray_encoder.py): never given to the embedder's constructor, nor part of any
#: content or resume key
ENCODE_KEYS = ("backend", "actors")
BACKENDS = ("local", "ray")


def without_encode_keys(embedder: Mapping[str, Any]) -> dict[str, Any]:
    """The embedder's own config (what its constructor and the content keys see)."""
    return {str(key): value for key, value in embedder.items() if key not in ENCODE_KEYS}


def check_embedder(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``embedder``: an embedder class of the registry, keys and types against its constructor,
    then the (lazy, cheap) constructor."""
    if not isinstance(cfg, Mapping):
        raise ConfigError("embedder", f"must be a mapping with _target_ (conf/embedder/), got {cfg!r}")
    check_targets(cfg, ("embedder",))
    target, cls = target_class(
        cfg, "embedder", "embedder", "retrievers.embedders.SentenceTransformerEmbedder"
    )
    own = without_encode_keys(dict(cfg))  # backend, actors: where a corpus is encoded (ray_encoder.py)
    typed = typed_values(
        cls, {key: value for key, value in own.items() if key != "_target_"}, "embedder", init=True
    )
    values = {"_target_": target, **typed}
    build_object(values, "embedder", "embedder")  # embedders validate in their constructor, load lazily
    return {**values, **_encode_keys(cfg)}


def _encode_keys(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``embedder.backend`` (local | ray) and ``embedder.actors`` (null or a count), checked."""
    backend = cfg.get("backend", "local")
    if backend not in BACKENDS:
        raise ConfigError("embedder.backend", f"{backend!r} is not a backend; allowed: {', '.join(BACKENDS)}")
    actors = cfg.get("actors")
    if actors is not None and (isinstance(actors, bool) or not isinstance(actors, int) or actors < 1):
        raise ConfigError(
            "embedder.actors",
            f"{actors!r}: give a whole number >= 1, or null (one per GPU, else per CPU slot)",
        )
    found = {"backend": backend} if "backend" in cfg else {}
    return {**found, **({"actors": actors} if "actors" in cfg else {})}


#: ``store`` keys that say where searches run (retrievers/backends/config.py), not how the store is built
BACKEND_KEYS = tuple(field.name for field in dataclasses.fields(BackendConfig))


def check_store(values: Mapping[str, Any] | None) -> StoreConfig:
    """``store``: every key against :class:`retrievers.store.StoreConfig` and its nested settings
    (the ``store.backend*`` keys are :func:`check_backend`'s)."""
    building = {key: value for key, value in (values or {}).items() if key not in BACKEND_KEYS}
    typed = typed_values(StoreConfig, building, "store")
    try:
        return StoreConfig.from_dict(typed)
    except (TypeError, ValueError) as error:
        raise from_library_error("store", error) from None


def check_backend(values: Mapping[str, Any] | None) -> BackendConfig:
    """``store.backend*``: the search backend (:class:`retrievers.backends.BackendConfig`)."""
    chosen = {key: value for key, value in (values or {}).items() if key in BACKEND_KEYS}
    typed = typed_values(BackendConfig, chosen, "store")
    try:
        return BackendConfig.from_dict(typed)
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


#: ConfigFile's sections typed only as mappings (their classes, chosen by the config, are checked
#: by :func:`load_settings`): checked here as empty mappings and then given back as they are, so a
#: sweep's jobs, which differ in them, share the check of every other section (typed_values)
_CHECKED_LATER = ("embedder", "store", "retrievers")


def _config_file(plain: Mapping[str, Any]) -> ConfigFile:
    later = {key: plain[key] for key in _CHECKED_LATER if isinstance(plain.get(key), Mapping)}
    typed = typed_values(ConfigFile, {**plain, **{key: {} for key in later}}, "", by_section=True)
    typed.update(later)
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
    store_parts = getattr(cls, "store_parts", None)  # KernelRetriever's; a class of one's own may lack it
    parts = store_parts(spec.params) if callable(store_parts) else ()
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
    if not top.retrievers and top.fuse.runs is None:
        raise ConfigError(
            "retrievers",
            "no retrievers configured; choose an experiment (experiment=quickstart) or add "
            "'+retriever@retrievers.bm25=bm25', or fuse run files: 'fuse.runs=[a.trec,b.trec]'",
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
    if top.answers.enabled and top.answers.k > top.run.top_k:
        raise ConfigError(
            "answers.k",
            f"{top.answers.k} is deeper than the run (run.top_k={top.run.top_k}); use at most {top.run.top_k}",
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
        answers=top.answers,
        llm=top.llm,
        fuse=top.fuse,
        growth=top.growth,
        backend=check_backend(top.store),
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
