"""Ray (hydra/launcher=ray, embedder.backend=ray) on a real two-node Ray cluster started on this machine
(tests/ray_cluster.py: one head, one second node, one CPU each, no mocks of Ray): a sweep's job
folders, sweep.csv and best.yaml are the basic launcher's, a rerun runs only the missing jobs, a
benchmark gives the same table; no cluster at ``address``, a node without the project and a
node lost under a running job each end in one ``error:`` line. ADI with BM25 + TF-IDF dense."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_cli, smoke_multirun
from ray_cluster import ROOT, RayCluster, free_port, node_env, start_cluster, start_node

pytest.importorskip("ray", reason="the cluster extra (pip install -e '.[cluster]') is not installed")

pytestmark = [pytest.mark.slow, pytest.mark.needs_data]
START_FIRST = True  # tests/conftest.py: the cluster's tests take about two minutes, mostly waiting on it

#: files of a run folder that hold measured times (and the launcher in .hydra); the rest must be
#: byte-identical between launchers
TIMED = {"metrics.json", "environment.json", "latency.json", "report.md", "report.html", "cli.log"}
TIMED_KEYS = {"wall_seconds", "run_seconds", "cost_seconds", "job_seconds", "time", "store_ready_seconds"}
GRID = ("store.bm25.k1=0.6,1.2", "store.bm25.b=0.4")  # two jobs: one per node when both are free


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    started = start_cluster(tmp_path_factory.mktemp("ray"))
    try:
        yield started
    finally:
        started.stop()


#: the command line's ``main`` run in a process that says, when it ends, which Ray modules it imported
MAIN_REPORTING_RAY = """
import sys
from viking_eval.cli import main
sys.argv = ["viking_eval", *sys.argv[1:]]
try:
    code = main()
finally:
    print("ray modules:", sorted(name for name in sys.modules if name == "ray" or name.startswith("ray.")))
