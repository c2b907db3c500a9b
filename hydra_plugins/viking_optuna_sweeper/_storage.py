"""The study's storage (``hydra.sweeper.storage``): which URLs it takes, the connection checked
before any trial runs, Optuna's RDBStorage with its heartbeat, and the study lock that lets
several worker processes share one study.

- ``sqlite:///<file>``: one machine (the default for a resumable study); several workers on that
  machine share the file, and the lock is a file lock beside it (``<file>.lock``).
- ``postgresql+psycopg://user:password@host:port/database`` (psycopg 3): workers on several
  machines; the lock is a PostgreSQL advisory lock keyed by the study's name.

Any other scheme is a SweeperConfigError naming the setting, before any trial runs; so is a
server that refuses the connection (the URL is shown without its password).

Named with a leading "_" so that Hydra's plugin scan leaves it alone (see _errors.py); Optuna and
SQLAlchemy are imported inside the functions, when a study runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra_plugins.viking_optuna_sweeper._errors import SweeperConfigError
from hydra_plugins.viking_optuna_sweeper._results import redacted_storage

if TYPE_CHECKING:
    import optuna

SCHEMES = ("sqlite", "postgresql")
POSTGRES_CONNECT_TIMEOUT = 10  # seconds, unless the URL sets connect_timeout
_KEY = "hydra.sweeper.storage"


def storage_dialect(url: str) -> str:
    """``sqlite`` or ``postgresql`` for a URL the sweeper takes; SweeperConfigError otherwise."""
    scheme, separator, _ = url.partition("://")
    dialect, _, driver = scheme.partition("+")
    if not separator or dialect not in SCHEMES:
        raise SweeperConfigError(
            f"{_KEY} {redacted_storage(url)!r}: unknown scheme {scheme!r}; write sqlite:///<file> "
            "(workers on one machine) or postgresql+psycopg://<user>:<password>@<host>:<port>/<database> "
            "(workers on several machines)",
            key=_KEY,
        )
    if dialect == "postgresql":
        wanted = {"": "psycopg2", "psycopg2": "psycopg2", "psycopg": "psycopg"}.get(driver)
        if wanted is None:
            raise SweeperConfigError(
                f"{_KEY} {redacted_storage(url)!r}: unknown PostgreSQL driver {driver!r}; write "
                "postgresql+psycopg://... (psycopg 3)",
                key=_KEY,
            )
        if importlib.util.find_spec(wanted) is None:
            raise SweeperConfigError(
                f"{_KEY} {redacted_storage(url)!r}: the {wanted} driver is not installed; write "
                "postgresql+psycopg://... (psycopg 3, pip install 'viking-eval[cluster]')",
                key=_KEY,
            )
    return dialect


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (None for an in-memory database)."""
    path = url.partition("://")[2].removeprefix("/").partition("?")[0]
    return None if path in ("", ":memory:") else Path(path)


def _engine_kwargs(url: str) -> dict[str, Any]:
    if storage_dialect(url) == "postgresql" and "connect_timeout" not in url:
        return {"connect_args": {"connect_timeout": POSTGRES_CONNECT_TIMEOUT}}
    return {}


def _refused(url: str, error: BaseException) -> SweeperConfigError:
    reason = str(getattr(error, "orig", None) or error).strip().splitlines()
    return SweeperConfigError(
        f"{_KEY}: cannot connect to {redacted_storage(url)}: {reason[0] if reason else type(error).__name__}",
        key=_KEY,
    )


def check_storage(url: str | None) -> None:
    """The storage URL's scheme, and for a server a connection (made and closed), before any
    trial runs: a refused connection is a SweeperConfigError naming the URL without its
    password. An SQLite file is not created here (the study creates it)."""
    if url is None or storage_dialect(url) == "sqlite":
        return
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool, **_engine_kwargs(url))
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT 1"))
    except sqlalchemy.exc.SQLAlchemyError as error:
        raise _refused(url, error) from None
    finally:
        engine.dispose()


