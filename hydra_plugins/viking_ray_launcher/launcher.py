"""The ``hydra/launcher=ray`` launcher: each job of a sweep is a Ray task that runs the job as the
Hydra Ray launcher plugin does (hydra-ray-launcher's job runner: the sweep config composed here,
Hydra's ``run_job`` there), so each job writes the run folder the basic launcher writes.

What it adds to the plugin (viking_eval/run/ray_jobs.py): ``address`` probed before ``ray.init``
(one line, exit 2, when no cluster is there), every node checked to import the project before
any job runs, the plugin's ``object_store_memory`` left out when joining a cluster (Ray refuses
it then), the driver's folder and ``VIKING_EVAL_*`` variables in each task, and a job lost with
its node named in one line (exit 1) once the other jobs have finished.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from viking_eval.run.ray_jobs import (
    RAY_LAUNCHER,
    RayOptions,
    check_nodes,
    connect,
    gather,
    ray_options,
    submit,
)

log = logging.getLogger(__name__)


class VikingRayLauncher(Launcher):
    """Hydra launcher; ``ray``: ``init`` (``ray.init``'s arguments) and ``remote`` (each task's)."""

    def __init__(self, ray: DictConfig) -> None:
        self.ray_cfg = ray
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def options(self) -> RayOptions:
        node = OmegaConf.create({"_target_": RAY_LAUNCHER, "ray": self.ray_cfg})
        found = ray_options(node)
        return found if found is not None else RayOptions()

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra.core.singleton import Singleton
        from hydra.core.utils import configure_log, filter_overrides, setup_globals
        from hydra_plugins.hydra_ray_launcher._launcher_util import _run_job

        if self.config is None or self.hydra_context is None or self.task_function is None:
            raise RuntimeError("VikingRayLauncher.launch before setup")
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        options = self.options()
        ray = connect(options.init)
        nodes = check_nodes(ray)
        log.info(f"Ray launcher: {len(job_overrides)} jobs on {nodes} node(s), sweep output dir: {sweep_dir}")
        refs: list[Any] = []
        names: list[str] = []
        for offset, overrides in enumerate(job_overrides):
            idx = initial_job_idx + offset
            shown = " ".join(filter_overrides(overrides))
            log.info(f"\t#{idx} : {shown}")
            sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = idx  # as Hydra's basic launcher numbers them
                sweep_config.hydra.job.num = idx
            refs.append(
                submit(
                    ray,
                    options.remote,
                    _run_job,
                    self.hydra_context,
                    sweep_config,
                    self.task_function,
                    Singleton.get_state(),
                )
            )
            names.append(f"job {idx} ({shown})")
        returns = gather(ray, refs, names)
        return [result for result in returns if isinstance(result, JobReturn)]
