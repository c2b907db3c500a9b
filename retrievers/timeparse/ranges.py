"""Time ranges and the calendar rules that resolve a time expression into them (see the rules in
:mod:`retrievers.timeparse`): :class:`TimeRange` (half-open, epoch seconds), :class:`TimeContext`
(the reference time, the scope's earliest time, the zone), :data:`RESOLVERS` (kind -> ranges) and
:func:`in_ranges`."""

from __future__ import annotations

import calendar
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo

import numpy as np
import numpy.typing as npt

__all__ = ["RESOLVERS", "TimeContext", "TimeRange", "in_ranges"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TimeRange:
    """Half-open range ``[start, end)`` of epoch seconds."""

    start: float
    end: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.end <= self.start:
            raise ValueError(f"TimeRange needs finite start < end, got [{self.start}, {self.end})")


@dataclass(frozen=True)
class TimeContext:
    """What relative expressions resolve against: ``reference`` ("now" for the query) and the
    scope's ``earliest`` time (for month-only expressions); ``tz`` for absolute dates."""

    reference: datetime | None
    earliest: datetime | None = None
    tz: tzinfo = UTC

    def __post_init__(self) -> None:
        for name in ("reference", "earliest"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"TimeContext.{name} must be timezone-aware, got {value!r}")


def _day_range(day: date, tz: tzinfo) -> TimeRange:
    start = datetime(day.year, day.month, day.day, tzinfo=tz)
    return TimeRange(start.timestamp(), (start + timedelta(days=1)).timestamp())


def _days_range(first: date, n_days: int, tz: tzinfo) -> TimeRange:
    start = datetime(first.year, first.month, first.day, tzinfo=tz)
    return TimeRange(start.timestamp(), (start + timedelta(days=n_days)).timestamp())


def _month_range(year: int, month: int, tz: tzinfo) -> TimeRange:
    start = datetime(year, month, 1, tzinfo=tz)
    next_year, next_month = (year + 1, 1) if month == 12 else (year, month + 1)
    return TimeRange(start.timestamp(), datetime(next_year, next_month, 1, tzinfo=tz).timestamp())


def _year_range(year: int, tz: tzinfo) -> TimeRange:
    return TimeRange(
        datetime(year, 1, 1, tzinfo=tz).timestamp(), datetime(year + 1, 1, 1, tzinfo=tz).timestamp()
    )


def _shift_months(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


def _local_reference(context: TimeContext) -> datetime:
    if context.reference is None:  # TimeExpression.resolve never gets here without one
        raise ValueError("a relative time expression needs TimeContext.reference")
    return context.reference.astimezone(context.tz)


def _unit_ago(unit: int, amount: int, context: TimeContext) -> TimeRange:
    """The calendar unit (0 day, 1 week, 2 month, 3 year) containing reference - amount units."""
    ref = _local_reference(context)
    today = ref.date()
    if unit == 0:
        return _day_range(today - timedelta(days=amount), context.tz)
    if unit == 1:
        monday = today - timedelta(days=today.weekday()) - timedelta(weeks=amount)
        return _days_range(monday, 7, context.tz)
    if unit == 2:
        year, month = _shift_months(ref.year, ref.month, -amount)
        return _month_range(year, month, context.tz)
    return _year_range(ref.year - amount, context.tz)


def _resolve_date(values: tuple[int, ...], context: TimeContext) -> tuple[TimeRange, ...]:
    year, month, day = values
    try:
        return (_day_range(date(year, month, day), context.tz),)
    except ValueError:
        return ()


def _resolve_month_year(values: tuple[int, ...], context: TimeContext) -> tuple[TimeRange, ...]:
    year, month = values
    return (_month_range(year, month, context.tz),)


def _resolve_year(values: tuple[int, ...], context: TimeContext) -> tuple[TimeRange, ...]:
    return (_year_range(values[0], context.tz),)


def _resolve_month_only(values: tuple[int, ...], context: TimeContext) -> tuple[TimeRange, ...]:
    ref = _local_reference(context)
    first_year = context.earliest.astimezone(context.tz).year if context.earliest is not None else ref.year
    return tuple(_month_range(year, values[0], context.tz) for year in range(first_year, ref.year + 1))


def _resolve_day_offset(values: tuple[int, ...], context: TimeContext) -> tuple[TimeRange, ...]:
    return (_unit_ago(0, values[0], context),)


def _resolve_ago(values: tuple[int, ...], context: TimeContext) -> tuple[TimeRange, ...]:
    amount, unit = values
    return (_unit_ago(unit, amount, context),)


def _resolve_past(values: tuple[int, ...], context: TimeContext) -> tuple[TimeRange, ...]:
    amount, unit = values
    ref = _local_reference(context)
    if unit <= 1:
        start = ref - timedelta(days=amount * (7 if unit == 1 else 1))
    else:
        months = amount * (12 if unit == 3 else 1)
        year, month = _shift_months(ref.year, ref.month, -months)
        day = min(ref.day, calendar.monthrange(year, month)[1])
        start = ref.replace(year=year, month=month, day=day)
    # the end is inclusive of the reference instant itself
    return (TimeRange(start.timestamp(), ref.timestamp() + 1.0),)


def _resolve_last_weekday(values: tuple[int, ...], context: TimeContext) -> tuple[TimeRange, ...]:
    today = _local_reference(context).date()
    back = (today.weekday() - values[0]) % 7 or 7
    return (_day_range(today - timedelta(days=back), context.tz),)


RESOLVERS: dict[str, Callable[[tuple[int, ...], TimeContext], tuple[TimeRange, ...]]] = {
    "iso_date": _resolve_date,
    "day_month_year": _resolve_date,
    "month_day_year": _resolve_date,
    "month_year": _resolve_month_year,
    "year": _resolve_year,
    "month_only": _resolve_month_only,
    "relative_day": _resolve_day_offset,
    "ago": _resolve_ago,
    "last_unit": _resolve_ago,
    "this_unit": _resolve_ago,
    "past_n": _resolve_past,
    "last_weekday": _resolve_last_weekday,
}


def in_ranges(epoch_seconds: FloatArray, ranges: Sequence[TimeRange]) -> npt.NDArray[np.bool_]:
    """Which entries fall inside any of ``ranges`` (NaN never does)."""
    inside = np.zeros(epoch_seconds.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        for time_range in ranges:
            inside |= (epoch_seconds >= time_range.start) & (epoch_seconds < time_range.end)
    return inside
