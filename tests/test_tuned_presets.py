"""The tuned presets that ship (``experiments/tuned/*.yaml``) load with ``retrievers.load_tuned`` in
a fresh process without Hydra and reproduce the test metrics their file records, exactly.

Each preset is one entry of ``PRESETS``: the file's name, the dataset and split it was evaluated
on (``half="holdout"``: the held-out half of the seeded partition the sweep tuned on, as for
CISI and LoCoMo, which have only a test split), the per-query scope (LoCoMo: each question
searches only its conversation) and the ranking depth of the run. To add a family's preset,
append an entry. One child process evaluates every preset, one after the other (a failing preset
reports its traceback and the next goes on); it imports ``retrievers`` and the harness's data,
split, metric and cache modules (none of which loads Hydra), and each preset's answer says
whether Hydra had been imported by then. The child embeds through the session's shared cache
(tests/conftest.py: ``shared_cache``), so SciFact and LoCoMo are embedded with the real model
once (MiniLM, on 2 idle cores about 4 minutes for SciFact, 1 for LoCoMo), not once per preset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TUNED = REPO / "experiments" / "tuned"


@dataclass(frozen=True)
class Preset:
    name: str  # experiments/tuned/<name>.yaml
    dataset: str
    split: str = "test"
    half: str | None = None  # "holdout": the held-out half of the tuning partition
    partition_key: str | None = None  # the partition's group key (LoCoMo: conversation)
    partition_seed: int = 0
    scope_key: str | None = None  # per-query scope (LoCoMo: conversation)
    top_k: int = 100


PRESETS = [
    Preset("graph-cisi", "cisi", half="holdout"),
    Preset("graph-locomo", "locomo", half="holdout", partition_key="conversation", scope_key="conversation"),
    Preset("hierarchical-scifact", "scifact", top_k=10),
    Preset(
        "hierarchical-locomo",
        "locomo",
        half="holdout",
        partition_key="conversation",
        scope_key="conversation",
    ),
    Preset("hybrid-scifact", "scifact"),
    Preset("hybrid-locomo", "locomo", half="holdout", partition_key="conversation", scope_key="conversation"),
    Preset(
        "multi_strategy-locomo",
        "locomo",
        half="holdout",
        partition_key="conversation",
        scope_key="conversation",
    ),
    Preset("multi_strategy-cosqa", "cosqa"),
]

CHILD = r"""
import json, sys, traceback
from pathlib import Path

from retrievers import load_tuned
from retrievers.embedders import SentenceTransformerEmbedder, StaticEmbedder, TfidfEmbedder
from viking_eval.run.cache import ArtifactCache
from viking_eval.run.cached_embedder import CachedEmbedder
from viking_eval.data import load_dataset
from viking_eval.measures.metrics import evaluate, parse_metrics
from viking_eval.data.splits import take_half
import yaml

def evaluate_preset(spec):
    path = Path(spec["path"])
    data = yaml.safe_load(path.read_text())
    recorded = data["provenance"]["evaluated_on"]["metrics"]
    dataset = load_dataset(spec["dataset"], spec["split"])
    if spec["half"] is not None:
        dataset = take_half(dataset, spec["half"], key=spec["partition_key"], seed=spec["partition_seed"])
    classes = {"SentenceTransformerEmbedder": SentenceTransformerEmbedder, "StaticEmbedder": StaticEmbedder}
    embedder_spec = data["embedder"]
    embedder = None
    if embedder_spec["class"] in classes:  # through the embedding cache (same vectors, embedded once)
        embedder = CachedEmbedder(classes[embedder_spec["class"]](**embedder_spec["params"]), ArtifactCache())
    documents = [dataset.corpus[doc_id] for doc_id in sorted(dataset.corpus)]
    scope_key = spec["scope_key"]
    run = {}
    if scope_key is None:
        retriever = load_tuned(path, documents=documents, embedder=embedder, source_folder=dataset.folder)
        query_ids = sorted(dataset.qrels)
        results = retriever.retrieve_batch([dataset.queries[q].text for q in query_ids], spec["top_k"])
        run = {q: {r.doc_id: r.score for r in rs} for q, rs in zip(query_ids, results)}
    else:
        full = load_tuned(path, documents=documents, embedder=embedder, source_folder=dataset.folder)
        by_scope = {}
        for q in sorted(dataset.qrels):
            by_scope.setdefault(str(dataset.queries[q].metadata[scope_key]), []).append(q)
        for scope, query_ids in sorted(by_scope.items()):
            view = full.store.restricted(full.store.metadata_mask(scope_key, scope))
            retriever = load_tuned(path, store=view, embedder=full.embedder)
            results = retriever.retrieve_batch([dataset.queries[q].text for q in query_ids], spec["top_k"])
            run.update({q: {r.doc_id: r.score for r in rs} for q, rs in zip(query_ids, results)})
    measured = evaluate(run, dataset.qrels, parse_metrics(list(recorded))).aggregate
    hydra = sorted({n.split(".")[0] for n in sys.modules} & {"hydra", "omegaconf"})
    return {"recorded": recorded, "measured": measured, "hydra_imported": hydra}


answers = {}
for spec in json.loads(sys.argv[1]):
    try:
        answers[spec["name"]] = evaluate_preset(spec)
    except Exception:
        answers[spec["name"]] = {"error": traceback.format_exc()}
print(json.dumps(answers))
"""


#: families whose every shipped preset must be in PRESETS (add yours when you list its files)
CHECKED_FAMILIES = {"hierarchical", "graph", "hybrid", "multi_strategy"}


def test_every_shipped_preset_of_the_checked_families_is_listed() -> None:
    shipped = {path.stem for path in TUNED.glob("*.yaml") if path.stem.split("-")[0] in CHECKED_FAMILIES}
    assert shipped <= {preset.name for preset in PRESETS}


@pytest.fixture(scope="module")
def preset_answers(shared_datasets: Path, shared_cache_folder: Path) -> dict[str, dict[str, Any]]:
    """Every preset of ``PRESETS`` evaluated by one child process: preset name -> its recorded
    and measured metrics and the Hydra modules imported by then, or the traceback it failed with."""
    specs = [{**asdict(preset), "path": str(TUNED / f"{preset.name}.yaml")} for preset in PRESETS]
    environment = {
        **os.environ,
        "VIKING_EVAL_DATA": str(shared_datasets),
        "VIKING_EVAL_CACHE": str(shared_cache_folder),
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(specs)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3600,
        env=environment,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return answers


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.needs_data
@pytest.mark.parametrize("preset", PRESETS, ids=[preset.name for preset in PRESETS])
def test_preset_reproduces_its_recorded_test_metrics(
    preset: Preset, preset_answers: dict[str, dict[str, Any]]
) -> None:
    path = TUNED / f"{preset.name}.yaml"
    assert path.is_file(), f"{path} is listed but not shipped"
    data = yaml.safe_load(path.read_text())
    assert data["provenance"]["tuned_on"]["tuned_on_reported_split"] is False
    assert data["provenance"]["evaluated_on"]["split"].startswith(preset.split)
    answer = preset_answers[preset.name]
    assert "error" not in answer, answer.get("error")
    assert answer["hydra_imported"] == [], "hydra was imported"
    assert answer["measured"] == answer["recorded"]
