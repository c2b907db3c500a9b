"""Jobs as Ray tasks (``hydra/launcher=ray``, docs/cluster.md): connecting to a cluster, checking
that its nodes can run the project, and gathering the tasks' results with one ``error:`` line for
what goes wrong on the cluster.

Ray is imported only here and only when a command asks for it (the ``cluster`` extra); the main
command never imports it. Used by the Hydra launcher (hydra_plugins/viking_ray_launcher) for
sweep jobs and by the benchmark and the gate for their runs (:func:`run_all`).

    connect(init)   a TCP probe of ``address`` first (Ray itself waits minutes for a cluster
                    that is not there), then ``ray.init``; no cluster: one line, exit 2
    check_nodes()   one task pinned to every alive node imports the project; a node without
                    it: one line, exit 2, before any job runs
    gather(refs)    every task's result, in order; a task lost with its node or worker (not
                    retried: ``max_retries`` 0 by default) is reported in one line after the
                    other tasks finish, exit 1; what finished stays finished (its run folder)
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from viking_eval.exits import EXIT_FAILED, invalid

#: the launcher preset's target (conf/hydra/launcher/ray.yaml)
RAY_LAUNCHER = "hydra_plugins.viking_ray_launcher.launcher.VikingRayLauncher"
#: variables of the driver that every job sees too (data folders, cache, offline switches)
FORWARDED_ENV = ("VIKING_EVAL_", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "XDG_DATA_HOME")
_PROBE_SECONDS = 5.0
#: the variables a BLAS library reads for its thread count when it is loaded (set for each job)
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class RayOptions:
    """``hydra.launcher.ray``: ``init`` goes to ``ray.init``, ``remote`` to each task's options."""

    init: Mapping[str, Any] = field(default_factory=dict)
    remote: Mapping[str, Any] = field(default_factory=dict)


def ray_options(launcher: Any) -> RayOptions | None:
    """The Ray settings of a composed ``hydra.launcher`` node, None when the launcher is not Ray."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(launcher, DictConfig) or str(launcher.get("_target_", "")) != RAY_LAUNCHER:
        return None
    plain = OmegaConf.to_container(launcher.get("ray") or {}, resolve=True)
    node = plain if isinstance(plain, dict) else {}
    init, remote = node.get("init") or {}, node.get("remote") or {}
    return RayOptions(
        init={str(k): v for k, v in init.items()}, remote={str(k): v for k, v in remote.items()}
    )


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        invalid(
            "hydra/launcher=ray: Ray is not installed; install the cluster extra "
            "(pip install -c constraints-local.txt -e '.[cluster]') on this machine and every node"
        )
    return ray


def _reachable(address: str) -> str | None:
    """None when something accepts a TCP connection at ``host:port``, else why not."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return f"{address!r} is not host:port"
    try:
        with socket.create_connection((host, int(port)), timeout=_PROBE_SECONDS):
            return None
    except OSError as error:
        return error.strerror or str(error)


