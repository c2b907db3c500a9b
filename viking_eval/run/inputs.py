"""What a retriever reads besides the store, supplied by the harness when a retriever is built.

- **The dataset's queries.** A retriever class that declares ``wants_queries = True`` (the run-file
  retriever, :mod:`retrievers.run_file`: a run file is keyed by query id, while retrievers are
  asked with query text) gets ``queries={query id: text}``, every query of the dataset's
  ``queries.jsonl``, unless its config gives ``queries`` itself.
- **Retrievers inside a retriever.** A parameter whose value is a retriever config (a mapping
  whose ``_target_`` is a class with ``retrieve_batch``, e.g. a hybrid's ``keyword_leg``) is
  built over the same store, with the same embedder, before the retriever that holds it.
- **Input files.** A class may list the files its results depend on (``input_files(params)``,
  e.g. the run file); their sha256 join the retriever's resume key, so editing a run file reruns
  the retriever instead of resuming a stale result.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retrievers.params import ParamError
from retrievers.types import Embedder
from viking_eval.config import instantiate_objects
from viking_eval.config.errors import from_library_error
from viking_eval.config.objects import is_retriever_config
from viking_eval.config.registry import resolve
from viking_eval.data import BeirDataset, load_queries
from viking_eval.files import sha256_file

__all__ = ["build_retriever", "dataset_queries", "input_files", "wants_queries"]


def dataset_queries(dataset: BeirDataset) -> dict[str, str]:
    """``{query id: text}`` for every query of the dataset's queries file (not only the judged
    ones of the split: a run file answering them all then has no unknown query ids)."""
    for relative in sorted(dataset.files):
        if Path(relative).name.startswith("queries.jsonl"):
            path = dataset.folder / relative
            if path.is_file():
                return {query_id: query.text for query_id, query in load_queries(path).items()}
    return {query_id: query.text for query_id, query in dataset.queries.items()}


def wants_queries(cls: type, params: Mapping[str, Any]) -> bool:
    """Whether building ``cls`` with ``params`` needs the dataset's queries (itself, or a
    retriever in its parameters)."""
    if getattr(cls, "wants_queries", False) and params.get("queries") is None:
        return True
    return any(
        wants_queries(resolve(value["_target_"], "_target_", "retriever"), value)
        for value in params.values()
        if is_retriever_config(value)
    )


def build_retriever(
    cls: type,
    params: Mapping[str, Any],
    store: Any,
    embedder: Embedder | None,
    queries: Mapping[str, str] | None,
    where: str = "retrievers",
) -> Any:
    """``cls(store, embedder=embedder, **params)``, with the retriever configs among ``params``
    built over ``store`` the same way (a hybrid's legs) and ``queries`` supplied when ``cls``
    wants them. A parameter the constructor refuses for this store (a ``ParamError``: e.g. an ANN
    knob on an exact store) is a ConfigError naming ``<where>.<key>``, like the checks made
    before any data is read."""
    built: dict[str, Any] = {}
    for key, value in params.items():
        if is_retriever_config(value):
            inner_cls = resolve(value["_target_"], f"{where}.{key}._target_", "retriever")
            inner = instantiate_objects({k: v for k, v in value.items() if k != "_target_"}, f"{where}.{key}")
            built[key] = build_retriever(inner_cls, inner, store, embedder, queries, f"{where}.{key}")
        else:
            built[key] = value
    if getattr(cls, "wants_queries", False) and built.get("queries") is None and queries is not None:
        built["queries"] = dict(queries)
    try:
        return cls(store, embedder=embedder, **built)
    except ParamError as error:
        raise from_library_error(where, error) from None


def input_files(target: str, params: Mapping[str, Any]) -> dict[str, str]:
    """``{path: sha256}`` of the files a retriever's results depend on besides the dataset and the
    store (its class's ``input_files(params)``, and those of retrievers in its parameters); a
    file that does not exist is listed as ``missing``."""
    files: dict[str, str] = {}
    lister = getattr(resolve(target, "_target_"), "input_files", None)
    for path in lister(params) if callable(lister) else []:
        file = Path(path)
        files[str(path)] = sha256_file(file) if file.is_file() else "missing"
    for value in params.values():
        if is_retriever_config(value):
            files.update(input_files(value["_target_"], value))
    return files
