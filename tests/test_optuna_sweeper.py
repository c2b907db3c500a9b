"""The viking_optuna Hydra sweeper (hydra_plugins/viking_optuna_sweeper): search-space parsing,
objectives, bad input, and real studies on ADI (BM25 + TF-IDF, well under a second per trial):
TPE, resuming from SQLite, failed trials, NSGA-II's Pareto front, and sweeps through the joblib
and submitit_local launchers."""

from __future__ import annotations

import csv
import json
import math
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from conftest import preflight_error, smoke_multirun
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

import viking_eval.config  # noqa: F401  registers the root schema conf/config.yaml names
from hydra_plugins.viking_optuna_sweeper._errors import ObjectiveError, SweeperConfigError
from hydra_plugins.viking_optuna_sweeper._objectives import objective_values
from hydra_plugins.viking_optuna_sweeper._space import search_space
from hydra_plugins.viking_optuna_sweeper._study import OptunaSweeperImpl

SPREAD_OVER_WORKERS = True  # tests/conftest.py: independent tests, each to the next free worker

REPO = Path(__file__).resolve().parents[1]


def _multirun(sweep_dir: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """The smoke multirun (ADI, BM25 + TF-IDF) into sweep_dir, latency timed on 5 queries."""
    return smoke_multirun(sweep_dir, "run.latency.n_queries=5", *overrides, timeout=timeout)


def _job_dirs(sweep_dir: Path) -> list[str]:
    return sorted((path.name for path in sweep_dir.iterdir() if path.name.isdigit()), key=int)


def _bm25(job_dir: Path) -> dict[str, Any]:
    return json.loads((job_dir / "metrics.json").read_text())["retrievers"]["bm25"]


def _job_overrides(job_dir: Path) -> dict[str, str]:
    lines = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
    return dict(line.split("=", 1) for line in lines)


def _results(sweep_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())


def _sweep_rows(sweep_dir: Path) -> list[dict[str, str]]:
    with open(sweep_dir / "sweep.csv") as handle:
        return list(csv.DictReader(handle))


# --- search space and objectives (in process) ---------------------------------------------------


def test_search_space_follows_the_override_syntax() -> None:
    params = {
        "a": "interval(0, 1)",
        "b": "int(interval(1, 100))",
        "c": "tag(log, interval(0.001, 1))",
        "d": "choice(x, y)",
        "e": "range(1, 10, 2)",
        "f": 3,
        "g": "interval(0, 5)",
    }
    arguments = ["experiment=smoke", "d=p,q,r", "g=0.5", "h=choice(true, false)"]
    space, fixed = search_space(params, arguments, OverridesParser.create(), grid=False)
    distributions = {param.key: param.distribution for param in space}
    assert distributions == {
        "a": FloatDistribution(0.0, 1.0),
        "b": IntDistribution(1, 100),
        "c": FloatDistribution(0.001, 1.0, log=True),
        "d": CategoricalDistribution(["p", "q", "r"]),  # the command line replaces the config's choice
        "e": IntDistribution(1, 9, step=2),  # Hydra's range: the stop is excluded
        "h": CategoricalDistribution([True, False]),
    }
    # plain values pass through to every trial; a fixed g on the command line beats the config's range
    assert fixed == ["experiment=smoke", "g=0.5", "f=3"]


def test_grid_takes_choices_and_ranges_and_names_an_interval() -> None:
    parser = OverridesParser.create()
    space, _ = search_space({"k": "range(0, 1, 0.25)", "m": "choice(a, b)"}, [], parser, grid=True)
    assert {param.key: param.grid_values for param in space} == {"k": (0.0, 0.25, 0.5, 0.75), "m": ("a", "b")}
    with pytest.raises(SweeperConfigError, match=r"store\.bm25\.k1=interval\(0.3, 2\): the grid sampler"):
        search_space({"store.bm25.k1": "interval(0.3, 2)"}, [], parser, grid=True)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("x=interval(1, 1)", r"x=interval\(1, 1\): empty interval"),
        ("x=interval(2, 1)", r"x=interval\(2, 1\): empty interval"),
        ("x=range(5, 1)", r"x=range\(5, 1\): empty range"),
        ("x=tag(log, interval(0, 1))", r"log-scale interval needs low > 0"),
        ("x=choice()", r"cannot parse 'x=choice\(\)'.*empty choice"),
    ],
)
def test_empty_or_bad_ranges_are_errors_naming_the_parameter(line: str, message: str) -> None:
    key, value = line.split("=", 1)
    with pytest.raises(SweeperConfigError, match=message):
        search_space({key: value}, [], OverridesParser.create(), grid=False)


