"""How a command of the harness ends: its exit statuses, and the one ``error:`` line of bad input.

Below every program (the CLI, the sweep callbacks, the Optuna sweeper's folder check), so that
each can refuse input the same way without importing the CLI.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import NoReturn

EXIT_OK = 0
EXIT_FAILED = 1  # a gate check failed, or a bug
EXIT_INVALID = 2  # bad config or data
DEBUG_ENV = "VIKING_EVAL_DEBUG"


def debugging() -> bool:
    """``VIKING_EVAL_DEBUG=1`` (or Hydra's ``HYDRA_FULL_ERROR=1``): tracebacks for config and data errors."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0") or os.environ.get("HYDRA_FULL_ERROR", "") not in (
        "",
        "0",
    )


def invalid(line: str) -> NoReturn:
    """Print ``error: <line>`` (and, when debugging, the exception being handled) and exit 2."""
    if debugging() and sys.exc_info()[0] is not None:
        traceback.print_exc()
    print(f"error: {line}", file=sys.stderr, flush=True)
    sys.exit(EXIT_INVALID)
