"""Where a query's time goes: per-stage spans, recorded only while someone asks for them.

The kernel and the families mark their stages with ``with span("vector"):`` (a block) or
``lap("round")`` (one iteration of a loop: it ends the lap before it, so a loop marks its
iterations with one line at the top of the body; the enclosing ``span`` ends the last one). A
span opened inside another is its child. Names come from :data:`STAGES`; ``detail`` tells spans
of one stage apart (a multi-strategy ``strategy`` span's strategy name).

Nobody recording (the default) costs one context-variable read per mark: :func:`span` returns a
shared do-nothing context manager and :func:`lap` returns at once. A harness records one query
with::

    with recording() as recorder:
        retriever.retrieve(query, top_k)
    recorder.spans  # tuple of Span: stage, parent, start/end (perf_counter_ns)

Threads: a thread started by the retriever records into the query's recorder only when its
callable is wrapped by :func:`carry` (``retrievers.timeouts`` and the hybrid's leg pool do), and
its spans then nest under the span that was open where it was started. A span that ends after
its query's recording ended (a timed-out strategy finishing in the background) is dropped.
Recording never changes what a retriever computes: it only reads clocks.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import ParamSpec, TypeVar

__all__ = ["STAGES", "Span", "SpanRecorder", "carry", "lap", "recording", "span"]

STAGES: frozenset[str] = frozenset(
    {
        "encode",  # query embedding (the kernel's encode)
        "vector",  # a vector index search
        "bm25",  # a BM25 index search or BM25 scoring
        "legs",  # hybrid: both legs searched in parallel threads (vector, bm25 inside)
        "seeds",  # graph: seed lists fused
        "fusion",  # lists fused into one (hybrid, multi-strategy)
        "traverse",  # graph walk or hierarchical descent (hop / global / round inside)
        "global",  # hierarchical: the global search that seeds the descent
        "hop",  # graph: one hop of the walk
        "round",  # hierarchical: one popped directory
        "analysis",  # multi-strategy: query analysis and plans
        "strategies",  # multi-strategy: the planned strategies, run concurrently
        "strategy",  # one strategy's search (detail: its name)
        "parents",  # chunk rows resolved to their documents
        "rerank",  # one reranker call
        "llm",  # one chat-completion call
    }
)
"""The stage names a span may have."""

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class Span:
    """One recorded stage: ``index`` in its query's recording, ``parent`` (an index, or -1 for a
    top-level span), clock times in ``time.perf_counter_ns`` nanoseconds."""

    index: int
    parent: int
    stage: str
    detail: str
    start_ns: int
    end_ns: int

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


class SpanRecorder:
    """The spans of one query (see the module docstring); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[
            int, tuple[int, str, str, int, bool]
        ] = {}  # index -> parent, stage, detail, start, lap
        self._done: list[tuple[int, int, str, str, int, int]] = []  # Span fields, made when asked
        self._count = 0
        self.closed = False
        self.start_ns = time.perf_counter_ns()
        self.end_ns = self.start_ns
        #: time.time_ns() - perf_counter_ns() at the start: turns span times into epoch times
        self.epoch_offset_ns = time.time_ns() - self.start_ns

    @property
    def spans(self) -> tuple[Span, ...]:
        """The finished spans, by index (start order)."""
        with self._lock:
            return tuple(Span(*fields) for fields in sorted(self._done))

    def begin(self, parent: int, stage: str, detail: str, is_lap: bool) -> int:
        if stage not in STAGES:
            raise ValueError(f"span stage {stage!r} is not one of {sorted(STAGES)}")
        with self._lock:
            index = self._count
            self._count += 1
            self._open[index] = (parent, stage, detail, time.perf_counter_ns(), is_lap)
        return index

    def end(self, index: int) -> None:
        now = time.perf_counter_ns()
        with self._lock:
            parent, stage, detail, start, _ = self._open.pop(index)
            if not self.closed:
                self._done.append((index, parent, stage, detail, start, now))

    def parent_of_open(self, index: int) -> int | None:
        """The parent of open span ``index`` when it is a lap; None otherwise."""
        with self._lock:
            entry = self._open.get(index)
        return entry[0] if entry is not None and entry[4] else None

    def close(self) -> None:
        with self._lock:
            self.end_ns = time.perf_counter_ns()
            self.closed = True


_RECORDER: contextvars.ContextVar[SpanRecorder | None] = contextvars.ContextVar(
    "retrievers_span_recorder", default=None
)
_PARENT: contextvars.ContextVar[int] = contextvars.ContextVar("retrievers_span_parent", default=-1)


class _NoSpan:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


_NO_SPAN = _NoSpan()


class _OpenSpan:
    def __init__(self, recorder: SpanRecorder, stage: str, detail: str) -> None:
        self.recorder = recorder
        self.stage = stage
        self.detail = detail
        self.index = -1
        self.token: contextvars.Token[int] | None = None

    def __enter__(self) -> None:
        self.index = self.recorder.begin(_PARENT.get(), self.stage, self.detail, False)
        self.token = _PARENT.set(self.index)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        # a lap still open inside this span ends with it
        current = _PARENT.get()
        while current != self.index:
            parent = self.recorder.parent_of_open(current)
            if parent is None:
                break
            self.recorder.end(current)
            current = parent
        self.recorder.end(self.index)
        assert self.token is not None
        _PARENT.reset(self.token)


def span(stage: str, detail: str = "") -> _NoSpan | _OpenSpan:
    """A context manager recording ``stage`` for its block (nothing when nobody records)."""
    recorder = _RECORDER.get()
    if recorder is None:
        return _NO_SPAN
    return _OpenSpan(recorder, stage, detail)


def lap(stage: str, detail: str = "") -> None:
    """End the lap open here (if any) and start a new ``stage`` lap; the enclosing :func:`span`
    ends the last one. Call it only inside a ``span`` block (here or in a caller: the hierarchical
    retriever's ``traverse`` span encloses the descent's laps); a lap with no enclosing span would
    stay open until the recording ends, and is then dropped."""
    recorder = _RECORDER.get()
    if recorder is None:
        return
    current = _PARENT.get()
    parent = recorder.parent_of_open(current) if current >= 0 else None
    if parent is not None:  # the previous lap: end it, start the new one beside it
        recorder.end(current)
    else:
        parent = current
    _PARENT.set(recorder.begin(parent, stage, detail, True))


def carry(call: Callable[P, T]) -> Callable[P, T]:
    """``call`` run in a copy of the caller's context: in another thread, its spans go to the
    caller's recording, under the span open where ``carry`` was called."""
    if _RECORDER.get() is None:
        return call
    context = contextvars.copy_context()

    def carried(*args: P.args, **kwargs: P.kwargs) -> T:
        return context.run(call, *args, **kwargs)

    return carried


@contextmanager
def recording() -> Iterator[SpanRecorder]:
    """Record the spans of the block (one query) into a new :class:`SpanRecorder`."""
    recorder = SpanRecorder()
    token = _RECORDER.set(recorder)
    parent = _PARENT.set(-1)
    try:
        yield recorder
    finally:
        recorder.close()
        _PARENT.reset(parent)
        _RECORDER.reset(token)
