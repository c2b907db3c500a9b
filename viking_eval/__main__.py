"""``python -m viking_eval [overrides]``: one entry, four programs (viking_eval/cli.py maps the
command line onto them).

- run (the default): evaluate the configured retrievers -- ``cli.run_program``;
- benchmark (``benchmark.datasets=[...]``): every dataset's run, one table --
  ``viking_eval.benchmark.run.benchmark_program``;
- gate (``gate.baseline=<file>``, e.g. ``experiment=ci_regression``): the baseline file's checks,
  with the command line's overrides applied to each -- ``cli.gate_program``;
- run + compare (``gate.baseline_run=<folder>``): evaluate, then gate against a stored run --
  ``cli.compare_program``.

The CLI first composes and validates the config of every job the command would run; a bad
config or bad data is one ``error:`` line and exit status 2. ``--help`` lists the experiments,
config groups, environment variables and exit codes.
"""

from __future__ import annotations

from viking_eval.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