def connect(init: Mapping[str, Any]) -> Any:
    """``ray.init(**init)`` (once per process); returns the ``ray`` module. ``address`` null (or
    unset) starts a Ray on this machine (or joins ``RAY_ADDRESS``), ``auto`` the cluster started
    here by ``ray start``, ``host:port`` a cluster's head. No cluster there: one line, exit 2."""
    ray = _import_ray()
    if ray.is_initialized():
        return ray
    kwargs = {key: value for key, value in init.items() if value is not None}
    address = kwargs.get("address")
    kwargs.setdefault("logging_level", "WARNING")
    kwargs.setdefault("log_to_driver", True)
    where = "hydra.launcher.ray.init.address"
    if isinstance(address, str) and address not in ("auto", "local") and "://" not in address:
        why = _reachable(address)
        if why is not None:
            invalid(
                f"{where}: no Ray cluster at {address} ({why}); start one with `ray start --head --port "
                f"<port>` and give its host:port, or {where}=null to start Ray on this machine"
            )
    try:
        ray.init(**kwargs)
    except (ConnectionError, ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        invalid(f"{where}: cannot connect to Ray at {address or '(a new local instance)'}: {first}")
    return ray


def _probe() -> str:
    """Runs on a node: the project's location there (an import error when it has none)."""
    from viking_eval import exits

    return str(exits.__file__)


def check_nodes(ray: Any) -> int:
    """Run :func:`_probe` on every alive node; returns the number of nodes. A node where the
    project does not import: one line naming it, exit 2 (no job has run)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [node for node in ray.nodes() if node.get("Alive")]
    probe = ray.remote(num_cpus=0, max_retries=0)(_probe)
    refs = [
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote()
        for node in nodes
    ]
    for node, ref in zip(nodes, refs, strict=True):
        try:
            ray.get(ref)
        except Exception as error:
            invalid(
                f"ray: node {node.get('NodeManagerAddress')} cannot run the project ({_first_line(error)}); "
                "install viking-eval[cluster] on every node, with the same code and Python as this one"
            )
    return len(nodes)


def _first_line(error: BaseException) -> str:
    """The innermost reason of a Ray error, one line (``No module named 'viking_eval'``)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        return _first_line(cause)
    text = str(error).strip()
    for line in reversed(text.splitlines()):  # a RayTaskError's text ends with the exception
        if "Error" in line or "error" in line:
            return line.strip()
    return text.splitlines()[0] if text else type(error).__name__


@contextmanager
def job_environment(cwd: str, env: Mapping[str, str]) -> Iterator[None]:
    """In a task: the driver's working folder (relative paths of the config mean the same) and
    its forwarded variables, put back afterwards (a Ray worker runs many tasks)."""
    before_cwd = os.getcwd()
    before_env = {key: os.environ.get(key) for key in env}
    if os.path.isdir(cwd):
        os.chdir(cwd)
    os.environ.update(env)
    try:
        yield
    finally:
        os.chdir(before_cwd)
        for key, value in before_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def driver_environment() -> dict[str, str]:
    """The driver's variables each job gets (:data:`FORWARDED_ENV`)."""
    return {key: value for key, value in os.environ.items() if key.startswith(FORWARDED_ENV)}


@dataclass(frozen=True)
class Exited:
    """A job that ended with ``sys.exit(code)`` (its ``error:`` line is on the worker's stderr,
    which Ray forwards)."""

    code: int


def driver_threads() -> int:
    """The BLAS threads of this process. A task runs with as many: Ray starts its workers with
    one (``OMP_NUM_THREADS``), and a matrix product's rounding depends on the thread count (a
    TF-IDF+SVD fit on one thread differs from two in the 7th digit), so a job on Ray would not
    give the numbers the same job gives on this machine."""
    from threadpoolctl import threadpool_info

    counts = [
        int(pool.get("num_threads") or 1) for pool in threadpool_info() if pool.get("user_api") == "blas"
    ]
    return max(counts, default=1)


def _call(
    function: Callable[..., Any], cwd: str, env: Mapping[str, str], threads: int, *args: Any, **kwargs: Any
) -> Any:
    """The task body: ``function(*args, **kwargs)`` in the driver's folder, variables and BLAS
    threads; a ``SystemExit`` comes back as :class:`Exited` (Ray would take it for the worker's
    death).

    The limit reaches only BLAS libraries already loaded, and a worker starts on Ray's
    ``OMP_NUM_THREADS=1``: SciPy's own OpenBLAS (its QR and LU in a TF-IDF+SVD fit), loaded for
    the first time inside the job, would run on one thread, and the first job of each worker
    would write other vectors than the same job on this machine. So SciPy's is loaded first,
    and a BLAS loaded later still (another library's copy) starts with the driver's count
    (``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` for the job)."""
    import numpy  # noqa: F401  (its BLAS loaded, so that the limit reaches it)
    import scipy.linalg  # noqa: F401  (SciPy's own OpenBLAS, likewise)
    from threadpoolctl import threadpool_limits

    blas_env = {name: str(threads) for name in BLAS_THREAD_VARIABLES}
    with job_environment(cwd, {**env, **blas_env}), threadpool_limits(limits=threads, user_api="blas"):
        try:
            return function(*args, **kwargs)
        except SystemExit as stop:
            return Exited(stop.code if isinstance(stop.code, int) else 1)


def submit(
    ray: Any, remote: Mapping[str, Any], function: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``function(*args, **kwargs)`` as a Ray task with ``remote``'s options (``num_cpus`` 1 and
    ``max_retries`` 0 unless given); returns its object ref."""
    options = {"num_cpus": 1, "max_retries": 0, **{k: v for k, v in remote.items() if v is not None}}
    task = ray.remote(**options)(_call)
    return task.remote(function, os.getcwd(), driver_environment(), driver_threads(), *args, **kwargs)


def gather(ray: Any, refs: Sequence[Any], names: Sequence[str]) -> list[Any]:
    """Every task's result in order. Tasks lost with their node or worker are named in one line
    once all the others have finished, exit 1; a job that exited (:class:`Exited`) makes the
    command exit with its status, after the others finish; a job's own exception is raised."""
    from ray import exceptions as ray_errors

    lost_types = tuple(
        getattr(ray_errors, name)
        for name in (
            "NodeDiedError",
            "WorkerCrashedError",
            "LocalRayletDiedError",
            "ObjectLostError",
            "OwnerDiedError",
            "ActorDiedError",
        )
        if hasattr(ray_errors, name)
    )
    results: list[Any] = []
    lost: list[tuple[str, str]] = []
    raised: BaseException | None = None
    for name, ref in zip(names, refs, strict=True):
        try:
            results.append(ray.get(ref))
        except lost_types as error:
            lost.append((name, _first_line(error)))
            results.append(None)
        except ray_errors.RayTaskError as error:
            if "No module named" in str(error):
                invalid(
                    f"ray: a worker cannot import the project ({_first_line(error)}); install viking-eval[cluster] on every node"
                )
            raised = raised or error
            results.append(None)
    if lost:
        shown = ", ".join(name for name, _ in lost[:10]) + (", ..." if len(lost) > 10 else "")
        print(
            f"error: ray: {len(lost)} of {len(refs)} jobs did not finish (a node or worker was lost: "
            f"{lost[0][1]}): {shown}; the {len(refs) - len(lost)} others finished; rerun the same "
            "command to run the missing ones",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(EXIT_FAILED)
    if raised is not None:
        raise raised
    exits = [result.code for result in results if isinstance(result, Exited)]
    if exits:
        sys.exit(max(exits))
    return results


def run_all(
    options: RayOptions,
    function: Callable[..., Any],
    calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]],
) -> list[Any]:
    """Each ``(name, args, kwargs)`` of ``calls`` as a task of ``function`` on the cluster of
    ``options``; their results in order (see :func:`gather`)."""
    ray = connect(options.init)
    check_nodes(ray)
    refs = [submit(ray, options.remote, function, *args, **kwargs) for _, args, kwargs in calls]
    return gather(ray, refs, [name for name, _, _ in calls])
