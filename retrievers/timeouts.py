"""Time limits on calls that may hang or fail: rerankers, strategies, remote services.

One rule for all of them: a call that raises or outruns its limit yields no value and a reason
(``"raised ValueError: ..."``, ``"timed out after 2 s"``) that the caller records in provenance;
it never ends the retrieval. A Python thread cannot be killed, so a timed-out call keeps running
in a daemon thread and its late answer is dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from retrievers.spans import carry

__all__ = ["Outcome", "call_with_timeout", "run_concurrently"]

T = TypeVar("T")

#: ``(value, None)`` on success, ``(None, reason)`` on failure
Outcome = tuple[Any, str | None]


def _failure(error: BaseException) -> str:
    return f"raised {type(error).__name__}: {error}"


def _timed_out(limit: float) -> str:
    return f"timed out after {limit:g} s"


def call_with_timeout(call: Callable[[], T], timeout_s: float | None) -> tuple[T | None, str | None]:
    """``(call(), None)``, or ``(None, reason)`` when it raises or, with a ``timeout_s``, takes
    longer than that many seconds."""
    if timeout_s is None:
        try:
            return call(), None
        except Exception as error:  # any failure means: the caller falls back, with this reason
            return None, _failure(error)
    return run_concurrently({"call": call}, {"call": timeout_s})["call"]


def run_concurrently(
    calls: Mapping[str, Callable[[], Any]], timeouts_s: Mapping[str, float | None]
) -> dict[str, Outcome]:
    """Start every call in its own daemon thread at once; each gets ``timeouts_s[name]`` seconds
    from the common start (None = no limit). Returns name -> :data:`Outcome`, in ``calls`` order."""
    boxes: dict[str, list[Outcome]] = {name: [] for name in calls}
    done = {name: threading.Event() for name in calls}

    def runner(name: str, call: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            try:
                boxes[name].append((call(), None))
            except Exception as error:
                boxes[name].append((None, _failure(error)))
            finally:
                done[name].set()

        return run

    start = time.monotonic()
    for name, call in calls.items():
        threading.Thread(target=carry(runner(name, call)), name=f"timed-{name}", daemon=True).start()
    outcomes: dict[str, Outcome] = {}
    for name in calls:
        limit = timeouts_s.get(name)
        remaining = None if limit is None else max(0.0, start + limit - time.monotonic())
        if done[name].wait(remaining):
            outcomes[name] = boxes[name][0]
        else:
            outcomes[name] = (None, _timed_out(float(limit)))  # type: ignore[arg-type]
    return outcomes
