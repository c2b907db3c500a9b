"""viking_eval: the evaluation harness around the ``retrievers`` library.

``python -m viking_eval`` runs it from Hydra configs; :func:`viking_eval.evaluate` runs it from
Python (docs/api.md). The import is lazy: ``import viking_eval`` loads neither Hydra nor a model.
"""

from __future__ import annotations

from typing import Any

__all__ = ["allow_targets", "evaluate"]


def __getattr__(name: str) -> Any:
    if name == "evaluate":
        from viking_eval.api import evaluate

        return evaluate
    if name == "allow_targets":  # own classes a config may name (viking_eval/config/registry.py)
        from viking_eval.config.registry import allow_targets

        return allow_targets
    raise AttributeError(f"module 'viking_eval' has no attribute {name!r}")
