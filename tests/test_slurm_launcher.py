"""The SLURM preset (conf/hydra/launcher/slurm.yaml, Hydra's submitit launcher): the batch script
a sweep would submit, rendered by the real launcher and submitit up to ``sbatch``, which here is a
script that refuses (no SLURM cluster on these machines: nothing is submitted, nothing runs). The
test reads the script submitit wrote and the jobs it pickled beside it, and checks the partition,
CPUs, memory, time, array size, the command and each job's overrides."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from submitit.core.utils import DelayedSubmission


def _no_cluster(bin_dir: Path) -> dict[str, str]:
    """``sbatch`` and ``srun`` that refuse (submitit looks for srun before it writes anything);
    the PATH that finds them first."""
    bin_dir.mkdir()
    for name in ("sbatch", "srun"):
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\necho "{name}: no SLURM cluster here (test)" >&2\nexit 1\n')
        path.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _directives(script: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", script, flags=re.MULTILINE))


@pytest.mark.slow
@pytest.mark.needs_data
@pytest.mark.parametrize(
    ("overrides", "jobs"),
    [
        (
            ["store.bm25.k1=0.6,0.9", "store.bm25.b=0.3,0.75"],
            [
                ["store.bm25.k1=0.6", "store.bm25.b=0.3"],
                ["store.bm25.k1=0.6", "store.bm25.b=0.75"],
                ["store.bm25.k1=0.9", "store.bm25.b=0.3"],
                ["store.bm25.k1=0.9", "store.bm25.b=0.75"],
            ],
        ),
        (  # an Optuna study: its first batch of n_jobs trials is one array
            ["hparams_search=bm25_optuna", "hydra.sweeper.n_jobs=3", "hydra.sweeper.n_trials=6"],
            None,
        ),
    ],
    ids=["grid", "optuna"],
)
def test_the_slurm_preset_renders_one_job_array(
    data_env: Path, tmp_path: Path, overrides: list[str], jobs: list[list[str]] | None
) -> None:
    sweep_dir = tmp_path / "sweep"
    launcher = [
        "hydra/launcher=slurm",
        "hydra.launcher.partition=cpu",
        "hydra.launcher.timeout_min=30",
        "hydra.launcher.cpus_per_task=2",
        "hydra.launcher.mem_gb=8",
        "hydra.launcher.array_parallelism=2",
    ]
    done = run_cli(
        "-m",
        "experiment=smoke",
        f"hydra.sweep.dir={sweep_dir}",
        *launcher,
        *overrides,
        env=_no_cluster(tmp_path / "bin"),
        timeout=300,
    )
    assert done.returncode != 0  # sbatch refused: the sweep did not run
    assert "sbatch: no SLURM cluster here (test)" in done.stderr
    submitit_dir = sweep_dir / ".submitit"
    [script_path] = submitit_dir.glob(".submission_file_*.sh")
    script = script_path.read_text()
    n_jobs = 4 if jobs is not None else 3
    assert _directives(script) == {
        "array": f"0-{n_jobs - 1}%2",
        "cpus-per-task": "2",
        "error": f"{submitit_dir}/%A_%a/%A_%a_0_log.err",
        "job-name": "viking_eval-smoke",
        "mem": "8GB",
        "nodes": "1",
        "ntasks-per-node": "1",
        "open-mode": "append",
        "output": f"{submitit_dir}/%A_%a/%A_%a_0_log.out",
        "partition": "cpu",
        "signal": "USR2@120",
        "time": "30",
        "wckey": "submitit",
    }
    command = script.strip().splitlines()[-1]
    assert command.startswith("srun --unbuffered ")
    assert command.endswith(f"{sys.executable} -u -m submitit.core._submit {submitit_dir}/%j")
    # the jobs of the array: each one Hydra job with its overrides and its number
    pickled = [DelayedSubmission.load(path).args for path in submitit_dir.glob("*.pkl")]
    by_number = {args[2]: [line for line in args[0] if line.startswith("store.bm25.")] for args in pickled}
    assert sorted(by_number) == list(range(n_jobs))
    if jobs is not None:
        assert [by_number[n] for n in range(n_jobs)] == jobs
    else:  # sampled trials 0-2: k1 and b inside bm25_optuna.yaml's intervals
        for lines in by_number.values():
            values = dict(line.split("=", 1) for line in lines)
            assert (
                0.3 <= float(values["store.bm25.k1"]) <= 2.0 and 0.0 <= float(values["store.bm25.b"]) <= 1.0
            )
    assert not (sweep_dir / "sweep.csv").exists() and not (sweep_dir / "optimization_results.yaml").exists()


# --------------------------------------------------------------------------- no SLURM on this machine


@pytest.mark.parametrize(
    ("found", "named"),
    [((), "no `sbatch` and `srun` on the PATH"), (("srun",), "no `sbatch` on the PATH")],
    ids=["neither", "no-sbatch"],
)
def test_the_slurm_launcher_without_its_commands_is_refused_naming_them(
    found: tuple[str, ...], named: str
) -> None:
    from viking_eval.config import ConfigError
    from viking_eval.config.launchers import SLURM_LAUNCHER, check_launcher

    which = lambda command: f"/opt/slurm/bin/{command}" if command in found else None  # noqa: E731
    with pytest.raises(ConfigError) as raised:
        check_launcher({"_target_": SLURM_LAUNCHER, "partition": "cpu"}, which=which)
    assert raised.value.line().startswith(f"hydra/launcher=slurm: {named} (")
    # with both commands, and for any other launcher, nothing is refused
    check_launcher({"_target_": SLURM_LAUNCHER}, which=lambda command: f"/usr/bin/{command}")
    check_launcher({"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}, which=which)


@pytest.mark.needs_data
def test_a_sweep_on_slurm_without_sbatch_is_one_line_and_exit_2_before_anything_is_written(
    data_env: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "bin"  # a PATH where no sbatch or srun is found
    empty.mkdir()
    sweep_dir = tmp_path / "sweep"
    done = run_cli(
        "-m",
        "experiment=smoke",
        f"hydra.sweep.dir={sweep_dir}",
        "hydra/launcher=slurm",
        "store.bm25.k1=0.6,0.9",
        env={"PATH": str(empty)},
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: hydra/launcher=slurm: no `sbatch` and `srun` on the PATH (submitit submits each job array "
        "with sbatch and runs it with srun); run the command on a SLURM login node, or drop "
        "hydra/launcher=slurm to run the jobs on this machine (or hydra/launcher=ray for a Ray cluster)"
    ]
    assert not sweep_dir.exists()  # no multirun.yaml, no .submitit folder: nothing was submitted
