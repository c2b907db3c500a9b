"""The one experiment loop: ``viking_eval.evaluate`` and ``python -m viking_eval`` run the same
code (viking_eval/run/experiment.py), so the same experiment gives the same files, and the API
resumes and reuses the fitted embedder exactly as the CLI does (issue 24)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

REPO = Path(__file__).resolve().parents[1]

# experiment=smoke, as the API spells it (conf/experiment/smoke.yaml, conf/retriever/{bm25,dense}.yaml,
# conf/embedder/tfidf.yaml): the same retrievers, embedder, metrics, depth and significance settings
SMOKE_RETRIEVERS = {
    "bm25": {"_target_": "retrievers.baselines.BM25Retriever"},
    "dense": {"_target_": "retrievers.baselines.DenseRetriever", "query_batch_size": 256},
}
SAME_FILES = ("runs/bm25.trec", "runs/dense.trec", "per_query.csv", "metrics.csv", "significance.csv")


def _cli(folder: Path, cache: Path) -> None:
    done = run_cli(
        "experiment=smoke",
        "run.latency.n_queries=0",
        f"hydra.run.dir={folder}",
        env={"VIKING_EVAL_CACHE": str(cache)},
    )
    assert done.returncode == 0, done.stderr


API_RUN = """
import json, sys
from viking_eval import evaluate
evaluate(json.loads(sys.argv[1]), "adi", embedder="tfidf", latency_queries=0, output_dir=sys.argv[2],
         cache_dir=sys.argv[3], name="smoke")
"""


def _api(folder: Path, cache: Path) -> dict[str, object]:
    """``evaluate()`` in a process of its own (as a user's script runs it); environment.json."""
    done = subprocess.run(
        [sys.executable, "-c", API_RUN, json.dumps(SMOKE_RETRIEVERS), str(folder), str(cache)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads((folder / "environment.json").read_text()))


def _scores(folder: Path) -> dict[str, object]:
    """metrics.json without what differs by construction between two runs (wall time)."""
    document = json.loads((folder / "metrics.json").read_text())
    document.pop("wall_seconds")
    for entry in document["retrievers"].values():
        entry.pop("run_seconds", None)
    return document


def _markers(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in (folder / "results").iterdir()}


def _environment(folder: Path) -> dict[str, object]:
    return dict(json.loads((folder / "environment.json").read_text()))


@pytest.mark.needs_data
def test_api_and_cli_write_the_same_run_and_resume_alike(data_env: Path, tmp_path: Path) -> None:
    cli, api = tmp_path / "cli", tmp_path / "api"
    _cli(cli, tmp_path / "cli-cache")
    first = _api(api, tmp_path / "api-cache")

    for name in SAME_FILES:
        assert (api / name).read_bytes() == (cli / name).read_bytes(), name
    assert _scores(api) == _scores(cli)
    cli_first = _environment(cli)
    for key in ("store_key", "embedder", "dataset_files", "dataset_split"):
        assert first.get(key) == cli_first.get(key), key
    # the first run of each fitted TF-IDF and built the store into its (empty) cache
    assert first["cache_builds"] == cli_first["cache_builds"] > 0

    # each again, in a new process, into its own folder: every retriever resumes from its
    # finished marker (a recomputed one would record a new cost), nothing is refitted or rebuilt,
    # the fitted embedder is loaded from the cache: the API exactly as the CLI
    cli_markers, api_markers = _markers(cli), _markers(api)
    _cli(cli, tmp_path / "cli-cache")
    again = _api(api, tmp_path / "api-cache")
    cli_again = _environment(cli)
    assert _markers(cli) == cli_markers and _markers(api) == api_markers
    assert (again["cache_builds"], again["cache_hits"]) == (
        cli_again["cache_builds"],
        cli_again["cache_hits"],
    )
    assert again["cache_builds"] == 0 and again["cache_hits"] >= 1
    for name in SAME_FILES:
        assert (api / name).read_bytes() == (cli / name).read_bytes(), name
