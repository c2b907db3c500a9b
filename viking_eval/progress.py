"""Progress bars: one look for every long phase of the harness.

A bar is a tqdm bar on stderr whose label says what is being done to what, with a unit:
``embedding scifact corpus (5,183 docs)``, ``retrieve dense: 300 queries``, ``timing dense: 100
queries``, ``significance vs bm25: 5 comparisons (10,000 resamples)``. One switch decides whether
bars are drawn: the config's top-level ``show_progress`` (true: always; false: never; null, the
default: only when stderr is a terminal, tqdm's ``disable=None``), so that logs, CI output and
captured test output hold no bar.

Libraries' own log lines and bars are silenced by :func:`quiet_libraries` (the CLI calls it)
unless ``VIKING_EVAL_DEBUG=1``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from tqdm.auto import tqdm

__all__ = ["NOISY_LOGGERS", "progress_bar", "progress_shown", "quiet_libraries"]

NOISY_LOGGERS = (
    "bm25s",  # sets its own level to DEBUG: "[bm25s][DEBUG] Building index from IDs" on every build
    "sentence_transformers",  # "Loading SentenceTransformer model from ..." on every run
    "transformers",
    "huggingface_hub",
    "ir_datasets",  # "[INFO] [starting] ..." / "[finished] ..." around every read (viking_eval/data/irds.py)
    "urllib3",
    "filelock",
    "faiss",
    "numexpr",
    "matplotlib",  # "generated new fontManager" on the first run on a machine (its font cache)
)
"""Loggers whose records below WARNING are dropped unless ``VIKING_EVAL_DEBUG=1``."""


def progress_bar(
    *, total: int | None, desc: str, unit: str, show: bool | None = None, leave: bool = True, **options: Any
) -> tqdm[Any]:
    """A labelled tqdm bar on stderr; ``show``: True always, False never, None on a terminal."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        leave=leave,
        disable=None if show is None else not show,
        file=sys.stderr,
        dynamic_ncols=True,
        **options,
    )


def progress_shown(show: bool | None) -> bool:
    """Whether a bar with this ``show`` setting is drawn (for code that takes a plain bool)."""
    if show is not None:
        return show
    return bool(sys.stderr is not None and sys.stderr.isatty())


class _BelowWarning(logging.Filter):
    """Drops a logger's records below WARNING. A filter as well as a level: some libraries set
    their own level when imported (bm25s sets DEBUG), after the CLI has started."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


_QUIET = _BelowWarning()
_LEVELS_BEFORE: dict[str, int] = {}  # the loggers quieted, and their levels before


def quiet_libraries(debug: bool = False) -> None:
    """Silence libraries' info and debug lines (:data:`NOISY_LOGGERS` and their children, such as
    ``sentence_transformers.base.model``: WARNING level, which children inherit, and a filter on
    the named logger, which holds even when the library resets its level) and Hugging Face's
    progress bars (``Loading weights``; also a model download's: ``HF_HUB_DISABLE_PROGRESS_BARS``,
    unless already set). ``debug`` undoes it. Call before those libraries are imported."""
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if debug:
            logger.removeFilter(_QUIET)
            if name in _LEVELS_BEFORE:
                logger.setLevel(_LEVELS_BEFORE.pop(name))
            continue
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
        if name not in _LEVELS_BEFORE:
            _LEVELS_BEFORE[name] = logger.level
            logger.setLevel(max(logger.level, logging.WARNING))
    if not debug:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
