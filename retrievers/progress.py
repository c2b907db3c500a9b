"""Progress of long library steps (a store's build phases, a BM25 index), drawn by whoever calls.

A step takes ``show_progress``: ``False`` draws nothing, ``True`` a tqdm bar on stderr (when tqdm,
which sentence-transformers brings, is installed), or a :class:`ProgressFactory` of the caller's:
a callable ``(total, desc, unit)`` giving a context manager with ``update(n)`` and ``set_postfix_str(text)`` (what it is doing now), as a
tqdm bar is
(a harness that logs plain lines where stderr is not a terminal passes one). The step enters the
bar for its duration; an error leaves it through ``__exit__`` with the exception."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol

__all__ = ["ProgressBar", "ProgressFactory", "ShowProgress", "open_bar"]


class ProgressBar(Protocol):
    def update(self, n: int = 1) -> object: ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> object: ...

    def __enter__(self) -> Any: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> object: ...


class ProgressFactory(Protocol):
    def __call__(self, total: int | None, desc: str, unit: str) -> ProgressBar: ...


ShowProgress = bool | ProgressFactory


def open_bar(
    show: ShowProgress, total: int | None, desc: str, unit: str, **tqdm_options: Any
) -> ProgressBar | None:
    """The bar ``show`` asks for, or None: the caller's factory, tqdm's bar (``tqdm_options`` go to
    it), or nothing (``False``, or ``True`` without tqdm installed)."""
    if show is False:
        return None
    if show is not True:
        return show(total, desc, unit)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    bar: ProgressBar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, **tqdm_options)
    return bar
