"""Configuration: the harness's settings and the schemas Hydra checks them with.

- :mod:`~viking_eval.config.schema`: structured-config schemas derived from any Params class or
  dataclass (the library's and the harness's: one declaration, one validation mechanism).
- :mod:`~viking_eval.config.settings`: the harness's settings as Params.
- :mod:`~viking_eval.config.load`: ``load_settings``, which checks a composed config node by node.
- :mod:`~viking_eval.config.objects`: building the objects a ``_target_`` mapping describes.
- :mod:`~viking_eval.config.validate`: one config node checked against its class.
- :mod:`~viking_eval.config.registry`: the classes a config may name with ``_target_``, checked
  before anything is imported or built.
- :mod:`~viking_eval.config.compose`: the root schema in Hydra's ConfigStore, composing a config
  for a command line, and Hydra's errors as one ``ConfigError`` line.
"""

from viking_eval.config.compose import SCHEMA_NAME, register_schema
from viking_eval.config.errors import ConfigError
from viking_eval.config.load import (
    check_embedder,
    check_retriever,
    check_store,
    check_sweep_objective,
    load_settings,
)
from viking_eval.config.objects import build_object, instantiate_objects
from viking_eval.config.settings import (
    BenchmarkSettings,
    ConfigFile,
    DatasetSettings,
    GateSettings,
    LatencySettings,
    RetrieverSpec,
    RunSettings,
    Settings,
    SweepSettings,
)

register_schema()

__all__ = [
    "SCHEMA_NAME",
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
    "load_settings",
    "register_schema",
]
