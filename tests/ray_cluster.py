"""A real two-node Ray cluster on this machine for the Ray tests (no mocks): a head and a second
node, each its own ``ray start --block`` process with one CPU, bound to 127.0.0.1 on free ports.
Each node logs into a folder of the test's temporary path and keeps its Ray session in a short
folder of its own under the system's temporary folder (Ray's sockets live there, and a Unix
socket's path may not exceed 107 bytes, which a pytest path under xdist does:
``/tmp/pytest-of-root/pytest-528/popen-gw1/...``); that folder is removed when the node stops.
Stopped by terminating the processes this module started (Ray's ``--block`` stops its node's
processes on SIGTERM), never by ``ray stop`` (which would stop every Ray on the machine)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAY = [sys.executable, "-m", "ray.scripts.scripts"]
#: seconds a node is given to stop after SIGTERM before its processes are killed
STOP_GRACE = 5
#: each started node's Ray session folder (by process id), removed when the node is stopped
_SESSION_DIRS: dict[int, Path] = {}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def node_env(extra: Mapping[str, str] = {}) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", **extra})
    return env


@dataclass
class RayCluster:
    address: str
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def stop(self) -> None:
        """Terminate the nodes this object started (last first), then kill their process groups.
        A node gets ``STOP_GRACE`` seconds to stop: a head that knew an actor on a lost node waits
        30 s for it before it exits, and nothing of a test's node is kept after it."""
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            # anything the node left in the group it was started in (its own session)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            session = _SESSION_DIRS.pop(process.pid, None)
            if session is not None:
                shutil.rmtree(session, ignore_errors=True)


def start_node(
    temp_dir: Path,
    *,
    head_port: int,
    head: bool,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    resources: str | None = None,
) -> subprocess.Popen[str]:
    """``ray start --block`` for one node with one CPU; returns once the node has joined.
    ``temp_dir`` holds its log; its Ray session folder is a short one (module docstring)."""
    temp_dir.mkdir(parents=True, exist_ok=True)
    session = Path(tempfile.mkdtemp(prefix="vkray-"))
    command = [python, "-m", "ray.scripts.scripts", "start", "--block", "--num-cpus", "1"]
    command += ["--node-ip-address", "127.0.0.1", "--disable-usage-stats", "--log-style", "record"]
    command += ["--dashboard-agent-listen-port", str(free_port()), "--metrics-export-port", str(free_port())]
    command += ["--runtime-env-agent-port", str(free_port())]
    if head:
        command += ["--head", "--port", str(head_port), "--temp-dir", str(session)]
        command += ["--include-dashboard", "false", "--ray-client-server-port", str(free_port())]
        command += ["--dashboard-port", str(free_port())]
    else:
        command += ["--address", f"127.0.0.1:{head_port}", "--temp-dir", str(session)]
    if resources is not None:
        command += ["--resources", resources]
    log = (temp_dir / ("head.log" if head else f"node-{len(list(temp_dir.glob('node-*.log')))}.log")).open(
        "w"
    )
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=dict(env if env is not None else node_env()),
        start_new_session=True,
    )
    _SESSION_DIRS[process.pid] = session
    assert process.stdout is not None
    for line in process.stdout:  # blocks until the node says it has started (or dies)
        if "Ray runtime started" in line:
            break
    else:
        RayCluster("", [process]).stop()
        raise RuntimeError(f"ray start failed ({' '.join(command)}); see {log.name}")
    return process


def start_cluster(temp_dir: Path) -> RayCluster:
    port = free_port()
    cluster = RayCluster(address=f"127.0.0.1:{port}")
    try:
        cluster.processes.append(start_node(temp_dir, head_port=port, head=True))
        cluster.processes.append(start_node(temp_dir / "node2", head_port=port, head=False))
    except BaseException:
        cluster.stop()
        raise
    return cluster
