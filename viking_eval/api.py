"""``viking_eval.evaluate``: the harness from Python, without Hydra (docs/api.md).

    from viking_eval import evaluate
    summary = evaluate({"bm25": {"_target_": "retrievers.BM25Retriever"}, "mine": my_retriever},
                       "scifact", metrics=["nDCG@10", "R@100"], embedder="tfidf")
    summary.metrics()   # {"bm25": {"nDCG@10": ...}, "mine": {...}}

It runs what ``python -m viking_eval`` runs, through the same loop: this module only turns its
arguments into the harness's validated settings (retriever configs checked by viking_eval.config
before any data is read) and calls ``runner.run_experiment``, the one experiment loop of the CLI,
sweeps, benchmarks and the gate. So the embedder is fitted once per corpus and cached, retriever
configs resume from their finished markers in ``output_dir`` exactly as a CLI run does, and the
result is the same :class:`~viking_eval.results.model.RunSummary`; with ``output_dir`` the same run
folder is written (config.yaml, runs/, metrics.json/.csv, per_query.csv, significance.csv,
latency.json, environment.json, report.md/.html, resume markers for retriever configs), so the
leaderboard, the gate's ``baseline_run`` and the reports read it like any run.

Retrievers are either

- **built objects**: anything with ``retrieve_batch(queries, top_k)`` (and ``retrieve``) returning
  :class:`~retrievers.types.RetrievalResult` lists whose doc ids are the dataset's (the contract in
  retrievers/types.py). The harness does not build them, so it does not know their store or
  embedder: their latency is the whole query (no encode/search split) and no resume marker is
  written for them; or
- **configs**: a mapping with ``_target_`` and parameters, exactly a ``conf/retriever/`` node
  (``{"_target_": "retrievers.baselines.DenseRetriever"}``), validated before any data is read
  and built over the store of ``store`` settings and ``embedder``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from retrievers.params import ParamError
from retrievers.types import Embedder, Retriever
from viking_eval.config import (
    ConfigError,
    DatasetSettings,
    LatencySettings,
    RetrieverSpec,
    RunSettings,
    Settings,
    check_embedder,
    check_retriever,
    check_store,
)
from viking_eval.config.compose import CONFIG_DIR
from viking_eval.config.errors import from_library_error
from viking_eval.data import BeirDataset
from viking_eval.measures.metrics import parse_metrics
from viking_eval.measures.significance import SignificanceSettings
from viking_eval.results.model import RunSummary
from viking_eval.run.experiment import run_experiment

__all__ = ["evaluate"]

log = logging.getLogger(__name__)

DEFAULT_METRICS = ("nDCG@10", "R@10", "R@100", "RR@10", "AP@100")
RetrieverLike = Retriever | Mapping[str, Any]


def _is_config(value: object) -> bool:
    return isinstance(value, Mapping) and "_target_" in value


def _named(
    retrievers: RetrieverLike | Sequence[RetrieverLike] | Mapping[str, RetrieverLike],
) -> dict[str, Any]:
    """``{name: object or config}``; unnamed ones are named after their class (``bm25retriever``,
    then ``bm25retriever_2``, ...)."""
    if _is_config(retrievers) or callable(getattr(retrievers, "retrieve_batch", None)):
        items: list[tuple[str | None, Any]] = [(None, retrievers)]
    elif isinstance(retrievers, Mapping):
        items = [(str(name), value) for name, value in retrievers.items()]
    elif isinstance(retrievers, Sequence) and not isinstance(retrievers, str):
        items = [(None, value) for value in retrievers]
    else:
        raise TypeError(
            f"retrievers: give a retriever (an object with retrieve_batch(queries, top_k) or a config with "
            f"_target_), a list of them or a {{name: retriever}} mapping; got {type(retrievers).__name__}"
        )
    named: dict[str, Any] = {}
    for name, value in items:
        if name is None:
            target = str(value["_target_"]) if _is_config(value) else type(value).__name__
            base = target.rsplit(".", 1)[-1].lower()
            name, n = base, 2
            while name in named:
                name, n = f"{base}_{n}", n + 1
        if name in named:
            raise ValueError(f"retrievers: name {name!r} given twice")
        if not _is_config(value) and not callable(getattr(value, "retrieve_batch", None)):
            raise ConfigError(
                f"retrievers.{name}",
                f"{type(value).__module__}.{type(value).__qualname__} has no retrieve_batch(queries, top_k) method "
                "(retrievers/types.py: the Retriever contract), and is not a config with _target_",
            )
        named[name] = value
    if not named:
        raise ValueError("retrievers: give at least one retriever")
    return named


def _embedder_config(embedder: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """An embedder config: a conf/embedder option by name (default: conf/config.yaml's, minilm) or
    a mapping with ``_target_``; validated."""
    if embedder is not None and not isinstance(embedder, str):
        return check_embedder(dict(embedder))
    option = CONFIG_DIR / "embedder" / f"{embedder or 'minilm'}.yaml"
    if not option.is_file():
        options = sorted(path.stem for path in option.parent.glob("*.yaml"))
        raise ConfigError(
            "embedder", f"no option {embedder!r}; the options are: {', '.join(options)} (conf/embedder/)"
        )
    return check_embedder(yaml.safe_load(option.read_text(encoding="utf-8")))  # it checks for a mapping


def _config_yaml(settings: Settings, named: Mapping[str, Any]) -> str:
    """config.yaml of an API run: what was evaluated, in the CLI's layout (a built object appears
    as its class, ``built: true``)."""
    retrievers = {
        name: (
            dict(value)
            if _is_config(value)
            else {"_target_": f"{type(value).__module__}.{type(value).__qualname__}", "built": True}
        )
        for name, value in named.items()
    }
    document = {
        "name": settings.name,
        "dataset": settings.dataset.to_dict(),
        "embedder": settings.embedder,
        "store": settings.store.to_dict(),
        "retrievers": retrievers,
        "run": {
            **{key: value for key, value in settings.run.to_dict().items() if key != "significance"},
            "significance": dataclasses.asdict(settings.run.significance),
        },
        "cache_dir": settings.cache_dir,
        "api": True,
    }
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def _harness_settings(
    dataset: str | os.PathLike[str] | BeirDataset,
    split: str,
    strict: bool,
    ignore_identical_ids: bool,
    top_k: int,
    batch_size: int,
    metrics: Sequence[str],
    latency_queries: int,
    baseline: str | None,
    significance: Mapping[str, Any] | None,
) -> tuple[DatasetSettings, RunSettings]:
    """The dataset and run settings of an API call, validated as the config's are."""
    given = dataset if isinstance(dataset, BeirDataset) else None
    location = str(given.folder) if given is not None else os.fspath(dataset)  # type: ignore[arg-type]
    dataset_settings = DatasetSettings(
        name=given.name if given is not None else Path(location).name or location,
        split=given.split if given is not None else split,
        path=location if (given is not None or os.sep in location) else None,
        strict=strict,
        ignore_identical_ids=ignore_identical_ids,
        download="never",
    )
    run = RunSettings(
        top_k=top_k,
        batch_size=batch_size,
        metrics=tuple(metrics),
        latency=LatencySettings(n_queries=latency_queries, warmup=min(10, latency_queries)),
        baseline=baseline,
        significance=SignificanceSettings(**dict(significance or {})),
    )
    return dataset_settings, run


