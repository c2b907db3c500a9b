"""The regression gate (experiments/baselines/ci_regression.yaml) runs every tuned preset of
experiments/tuned/ with the preset's own retriever parameters (on the static embedder, which the
checks use to stay fast): each check's command is composed as the gate composes it, and the named
retriever's parameters must equal the tuned file's, key by key. A tuned file or a gate command that
drifts fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir

from viking_eval.config import load_settings

REPO = Path(__file__).resolve().parents[1]
GATE = REPO / "experiments" / "baselines" / "ci_regression.yaml"

#: tuned file -> (gate check, retriever name in that check)
COVERAGE = {
    "graph-cisi": ("cisi-graph", "graph_tuned"),
    "graph-locomo": ("locomo-graph", "graph_tuned"),
    "hierarchical-locomo": ("locomo-hier", "hier_tuned"),
    "hierarchical-scifact": ("scifact-hier", "hier_tuned"),
    "hybrid-locomo": ("locomo-hybrid", "hybrid_tuned"),
    "hybrid-scifact": ("scifact-hybrid", "hybrid_tuned"),
    "multi_strategy-cosqa": ("cosqa-multi", "multi_strategy_tuned"),
    "multi_strategy-locomo": ("locomo-multi", "multi_strategy_tuned"),
}


def checks() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(GATE.read_text(encoding="utf-8"))
    return {check.get("name", check["dataset"]): check for check in document["checks"]}


def test_every_tuned_preset_is_covered() -> None:
    assert sorted(path.stem for path in (REPO / "experiments" / "tuned").glob("*.yaml")) == sorted(COVERAGE)
    gate = checks()
    for check, retriever in COVERAGE.values():
        assert retriever in gate[check]["metrics"], f"{check} does not gate {retriever}"
    assert "openviking" in gate["scifact-hier"]["metrics"]


def plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


@pytest.mark.parametrize("tuned", sorted(COVERAGE))
def test_gate_runs_the_tuned_parameters(tuned: str) -> None:
    check, retriever = COVERAGE[tuned]
    command = checks()[check]["command"].split()
    assert command[:3] == ["python", "-m", "viking_eval"]
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=command[3:])
    spec = {s.name: s for s in load_settings(cfg).retrievers}[retriever]
    params = yaml.safe_load((REPO / "experiments" / "tuned" / f"{tuned}.yaml").read_text())["retriever"][
        "params"
    ]
    for key, value in params.items():
        assert plain(spec.params.get(key)) == plain(value), f"{check}/{retriever}: {key}"
