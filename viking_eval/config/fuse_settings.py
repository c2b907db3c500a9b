"""``fuse``: the fusion program's settings (viking_eval/fuse/, ``experiment=fuse``, docs/fusion.md).

``runs`` set makes the command a fusion of those TREC run files (earlier runs'
``runs/<retriever>.trec``) with ``method`` after ``norm``; ``weights`` (weighted methods) and
``params`` (the method's parameters) are used as given, or chosen on the tuning split by
``optimise``: ``grid`` (every weight vector on a ``step`` grid summing to 1, times each parameter's
range) or ``optuna`` (``trials`` trials of Optuna's TPE sampler, seeded by ``seed``), maximising
``objective`` (a metric of ``run.metrics``; null = the first). Supervised methods learn from the
runs on the tuning split. Every option is checked against the method before any file is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from retrievers.fusion import METHODS, MISSING, NORMS, check_options
from retrievers.params import Params, param

__all__ = ["FuseSettings"]


@dataclass(frozen=True)
class FuseSettings(Params):
    """See the module docstring."""

    SECTION = "fuse"

    runs: tuple[str, ...] | None = param(
        None, non_empty=True, unique=True, doc="TREC run files to fuse; null = not a fusion"
    )
    method: str = param("rrf", choices=tuple(METHODS), doc="a fusion method (docs/fusion.md)")
    norm: str = param("min-max", choices=NORMS, doc="each run's score normalisation")
    weights: tuple[float, ...] | None = param(None, doc="one per run (weighted methods); null = 1 each")
    params: Mapping[str, float] = param(factory=dict, doc="the method's parameters (rrf: k, rbc: phi, ...)")
    missing: str = param(
        "zero", choices=MISSING, doc="sum-like methods: what a run adds for a document it lacks"
    )
    optimise: Literal["none", "grid", "optuna"] = param(
        "none", doc="choose weights and params on the tuning split"
    )
    objective: str | None = param(None, non_empty=True, doc="the metric optimised; null = run.metrics[0]")
    step: float = param(0.1, low=0.0, high=1.0, low_open=True, doc="grid and Optuna: the weights' step")
    trials: int = param(50, low=1, high=100_000, doc="optuna: trials")
    seed: int = param(0, doc="optuna: the sampler's seed")

    def check(self) -> None:
        if self.runs is None:
            return
        n_legs = len(self.runs)
        if n_legs < 2:
            raise self.fail("runs", f"fusion needs two or more run files, got {n_legs}")
        spec = METHODS[self.method]
        if self.optimise != "none" and not spec.weighted and not spec.ranges:
            raise self.fail("optimise", f"{self.method} has no weights or parameters to optimise; set none")
        try:
            check_options(
                self.method,
                n_legs,
                norm=self.norm,
                weights=self.weights,
                params=dict(self.params),
                missing=self.missing,
            )
        except ValueError as error:
            text = str(error)
            key = "weights" if "weight" in text else "params" if "parameter" in text else "missing"
            raise self.fail(key, text) from None