def evaluate(
    retrievers: RetrieverLike | Sequence[RetrieverLike] | Mapping[str, RetrieverLike],
    dataset: str | os.PathLike[str] | BeirDataset,
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    split: str = "test",
    top_k: int = 100,
    embedder: Embedder | str | Mapping[str, Any] | None = None,
    store: Mapping[str, Any] | None = None,
    baseline: str | None = None,
    latency_queries: int = 100,
    significance: Mapping[str, Any] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    name: str = "api",
    batch_size: int = 256,
    strict: bool = False,
    ignore_identical_ids: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    show_progress: bool = False,
) -> RunSummary:
    """Evaluate ``retrievers`` on ``dataset`` and return the run's
    :class:`~viking_eval.results.model.RunSummary` (what ``python -m viking_eval`` computes).

    ``retrievers``: one retriever, a list, or ``{name: retriever}``; each a built object with
    ``retrieve_batch(queries, top_k)`` or a config mapping with ``_target_`` (module docstring).
    ``dataset``: a name (searched as ``dataset.name`` is: VIKING_EVAL_DATA, datasets/, the data
    folder), a BEIR folder path, or a loaded :class:`~viking_eval.data.BeirDataset` (its split is
    used). ``metrics``: ir-measures names; ``split``: the qrels split; ``top_k``: run depth.
    ``embedder`` and ``store``: for retriever configs, the embedder the store is built with (an
    object, a conf/embedder option name such as ``"tfidf"``, or a config mapping; default
    conf/config.yaml's, MiniLM) and the store settings (conf/store/ keys; default the defaults).
    ``baseline``: the retriever the others are tested against (default the first);
    ``latency_queries``: queries timed one at a time (0 = skip); ``significance``:
    ``run.significance`` settings (test, correction, alpha, ...). ``output_dir``: write the run
    folder there (default: write nothing; the summary's ``output_dir`` is then None).

    Everything is validated before any data is read: a bad metric, parameter or retriever raises
    :class:`~viking_eval.config.ConfigError` naming the key (``retrievers.mine: my_mod.Mine has no
    retrieve_batch(queries, top_k) method``)."""
    named = _named(retrievers)
    try:
        dataset_settings, run = _harness_settings(
            dataset,
            split,
            strict,
            ignore_identical_ids,
            top_k,
            batch_size,
            metrics,
            latency_queries,
            baseline,
            significance,
        )
    except ParamError as error:
        raise from_library_error(error.key.split(".", 1)[0], error) from None
    except (TypeError, ValueError) as error:  # SignificanceSettings
        raise ConfigError("run.significance", str(error)) from None
    configs = {key: value for key, value in named.items() if _is_config(value)}
    embedder_object = None if embedder is None or isinstance(embedder, str | Mapping) else embedder
    embedder_config = {} if embedder_object is not None or not configs else _embedder_config(embedder)  # type: ignore[arg-type]
    specs = [
        check_retriever(key, value)
        if _is_config(value)
        else RetrieverSpec(key, f"{type(value).__module__}.{type(value).__qualname__}", {})
        for key, value in named.items()
    ]
    if baseline is not None and baseline not in named:
        raise ConfigError("run.baseline", f"{baseline!r} is not one of the retrievers: {list(named)}")
    settings = Settings(
        name=name,
        dataset=dataset_settings,
        run=run,
        metrics=parse_metrics(run.metrics),
        store=check_store(store or {}),
        embedder=embedder_config,
        retrievers=specs,
        cache_dir=os.fspath(cache_dir) if cache_dir is not None else None,
        show_progress=show_progress,
    )
    factory = None if embedder_object is None else (lambda: embedder_object)
    return run_experiment(
        settings,
        Path(output_dir) if output_dir is not None else None,
        embedder_factory=factory,
        config_yaml=_config_yaml(settings, named),
        dataset=dataset if isinstance(dataset, BeirDataset) else None,
        built={key: value for key, value in named.items() if not _is_config(value)},
        environment={"api": True},
    )
