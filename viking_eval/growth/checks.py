"""What a growth run refuses before anything is read: settings of other programs, an embedder
fitted on the corpus, run-file retrievers, a search backend (docs/growth.md)."""

from __future__ import annotations

from viking_eval.config import ConfigError, Settings
from viking_eval.config.registry import resolve

__all__ = ["check_growth"]


def check_growth(settings: Settings) -> None:
    """ConfigError naming the key when ``settings`` cannot be a growth run (``growth.by`` set)."""
    others = (
        ("benchmark.datasets", settings.benchmark.datasets is not None, "a benchmark"),
        ("fuse.runs", settings.fuse.runs is not None, "a fusion of run files"),
        ("gate.baseline", settings.gate.baseline is not None, "the regression gate"),
        ("gate.baseline_run", settings.gate.baseline_run is not None, "a comparison with a stored run"),
    )
    for key, is_set, what in others:
        if is_set:
            raise ConfigError(
                key, f"makes the command {what}, and growth.by={settings.growth.by} a growth run: set one"
            )
    if not settings.backend.is_local:
        raise ConfigError(
            "store.backend",
            f"is {settings.backend.backend!r}; a growth run builds a store per step and searches it locally: "
            "use store.backend=local",
        )
    target = str(settings.embedder.get("_target_", ""))
    if target and callable(getattr(resolve(target, "embedder._target_", "embedder"), "fit", None)):
        raise ConfigError(
            "embedder",
            f"{target.rsplit('.', 1)[-1]} is fitted on the corpus, which would let it see documents not yet "
            "in memory; choose an embedder that is not fitted (embedder=static or minilm)",
        )
    for spec in settings.retrievers:
        if spec.target == "retrievers.run_file.RunFileRetriever":
            raise ConfigError(
                f"retrievers.{spec.name}",
                "a run file ranks the finished corpus, not the memory of a step: leave it out of a growth run",
            )
