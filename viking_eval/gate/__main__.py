"""``python -m viking_eval.gate check|record|compare ...``: the gate's program. The loop that
runs a check's command is handed in from here, above both (the gate never imports the runner)."""

from __future__ import annotations

import sys

from viking_eval.gate.commands import main
from viking_eval.run.experiment import run_experiment

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], run=run_experiment))
