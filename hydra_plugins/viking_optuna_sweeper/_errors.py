"""The Optuna sweeper's errors: a bad setting or search space (SweeperConfigError, found before
any trial runs), and the two reasons a finished job becomes a failed trial (JobExitError,
ObjectiveError).

The modules of this package that do the work are named with a leading "_" (this one too): Hydra's
plugin scan imports, and re-executes if already imported, every module of ``hydra_plugins`` whose
name does not start with "_", which would put a second SweeperConfigError class beside the one
already caught. sweeper.py (the plugin class) and config.py (its schema) are the scanned ones.
"""

from __future__ import annotations

from hydra.errors import CompactHydraException


class SweeperConfigError(CompactHydraException):
    """A bad ``hydra.sweeper`` setting or search space, found before any trial runs. ``key``: the
    setting at fault (``hydra.sweeper`` when it is the search space as a whole or one of its
    overrides, which the message names); ``detail``: the message without that key at its start."""

    def __init__(self, message: str, *, key: str = "hydra.sweeper") -> None:
        super().__init__(message)
        self.key = key
        self.detail = (
            message[len(key) :].lstrip(" :") if message.startswith((f"{key} ", f"{key}:")) else message
        )


class JobExitError(RuntimeError):
    """A job called ``sys.exit``: recorded as a failed trial, not the end of the study."""


class ObjectiveError(ValueError):
    """A finished job's return value has no finite value for an objective."""
