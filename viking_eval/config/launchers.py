"""What a multirun's launcher needs on this machine, checked before Hydra builds it (the CLI's
pre-flight): a launcher that cannot start gives one ``error:`` line naming what is missing, and
no sweep folder, no submission, no job.

    hydra/launcher=slurm   submitit submits each batch of jobs with ``sbatch`` and runs it with
                           ``srun``: both must be on the PATH (a SLURM login node); without them
                           submitit would fail with a traceback after writing into the sweep folder

The Ray launcher checks its cluster itself when it connects (viking_eval/run/ray_jobs.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from typing import Any

from viking_eval.config.errors import ConfigError

__all__ = ["SLURM_COMMANDS", "SLURM_LAUNCHER", "check_launcher"]

#: the target of conf/hydra/launcher/slurm.yaml (Hydra's submitit launcher, SLURM executor)
SLURM_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
#: the SLURM commands submitit runs: ``sbatch`` to submit, ``srun`` in the batch script
SLURM_COMMANDS = ("sbatch", "srun")


def check_launcher(launcher: Mapping[str, Any], which: Callable[[str], str | None] = shutil.which) -> None:
    """Refuse (ConfigError) a launcher this machine cannot start: for the SLURM launcher, the
    SLURM commands missing from the PATH. ``launcher`` is the composed ``hydra.launcher`` node;
    ``which`` finds a command (``shutil.which``)."""
    if str(launcher.get("_target_", "")) != SLURM_LAUNCHER:
        return
    missing = [command for command in SLURM_COMMANDS if which(command) is None]
    if not missing:
        return
    names = " and ".join(f"`{command}`" for command in missing)
    raise ConfigError(
        "hydra/launcher=slurm",
        f"no {names} on the PATH (submitit submits each job array with sbatch and runs it with srun); "
        "run the command on a SLURM login node, or drop hydra/launcher=slurm to run the jobs on this "
        "machine (or hydra/launcher=ray for a Ray cluster)",
    )
