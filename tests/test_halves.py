"""``dataset.half``: a single run evaluates all of the reported split, or exactly the tune or
holdout half of the seeded partition a sweep uses (viking_eval/splits.py). Runs are tiny (ADI,
TF-IDF, no latency timing); LoCoMo is only loaded, never embedded."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import preflight_error, run_cli
from hydra import compose, initialize_config_dir

from viking_eval.config import ConfigError, Settings, load_settings
from viking_eval.data.splits import load_for_phase, resolve_tune_split, take_half
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
SMOKE = ["experiment=smoke", "run.latency.n_queries=0"]
# the experiments whose tuned rows were chosen on the tune half of the split they report
HOLDOUT_EXPERIMENTS = {
    "multi_strategy_locomo": {"multi_strategy_tuned": "multi_strategy-locomo"},
    "hybrid_locomo": {"hybrid_tuned": "hybrid-locomo"},
    "graph_locomo": {"graph_tuned": "graph-locomo"},
    "hierarchical_locomo": {"hier_tuned": "hierarchical-locomo"},
    "graph_cisi": {"graph_tuned": "graph-cisi"},
}


def _settings(*overrides: str) -> Settings:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return load_settings(compose(config_name="config", overrides=list(overrides)))


def _load(settings: Settings, phase: str) -> Any:
    dataset, _ = load_for_phase(
        settings.dataset.path or settings.dataset.name,
        phase,  # type: ignore[arg-type]
        split=settings.dataset.split,
        tune_split=settings.dataset.tune_split,
        partition_key=settings.dataset.partition_key,
        partition_seed=settings.dataset.partition_seed,
        half=settings.dataset.half,
    )
    return dataset


def _per_query(folder: Path) -> dict[str, dict[str, float]]:
    """retriever -> query id -> nDCG@10 from a run's per_query.csv."""
    values: dict[str, dict[str, float]] = {}
    with open(folder / "per_query.csv") as handle:
        for row in csv.DictReader(handle):
            values.setdefault(row["retriever"], {})[row["query_id"]] = float(row["nDCG@10"])
    return values


@pytest.fixture
def adi_copy(shared_datasets: Path, tmp_path: Path) -> Path:
    """A private copy of ADI (82 documents, 35 judged queries; only test qrels: partitioned)."""
    return Path(shutil.copytree(shared_datasets / "adi", tmp_path / "adi"))


# --------------------------------------------------------------------------- the halves


@pytest.mark.needs_data
@pytest.mark.parametrize(
    ("report", "sweep"),
    [
        # LoCoMo: the family experiments and the sweeps their tuned rows come from
        ("experiment=hybrid_locomo", "experiment=hybrid_sweep_locomo"),
        ("experiment=multi_strategy_locomo", "experiment=multi_strategy_sweep"),
        ("experiment=graph_locomo", "experiment=graph_sweep_locomo"),
        ("experiment=hierarchical_locomo", "experiment=hierarchical_sweep_locomo"),
        ("experiment=graph_cisi", "experiment=graph_sweep"),
        ("experiment=smoke", "experiment=smoke"),  # ADI: a partition by query id
    ],
)
def test_halves_partition_the_split_as_the_sweep_does(
    shared_datasets: Path, monkeypatch: pytest.MonkeyPatch, report: str, sweep: str
) -> None:
    monkeypatch.setenv("VIKING_EVAL_DATA", str(shared_datasets))
    sweep_settings = _settings(sweep)
    everything = _load(_settings(report, "dataset.half=all"), "report")
    tune = _load(_settings(report, "dataset.half=tune"), "report")
    holdout = _load(_settings(report, "dataset.half=holdout"), "report")
    assert set(tune.queries).isdisjoint(holdout.queries)
    assert set(tune.queries) | set(holdout.queries) == set(everything.queries)
    assert tune.queries and holdout.queries
    assert {**tune.qrels, **holdout.qrels} == everything.qrels
    # the same queries, judgments and fingerprint as the sweep's jobs and its best.yaml
    jobs, final = _load(sweep_settings, "tune"), _load(sweep_settings, "final")
    assert list(tune.queries) == list(jobs.queries) and tune.qrels == jobs.qrels
    assert list(holdout.queries) == list(final.queries) and holdout.qrels == final.qrels
    assert (tune.fingerprint, holdout.fingerprint) == (jobs.fingerprint, final.fingerprint)
    assert len({everything.fingerprint, tune.fingerprint, holdout.fingerprint}) == 3
    assert (tune.split, holdout.split) == ("test[tune half]", "test[holdout half]")
    if everything.name == "locomo":  # whole conversations; 853 held-out questions (the tuned files' figure)
        conversations = [{q.metadata["conversation"] for q in d.queries.values()} for d in (tune, holdout)]
        assert conversations[0].isdisjoint(conversations[1])
        assert (len(everything.queries), len(holdout.queries)) == (1981, 853)
    if everything.name == "cisi":
        assert (len(everything.queries), len(holdout.queries)) == (76, 38)


