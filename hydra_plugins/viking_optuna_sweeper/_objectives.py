"""The objectives' values in a job's return value, ``{retriever: {metric: value}}``:
``bm25.nDCG@10`` is ``returned["bm25"]["nDCG@10"]`` (a key may itself hold dots, as
``latency.p95_ms``). A missing, non-numeric, NaN or infinite value is an ObjectiveError: the
trial is told to the study as FAIL and the study goes on.

Named with a leading "_" so that Hydra's plugin scan leaves it alone (see _errors.py).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hydra_plugins.viking_optuna_sweeper._errors import ObjectiveError

_MISSING = object()


def _lookup(returned: Any, path: str) -> Any:
    """``returned[a][b]`` for ``path`` "a.b"; a key may itself hold dots ("latency.p95_ms")."""
    if isinstance(returned, Mapping):
        if path in returned:
            return returned[path]
        for match in re.finditer(r"\.", path):
            head, tail = path[: match.start()], path[match.end() :]
            if head in returned:
                found = _lookup(returned[head], tail)
                if found is not _MISSING:
                    return found
    return _MISSING


def _available(returned: Any, prefix: str = "") -> list[str]:
    if not isinstance(returned, Mapping):
        return [prefix.rstrip(".")] if prefix else []
    keys: list[str] = []
    for key, value in returned.items():
        keys += _available(value, f"{prefix}{key}.")
    return keys


def objective_values(returned: Any, objectives: Sequence[str]) -> list[float]:
    """The objectives' values in a job's return value; ObjectiveError when one is missing,
    not a number, NaN or infinite (the trial is then a failure)."""
    values = []
    for objective in objectives:
        value = _lookup(returned, objective)
        if value is _MISSING and len(objectives) == 1 and isinstance(returned, numbers.Real):
            value = returned  # a task that returns the number itself
        if value is _MISSING:
            available = _available(returned)
            raise ObjectiveError(
                f"objective {objective!r} is not in the job's return value; it has "
                f"{available[:20]}{' ...' if len(available) > 20 else ''}"
            )
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ObjectiveError(f"objective {objective!r} is not a number: {value!r}")
        if not math.isfinite(float(value)):
            raise ObjectiveError(f"objective {objective!r} is {float(value)}")
        values.append(float(value))
    return values
