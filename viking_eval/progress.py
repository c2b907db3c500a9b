"""Progress bars: one look for every long phase of the harness.

A bar is a tqdm bar on stderr whose label says what is being done to what, with a unit:
``embedding scifact corpus (5,183 docs)``, ``retrieve dense: 300 queries``, ``timing dense: 100
queries``, ``significance vs bm25: 5 comparisons (10,000 resamples)``. One switch decides whether
bars are drawn: the config's top-level ``show_progress`` (true: always; false: never; null, the
default: bars when stderr is a terminal, plain lines otherwise).

Without a terminal (CI, nohup, a pipe, ``2> file``) a bar becomes plain lines, one per
``VIKING_EVAL_PROGRESS_INTERVAL`` seconds (default 10) while the stage runs, even when nothing
is counted (a background timer), and one at its end::

    embedding scifact corpus (5,183 docs): 1,024/5,183 doc (21.4/s, 0:48, ~3:14 left)
    embedding scifact corpus (5,183 docs): done, 5,183/5,183 doc in 4:02 (21.4/s)

A stage's first line comes with its first count or after one interval, whichever is sooner (so
that a step failing at once leaves only its error line; a stage done in one count has only its end
line); a stage that fails says nothing more.
The lines go to stderr and to the log files of the root logger (Hydra's ``cli.log``). Stages
without a count (a model loading, a store's build phases) get the same lines without counts.

Libraries' own log lines and bars are silenced by :func:`quiet_libraries` (the CLI calls it)
unless ``VIKING_EVAL_DEBUG=1``.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from types import TracebackType
from typing import Any

from tqdm.auto import tqdm

from retrievers.progress import ShowProgress

__all__ = [
    "DEFAULT_INTERVAL",
    "INTERVAL_ENV",
    "NOISY_LOGGERS",
    "ProgressLines",
    "library_progress",
    "progress_bar",
    "progress_interval",
    "progress_shown",
    "quiet_libraries",
    "quiet_model_bars",
    "stage",
]

INTERVAL_ENV = "VIKING_EVAL_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 10.0
"""Seconds between two progress lines of a stage when stderr is not a terminal."""

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


def progress_interval() -> float:
    """Seconds between progress lines: ``VIKING_EVAL_PROGRESS_INTERVAL`` (a number > 0), or 10."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{INTERVAL_ENV} must be a number of seconds > 0 (such as 10 or 0.5), got {raw!r}")
    return seconds


