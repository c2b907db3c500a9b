"""A job run as a Ray task (viking_eval/run/ray_jobs._call) gets the driver's BLAS threads in every
BLAS library, also in one loaded for the first time inside the job: a Ray worker starts on
``OMP_NUM_THREADS=1``, and SciPy's own OpenBLAS, first loaded by the job's TF-IDF+SVD fit, stayed
on one thread, so the first job of each worker wrote other dense vectors than the basic launcher
(tests/test_ray_cluster_jobs.py found it in ``runs/dense.trec``). The task body is run here in a
fresh process started as Ray starts its workers (``OMP_NUM_THREADS=1``, NumPy loaded); no Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ray_cluster import ROOT

WORKER = """
import json, os, sys
import numpy  # a Ray worker has NumPy (and its BLAS) loaded before any task
from viking_eval.run.ray_jobs import _call

def job():
    import scipy.linalg  # first loaded here, as by a TF-IDF+SVD fit
    from threadpoolctl import threadpool_info
    return sorted(
        (pool["filepath"].rsplit("/", 1)[-1], pool["num_threads"])
        for pool in threadpool_info() if pool["user_api"] == "blas"
    )

print(json.dumps({"in_job": _call(job, os.getcwd(), {}, 2), "env_after": os.environ.get("OPENBLAS_NUM_THREADS")}))
"""


def test_a_job_runs_every_blas_library_on_the_drivers_threads() -> None:
    env = {key: value for key, value in os.environ.items() if not key.endswith("_NUM_THREADS")}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})  # as Ray starts a worker
    done = subprocess.run(
        [sys.executable, "-c", WORKER], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    libraries = [name for name, _ in found["in_job"]]
    assert any("scipy_openblas" in name and "64" not in name for name in libraries), libraries  # SciPy's
    assert len(libraries) >= 2 and all(threads == 2 for _, threads in found["in_job"]), found
    assert found["env_after"] is None  # the job's variables are put back after it