@pytest.mark.needs_data
def test_halves_follow_the_partition_key_and_seed(shared_datasets: Path) -> None:
    dataset = _load(_settings(*SMOKE, f"dataset.path={shared_datasets / 'locomo'}"), "report")
    for key, seed in (("conversation", 0), ("conversation", 3), (None, 0)):
        settings = _settings(
            *SMOKE,
            f"dataset.path={shared_datasets / 'locomo'}",
            f"dataset.partition_key={key if key else 'null'}",
            f"dataset.partition_seed={seed}",
            "dataset.half=holdout",
        )
        expected = take_half(dataset, "holdout", key=key, seed=seed)
        assert list(_load(settings, "report").queries) == list(expected.queries)


# --------------------------------------------------------------------------- a run of one half


@pytest.mark.needs_data
def test_a_holdout_run_scores_only_the_holdout_queries(tmp_path: Path, adi_copy: Path) -> None:
    base = [*SMOKE, f"dataset.path={adi_copy}"]
    everything = run_experiment(_settings(*base), tmp_path / "all")
    holdout_settings = _settings(*base, "dataset.half=holdout")
    summary = run_experiment(holdout_settings, tmp_path / "holdout")
    expected = take_half(_load(_settings(*base), "report"), "holdout", key=None, seed=0)
    assert 0 < len(expected.queries) < len(_load(_settings(*base), "report").queries)
    per_query_all = _per_query(tmp_path / "all")
    per_query = _per_query(tmp_path / "holdout")
    for retriever in ("bm25", "dense"):
        assert set(per_query[retriever]) == set(expected.queries)
        # each held-out query scores what it scores in the run of every query ...
        assert per_query[retriever] == {qid: per_query_all[retriever][qid] for qid in expected.queries}
        # ... and the half's figure is the mean over those queries alone
        mean = sum(per_query[retriever].values()) / len(per_query[retriever])
        assert summary.metrics()[retriever]["nDCG@10"] == pytest.approx(mean, abs=1e-12)
    assert everything.metrics()["bm25"]["nDCG@10"] != summary.metrics()["bm25"]["nDCG@10"]
    # the half is written wherever the dataset is described
    metrics = json.loads((tmp_path / "holdout" / "metrics.json").read_text())
    assert (metrics["split"], metrics["n_queries"]) == ("test[holdout half]", len(expected.queries))
    environment = json.loads((tmp_path / "holdout" / "environment.json").read_text())
    assert environment["dataset_split"] == "test[holdout half]"
    assert environment["dataset_subset"] == "holdout half of a partition by query id, seed 0"
    assert "(test[holdout half])" in (tmp_path / "holdout" / "report.md").read_text().splitlines()[0]


@pytest.mark.needs_data
def test_resume_never_reuses_another_half(tmp_path: Path, adi_copy: Path) -> None:
    base = [*SMOKE, f"dataset.path={adi_copy}", "run.resume=true"]
    folder = tmp_path / "run"
    run_experiment(_settings(*base, "dataset.half=holdout"), folder)
    tune = run_experiment(_settings(*base, "dataset.half=tune"), folder)  # same folder: must rerun
    expected = take_half(_load(_settings(*base), "report"), "tune", key=None, seed=0)
    assert set(_per_query(folder)["bm25"]) == set(expected.queries)
    assert all(result.n_queries == len(expected.queries) for result in tune.results)
    again = run_experiment(_settings(*base, "dataset.half=tune"), folder)  # the same half: reused
    assert [result.metrics for result in again.results] == [result.metrics for result in tune.results]


