"""Encoding a corpus on a Ray cluster (``embedder.backend=ray``, docs/cluster.md): Ray Data sends
the calls the local encoder would make to a pool of model actors, and this process writes the
same content-addressed parts (viking_eval/run/cached_embedder.py) as they complete.

    missing parts (RESUME_CHUNK texts each, longest first, as the local encoder orders them)
      -> one row per call of ENCODE_CHUNK texts: (part, call, texts)
      -> Ray Data ``map_batches`` over an actor pool, one row at a time: each actor holds one copy
         of the embedder (one actor per GPU where the cluster has GPUs, else one per CPU slot;
         ``embedder.actors`` sets the number) and returns the call's vectors as float32 bytes
      -> here: a part whose calls have all come back is saved as its cache entry (staged, then
         renamed into place: never half-visible), so a killed encode keeps its finished parts

Each call is the same ``encode`` of the same texts the single-process encoder makes, so on a CPU
the vectors are bit-identical to it (a test checks it with the TF-IDF and static embedders).
The cluster: ``RAY_ADDRESS`` (``host:port`` or ``auto``), or the cluster a sweep job already runs
on, else a Ray started on this machine for the encode. Ray is imported only here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from retrievers.types import Embedder, EncodeKind


@dataclass(frozen=True)
class EncodeBackend:
    """``embedder.backend`` (``local`` | ``ray``) and ``embedder.actors`` (null: one actor per GPU,
    else per CPU slot of the cluster)."""

    backend: str = "local"
    actors: int | None = None

    @property
    def on_ray(self) -> bool:
        return self.backend == "ray"


def encode_backend(embedder_config: dict[str, Any]) -> EncodeBackend:
    return EncodeBackend(
        backend=str(embedder_config.get("backend") or "local"), actors=embedder_config.get("actors")
    )


class EncodeActor:
    """One model copy on the cluster: ``encode`` of one call's texts, as float32 bytes."""

    def __init__(self, embedder: Embedder, kind: EncodeKind, env: dict[str, str], threads: int) -> None:
        from threadpoolctl import threadpool_limits

        os.environ.update(env)  # the driver's data, cache and offline switches (HF_HUB_OFFLINE)
        threadpool_limits(limits=threads, user_api="blas")
        self.embedder = embedder
        self.kind = kind

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = []
        for texts in batch["texts"]:
            vectors = np.ascontiguousarray(
                np.asarray(self.embedder.encode(json.loads(str(texts)), kind=self.kind), dtype=np.float32)
            )
            out.append(vectors.tobytes())
        return {"part": batch["part"], "call": batch["call"], "vectors": np.array(out, dtype=object)}


def _actors(ray: Any, wanted: int | None) -> tuple[int, dict[str, float]]:
    """How many actors, and each one's resources: one per GPU, else one per CPU slot."""
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    if gpus > 0:
        return (wanted or gpus), {"num_gpus": 1.0}
    return (wanted or max(1, cpus)), {"num_cpus": 1.0}


def encode_parts_on_ray(
    embedder: Embedder,
    kind: EncodeKind,
    parts: Sequence[list[str]],
    *,
    call_size: int,
    actors: int | None,
    done: Callable[[int, np.ndarray], None],
    progress: Callable[[int], Any],
) -> int:
    """Encode every part (a list of texts, already in the order they are encoded) in calls of
    ``call_size`` texts on the cluster's actors; ``done(index, vectors)`` is called for each part
    as soon as all its calls are back, ``progress(n)`` for each call's ``n`` texts. Returns the
    number of actors used."""
    from viking_eval.run.ray_jobs import connect, driver_environment, driver_threads

    ray = connect({"address": os.environ.get("RAY_ADDRESS") or None})
    from ray import data as ray_data

    count, resources = _actors(ray, actors)
    rows: list[dict[str, Any]] = [
        {"part": index, "call": start // call_size, "texts": json.dumps(texts[start : start + call_size])}
        for index, texts in enumerate(parts)
        for start in range(0, len(texts), call_size)
    ]
    calls = [0] * len(parts)
    for item in rows:
        calls[item["part"]] += 1
    dim = embedder.dim
    context = ray_data.DataContext.get_current()
    context.enable_progress_bars = False
    dataset: Any = ray_data.from_items(rows, override_num_blocks=min(len(rows), 4 * count))
    encoded = dataset.map_batches(
        EncodeActor,
        fn_constructor_kwargs={
            "embedder": embedder,
            "kind": kind,
            "env": driver_environment(),
            "threads": driver_threads(),
        },
        batch_size=1,
        compute=ray_data.ActorPoolStrategy(size=count),
        **resources,
    )
    pending: dict[int, dict[int, np.ndarray]] = {}
    for row in encoded.iter_rows():
        part, call = int(row["part"]), int(row["call"])
        vectors = np.frombuffer(row["vectors"], dtype=np.float32).reshape(-1, dim)
        pending.setdefault(part, {})[call] = vectors
        progress(vectors.shape[0])
        if len(pending[part]) == calls[part]:
            pieces = pending.pop(part)
            done(part, np.concatenate([pieces[number] for number in range(calls[part])]))
    if pending:
        raise RuntimeError(f"ray encode: parts {sorted(pending)} came back incomplete")
    return count