def open_storage(
    url: str, heartbeat_interval: int | None, grace_period: int | None, retry_killed: int
) -> optuna.storages.RDBStorage:
    """Optuna's RDBStorage for ``url`` with its heartbeat (a trial whose worker stops beating for
    ``grace_period`` seconds is failed, then run again up to ``retry_killed`` times by Optuna's
    retry callback, _storage.retry_callback)."""
    import optuna
    import sqlalchemy

    storage_dialect(url)
    path = sqlite_path(url) if url.startswith("sqlite") else None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    callback: dict[str, Any] = {}
    if retry_killed:  # the callback's keyword was renamed in Optuna 4.9 (failed_trial_callback before)
        renamed = hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback")
        keyword = "heartbeat_stale_trial_callback" if renamed else "failed_trial_callback"
        callback[keyword] = retry_callback(retry_killed)
    try:
        # RDBStorage creates Optuna's tables in a new database: workers of different studies
        # starting at once would race there (the study lock is per study), so one at a time
        with _schema_lock(url), warnings.catch_warnings():  # the heartbeat: "experimental" since 2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=_engine_kwargs(url),
                heartbeat_interval=heartbeat_interval,
                grace_period=grace_period,
                **callback,
            )
    except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as error:
        raise _refused(url, error) from None


#: the PostgreSQL advisory lock held while Optuna's tables are created (any study of the database)
SCHEMA_LOCK_KEY = int.from_bytes(hashlib.sha256(b"viking_optuna schema").digest()[:8], "big", signed=True)


@contextlib.contextmanager
def _schema_lock(url: str) -> Iterator[None]:
    """For a PostgreSQL URL, the database-wide advisory lock :data:`SCHEMA_LOCK_KEY` held in the
    block (two sessions creating Optuna's tables at once fail on PostgreSQL's catalog: ``duplicate
    key value violates unique constraint "pg_type_typname_nsp_index"``); nothing for SQLite, whose
    workers already share one file lock (StudyLock)."""
    if storage_dialect(url) != "postgresql":
        yield
        return
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool, **_engine_kwargs(url))
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
            try:
                yield
            finally:
                connection.execute(
                    sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK_KEY}
                )
                connection.commit()
    finally:
        engine.dispose()


def retry_callback(max_retry: int) -> Callable[[optuna.Study, optuna.trial.FrozenTrial], None]:
    """Optuna's callback that enqueues a failed trial again (same parameters, ``failed_trial``
    and ``retry_history`` system attributes) at most ``max_retry`` times:
    RetryHeartbeatStaleTrialCallback (Optuna >= 4.9), RetryFailedTrialCallback before."""
    import optuna

    with warnings.catch_warnings():  # "experimental" since Optuna 2.8, and still the way to do it
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if hasattr(optuna.storages, "RetryHeartbeatStaleTrialCallback"):
            return optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=max_retry)
        return optuna.storages.RetryFailedTrialCallback(max_retry=max_retry)


class StudyLock:
    """One worker at a time between the study's count of trials and its ``ask`` (and while it
    fails trials of dead workers, or claims the results), so that N workers never ask more than
    ``n_trials``: a file lock beside an SQLite database, a PostgreSQL advisory lock keyed by the
    study's name, nothing for an in-memory study (one process)."""

    def __init__(self, url: str | None, study_name: str) -> None:
        self.url = url
        self.key = int.from_bytes(
            hashlib.sha256(f"viking_optuna:{study_name}".encode()).digest()[:8], "big", signed=True
        )
        self._engine: Any = None
        self.dialect = None if url is None else storage_dialect(url)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        if self.url is None:
            yield
            return
        if self.dialect == "sqlite":
            path = sqlite_path(self.url)
            if path is None:
                yield
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(f"{path}.lock", "a+b") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            return
        import sqlalchemy

        if self._engine is None:
            self._engine = sqlalchemy.create_engine(
                self.url, poolclass=sqlalchemy.pool.NullPool, **_engine_kwargs(self.url)
            )
        with self._engine.connect() as connection:
            connection.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": self.key})
            try:
                yield
            finally:
                connection.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
                connection.commit()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