def _clock_text(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _rate_text(rate: float) -> str:
    return f"{rate:,.1f}" if rate < 100 else f"{rate:,.0f}"


def _write_line(line: str) -> None:
    """``line`` on stderr and in the root logger's log files (Hydra's job log, ``cli.log``), not
    in its console handler (stdout, under Hydra): a progress line is not a log record to show twice."""
    stream = sys.stderr
    if stream is not None:
        stream.write(line + "\n")
        stream.flush()
    files = [handler for handler in logging.getLogger().handlers if isinstance(handler, logging.FileHandler)]
    if files:
        record = logging.LogRecord("viking_eval.progress", logging.INFO, __file__, 0, line, None, None)
        for handler in files:
            if record.levelno >= handler.level:
                handler.handle(record)


class ProgressLines:
    """A stage's progress as plain lines (see the module docstring): the drop-in for a tqdm bar
    where stderr is not a terminal. ``clock`` and ``write`` are for tests (a fake clock, a list);
    ``timer=False`` starts no background timer (then only :meth:`update` and :meth:`tick` write)."""

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        unit: str = "",
        *,
        initial: int = 0,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        write: Callable[[str], None] = _write_line,
        timer: bool = True,
    ) -> None:
        self.desc = desc
        self.total = total
        self.unit = unit
        self.initial = initial
        self.n = initial
        self.interval = progress_interval() if interval is None else interval
        self.clock = clock
        self.write = write
        self.started = clock()
        self.last_line: float | None = None  # clock of the last line written
        self.closed = False
        self.postfix = ""  # what the stage is doing now (set_postfix_str), after its count
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        if timer:
            self._timer = threading.Thread(target=self._beat, name=f"progress: {desc}", daemon=True)
            self._timer.start()

    # -- what is said

    def line(self, now: float) -> str:
        """The stage's state: ``<desc>: <n>/<total> <unit> (<rate>/s, <elapsed>, ~<left> left)``."""
        elapsed = now - self.started
        done = self.n - self.initial
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        details = [] if rate is None else [f"{_rate_text(rate)}/s"]
        details.append(_clock_text(elapsed))
        if rate is not None and self.total is not None and self.total >= self.n:
            details.append(f"~{_clock_text((self.total - self.n) / rate)} left")
        if self.postfix:
            details.append(self.postfix)
        if self.total is None and not self.n:
            return f"{self.desc}: running ({', '.join(details)})"
        count = f"{self.n:,}" if self.total is None else f"{self.n:,}/{self.total:,}"
        return f"{self.desc}: {count}{' ' + self.unit if self.unit else ''} ({', '.join(details)})"

    def end_line(self, now: float) -> str:
        elapsed = now - self.started
        if self.total is None and not self.n:
            return f"{self.desc}: done in {_clock_text(elapsed)}"
        done = self.n - self.initial
        count = f"{self.n:,}" if self.total is None else f"{self.n:,}/{self.total:,}"
        rate = f" ({_rate_text(done / elapsed)}/s)" if elapsed > 0 and done > 0 else ""
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.desc}: done, {count}{unit} in {_clock_text(elapsed)}{rate}"

    def _say(self, text: str, now: float) -> None:
        self.last_line = now
        self.write(text)

    # -- what drives it

    def update(self, n: int = 1) -> None:
        """Count ``n`` more; the first count, or one an interval after the last line, is said."""
        with self._lock:
            if self.closed:
                return
            self.n += n
            now = self.clock()
            first = self.last_line is None and (
                self.total is None or self.n < self.total
            )  # else: its end says it
            if first or (self.last_line is not None and now - self.last_line >= self.interval):
                self._say(self.line(now), now)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """What the stage does now (``scoring``), said in its next lines; tqdm's method."""
        with self._lock:
            self.postfix = s

    def tick(self) -> None:
        """Say where the stage stands if an interval has passed since its last line (or its
        start): what the timer calls, so that a stage with no count for a while still speaks."""
        with self._lock:
            if self.closed:
                return
            now = self.clock()
            since = self.started if self.last_line is None else self.last_line
            if now - since >= self.interval:
                self._say(self.line(now), now)

    def _beat(self) -> None:
        while not self._stop.wait(self._next_wait()):
            self.tick()

    def _next_wait(self) -> float:
        since = self.started if self.last_line is None else self.last_line
        return max(0.05, self.interval - (self.clock() - since))

    def close(self, failed: bool = False) -> None:
        """End the stage: its last line, unless ``failed`` (the error says it)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if not failed:
                now = self.clock()
                self._say(self.end_line(now), now)
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join()

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close(failed=error is not None)


def _lines_instead_of_bars(show: bool | None) -> bool:
    return show is None and not progress_shown(None)


def progress_bar(
    *, total: int | None, desc: str, unit: str, show: bool | None = None, leave: bool = True, **options: Any
) -> tqdm[Any] | ProgressLines:
    """A labelled tqdm bar on stderr; ``show``: True always, False never, None on a terminal,
    and plain lines (:class:`ProgressLines`) where stderr is not one."""
    if _lines_instead_of_bars(show):
        return ProgressLines(desc, total, unit, initial=int(options.get("initial", 0)))
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


def _lines_factory(total: int | None, desc: str, unit: str) -> ProgressLines:
    return ProgressLines(desc, total, unit)


def library_progress(show: bool | None) -> ShowProgress:
    """``show_progress`` for a ``retrievers`` step (a store build, :mod:`retrievers.progress`):
    its tqdm bars on a terminal (or with True), none with False, plain lines otherwise."""
    return _lines_factory if _lines_instead_of_bars(show) else progress_shown(show)


@contextmanager
def stage(desc: str, show: bool | None = None) -> Iterator[None]:
    """A step with no count (a model loading) as plain lines where stderr is not a terminal:
    ``<desc>: running (0:10)`` every interval, ``<desc>: done in 0:12`` at its end. Nothing on a
    terminal (no bar for it) nor with ``show`` False."""
    with ProgressLines(desc) if _lines_instead_of_bars(show) else nullcontext():
        yield


def quiet_model_bars() -> None:
    """Hugging Face's own bars (transformers' ``Loading weights 103/103`` on every model load, a
    model download's) off, unless ``VIKING_EVAL_DEBUG=1``; for libraries imported already too."""
    if os.environ.get("VIKING_EVAL_DEBUG", "") not in ("", "0"):
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"].strip().lower() not in {"1", "true", "yes", "on"}:
        return  # the user asked for them
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils.tqdm import disable_progress_bars

        disable_progress_bars()


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
