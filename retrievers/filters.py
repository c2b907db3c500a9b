"""Metadata filters: which store rows a search may return, decided before any top-k is taken.

A :class:`MetadataFilter` is a validated config value with up to three conditions, all of which
must hold (AND):

* ``doc_ids``: the document is one of these ids (in a chunked store a chunk passes when its
  parent document, or the chunk id itself, is listed);
* ``metadata``: ``{key: value}`` — ``metadata[key]`` equals ``value`` (compared as strings, as
  the store's scoping does), or is any of the values when a list is given; every key must match;
* ``time_range``: ``{start, end, field}`` — the time in ``metadata[field]`` (default
  ``timestamp``; ISO 8601 or epoch seconds, parsed by :func:`retrievers.timeparse.parse_timestamp`)
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
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from retrievers.timeparse import parse_timestamp

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
class TimeWindow:
    """``start <= time(metadata[field]) <= end``; bounds are ISO 8601 strings (naive = UTC) or
    epoch seconds, either may be None (open); ``start <= end``."""

    start: str | float | None = None
    end: str | float | None = None
    field: str = "timestamp"

    def __post_init__(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"filters.time_range.field must be a metadata key, got {self.field!r}")
        low, high = self.bounds
        if low is None and high is None:
            raise ValueError("filters.time_range needs a start, an end or both (or leave time_range null)")
        if low is not None and high is not None and low > high:
            raise ValueError(f"filters.time_range.start {self.start!r} is after end {self.end!r}")

    @property
    def bounds(self) -> tuple[float | None, float | None]:
        """(start, end) as epoch seconds."""
        return _epoch(self.start, "filters.time_range.start"), _epoch(self.end, "filters.time_range.end")


@dataclass(frozen=True)
class MetadataFilter:
    """Conditions a row must meet to be searched (all of them); None / empty = no condition."""

    doc_ids: tuple[str, ...] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    time_range: TimeWindow | None = None

    def __post_init__(self) -> None:
        if self.doc_ids is not None:
            if isinstance(self.doc_ids, str) or not isinstance(self.doc_ids, Sequence):
                raise ValueError(
                    f"filters.doc_ids must be a list of document ids or null, got {self.doc_ids!r}"
                )
            ids = tuple(self.doc_ids)
            if any(not isinstance(doc_id, str) or not doc_id for doc_id in ids):
                raise ValueError(f"filters.doc_ids must hold non-empty strings, got {list(ids)}")
            object.__setattr__(self, "doc_ids", ids)
        if not isinstance(self.metadata, Mapping):
            raise ValueError(f"filters.metadata must be a mapping {{key: value}}, got {self.metadata!r}")
        cleaned: dict[str, tuple[str, ...]] = {}
        for key, value in self.metadata.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"filters.metadata keys must be non-empty strings, got {key!r}")
            values = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]
            if not values or any(not isinstance(item, _SCALARS) for item in values):
                raise ValueError(
                    f"filters.metadata.{key} must be a string, number, boolean or a non-empty list of them, got {value!r}"
                )
            cleaned[key] = tuple(str(item) for item in values)
        object.__setattr__(self, "metadata", cleaned)
        if self.time_range is not None and not isinstance(self.time_range, TimeWindow):
            raise ValueError(f"filters.time_range must be a TimeWindow, got {self.time_range!r}")

    @property
    def is_empty(self) -> bool:
        return self.doc_ids is None and not self.metadata and self.time_range is None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> MetadataFilter:
        """Build from config data ``{doc_ids, metadata, time_range: {start, end, field}}``,
        rejecting unknown keys."""
        if not isinstance(values, Mapping):
            raise ValueError(
                f"filters must be a mapping {{doc_ids, metadata, time_range}} or null, got {values!r}"
            )
        allowed = {"doc_ids", "metadata", "time_range"}
        unknown = sorted(set(values) - allowed)
        if unknown:
            raise ValueError(f"unknown filters key(s) {unknown}; allowed: {sorted(allowed)}")
        window = values.get("time_range")
        if window is not None:
            if not isinstance(window, Mapping):
                raise ValueError(
                    f"filters.time_range must be a mapping {{start, end, field}}, got {window!r}"
                )
            extra = sorted(set(window) - {"start", "end", "field"})
            if extra:
                raise ValueError(
                    f"unknown filters.time_range key(s) {extra}; allowed: ['end', 'field', 'start']"
                )
            window = TimeWindow(**dict(window))
        return cls(
            doc_ids=values.get("doc_ids"),
            metadata=values.get("metadata") or {},
            time_range=window,
        )


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
