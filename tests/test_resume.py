"""Resuming a run folder (issue 12, items 2 and "Also"): a finished retriever is reused only when
everything that produced it is identical, the log names what differs when it is not, and a
resumed run keeps the cost of the original work.

Each test runs the smoke experiment (ADI, BM25 + TF-IDF dense, no latency timing) on a copy of
ADI in tmp_path, edits the copy or the configuration, and runs again into the same folder."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest
from conftest import smoke_settings
from hydra.utils import get_class

from viking_eval.config import Settings
from viking_eval.results.model import ResumeKey
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
RUNNER_LOG = "viking_eval.run.experiment"


@pytest.fixture
def adi(shared_datasets: Path, tmp_path: Path) -> Path:
    """A writable copy of the ADI dataset."""
    folder = tmp_path / "adi"
    shutil.copytree(shared_datasets / "adi", folder)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def _settings(dataset: Path, *overrides: str) -> Settings:
    """The smoke experiment on the copy of ADI at ``dataset``, no latency timing."""
    return smoke_settings(f"dataset.path={dataset}", "run.latency.n_queries=0", *overrides)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reruns(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == RUNNER_LOG and r.getMessage().startswith("rerunning")
    ]


def _resumed(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == RUNNER_LOG and "already finished" in r.getMessage()
    ]


@pytest.mark.needs_data
def test_changed_qrels_are_rerun_and_the_log_names_the_file(
    adi: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "run"
    first = run_experiment(_settings(adi), out)
    qrels = adi / "qrels" / "test.tsv"
    before = _sha(qrels)
    # drop the first judgment of every query that has several: the same queries stay judged
    header, *rows = qrels.read_text().splitlines()
    seen: dict[str, int] = {}
    counts = {row.split("\t")[0]: 0 for row in rows}
    for row in rows:
        counts[row.split("\t")[0]] += 1
    kept = []
    for row in rows:
        query_id = row.split("\t")[0]
        seen[query_id] = seen.get(query_id, 0) + 1
        if not (counts[query_id] > 1 and seen[query_id] == 1):
            kept.append(row)
    qrels.write_text("\n".join([header, *kept]) + "\n")
    after = _sha(qrels)

    caplog.set_level(logging.INFO, logger=RUNNER_LOG)
    second = run_experiment(_settings(adi), out)
    assert second.metrics() != first.metrics()
    assert second.metrics() == run_experiment(_settings(adi), tmp_path / "fresh").metrics()
    reason = f"qrels/test.tsv changed (sha256 {before[:4]}.. -> {after[:4]}..)"
    assert _reruns(caplog)[:2] == [f"rerunning bm25: {reason}", f"rerunning dense: {reason}"]
    # the folder's files are the new run's
    document = json.loads((out / "metrics.json").read_text())
    assert document["retrievers"]["bm25"]["metrics"] == second.metrics()["bm25"]
    environment = json.loads((out / "environment.json").read_text())
    assert environment["dataset_files"]["qrels/test.tsv"] == after


@pytest.mark.needs_data
def test_changed_queries_are_rerun_and_the_log_names_the_file(
    adi: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "run"
    first = run_experiment(_settings(adi), out)
    queries_file = adi / "queries.jsonl"
    before = _sha(queries_file)
    lines = [json.loads(line) for line in queries_file.read_text().splitlines()]
    lines[0]["text"] = lines[1]["text"]  # query 1 now asks query 2's question
    queries_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    after = _sha(queries_file)

    caplog.set_level(logging.INFO, logger=RUNNER_LOG)
    second = run_experiment(_settings(adi), out)
    changed = lines[0]["_id"]
    assert second.results[0].per_query["nDCG@10"][changed] != first.results[0].per_query["nDCG@10"][changed]
    assert second.metrics()["bm25"] != first.metrics()["bm25"]
    reason = f"queries.jsonl changed (sha256 {before[:4]}.. -> {after[:4]}..)"
    assert _reruns(caplog) == [f"rerunning bm25: {reason}", f"rerunning dense: {reason}"]
    trec = [line.split() for line in (out / "runs" / "bm25.trec").read_text().splitlines()]
    fresh = run_experiment(_settings(adi), tmp_path / "fresh")
    assert second.metrics() == fresh.metrics()
    assert trec == [
        line.split() for line in (tmp_path / "fresh" / "runs" / "bm25.trec").read_text().splitlines()
    ]


@pytest.mark.needs_data
@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ("run.top_k=50", "run.top_k changed (100 -> 50)"),
        ("run.batch_size=7", "run.batch_size changed (256 -> 7)"),
        (
            "run.metrics=[nDCG@10,R@100]",
            'run.metrics changed (["nDCG@10", "R@10", "R@100", "RR@10", "AP@100"] ->',
        ),
        ("run.latency.seed=3", "run.latency.seed changed (0 -> 3)"),
        ("dataset.ignore_identical_ids=true", "dataset.ignore_identical_ids changed (false -> true)"),
        ("dataset.group_key=topic", 'dataset.group_key changed (null -> "topic")'),
    ],
)
def test_every_setting_is_part_of_the_key(
    adi: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, override: str, reason: str
) -> None:
    out = tmp_path / "run"
    run_experiment(_settings(adi), out)
    caplog.set_level(logging.INFO, logger=RUNNER_LOG)
    run_experiment(_settings(adi, override), out)
    reruns = _reruns(caplog)
    assert [line.split(":")[0] for line in reruns] == ["rerunning bm25", "rerunning dense"]
    assert all(reason in line for line in reruns), reruns
    assert _resumed(caplog) == []


@pytest.mark.needs_data
def test_a_retriever_parameter_reruns_only_that_retriever(
    adi: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "run"
    run_experiment(_settings(adi), out)
    caplog.set_level(logging.INFO, logger=RUNNER_LOG)
    run_experiment(_settings(adi, "retrievers.dense.query_batch_size=8"), out)
    assert _reruns(caplog) == ["rerunning dense: retriever.params.query_batch_size changed (256 -> 8)"]
    assert len(_resumed(caplog)) == 1 and "bm25" in _resumed(caplog)[0]


@pytest.mark.needs_data
def test_the_algorithm_version_is_part_of_the_key(
    adi: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    settings = _settings(adi)
    run_experiment(settings, out)
    target = next(spec.target for spec in settings.retrievers if spec.name == "bm25")
    cls = get_class(target)
    old = getattr(cls, "ALGORITHM_VERSION", None)
    monkeypatch.setattr(cls, "ALGORITHM_VERSION", 99, raising=False)
    caplog.set_level(logging.INFO, logger=RUNNER_LOG)
    run_experiment(settings, out)
    assert _reruns(caplog) == [f"rerunning bm25: algorithm.{target} changed ({json.dumps(old)} -> 99)"]


@pytest.mark.needs_data
def test_an_unchanged_rerun_is_resumed_and_keeps_the_original_cost(
    adi: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "run"
    first = run_experiment(_settings(adi), out)
    markers = {name: json.loads((out / "results" / f"{name}.json").read_text()) for name in ("bm25", "dense")}
    costs = {name: marker["cost_seconds"] for name, marker in markers.items()}
    assert all(cost > 0 for cost in costs.values())
    assert sum(costs.values()) <= first.wall_seconds
    # make the recorded cost unmistakable: a resume must report it, not its own fraction of a second
    for name, cost in (("bm25", 100.0), ("dense", 200.0)):
        markers[name]["cost_seconds"] = cost
        (out / "results" / f"{name}.json").write_text(json.dumps(markers[name]))
    caplog.set_level(logging.INFO, logger=RUNNER_LOG)
    second = run_experiment(_settings(adi), out)
    assert _reruns(caplog) == [] and len(_resumed(caplog)) == 2
    assert second.metrics() == first.metrics()
    assert 300.0 <= second.wall_seconds < 300.0 + 60.0
    assert json.loads((out / "metrics.json").read_text())["wall_seconds"] == round(second.wall_seconds, 3)


@pytest.mark.needs_data
def test_a_marker_without_key_parts_is_rerun(
    adi: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "run"
    run_experiment(_settings(adi), out)
    marker = out / "results" / "bm25.json"
    saved = json.loads(marker.read_text())
    marker.write_text(json.dumps({"spec_key": "0" * 64, **saved["result"]}))  # the format before parts
    caplog.set_level(logging.INFO, logger=RUNNER_LOG)
    run_experiment(_settings(adi), out)
    assert _reruns(caplog) == ["rerunning bm25: its marker predates resume keys with named parts"]
    assert json.loads(marker.read_text())["key_parts"]["files"]["qrels/test.tsv"] == _sha(
        adi / "qrels" / "test.tsv"
    )


def test_key_differences_by_hand() -> None:
    saved = {
        "files": {"corpus.jsonl": "aaaa1111", "qrels/test.tsv": "ab12ff"},
        "run": {"top_k": 100, "metrics": ["nDCG@10"]},
    }
    key = ResumeKey(
        {
            "files": {"corpus.jsonl": "aaaa1111", "qrels/test.tsv": "cd34ee", "qrels/dev.tsv": "9999"},
            "run": {"top_k": 100, "metrics": ("nDCG@10",)},  # a tuple equals the saved JSON list
        }
    )
    assert key.differences(saved) == [
        "qrels/test.tsv changed (sha256 ab12.. -> cd34..)",
        "qrels/dev.tsv added (sha256 9999..)",
    ]
    assert key.differences(key.parts) == []
    assert ResumeKey(dict(saved)).digest != key.digest


@pytest.mark.needs_data
def test_an_unreadable_marker_is_rerun_and_named(
    adi: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "run"
    first = run_experiment(_settings(adi), out)
    marker = out / "results" / "dense.json"
    marker.write_text(marker.read_text()[:100])  # cut short, as by a full disk outside io.py
    caplog.set_level(logging.INFO, logger=RUNNER_LOG)
    second = run_experiment(_settings(adi), out)
    assert [line.split(": ")[0:2] for line in _reruns(caplog)] == [["rerunning dense", str(marker)]]
    assert "not valid JSON" in _reruns(caplog)[0]
    assert second.metrics() == first.metrics()
    assert json.loads(marker.read_text())["result"]["name"] == "dense"


@pytest.mark.needs_data
def test_a_search_default_the_code_sets_is_part_of_the_key(
    adi: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IVF-PQ's default refine_factor is not saved in the store: a result made with another
    default must be rerun, not reused (same store, same config). Like any store part, it
    reruns every retriever of the run."""
    from retrievers.index import ann

    out = tmp_path / "run"
    pq = ["store.vector_index.kind=ivf_pq", "store.vector_index.pq_bits=4", "store.vector_index.nlist=2"]
    settings = _settings(adi, *pq)
    with pytest.warns(UserWarning):  # faiss's k-means warns about a training set this small
        run_experiment(settings, out)
    caplog.set_level(logging.INFO, logger=RUNNER_LOG)
    run_experiment(settings, out)
    assert len(_resumed(caplog)) == 2 and _reruns(caplog) == []
    monkeypatch.setattr(ann, "DEFAULT_REFINE_FACTOR", 3)
    caplog.clear()
    run_experiment(settings, out)
    reason = "store.search_defaults.refine_factor changed (10 -> 3)"
    assert _reruns(caplog) == [f"rerunning bm25: {reason}", f"rerunning dense: {reason}"]
