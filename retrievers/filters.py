"""Metadata filters: which store rows a search may return, decided before any top-k is taken.

A :class:`MetadataFilter` is a validated config value with up to three conditions, all of which
must hold (AND):

* ``doc_ids``: the document is one of these ids (in a chunked store a chunk passes when its
  parent document, or the chunk id itself, is listed);
* ``metadata``: ``{key: value}`` — ``metadata[key]`` equals ``value`` (compared as strings, as
  the store's scoping does), or is any of the values when a list is given; every key must match;
* ``time_range``: ``{start, end, field}`` — the time in ``metadata[field]`` (default
  ``timestamp``; ISO 8601 or epoch seconds, parsed by :func:`retrievers.timeparse.stamps.parse_timestamp`)
  lies in ``[start, end]`` (either bound may be null = open). Rows without a parseable time
  fail the condition.

:func:`filter_mask` turns a filter into a boolean mask over a store's rows, which retrievers hand
to the indexes (``ExactVectorIndex.search(mask=)``, ``BM25Index.search(mask=)``): filtering is
part of the search, so a filtered top-k holds k allowed documents whenever k exist (filtering a
top-k list afterwards would return fewer). A condition that names something the store does not
have at all — a metadata key no document carries, a time field no document has a time in, ids
none of which exist — matches nothing: the result is empty and a :class:`FilterWarning` says
why, rather than an error in the middle of a run.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from retrievers.params import ParamError, Params, param
from retrievers.timeparse.stamps import parse_timestamp

if TYPE_CHECKING:
    from retrievers.store import ContextStore

__all__ = ["FilterWarning", "MetadataFilter", "TimeWindow", "filter_mask"]

log = logging.getLogger(__name__)

BoolArray = npt.NDArray[np.bool_]
_SCALARS = (str, int, float, bool)


class FilterWarning(UserWarning):
    """A filter condition that cannot match anything in this store."""


def _epoch(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{where} must be an ISO 8601 string, epoch seconds or null, got {value!r}")
    parsed = parse_timestamp(value, tz=UTC)
    if parsed is None:
        raise ValueError(f"{where} is not an ISO 8601 time or epoch seconds: {value!r}")
    return parsed.timestamp()


@dataclass(frozen=True)
class TimeWindow(Params):
    """``start <= time(metadata[field]) <= end``; bounds are ISO 8601 strings (naive = UTC) or
    epoch seconds, either may be None (open); ``start <= end``."""

    SECTION = "filters.time_range"

    start: str | float | None = param(None)
    end: str | float | None = param(None)
    field: str = param("timestamp", non_empty=True, doc="the metadata key holding the time")

    def check(self) -> None:
        low, high = self.bounds
        if low is None and high is None:
            raise self.fail("start", "or end must be given (or leave time_range null)")
        if low is not None and high is not None and low > high:
            raise self.fail("start", f"{self.start!r} is after end {self.end!r}")

    @property
    def bounds(self) -> tuple[float | None, float | None]:
        """(start, end) as epoch seconds."""
        return _epoch(self.start, "filters.time_range.start"), _epoch(self.end, "filters.time_range.end")


@dataclass(frozen=True)
class MetadataFilter(Params):
    """Conditions a row must meet to be searched (all of them); None / empty = no condition.
    ``metadata`` values are compared as strings; a list means any of them."""

    SECTION = "filters"

    doc_ids: tuple[str, ...] | None = param(None, non_empty=True)
    metadata: Mapping[str, Any] = param(factory=dict)
    time_range: TimeWindow | None = param(None)

    def check(self) -> None:
        cleaned: dict[str, tuple[str, ...]] = {}
        for key, value in self.metadata.items():
            if not isinstance(key, str) or not key:
                raise self.fail("metadata", f"keys must be non-empty strings, got {key!r}")
            values = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]
            if not values or any(not isinstance(item, _SCALARS) for item in values):
                raise ParamError(
                    f"filters.metadata.{key}",
                    f"filters.metadata.{key} must be a string, number, boolean or a non-empty list of them, got {value!r}",
                )
            cleaned[key] = tuple(str(item) for item in values)
        object.__setattr__(self, "metadata", cleaned)

    @property
    def is_empty(self) -> bool:
        return self.doc_ids is None and not self.metadata and self.time_range is None


def _warn(message: str) -> None:
    log.warning("%s", message)
    warnings.warn(message, FilterWarning, stacklevel=3)


def filter_mask(store: ContextStore, filters: MetadataFilter) -> BoolArray:
    """Rows of ``store`` meeting every condition of ``filters`` (combined with the store's own
    restriction, ``store.allowed``). Warns (:class:`FilterWarning`) for a condition that cannot
    match anything in this store; see the module docstring."""
    n_rows = len(store.documents)
    mask = (
        np.ones(n_rows, dtype=np.bool_) if store.allowed is None else np.array(store.allowed, dtype=np.bool_)
    )
    if filters.doc_ids is not None:
        wanted = set(filters.doc_ids)
        known = wanted & (set(store.parent_ids) | set(store.doc_ids))
        if not known:
            _warn(f"filters.doc_ids: none of the {len(wanted)} ids is in the store; nothing matches")
        elif len(known) < len(wanted):
            log.info(
                "filters.doc_ids: %d of %d ids are not in the store", len(wanted) - len(known), len(wanted)
            )
        parent_ids = store.parent_ids
        mask &= np.fromiter(
            (
                doc.id in wanted or parent_ids[parent] in wanted
                for doc, parent in zip(store.documents, store.parent_of, strict=True)
            ),
            dtype=np.bool_,
            count=n_rows,
        )
    for key, values in filters.metadata.items():
        present = np.fromiter((key in doc.metadata for doc in store.documents), dtype=np.bool_, count=n_rows)
        if not present.any():
            _warn(f"filters.metadata: no document has metadata key {key!r}; nothing matches")
        wanted_values = set(values)
        mask &= np.fromiter(
            (key in doc.metadata and str(doc.metadata[key]) in wanted_values for doc in store.documents),
            dtype=np.bool_,
            count=n_rows,
        )
    if filters.time_range is not None:
        window = filters.time_range
        low, high = window.bounds
        times = np.full(n_rows, math.nan)
        for row, doc in enumerate(store.documents):
            parsed = parse_timestamp(doc.metadata.get(window.field), tz=UTC)
            if parsed is not None:
                times[row] = parsed.timestamp()
        if np.isnan(times).all():
            _warn(
                f"filters.time_range: no document has a time in metadata key {window.field!r}; nothing matches"
            )
        inside = ~np.isnan(times)
        if low is not None:
            inside &= times >= low
        if high is not None:
            inside &= times <= high
        mask &= inside
    return mask