def test_no_search_space_and_non_string_params_are_errors() -> None:
    parser = OverridesParser.create()
    with pytest.raises(SweeperConfigError, match="no search space"):
        search_space({}, ["experiment=smoke"], parser, grid=False)
    with pytest.raises(
        SweeperConfigError, match=r"hydra\.sweeper\.params\.x: write the search space as a string"
    ):
        search_space({"x": [1, 2]}, [], parser, grid=False)


def test_objective_values_read_the_returned_dict() -> None:
    returned = {"bm25": {"nDCG@10": 0.5, "latency.p95_ms": 2}, "dense": {"latency": {"p95_ms": 3.5}}}
    assert objective_values(returned, ["bm25.nDCG@10", "bm25.latency.p95_ms"]) == [0.5, 2.0]
    assert objective_values(returned, ["dense.latency.p95_ms"]) == [3.5]
    assert objective_values(0.25, ["anything"]) == [0.25]  # a task that returns a number
    with pytest.raises(ObjectiveError, match=r"'bm25\.R@10' is not in .*'bm25\.nDCG@10'"):
        objective_values(returned, ["bm25.R@10"])
    for bad in (math.nan, math.inf, -math.inf, None, "0.5", True):
        with pytest.raises(ObjectiveError):
            objective_values({"bm25": {"nDCG@10": bad}}, ["bm25.nDCG@10"])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"sampler": "annealing"}, r"unknown sampler 'annealing'"),
        ({"direction": ["maximize", "minimize"]}, r"2 entries .* for 1 objectives"),
        ({"direction": "up"}, r"'up' is not one of"),
        (
            {"objective": ["bm25.nDCG@10", "bm25.latency.p95_ms"], "direction": "maximize"},
            r"1 entries .* for 2",
        ),
        (
            {"objective": ["a.x", "a.y"], "direction": ["maximize", "minimize"], "sampler": "cmaes"},
            "cmaes optimises a single objective",
        ),
        ({"objective": None}, "objective is required"),
        ({"n_trials": 0}, r"n_trials must be an integer >= 1, got 0"),
    ],
)
def test_bad_sweeper_settings_are_errors(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(SweeperConfigError, match=message):
        OptunaSweeperImpl(**{"objective": "bm25.nDCG@10", **settings})


def test_plugin_is_found_and_hydra_plugins_stays_a_namespace_package() -> None:
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    assert not (REPO / "hydra_plugins" / "__init__.py").exists()
    names = [plugin.__name__ for plugin in Plugins.instance().discover(Sweeper)]
    assert "VikingOptunaSweeper" in names
    assert "viking_optuna.yaml" in ConfigStore.instance().list("hydra/sweeper")


# each search space with an experiment it is written for
SEARCH_SPACE_EXPERIMENTS = {
    "bm25_optuna": "smoke",
    "hierarchical_optuna": "hierarchical_sweep",
    "hierarchical_quality_latency": "hierarchical_sweep",
    "graph_optuna": "graph_sweep",
    "multi_strategy_optuna": "multi_strategy_locomo",
    "hybrid_optuna": "hybrid_scifact",
}


def test_every_search_space_file_is_checked() -> None:
    files = {path.stem for path in (REPO / "conf" / "hparams_search").glob("*.yaml")}
    assert files == set(SEARCH_SPACE_EXPERIMENTS)


@pytest.mark.parametrize(("search", "experiment"), sorted(SEARCH_SPACE_EXPERIMENTS.items()))
def test_search_space_files_compose_with_their_experiment(search: str, experiment: str) -> None:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[f"experiment={experiment}", f"hparams_search={search}"],
            return_hydra_config=True,
        )
    sweeper = instantiate(cfg.hydra.sweeper).sweeper
    space, _ = search_space(sweeper.params, [], OverridesParser.create(), grid=sweeper.sampler_name == "grid")
    missing = object()
    for param in space:  # every swept key exists in the experiment's config, so its override applies
        assert OmegaConf.select(cfg, param.key, default=missing) is not missing, param.key
    for objective in sweeper.objectives:  # and the objective names one of its retrievers
        assert objective.split(".", 1)[0] in cfg.retrievers, objective
    assert cfg.sweep.objective == sweeper.objectives[0]  # best.yaml picks by the same value


