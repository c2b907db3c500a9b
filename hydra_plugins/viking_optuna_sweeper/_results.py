"""The study's results document, ``optimization_results.yaml``: the study, trial counts by state,
and the best trial (one objective) or the Pareto front (several), each trial with its values,
parameters, overrides and job folder; a storage URL is shown without its password.

Named with a leading "_" so that Hydra's plugin scan leaves it alone (see _errors.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna


def redacted_storage(storage: str | None) -> str | None:
    """A storage URL without its password (results files are shared)."""
    return None if storage is None else re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", storage)


def _trial_entry(trial: optuna.trial.FrozenTrial, objectives: Sequence[str]) -> dict[str, Any]:
    values = dict(zip(objectives, trial.values, strict=True))
    return {
        "trial": trial.number,
        "values": values,
        "params": dict(trial.params),
        "overrides": list(trial.user_attrs.get("overrides", [])),
        "job_dir": trial.user_attrs.get("job_dir"),
    }


def results_document(
    study: optuna.Study,
    objectives: Sequence[str],
    directions: Sequence[str],
    sampler_name: str,
    storage: str | None,
) -> dict[str, Any]:
    """``optimization_results.yaml``: the study, trial counts by state, and the best trial
    (one objective) or the Pareto front (several; non-dominated complete trials)."""
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.state.name.lower()] = counts.get(trial.state.name.lower(), 0) + 1
    single = len(objectives) == 1
    document: dict[str, Any] = {
        "study_name": study.study_name,
        "storage": redacted_storage(storage),
        "sampler": sampler_name,
        "objective": objectives[0] if single else list(objectives),
        "direction": directions[0] if single else list(directions),
        "trials": {"total": len(trials), **dict(sorted(counts.items()))},
    }
    complete = [trial for trial in trials if trial.state.name == "COMPLETE"]
    if not complete:
        document["best"] = None
        return document
    if single:
        best = study.best_trial
        entry = _trial_entry(best, objectives)
        document.update(
            best_trial=best.number,
            best_value=entry["values"][objectives[0]],
            best_params=entry["params"],
            best_overrides=entry["overrides"],
            best_job_dir=entry["job_dir"],
        )
    else:
        front = sorted(study.best_trials, key=lambda trial: trial.number)
        document["pareto_front"] = [_trial_entry(trial, objectives) for trial in front]
    return document