raise SystemExit(code)
"""


@pytest.fixture(scope="module")
def basic_sweep(shared_datasets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep with the basic launcher, by a command that never imports Ray (checked here: the
    main command needs no cluster extra)."""
    sweep_dir = tmp_path_factory.mktemp("basic") / "sweep"
    env = node_env(
        {
            "VIKING_EVAL_CACHE": str(tmp_path_factory.mktemp("cache_basic")),
            "VIKING_EVAL_DATA": str(shared_datasets),
        }
    )
    argv = ["-m", "experiment=smoke", f"hydra.sweep.dir={sweep_dir}", "run.latency.n_queries=0", *GRID]
    done = subprocess.run(
        [sys.executable, "-c", MAIN_REPORTING_RAY, *argv],
        cwd=ROOT,
        env={
            key: value for key, value in env.items() if key not in ("VIKING_EVAL_DEBUG", "HYDRA_FULL_ERROR")
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ray modules: []" in done.stdout
    return sweep_dir


def _ray_sweep(sweep_dir: Path, cluster: RayCluster, *extra: str) -> subprocess.CompletedProcess[str]:
    return smoke_multirun(
        sweep_dir,
        "run.latency.n_queries=0",
        *GRID,
        "hydra/launcher=ray",
        f"hydra.launcher.ray.init.address={cluster.address}",
        *extra,
    )


def _untimed_json(path: Path) -> object:
    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items() if key not in TIMED_KEYS}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    return strip(json.loads(path.read_text()))


def _sweep_csv_without_times(path: Path) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    return [{key: value for key, value in row.items() if key != "job_seconds"} for row in rows]


def _job_files(sweep_dir: Path) -> dict[str, object]:
    """Every file of every job folder: bytes, but for the timed keys of results/*.json (compared
    without them) and config.yaml's cache_dir (each sweep of this module has its own cache)."""
    files: dict[str, object] = {}
    for path in sorted(sweep_dir.glob("[0-9]*/**/*")):
        if not path.is_file() or path.name in TIMED or ".hydra" in path.parts:
            continue
        name = str(path.relative_to(sweep_dir))
        if path.suffix == ".json":
            files[name] = _untimed_json(path)
        elif path.name == "config.yaml":
            files[name] = [
                line for line in path.read_bytes().splitlines() if not line.startswith(b"cache_dir:")
            ]
        else:
            files[name] = path.read_bytes()
    return files


def test_a_sweep_on_two_nodes_writes_what_the_basic_launcher_writes(
    cluster: RayCluster, basic_sweep: Path, data_env: Path, tmp_path: Path
) -> None:
    sweep_dir = tmp_path / "sweep"
    done = _ray_sweep(sweep_dir, cluster)
    assert done.returncode == 0, done.stderr[-3000:]
    basic, on_ray = _job_files(basic_sweep), _job_files(sweep_dir)
    assert (
        sorted(on_ray) == sorted(basic)
        and len([name for name in basic if name.endswith("per_query.csv")]) == 2
    )
    assert [name for name in basic if basic[name] != on_ray[name]] == []  # runs, per-query values, results
    for job in "01":
        assert _untimed_json(sweep_dir / job / "metrics.json") == _untimed_json(
            basic_sweep / job / "metrics.json"
        )
    assert (sweep_dir / "best.yaml").read_bytes() == (basic_sweep / "best.yaml").read_bytes()
    assert _sweep_csv_without_times(sweep_dir / "sweep.csv") == _sweep_csv_without_times(
        basic_sweep / "sweep.csv"
    )

    # a job lost: rerunning the same command runs only it, the others are resumed as they are
    kept = (sweep_dir / "0" / "results" / "bm25.json").stat().st_mtime_ns
    for marker in (sweep_dir / "1" / "results").glob("*.json"):
        marker.unlink()
    again = _ray_sweep(sweep_dir, cluster)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (sweep_dir / "0" / "results" / "bm25.json").stat().st_mtime_ns == kept
    assert _job_files(sweep_dir) == basic  # job 1 computed again, the same
    assert (sweep_dir / "best.yaml").read_bytes() == (basic_sweep / "best.yaml").read_bytes()


def test_no_cluster_at_the_address_is_one_line_and_exit_2(data_env: Path, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    done = smoke_multirun(
        tmp_path / "sweep", "hydra/launcher=ray", f"hydra.launcher.ray.init.address=127.0.0.1:{port}"
    )
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: hydra.launcher.ray.init.address: no Ray cluster at 127.0.0.1:{port}")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "sweep" / "0").exists()


def _python_without_project(folder: Path) -> str:
    """A Python environment with this one's packages (Ray included) but not the project: a venv
    whose site-packages is added as a plain path, so the project's editable-install hook (a .pth
    file there) never runs."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    (next(folder.glob("lib/python*/site-packages")) / "outer.pth").write_text(f"{site}\n")
    return str(folder / "bin" / "python")


def test_a_node_without_the_project_is_one_line_and_exit_2(
    cluster: RayCluster, data_env: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    python = _python_without_project(tmp_path / "venv")
    env = {key: value for key, value in node_env().items() if key != "PYTHONPATH"}
    check = subprocess.run(
        [python, "-c", "import viking_eval"], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert "No module named 'viking_eval'" in check.stderr  # the environment really lacks it
    port = int(cluster.address.rsplit(":", 1)[1])  # a third node, without the project, joins
    bare = start_node(tmp_path_factory.mktemp("ray_bare"), head_port=port, head=False, python=python, env=env)
    try:  # the command from another folder: Ray puts the driver's folder on its workers' path
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "viking_eval",
                "-m",
                "experiment=smoke",
                f"hydra.sweep.dir={tmp_path / 'sweep'}",
                "hydra/launcher=ray",
                f"hydra.launcher.ray.init.address={cluster.address}",
            ],
            cwd=tmp_path,
            env=node_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        RayCluster(cluster.address, [bare]).stop()
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ray: node ") and "No module named 'viking_eval'" in last, last
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "sweep" / "0").exists()  # no job ran


LOST_NODE_SCRIPT = """
import os, sys
from viking_eval.run import ray_jobs

def wait_for_writer(fifo):
    with open(fifo) as handle:  # opens once the test opens it for writing: the task is running
        return handle.read()

options = ray_jobs.RayOptions(init={"address": sys.argv[1]}, remote={"resources": {"doomed": 1}})
ray = ray_jobs.connect(options.init)
refs = [ray_jobs.submit(ray, options.remote, wait_for_writer, sys.argv[2])]
refs.append(ray_jobs.submit(ray, {}, len, "four"))
print("submitted", flush=True)
print(ray_jobs.gather(ray, refs, ["job 0 (doomed)", "job 1"]))
"""


def test_a_node_lost_under_a_running_job_is_one_line_and_exit_1(
    cluster: RayCluster, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    port = int(cluster.address.rsplit(":", 1)[1])
    doomed = start_node(
        tmp_path_factory.mktemp("ray_doomed"), head_port=port, head=False, resources='{"doomed": 1}'
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    script = tmp_path / "lost.py"
    script.write_text(LOST_NODE_SCRIPT)
    driver = subprocess.Popen(
        [sys.executable, str(script), cluster.address, str(fifo)],
        env=node_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with open(fifo, "w"):  # returns once the task on the doomed node has opened it
            # the node crashes with the task still running (never written to): every process of it
            # killed at once, as a lost machine goes (a graceful stop waits 30 s for the task)
            os.killpg(doomed.pid, signal.SIGKILL)
            doomed.wait(timeout=60)
            out, err = driver.communicate(timeout=300)
    finally:
        RayCluster(cluster.address, [doomed]).stop()
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 1, err[-3000:]
    assert "submitted" in out and "[" not in out.replace("submitted", "")  # no results printed
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ray: 1 of 2 jobs did not finish") and "job 0 (doomed)" in last, last
    assert "the 1 others finished" in last and "Traceback" not in err


# --------------------------------------------------------------------------- embedder.backend=ray


def _texts(n: int) -> list[str]:
    """``n`` texts of 3 to 60 words (more than one resumable part when n > RESUME_CHUNK)."""
    import numpy as np

    words = [
        "protein",
        "cell",
        "cancer",
        "gene",
        "the",
        "of",
        "study",
        "results",
        "binding",
        "receptor",
        "dose",
        "mice",
        "trial",
    ]
    rng = np.random.default_rng(7)
    return [" ".join(rng.choice(words, size=int(rng.integers(3, 60)))) for _ in range(n)]


def test_encoding_on_ray_is_bit_identical_to_the_local_encoder_and_resumes_from_its_parts(
    cluster: RayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from retrievers.embedders import StaticEmbedder, TfidfEmbedder
    from viking_eval.run.cache import ArtifactCache, clear_memo
    from viking_eval.run.cached_embedder import RESUME_CHUNK, CachedEmbedder
    from viking_eval.run.ray_encoder import EncodeBackend

    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    texts = _texts(RESUME_CHUNK + 700)  # two parts
    on_ray = EncodeBackend("ray", actors=2)
    try:
        for name, embedder in (("static", StaticEmbedder()), ("tfidf", TfidfEmbedder(dim=32).fit(texts))):
            local = CachedEmbedder(embedder, ArtifactCache(tmp_path / name / "local"))
            expected = local.encode(texts, kind="document")
            assert local.parts_encoded == 2
            clear_memo()
            remote = CachedEmbedder(embedder, ArtifactCache(tmp_path / name / "ray"), backend=on_ray)
            vectors = remote.encode(texts, kind="document")
            assert remote.parts_encoded == 2 and vectors.tobytes() == expected.tobytes(), name
            # the same entries, under the same content keys, as the local encoder's
            local_parts = sorted(
                p.name for p in (tmp_path / name / "local").glob("embeddings/*/*") if p.is_dir()
            )
            ray_parts = sorted(p.name for p in (tmp_path / name / "ray").glob("embeddings/*/*") if p.is_dir())
            assert ray_parts == local_parts and len(ray_parts) == 2

        # a killed encode keeps its finished parts: with one part gone, only that one is encoded
        entries = sorted(p for p in (tmp_path / "tfidf" / "ray").glob("embeddings/*/*") if p.is_dir())
        import shutil

        shutil.rmtree(entries[0])
        clear_memo()
        resumed = CachedEmbedder(embedder, ArtifactCache(tmp_path / "tfidf" / "ray"), backend=on_ray)
        assert resumed.encode(texts, kind="document").tobytes() == expected.tobytes()
        assert (resumed.parts_cached, resumed.parts_encoded) == (1, 1)
    finally:
        ray.shutdown()


# --------------------------------------------------------------------------- a benchmark's datasets


def test_a_benchmark_on_ray_gives_the_table_it_gives_here(
    cluster: RayCluster, data_env: Path, tmp_path: Path
) -> None:
    common = ("experiment=benchmark", "benchmark.datasets=[adi,medline]", "run.latency.n_queries=0")
    here = run_cli(*common, f"hydra.run.dir={tmp_path / 'here'}", "benchmark.variants={}")
    assert here.returncode == 0, here.stderr[-3000:]
    on_ray = run_cli(
        *common,
        f"hydra.run.dir={tmp_path / 'ray'}",
        "benchmark.variants={}",
        "hydra/launcher=ray",
        f"hydra.launcher.ray.init.address={cluster.address}",
    )
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    assert "(a Ray task)" in on_ray.stdout
    table = lambda text: text[text.index("mean over datasets") :].split("\nbenchmark: ")[0]  # noqa: E731
    assert table(on_ray.stdout) == table(here.stdout)
    assert (tmp_path / "ray" / "benchmark.csv").read_bytes() == (
        tmp_path / "here" / "benchmark.csv"
    ).read_bytes()
    for folder in ("adi", "medline"):
        for run_file in ("runs/bm25.trec", "runs/dense.trec", "per_query.csv"):
            assert (tmp_path / "ray" / folder / run_file).read_bytes() == (
                tmp_path / "here" / folder / run_file
            ).read_bytes()


@pytest.mark.parametrize(
    ("override", "key"),
    [("+embedder.backend=rai", "embedder.backend"), ("+embedder.actors=0", "embedder.actors")],
)
def test_a_bad_encode_backend_names_its_key(override: str, key: str) -> None:
    from conftest import smoke_settings

    from viking_eval.config import ConfigError

    with pytest.raises(ConfigError) as raised:
        smoke_settings(override)
    assert raised.value.line().startswith(f"{key}:")


def test_the_encode_backend_is_no_part_of_what_the_embedder_is() -> None:
    from conftest import smoke_settings

    from viking_eval.config.load import without_encode_keys

    local, on_ray = smoke_settings(), smoke_settings("+embedder.backend=ray", "+embedder.actors=2")
    assert (on_ray.embedder["backend"], on_ray.embedder["actors"]) == ("ray", 2)
    assert (
        without_encode_keys(on_ray.embedder)
        == without_encode_keys(local.embedder)
        == {
            "_target_": "retrievers.embedders.TfidfEmbedder",
            "dim": 256,
            "seed": 0,
        }
    )


GATE_FILE = """
description: two checks of the Ray test (ADI and Medline, BM25 and TF-IDF dense)
tolerance: 0.5
checks:
- dataset: adi
  command: python -m viking_eval experiment=ci_regression gate.baseline=null dataset=adi run.latency.n_queries=0
  metrics:
    bm25: {nDCG@10: 0.48}
    dense: {nDCG@10: 0.45}
- dataset: medline
  command: python -m viking_eval experiment=ci_regression gate.baseline=null dataset=medline run.latency.n_queries=0
  metrics:
    bm25: {nDCG@10: 0.67}
"""


def test_the_gate_on_ray_gives_the_verdicts_it_gives_here(
    cluster: RayCluster, data_env: Path, tmp_path: Path
) -> None:
    baseline = tmp_path / "gate.yaml"
    baseline.write_text(GATE_FILE)
    common = ("experiment=ci_regression", f"gate.baseline={baseline}")
    here = run_cli(*common, f"hydra.run.dir={tmp_path / 'here'}")
    assert here.returncode == 0, here.stderr[-3000:]
    on_ray = run_cli(
        *common,
        f"hydra.run.dir={tmp_path / 'ray'}",
        "hydra/launcher=ray",
        f"hydra.launcher.ray.init.address={cluster.address}",
    )
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    assert "gate: 2 checks as Ray tasks" in on_ray.stderr
    verdicts = lambda folder: (folder / "gate.txt").read_text().replace(str(folder), "<run>")  # noqa: E731
    assert verdicts(tmp_path / "ray") == verdicts(tmp_path / "here")
    for check in ("adi", "medline"):
        assert (tmp_path / "ray" / check / "per_query.csv").read_bytes() == (
            tmp_path / "here" / check / "per_query.csv"
        ).read_bytes()
