"""The data layer: finding, fetching, loading and validating datasets.

Modules, from the bottom up (each imports only modules above it in this list):

- ``errors``: :class:`DataError` (one line ``<file>:<line>: <what>``) and :class:`DatasetNotFound`;
- ``locations``: the folders searched by name (``VIKING_EVAL_DATA``, ``datasets/``, :func:`data_home`);
- ``records``: bytes, gzip, UTF-8 and JSON lines, ids and record fields of a dataset file;
- ``checksums``: ``CHECKSUMS.json``, written at download and re-verified on load;
- ``judgments``: judgments naming unknown queries or documents (:class:`DataIssues`, :class:`DataWarning`);
- ``dataset``: :class:`BeirDataset`, :class:`Query` and ``assemble``, the last step of both loaders;
- ``beir``: BEIR folders (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``): :func:`load_beir`;
- ``irds_records``, ``irds_reading``, ``irds``: ir_datasets collections by id (``irds:<id>``);
- ``registry``: ``datasets/registry.yaml``; ``archive``: safe unzip; ``download``: fetching a
  registry dataset (``python -m viking_eval.data.download``); ``convert``: rebuilding the shared
  datasets from their raw releases (``python -m viking_eval.data.convert``);
- ``resolve``: :func:`resolve_dataset`, :func:`load_dataset`, ``find_or_download``: the top;
- ``splits``: which split (or half of one) a tuning or reporting phase evaluates.

This package re-exports the public API that the rest of the harness uses (loaded on first use);
the modules inside it import each other directly, never through this file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, for type checkers; at run time they load on first use
    from viking_eval.data.beir import load_beir, load_corpus, load_qrels, load_queries
    from viking_eval.data.checksums import CHECKSUMS_FILE, read_checksums, record_checksums
    from viking_eval.data.dataset import BeirDataset, Query
    from viking_eval.data.errors import DataError, DatasetNotFound
    from viking_eval.data.judgments import DataIssues, DataWarning
    from viking_eval.data.locations import DATA_ENV, data_home, data_search_path
    from viking_eval.data.records import id_problem, read_jsonl
    from viking_eval.data.resolve import find_or_download, how_to_get, load_dataset, resolve_dataset

_MODULE_OF = {
    **dict.fromkeys(("load_beir", "load_corpus", "load_qrels", "load_queries"), "beir"),
    **dict.fromkeys(("CHECKSUMS_FILE", "read_checksums", "record_checksums"), "checksums"),
    **dict.fromkeys(("BeirDataset", "Query"), "dataset"),
    **dict.fromkeys(("DataError", "DatasetNotFound"), "errors"),
    **dict.fromkeys(("DataIssues", "DataWarning"), "judgments"),
    **dict.fromkeys(("DATA_ENV", "data_home", "data_search_path"), "locations"),
    **dict.fromkeys(("id_problem", "read_jsonl"), "records"),
    **dict.fromkeys(("find_or_download", "how_to_get", "load_dataset", "resolve_dataset"), "resolve"),
}

__all__ = [
    "CHECKSUMS_FILE",
    "DATA_ENV",
    "BeirDataset",
    "DataError",
    "DataIssues",
    "DataWarning",
    "DatasetNotFound",
    "Query",
    "data_home",
    "data_search_path",
    "find_or_download",
    "how_to_get",
    "id_problem",
    "load_beir",
    "load_corpus",
    "load_dataset",
    "load_qrels",
    "load_queries",
    "read_checksums",
    "read_jsonl",
    "record_checksums",
    "resolve_dataset",
]


def __getattr__(name: str) -> Any:
    """Load a re-exported name from its module on first use: importing this package loads none
    of its modules, so ``python -m viking_eval.data.download`` runs that module only once."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'viking_eval.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"viking_eval.data.{module}"), name)
    globals()[name] = value
    return value
