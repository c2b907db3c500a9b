"""viking_ray_launcher: sweep jobs as Ray tasks (``hydra/launcher=ray``, conf/hydra/launcher/ray.yaml,
docs/cluster.md). Hydra imports this package to discover plugins: nothing here imports Ray,
which is imported only when the launcher launches."""
