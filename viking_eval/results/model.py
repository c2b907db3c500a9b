"""The result model of a run: plain frozen values, no I/O.

``RetrieverResult`` is what one retriever produced on one dataset split; ``RunSummary`` is a whole
run (every retriever, the significance tests, the wall time). ``ResumeKey`` says what produced a
result, part by part, so that a finished result is reused only when every part is identical, and
so that the reason for a rerun can be named. ``run_folder.py`` reads and writes these values;
the runner makes them; the reports and the gate read them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from viking_eval.config import Settings
    from viking_eval.data.splits import Phase
    from viking_eval.measures.significance import SignificanceReport


@dataclass(frozen=True)
class RetrieverResult:
    """One retriever on one split: aggregate and per-query metrics, latency, run time."""

    name: str
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]  # metric -> query id -> value
    latency: dict[str, Any] | None
    n_queries: int
    n_queries_without_results: int
    run_seconds: float
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # group -> n_queries, metrics
    stats: dict[str, Any] = field(default_factory=dict)  # provenance_stats(): per-query retriever stats
    # over an approximate vector index: index kind, knobs, ann_recall@10 (ann_quality.py); else {}
    vector_search: dict[str, Any] = field(default_factory=dict)
    # answers.enabled: counts, per-group means and intervals, LLM usage (viking_eval/answers/); else {}
    answers: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSummary:
    output_dir: Path | None  # the run folder (None: nothing was written)
    dataset: str
    split: str
    results: list[RetrieverResult]
    data_issues: dict[str, int]
    phase: str = "report"
    tuned_on_reported_split: bool = False
    significance: SignificanceReport | None = None  # every retriever vs run.baseline
    # what the run's results cost: this invocation's wall time (data, embedder, store, retrieval,
    # metrics, latency, reports) plus the recorded cost of every result taken from a finished marker
    wall_seconds: float = 0.0

    def metrics(self) -> dict[str, dict[str, float]]:
        return {result.name: result.metrics for result in self.results}

    def objectives(self) -> dict[str, dict[str, float]]:
        """What a sweeper optimises (``hydra.sweeper.objective``, e.g. ``bm25.nDCG@10``): every
        metric, and p50/p95 latency for quality-vs-latency studies."""
        return {
            result.name: {
                **result.metrics,
                **{f"latency.{key}": result.latency[key] for key in ("p50_ms", "p95_ms") if result.latency},
            }
            for result in self.results
        }


class RunExperiment(Protocol):
    """The runner's ``run_experiment``, as the gate and the sweep's best-configuration step take it
    (they run experiments without importing the runner)."""

    def __call__(
        self, settings: Settings, output_dir: Path | None, *, config_yaml: str = "", phase: Phase = "report"
    ) -> RunSummary: ...


# --------------------------------------------------------------------------- resume keys


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        for key in value:
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value
    return out


def _shown(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if value is not _MISSING else "(none)"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MISSING = object()


@dataclass(frozen=True)
class ResumeKey:
    """Everything that determines a retriever's result, by named part (JSON values).

    Parts (see ``runner.resume_key``): ``files`` (sha256 of every dataset file read: corpus,
    queries, the split's qrels), ``queries`` (the evaluated query ids: count and sha256),
    ``split`` (the evaluated split label, e.g. ``test[tune half]``), ``dataset`` (every dataset
    setting), ``retriever`` (class, parameters), ``algorithm`` (the class's ``ALGORITHM_VERSION``
    and those of the objects in its parameters), ``embedder`` (config and ``name`` fingerprint),
    ``store`` (settings and the content key of the built store), ``run`` (top_k, batch size,
    metrics, latency settings). Two keys are equal when every part is; ``differences`` names the
    parts that are not."""

    parts: dict[str, Any]

    def __post_init__(self) -> None:
        # as a marker will hold them: JSON values (tuples become lists), so that a fresh key and
        # a saved one compare equal part by part
        object.__setattr__(self, "parts", json.loads(json.dumps(self.parts, ensure_ascii=False, default=str)))

    @property
    def digest(self) -> str:
        return _digest(self.parts)

    def differences(self, saved: Mapping[str, Any]) -> list[str]:
        """What changed from ``saved`` (an older key's parts) to this key, one phrase per leaf:
        ``qrels/test.tsv changed (sha256 ab12.. -> cd34..)``, ``run.top_k changed (5 -> 100)``."""
        before = _flatten(dict(saved), "", {})
        after = _flatten(self.parts, "", {})
        phrases = []
        for path in [*after, *(path for path in before if path not in after)]:
            old, new = before.get(path, _MISSING), after.get(path, _MISSING)
            if old == new:
                continue
            if path.startswith("files."):
                name = path.removeprefix("files.")
                if old is _MISSING:
                    phrases.append(f"{name} added (sha256 {str(new)[:4]}..)")
                elif new is _MISSING:
                    phrases.append(f"{name} no longer read")
                else:
                    phrases.append(f"{name} changed (sha256 {str(old)[:4]}.. -> {str(new)[:4]}..)")
            elif path.endswith((".sha256", ".content_key")):  # hashes: their first digits
                phrases.append(f"{path} changed ({str(old)[:4]}.. -> {str(new)[:4]}..)")
            else:
                phrases.append(f"{path} changed ({_shown(old)} -> {_shown(new)})")
        return phrases


@dataclass(frozen=True)
class FinishedRetriever:
    """A ``results/<name>.json`` marker: the result, the key parts that produced it, and what it
    cost to compute (wall seconds, the run's shared setup included for the first retriever)."""

    result: RetrieverResult
    key_parts: dict[str, Any] | None  # None: a marker written before resume keys had parts
    cost_seconds: float

    def reason_to_rerun(self, key: ResumeKey) -> str | None:
        """None when the marker was produced by exactly ``key``, else why it cannot be reused."""
        if self.key_parts is None:
            return "its marker predates resume keys with named parts"
        differences = key.differences(self.key_parts)
        if not differences:
            return None
        shown = differences[:4]
        more = f"; and {len(differences) - 4} more" if len(differences) > 4 else ""
        return "; ".join(shown) + more