# --- studies end to end (the whole command line, ADI) ---------------------------------------------


@pytest.mark.needs_data
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["hparams_search=bm25_optuna", "store.bm25.k1=interval(1,1)"],
            "store.bm25.k1=interval(1,1): empty interval",
        ),
        (["hparams_search=bm25_optuna", "hydra.sweeper.sampler=annealing"], "unknown sampler 'annealing'"),
        (
            ["hparams_search=bm25_optuna", "hydra.sweeper.direction=[maximize,minimize]"],
            "give one direction per objective",
        ),
        (
            ["hparams_search=bm25_optuna", "store.bm25.kk=interval(0,1)"],
            "store.bm25.kk is not in the config",
        ),
    ],
)
def test_bad_input_stops_before_any_trial(
    data_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str], message: str
) -> None:
    """Refused by the command line's pre-flight (called alone; tests/test_cli.py runs the whole
    command line): one line, exit status 2, no job folder."""
    argv = ["-m", "experiment=smoke", f"hydra.sweep.dir={tmp_path}", "run.latency.n_queries=5", *overrides]
    assert message in preflight_error(capsys, *argv)
    assert _job_dirs(tmp_path) == []
    assert not (tmp_path / "optimization_results.yaml").exists()


@pytest.mark.slow
@pytest.mark.needs_data
def test_tpe_study_reports_the_best_trial_folder(data_env: Path, tmp_path: Path) -> None:
    done = _multirun(
        tmp_path, "hparams_search=bm25_optuna", "hydra.sweeper.n_trials=6", "hydra.sweeper.seed=1"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _job_dirs(tmp_path) == ["0", "1", "2", "3", "4", "5"]
    values = {job: _bm25(tmp_path / job)["metrics"]["nDCG@10"] for job in _job_dirs(tmp_path)}
    points = {job: _job_overrides(tmp_path / job) for job in values}
    assert len({(p["store.bm25.k1"], p["store.bm25.b"]) for p in points.values()}) == 6
    for point in points.values():  # sampled inside the intervals of bm25_optuna.yaml
        assert 0.3 <= float(point["store.bm25.k1"]) <= 2.0 and 0.0 <= float(point["store.bm25.b"]) <= 1.0
    assert len(set(values.values())) > 1  # k1 and b move BM25's nDCG@10: the study has a signal
    results = _results(tmp_path)
    assert results["trials"] == {"total": 6, "complete": 6}
    assert results["best_value"] == max(values.values())
    best = str(results["best_trial"])
    assert values[best] == results["best_value"]
    assert results["best_job_dir"] == str(tmp_path / best)
    assert {key: float(value) for key, value in results["best_params"].items()} == {
        key: float(points[best][key]) for key in ("store.bm25.k1", "store.bm25.b")
    }
    assert "optimization results" in done.stdout and f"best_value: {results['best_value']}" in done.stdout
    assert len(_sweep_rows(tmp_path)) == 6 * 2  # the sweep summary sees every trial, both retrievers
    chosen = yaml.safe_load((tmp_path / "best.yaml").read_text())  # best.yaml picks by the same objective
    assert chosen["objective"] == "bm25.nDCG@10"
    assert chosen["tuned_on"]["value"] == results["best_value"]


@pytest.mark.slow
@pytest.mark.needs_data
def test_resumed_study_runs_only_the_missing_trials(data_env: Path, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    storage = f"sqlite:///{tmp_path / 'db' / 'optuna.db'}"
    study = ["hparams_search=bm25_optuna", "sweep.evaluate_best=false", f"hydra.sweeper.storage={storage}"]
    study.append("hydra.sweeper.study_name=resume_test")
    first = _multirun(sweep_dir, *study, "hydra.sweeper.n_trials=3")
    assert first.returncode == 0, first.stderr[-3000:]
    assert _job_dirs(sweep_dir) == ["0", "1", "2"]
    written = {job: (sweep_dir / job / "metrics.json").stat().st_mtime_ns for job in _job_dirs(sweep_dir)}

    second = _multirun(sweep_dir, *study, "hydra.sweeper.n_trials=5")
    assert second.returncode == 0, second.stderr[-3000:]
    assert _job_dirs(sweep_dir) == ["0", "1", "2", "3", "4"]  # exactly two new trials
    assert {job: (sweep_dir / job / "metrics.json").stat().st_mtime_ns for job in written} == written
    loaded = optuna.load_study(study_name="resume_test", storage=storage)
    assert [trial.state for trial in loaded.trials] == [TrialState.COMPLETE] * 5
    # the resumed sampler does not draw the first run's points again
    assert len({tuple(sorted(trial.params.items())) for trial in loaded.trials}) == 5
    assert _results(sweep_dir)["trials"] == {"total": 5, "complete": 5}

    # a process killed mid-trial leaves it RUNNING: the next run marks it failed and goes on
    stale = loaded.ask()
    assert stale.number == 5
    third = _multirun(sweep_dir, *study, "hydra.sweeper.n_trials=7")
    assert third.returncode == 0, third.stderr[-3000:]
    states = [trial.state for trial in optuna.load_study(study_name="resume_test", storage=storage).trials]
    assert states == [TrialState.COMPLETE] * 5 + [TrialState.FAIL, TrialState.COMPLETE]
    assert _job_dirs(sweep_dir) == ["0", "1", "2", "3", "4", "6"]
    assert "trial 5 was left running" in third.stderr + third.stdout


@pytest.mark.slow
@pytest.mark.needs_data
def test_failed_trials_are_marked_and_the_study_completes(data_env: Path, tmp_path: Path) -> None:
    # split 'nosplit' has no qrels: the job stops with a data error (sys.exit(2)); the grid runs both
    # points. (A value the config refuses, such as b = 2.0, never gets this far: the CLI's pre-flight
    # checks every choice of the search space before the study starts.)
    sweep_dir = tmp_path / "exit"
    done = _multirun(
        sweep_dir,
        "hydra/sweeper=viking_optuna",
        "hydra.sweeper.objective=bm25.nDCG@10",
        "hydra.sweeper.sampler=grid",
        "dataset.split=choice(nosplit,test)",
        "store.bm25.k1=0.9",
        "sweep.evaluate_best=false",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = _results(sweep_dir)
    assert results["trials"] == {"total": 2, "complete": 1, "fail": 1}
    failed = next(
        job for job in _job_dirs(sweep_dir) if _job_overrides(sweep_dir / job)["dataset.split"] == "nosplit"
    )
    passed = next(job for job in _job_dirs(sweep_dir) if job != failed)
    assert not (sweep_dir / failed / "metrics.json").exists()
    assert results["best_trial"] == int(passed)
    assert results["best_value"] == _bm25(sweep_dir / passed)["metrics"]["nDCG@10"]
    log = done.stderr + done.stdout
    assert f"trial {failed} failed (overrides [" in log and "'dataset.split=nosplit'" in log
    assert "JobExitError: the job exited with status 2" in log

    # a job that finishes without the objective (no latency measured) fails too; nothing is best
    sweep_dir = tmp_path / "missing"
    done = _multirun(
        sweep_dir,
        "hydra/sweeper=viking_optuna",
        "hydra.sweeper.objective=bm25.latency.p95_ms",
        "hydra.sweeper.direction=minimize",
        "hydra.sweeper.sampler=grid",
        "store.bm25.k1=0.9,1.2",
        "run.latency.n_queries=0",
        "sweep.evaluate_best=false",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = _results(sweep_dir)
    assert results["trials"] == {"total": 2, "fail": 2} and results["best"] is None
    assert all((sweep_dir / job / "metrics.json").is_file() for job in ("0", "1"))
    assert "objective 'bm25.latency.p95_ms' is not in the job's return value" in done.stderr + done.stdout


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """(nDCG up, latency down): a is at least as good in both and better in one."""
    return a[0] >= b[0] and a[1] <= b[1] and a != b


@pytest.mark.slow
@pytest.mark.needs_data
def test_nsga2_writes_the_pareto_front_of_quality_and_latency(data_env: Path, tmp_path: Path) -> None:
    done = _multirun(
        tmp_path,
        "hparams_search=bm25_optuna",
        "hydra.sweeper.objective=[bm25.nDCG@10,bm25.latency.p95_ms]",
        "hydra.sweeper.direction=[maximize,minimize]",
        "hydra.sweeper.sampler=nsgaii",
        "+hydra.sweeper.sampler_kwargs.population_size=4",
        "hydra.sweeper.n_trials=6",
        "sweep.evaluate_best=false",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    points = {}
    for job in _job_dirs(tmp_path):
        bm25 = _bm25(tmp_path / job)
        points[int(job)] = (bm25["metrics"]["nDCG@10"], bm25["latency"]["p95_ms"])
    assert sorted(points) == list(range(6))
    results = _results(tmp_path)
    assert results["objective"] == ["bm25.nDCG@10", "bm25.latency.p95_ms"]
    front = {entry["trial"]: entry for entry in results["pareto_front"]}
    assert front
    for number, entry in front.items():  # the values told are the job's own figures
        assert (entry["values"]["bm25.nDCG@10"], entry["values"]["bm25.latency.p95_ms"]) == points[number]
        assert entry["job_dir"] == str(tmp_path / str(number))
    # the front is exactly the trials no other trial dominates
    expected = {n for n, p in points.items() if not any(_dominates(q, p) for q in points.values())}
    assert set(front) == expected


# --- launchers ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.needs_data
def test_optuna_batches_through_the_joblib_launcher(data_env: Path, tmp_path: Path) -> None:
    # four grid points, two trials per batch in two worker processes; split nosplit exits in a worker
    done = _multirun(
        tmp_path,
        "hydra/sweeper=viking_optuna",
        "hydra.sweeper.objective=bm25.nDCG@10",
        "hydra.sweeper.sampler=grid",
        "hydra.sweeper.n_jobs=2",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "store.bm25.k1=0.9,1.2",
        "dataset.split=choice(test,nosplit)",
        "sweep.evaluate_best=false",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _job_dirs(tmp_path) == ["0", "1", "2", "3"]
    results = _results(tmp_path)
    assert results["trials"] == {"total": 4, "complete": 2, "fail": 2}
    grid = {
        (_job_overrides(tmp_path / job)["store.bm25.k1"], _job_overrides(tmp_path / job)["dataset.split"])
        for job in _job_dirs(tmp_path)
    }
    assert grid == {("0.9", "test"), ("0.9", "nosplit"), ("1.2", "test"), ("1.2", "nosplit")}
    finished = {job for job in _job_dirs(tmp_path) if (tmp_path / job / "metrics.json").is_file()}
    assert {_job_overrides(tmp_path / job)["dataset.split"] for job in finished} == {"test"}
    # each trial was told the value of its own folder
    best = max(finished, key=lambda job: _bm25(tmp_path / job)["metrics"]["nDCG@10"])
    assert results["best_trial"] == int(best)
    assert results["best_value"] == _bm25(tmp_path / best)["metrics"]["nDCG@10"]


@pytest.mark.slow
@pytest.mark.needs_data
@pytest.mark.parametrize(
    "launcher",
    [
        ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
        ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"],
    ],
    ids=["joblib", "submitit_local"],
)
def test_four_point_sweep_through_a_parallel_launcher(
    data_env: Path, tmp_path: Path, launcher: list[str]
) -> None:
    done = _multirun(
        tmp_path, *launcher, "store.bm25.k1=0.6,0.9,1.2,1.5", "sweep.evaluate_best=false", timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _job_dirs(tmp_path) == ["0", "1", "2", "3"]
    for job in _job_dirs(tmp_path):
        assert (tmp_path / job / "metrics.json").is_file()
    rows = _sweep_rows(tmp_path)
    assert [(row["job"], row["store.bm25.k1"], row["retriever"]) for row in rows] == [
        (str(job), k1, retriever)
        for job, k1 in enumerate(["0.6", "0.9", "1.2", "1.5"])
        for retriever in ("bm25", "dense")
    ]
    bm25 = [row["nDCG@10"] for row in rows if row["retriever"] == "bm25"]
    assert len(set(bm25)) > 1  # each job ran its own k1


@pytest.mark.needs_data
def test_a_choice_the_config_refuses_stops_the_study_before_any_trial(data_env: Path, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "study"
    done = _multirun(
        sweep_dir,
        "hydra/sweeper=viking_optuna",
        "hydra.sweeper.objective=bm25.nDCG@10",
        "hydra.sweeper.sampler=grid",
        "store.bm25.b=choice(0.4,2.0)",
        "sweep.evaluate_best=false",
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: store.bm25.b: must be a number in [0, 1], got 2.0 (choice store.bm25.b=2.0 of the search space)"
    )
    assert not sweep_dir.exists()
