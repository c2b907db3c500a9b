"""The tuned presets that ship (``experiments/tuned/*.yaml``) load with ``retrievers.load_tuned``
in a fresh process without Hydra and reproduce their figures exactly, at two depths.

- **On a slice** (the README's test command, CI): each preset on a fixed slice of its dataset --
  the first queries of its evaluation split (LoCoMo: the first conversation of the held-out half)
  and their judged documents plus distractors chosen by sha256 (``take_slice``) -- with the real
  model, must give exactly the metrics recorded in ``tests/tuned_preset_slices.json``. That file
  names the sha256 of each preset file it was recorded from, so a changed preset is refused until
  it is recorded again: ``python tests/test_tuned_presets.py --record`` (about 2 minutes).
- **On the whole split** (``python -m pytest -m reproduce``: 2,490 s on 2 cores shared with other
  jobs, from an empty cache, most of it MiniLM embedding SciFact, LoCoMo, CISI and CoSQA): each preset must
  give exactly the test metrics its own file records (``provenance.evaluated_on``).

Each preset is one entry of ``PRESETS``: the file's name, the dataset and split it was evaluated
on (``half="holdout"``: the held-out half of the seeded partition the sweep tuned on, as for
CISI and LoCoMo, which have only a test split), the per-query scope (LoCoMo: each question
searches only its conversation) and the ranking depth of the run. To add a family's preset,
append an entry and record the slices. One child process evaluates every preset, one after the
other (a failing preset reports its traceback and the next goes on); it imports ``retrievers``
and the harness's data, split, metric and cache modules (none of which loads Hydra), and each
preset's answer says whether Hydra had been imported by then. The child embeds through the
session's shared cache (tests/conftest.py: ``shared_cache``), so each corpus is embedded once.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

START_FIRST = True  # tests/conftest.py: the real-model child takes about two minutes

REPO = Path(__file__).resolve().parents[1]
TUNED = REPO / "experiments" / "tuned"
SLICES_FILE = Path(__file__).with_name("tuned_preset_slices.json")


@dataclass(frozen=True)
class Slice:
    """A fixed slice of a dataset's evaluated queries: the first ``n_queries`` query ids (in
    sorted order) with every document they judge, plus the documents that come first when the
    rest are ordered by sha256(doc id) up to ``n_docs`` in all; or, for a scoped dataset, the first
    ``n_scopes`` scope values (sorted) with all their queries and documents."""

    n_queries: int = 0
    n_docs: int = 0
    n_scopes: int = 0


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


#: the slice each dataset is checked on in the README's test command (MiniLM embeds about 1,600
#: documents for all of them, against 18,800 for the whole splits)
SLICES = {
    "scifact": Slice(n_queries=40, n_docs=400),
    "cisi": Slice(n_queries=10, n_docs=300),
    "cosqa": Slice(n_queries=80, n_docs=500),
    "locomo": Slice(n_scopes=1),
}

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
import dataclasses, hashlib, json, sys, traceback
from pathlib import Path

from retrievers import load_tuned
from retrievers.embedders import SentenceTransformerEmbedder, StaticEmbedder, TfidfEmbedder
from viking_eval.run.cache import ArtifactCache
from viking_eval.run.cached_embedder import CachedEmbedder
from viking_eval.data import load_dataset
from viking_eval.measures.metrics import evaluate, parse_metrics
from viking_eval.data.splits import take_half
import yaml


def take_slice(dataset, piece, scope_key):
    if piece["n_scopes"]:
        scopes = sorted({str(q.metadata[scope_key]) for q in dataset.queries.values()})[: piece["n_scopes"]]
        keep = [q for q in sorted(dataset.qrels) if str(dataset.queries[q].metadata[scope_key]) in scopes]
        docs = {d for d, doc in dataset.corpus.items() if str(doc.metadata.get(scope_key)) in scopes}
    else:
        keep = sorted(dataset.qrels)[: piece["n_queries"]]
        docs = {d for q in keep for d in dataset.qrels[q]}
        rest = sorted(set(dataset.corpus) - docs, key=lambda d: (hashlib.sha256(d.encode()).hexdigest(), d))
        docs |= set(rest[: max(0, piece["n_docs"] - len(docs))])
    return dataclasses.replace(
        dataset,
        subset=f"{dataset.subset}; slice {piece}",
        corpus={d: dataset.corpus[d] for d in dataset.corpus if d in docs},
        queries={q: dataset.queries[q] for q in keep},
        qrels={q: {d: g for d, g in dataset.qrels[q].items() if d in docs} for q in keep},
    )


def evaluate_preset(spec):
    path = Path(spec["path"])
    data = yaml.safe_load(path.read_text())
    recorded = data["provenance"]["evaluated_on"]["metrics"]
    dataset = load_dataset(spec["dataset"], spec["split"])
    if spec["half"] is not None:
        dataset = take_half(dataset, spec["half"], key=spec["partition_key"], seed=spec["partition_seed"])
    if spec["slice"] is not None:
        dataset = take_slice(dataset, spec["slice"], spec["scope_key"])
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
    return {
        "recorded": recorded,
        "measured": measured,
        "hydra_imported": hydra,
        "n_queries": len(dataset.qrels),
        "n_docs": len(dataset.corpus),
    }


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


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def evaluate_presets(datasets: Path, cache: Path, *, sliced: bool) -> dict[str, dict[str, Any]]:
    """Every preset of ``PRESETS`` evaluated by one child process (on its slice, or on the whole
    split): preset name -> its recorded and measured metrics, the slice's size and the Hydra
    modules imported by then, or the traceback it failed with."""
    specs = [
        {
            **asdict(preset),
            "path": str(TUNED / f"{preset.name}.yaml"),
            "slice": asdict(SLICES[preset.dataset]) if sliced else None,
        }
        for preset in PRESETS
    ]
    environment = {
        **os.environ,
        "VIKING_EVAL_DATA": str(datasets),
        "VIKING_EVAL_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
    }
    if sliced:
        # one thread (torch, BLAS): the slice is recorded and checked at the same thread count on
        # any machine, and under pytest-xdist the child does not contend with the other workers
        # for the cores (alone: 126 s wall, 126 CPU-s, against 90 s and 150 CPU-s on two threads)
        environment["OMP_NUM_THREADS"] = "1"
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


def test_every_shipped_preset_of_the_checked_families_is_listed() -> None:
    shipped = {path.stem for path in TUNED.glob("*.yaml") if path.stem.split("-")[0] in CHECKED_FAMILIES}
    assert shipped <= {preset.name for preset in PRESETS}


def test_every_listed_preset_has_a_slice_recorded_from_its_current_file() -> None:
    recorded = json.loads(SLICES_FILE.read_text())
    for preset in PRESETS:
        entry = recorded["presets"].get(preset.name)
        assert entry is not None, (
            f"{preset.name}: no slice recorded (python tests/test_tuned_presets.py --record)"
        )
        assert entry["slice"] == asdict(SLICES[preset.dataset]), (
            f"{preset.name}: the slice changed: record again"
        )
        assert entry["preset_sha256"] == _sha256(TUNED / f"{preset.name}.yaml"), (
            f"{preset.name}: the preset file changed since its slice was recorded: "
            "python tests/test_tuned_presets.py --record"
        )


@pytest.fixture(scope="module")
def slice_answers(shared_datasets: Path, shared_cache_folder: Path) -> dict[str, dict[str, Any]]:
    return evaluate_presets(shared_datasets, shared_cache_folder, sliced=True)


@pytest.fixture(scope="module")
def preset_answers(shared_datasets: Path, shared_cache_folder: Path) -> dict[str, dict[str, Any]]:
    return evaluate_presets(shared_datasets, shared_cache_folder, sliced=False)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.needs_data
@pytest.mark.parametrize("preset", PRESETS, ids=[preset.name for preset in PRESETS])
def test_preset_reproduces_its_recorded_slice_metrics(
    preset: Preset, slice_answers: dict[str, dict[str, Any]]
) -> None:
    entry = json.loads(SLICES_FILE.read_text())["presets"][preset.name]
    answer = slice_answers[preset.name]
    assert "error" not in answer, answer.get("error")
    assert answer["hydra_imported"] == [], "hydra was imported"
    assert (answer["n_queries"], answer["n_docs"]) == (entry["n_queries"], entry["n_docs"])
    assert answer["measured"] == entry["metrics"]


@pytest.mark.reproduce
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


def record_slices(datasets: Path, cache: Path) -> None:
    """Write ``tests/tuned_preset_slices.json``: every preset's metrics on its slice, measured now."""
    answers = evaluate_presets(datasets, cache, sliced=True)
    failed = {name: answer["error"] for name, answer in answers.items() if "error" in answer}
    if failed:
        raise SystemExit("\n".join(f"{name}:\n{error}" for name, error in failed.items()))
    document = {
        "about": "tests/test_tuned_presets.py: each tuned preset's metrics on its slice; "
        "written by `python tests/test_tuned_presets.py --record`",
        "presets": {
            preset.name: {
                "preset_sha256": _sha256(TUNED / f"{preset.name}.yaml"),
                "slice": asdict(SLICES[preset.dataset]),
                "n_queries": answers[preset.name]["n_queries"],
                "n_docs": answers[preset.name]["n_docs"],
                "metrics": answers[preset.name]["measured"],
            }
            for preset in PRESETS
        },
    }
    partial = SLICES_FILE.with_suffix(".json.partial")
    partial.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    partial.replace(SLICES_FILE)


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        raise SystemExit("usage: python tests/test_tuned_presets.py --record  (needs VIKING_EVAL_DATA)")
    data_folder = os.environ.get("VIKING_EVAL_DATA")
    if not data_folder:
        raise SystemExit("set VIKING_EVAL_DATA to the folder holding scifact, cisi, cosqa and locomo")
    record_slices(
        Path(data_folder), Path(os.environ.get("VIKING_EVAL_CACHE", Path.home() / ".cache/viking_eval"))
    )