# --------------------------------------------------------------------------- refusals: one line, exit 2


def test_an_unknown_half_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    line = preflight_error(capsys, *SMOKE, "dataset.half=held_out")
    assert line == "error: dataset.half: must be one of ['all', 'tune', 'holdout'], got 'held_out'"


def test_a_sweep_with_a_half_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    line = preflight_error(capsys, "-m", *SMOKE, "dataset.half=holdout", "run.top_k=10,20")
    assert line.startswith("error: dataset.half: 'holdout' is for a single run;"), line
    assert "set dataset.half=all" in line


@pytest.mark.needs_data
def test_a_half_where_sweeps_tune_on_another_split_is_refused(tmp_path: Path, adi_copy: Path) -> None:
    # a dev qrels file: sweeps tune on dev, so the whole test split is held out and has no halves
    (adi_copy / "qrels" / "dev.tsv").write_text((adi_copy / "qrels" / "test.tsv").read_text())
    assert resolve_tune_split(adi_copy, "test", "auto") == "dev"
    out = tmp_path / "run"
    done = run_cli(*SMOKE, f"dataset.path={adi_copy}", "dataset.half=holdout", f"hydra.run.dir={out}")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("error: dataset.half: 'holdout': ")
    assert "resolves to 'dev'" in errors[0] and "set dataset.half=all" in errors[0]
    assert not (out / "metrics.json").exists()
    # explicitly partitioned, the same data has halves
    with pytest.raises(ConfigError, match=r"^dataset\.half: .tune.: "):
        _load(_settings(*SMOKE, f"dataset.path={adi_copy}", "dataset.half=tune"), "report")
    settings = _settings(
        *SMOKE, f"dataset.path={adi_copy}", "dataset.half=tune", "dataset.tune_split=partition"
    )
    assert _load(settings, "report").split == "test[tune half]"


# --------------------------------------------------------------------------- the experiments


@pytest.mark.parametrize("experiment", sorted(HOLDOUT_EXPERIMENTS))
def test_experiments_with_rows_tuned_on_a_half_report_the_other_half(experiment: str) -> None:
    settings = _settings(f"experiment={experiment}")
    assert settings.dataset.half == "holdout"
    by_name = {spec.name: spec for spec in settings.retrievers}
    for row, tuned_name in HOLDOUT_EXPERIMENTS[experiment].items():
        tuned = yaml.safe_load((REPO / "experiments" / "tuned" / f"{tuned_name}.yaml").read_text())
        assert tuned["provenance"]["tuned_on"]["split"] == "test[tune half]"
        assert tuned["provenance"]["dataset"] == settings.dataset.name
        # the row is the tuned file's configuration, parameter for parameter
        params = by_name[row].params
        for key, value in tuned["retriever"]["params"].items():
            got = params.get(key)
            got = list(got) if isinstance(got, tuple) else got
            assert got == value or (isinstance(value, float) and got == pytest.approx(value)), (row, key)


def test_every_tuned_row_on_a_partitioned_split_is_reported_on_its_holdout_half() -> None:
    """Any experiment holding a row exported from a tuned file whose tuning split was half of the
    reported split evaluates the held-out half (a new experiment cannot forget it)."""
    tuned_on_half = set()
    for path in sorted((REPO / "experiments" / "tuned").glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        if "half]" in document["provenance"]["tuned_on"]["split"]:
            tuned_on_half.add(path.stem)
    assert tuned_on_half == {value for rows in HOLDOUT_EXPERIMENTS.values() for value in rows.values()}
    for path in sorted((REPO / "conf" / "experiment").glob("*.yaml")):
        text = path.read_text()
        if (
            any(f"experiments/tuned/{name}.yaml" in text for name in tuned_on_half)
            and "sweep" not in path.stem
        ):
            assert path.stem in HOLDOUT_EXPERIMENTS, path.stem
