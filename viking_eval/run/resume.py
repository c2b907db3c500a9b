"""Resume keys: everything a retriever's result depends on (data files, evaluated queries, every
setting, the algorithm versions of its classes), compared with a finished marker's key to decide
whether the retriever runs again (viking_eval/results/model.py: ResumeKey)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from retrievers.index.ann import code_default_knobs
from retrievers.types import Embedder
from viking_eval.config import RetrieverSpec, Settings
from viking_eval.config.load import without_encode_keys
from viking_eval.config.registry import resolve
from viking_eval.data import BeirDataset
from viking_eval.results.model import ResumeKey
from viking_eval.run.inputs import input_files


def algorithm_versions(spec: RetrieverSpec) -> dict[str, Any]:
    """``ALGORITHM_VERSION`` of the retriever class and of every object in its parameters (a
    reranker, ...); None for a class that declares none. A family bumps its version when the same
    parameters start to give different results."""
    versions: dict[str, Any] = {}

    def visit(target: str) -> None:
        # every target was checked against the class registry when the settings were loaded
        versions[target] = getattr(
            resolve(target, f"retrievers.{spec.name}._target_"), "ALGORITHM_VERSION", None
        )

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            if isinstance(value.get("_target_"), str):
                visit(value["_target_"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    visit(spec.target)
    walk(spec.params)
    return versions


def resume_key(
    settings: Settings, spec: RetrieverSpec, dataset: BeirDataset, embedder: Embedder, store_key: str
) -> ResumeKey:
    """Everything a retriever's result depends on, by part (see ``results.ResumeKey``)."""
    query_ids = list(dataset.queries)
    inputs = input_files(spec.target, spec.params)  # e.g. a run file: its sha256
    defaults = code_default_knobs(settings.store.vector_index.kind)
    return ResumeKey(
        {
            **({"inputs": inputs} if inputs else {}),
            "files": dict(sorted(dataset.files.items())),
            "evaluated_queries": {
                "n": len(query_ids),
                "sha256": hashlib.sha256(json.dumps(query_ids).encode("utf-8")).hexdigest(),
            },
            "split": dataset.split,
            # dataset.download decides whether a missing dataset is fetched, not what is evaluated
            "dataset": {
                key: value for key, value in dataclasses.asdict(settings.dataset).items() if key != "download"
            },
            "retriever": {"target": spec.target, "params": spec.params},
            "algorithm": algorithm_versions(spec),
            "embedder": {"config": without_encode_keys(settings.embedder), "name": embedder.name},
            "store": {
                "settings": settings.store.to_dict(),
                "content_key": store_key,
                # defaults the code sets, not the store (none for exact, HNSW, IVF-Flat)
                **({"search_defaults": defaults} if defaults else {}),
                # a backend's keyword leg scores its own way (never the URL: it may hold a password)
                **(
                    {"backend": {k: v for k, v in settings.backend.to_dict().items() if k != "backend_url"}}
                    if not settings.backend.is_local
                    else {}
                ),
            },
            "run": {
                "top_k": settings.run.top_k,
                "batch_size": settings.run.batch_size,
                "metrics": [metric.name for metric in settings.metrics],
                "latency": dataclasses.asdict(settings.run.latency),
                # redundancy@k is a result too; absent when off, so earlier keys still match
                **({"redundancy": settings.run.redundancy} if settings.run.redundancy is not None else {}),
            },
        }
    )
