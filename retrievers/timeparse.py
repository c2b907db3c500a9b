"""Time for retrieval: document timestamps parsed at store build, time expressions in queries.

Two halves, one concept ("turn text into instants and ranges"):

* **Document timestamps.** :class:`DocumentTimes` parses, once per store build, the first present
  field of :attr:`TimestampConfig.fields` (``metadata.timestamp``, LoCoMo's ``session_date_time``)
  into aware datetimes and keeps one float64 array of epoch seconds per store row (NaN = no usable
  time). Accepted values, and nothing else (values are counted, never guessed):

  - epoch numbers (int/float, or a numeric string), in seconds (``epoch_unit: s``) or
    milliseconds (``ms``); a value outside +-1e11 s (about year 5000) is refused, since it is
    most likely milliseconds read as seconds;
  - ISO 8601 (``2023-05-08``, ``2023-05-08T13:56:00Z``, ``...+02:00``; ``datetime.fromisoformat``);
  - LoCoMo session strings: ``"1:56 pm on 8 May, 2023"``.

  Naive values take ``default_timezone`` (UTC unless configured). The counts (parsed, missing,
  unparseable per field, a few examples) are kept in :attr:`DocumentTimes.report`, logged at
  build when something did not parse, and saved with the array (``.npy`` + JSON, no pickle).

* **Query time expressions.** :func:`extract_time_expressions` finds absolute dates ("8 May 2023",
  "May 8, 2023", "2023-05-08", "September 2023", "in 2022", "in August") and relative ones
  ("yesterday", "last week", "two months ago", "past 3 days", "last Friday") with a table of
  patterns (:data:`TIME_PATTERNS`). Each :class:`TimeExpression` is resolved into half-open
  ranges of epoch seconds against a :class:`TimeContext` (the reference time comes from retriever
  configuration or from the scope's latest document, never from query metadata).

Calendar rules for relative expressions (reference time ``r``, in its own time zone):
``yesterday``/``today`` are calendar days; ``N days|weeks|months|years ago`` is the calendar day /
Monday-to-Sunday week / month / year containing ``r`` minus N units; ``last week|month|year`` is
``1 ... ago``; ``this week|month|year`` contains ``r``; ``past|last N units`` is ``[r - N units, r]``;
``last <weekday>`` is the latest such day strictly before ``r``'s day. A month without a year
("in August") is that month in every year from the scope's earliest to its latest time.
"""

from __future__ import annotations

import calendar
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import numpy.typing as npt

from retrievers.params import Params, param
from retrievers.types import Document

__all__ = [
    "TIME_PATTERNS",
    "DocumentTimes",
    "TimeContext",
    "TimeExpression",
    "TimeRange",
    "TimestampConfig",
    "extract_time_expressions",
    "in_ranges",
    "parse_timestamp",
    "parse_timezone",
    "resolve_all",
]

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]

#: epoch values beyond this many seconds from 1970 are refused (year ~5138): most likely ms
EPOCH_LIMIT_SECONDS = 1e11
_EPOCH_UNITS: dict[str, float] = {"s": 1.0, "ms": 1000.0}
_MAX_EXAMPLES = 5

MONTHS: dict[str, int] = {
    **{name.lower(): number for number, name in enumerate(calendar.month_name) if name},
    **{name.lower(): number for number, name in enumerate(calendar.month_abbr) if name},
    "sept": 9,
}
WEEKDAYS: dict[str, int] = {name.lower(): number for number, name in enumerate(calendar.day_name)}
NUMBER_WORDS: dict[str, int] = {
    "a": 1,
    "an": 1,
    "one": 1,
    "a couple of": 2,
    "couple of": 2,
    "two": 2,
    "three": 3,
    "a few": 3,
    "few": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
UNITS = ("day", "week", "month", "year")


def parse_timezone(name: str) -> tzinfo:
    """``UTC``, a fixed offset (``+02:00``, ``-0530``) or an IANA name (``Europe/Berlin``)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"timezone must be 'UTC', an offset such as '+02:00' or an IANA name, got {name!r}")
    text = name.strip()
    if text.upper() in ("UTC", "Z"):
        return UTC
    offset = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", text)
    if offset:
        sign = 1 if offset.group(1) == "+" else -1
        hours, minutes = int(offset.group(2)), int(offset.group(3))
        if hours > 23 or minutes > 59:
            raise ValueError(f"timezone offset {text!r} is out of range (-23:59 .. +23:59)")
        return timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown timezone {text!r}; use 'UTC', an offset such as '+02:00' or an IANA name"
        ) from None


# --------------------------------------------------------------------------------------------
# Document timestamps
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimestampConfig(Params):
    """Which metadata fields hold a document's time (first present field wins; an unparseable
    value is counted and the next field is tried), the zone of naive values, the epoch unit."""

    SECTION = "store.timestamps"

    fields: tuple[str, ...] = param(("timestamp", "session_date_time"), non_empty=True, unique=True)
    default_timezone: str = param("UTC", doc="UTC, an offset such as +02:00, or an IANA name")
    epoch_unit: Literal["s", "ms"] = param("s")

    def check(self) -> None:
        if any(not name for name in self.fields):
            raise self.fail("fields", f"must be a non-empty list of metadata keys, got {list(self.fields)}")
        try:
            parse_timezone(self.default_timezone)
        except ValueError as error:
            raise self.fail("default_timezone", f"is not a time zone: {error}") from None

    @property
    def tz(self) -> tzinfo:
        return parse_timezone(self.default_timezone)


_LOCOMO_RE = re.compile(
    r"(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([a-z]+)\.?,?\s+(\d{4})", re.IGNORECASE
)
_NUMBER_RE = re.compile(r"[+-]?\d+(?:\.\d+)?")
_ISO_START_RE = re.compile(r"\d{4}-\d{2}")


def _from_epoch(seconds: float) -> datetime | None:
    if not math.isfinite(seconds) or abs(seconds) > EPOCH_LIMIT_SECONDS:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


def _from_locomo(match: re.Match[str], tz: tzinfo) -> datetime | None:
    hour, minute, half, day, month_name, year = match.groups()
    month = MONTHS.get(month_name.lower())
    hour_12 = int(hour)
    if month is None or not 1 <= hour_12 <= 12:
        return None
    hour_24 = hour_12 % 12 + (12 if half.lower() == "p" else 0)
    try:
        return datetime(int(year), month, int(day), hour_24, int(minute), tzinfo=tz)
    except ValueError:  # 31 February and the like
        return None


def parse_timestamp(value: object, *, tz: tzinfo = UTC, epoch_unit: str = "s") -> datetime | None:
    """An aware datetime for ``value``, or None when it is none of the accepted forms (see the
    module docstring). Booleans, NaN and empty strings give None."""
    scale = _EPOCH_UNITS.get(epoch_unit)
    if scale is None:
        raise ValueError(f"epoch_unit must be one of {sorted(_EPOCH_UNITS)}, got {epoch_unit!r}")
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _from_epoch(float(value) / scale)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if _NUMBER_RE.fullmatch(text):
        return _from_epoch(float(text) / scale)
    locomo = _LOCOMO_RE.fullmatch(text)
    if locomo:
        return _from_locomo(locomo, tz)
    if _ISO_START_RE.match(text):
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=tz)
    return None


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


class DocumentTimes:
    """Epoch seconds (float64, NaN = no time) per store row, and the parse report."""

    ARRAY_FILE = "epoch_seconds.npy"
    REPORT_FILE = "report.json"

    def __init__(self, epoch_seconds: npt.ArrayLike, report: Mapping[str, Any]) -> None:
        array = np.asarray(epoch_seconds, dtype=np.float64)
        if array.ndim != 1:
            raise ValueError(f"epoch_seconds must be 1-D, got shape {array.shape}")
        if np.isinf(array).any():
            raise ValueError("epoch_seconds must be finite or NaN (missing), never infinite")
        self.epoch_seconds: FloatArray = array
        self.report: dict[str, Any] = dict(report)

    def __len__(self) -> int:
        return int(self.epoch_seconds.shape[0])

    @classmethod
    def build(cls, documents: Sequence[Document], config: TimestampConfig) -> DocumentTimes:
        """Parse every document's time; counts go to :attr:`report` and a warning is logged when
        values did not parse."""
        tz = config.tz
        times = np.full(len(documents), np.nan, dtype=np.float64)
        by_field = {name: {"parsed": 0, "unparseable": 0} for name in config.fields}
        examples: list[dict[str, str]] = []
        n_unparseable_docs = 0
        for row, doc in enumerate(documents):
            had_bad_value = False
            for name in config.fields:
                value = doc.metadata.get(name)
                if _is_missing(value):
                    continue
                parsed = parse_timestamp(value, tz=tz, epoch_unit=config.epoch_unit)
                if parsed is None:
                    by_field[name]["unparseable"] += 1
                    had_bad_value = True
                    if len(examples) < _MAX_EXAMPLES:
                        examples.append({"doc_id": doc.id, "field": name, "value": str(value)[:80]})
                    continue
                by_field[name]["parsed"] += 1
                times[row] = parsed.timestamp()
                break
            if had_bad_value and math.isnan(times[row]):
                n_unparseable_docs += 1
        n_parsed = int(np.count_nonzero(~np.isnan(times)))
        report: dict[str, Any] = {
            "fields": list(config.fields),
            "default_timezone": config.default_timezone,
            "epoch_unit": config.epoch_unit,
            "n_documents": len(documents),
            "parsed": n_parsed,
            "unparseable": n_unparseable_docs,
            "missing": len(documents) - n_parsed - n_unparseable_docs,
            "by_field": by_field,
            "examples": examples,
        }
        bad_values = sum(counts["unparseable"] for counts in by_field.values())
        if bad_values:
            log.warning(
                "timestamps: %d value(s) did not parse (%d documents left without a time); "
                "examples: %s. Accepted: epoch %s, ISO 8601, '1:56 pm on 8 May, 2023'",
                bad_values,
                n_unparseable_docs,
                examples,
                config.epoch_unit,
            )
        return cls(times, report)

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / self.ARRAY_FILE, self.epoch_seconds, allow_pickle=False)
        (folder / self.REPORT_FILE).write_text(json.dumps(self.report, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, n_documents: int, *, mmap: bool = True) -> DocumentTimes:
        folder = Path(folder)
        array_path = folder / cls.ARRAY_FILE
        if not array_path.is_file():
            raise ValueError(
                f"{folder}: missing {cls.ARRAY_FILE}; the store was built without timestamps, rebuild it"
            )
        times = np.load(array_path, mmap_mode="r" if mmap else None, allow_pickle=False)
        if times.dtype != np.float64 or times.shape != (n_documents,):
            raise ValueError(
                f"{array_path}: expected float64 of shape ({n_documents},), got {times.dtype} {times.shape}"
            )
        report = json.loads((folder / cls.REPORT_FILE).read_text(encoding="utf-8"))
        return cls(times, report)

    def has_time(self, mask: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.bool_]:
        """Rows with a time (and allowed by ``mask``)."""
        known = ~np.isnan(self.epoch_seconds)
        return known if mask is None else known & mask

    def span(self, mask: npt.NDArray[np.bool_] | None = None) -> tuple[float, float] | None:
        """(earliest, latest) epoch seconds over the rows allowed by ``mask``; None if none has a time."""
        rows = self.has_time(mask)
        if not rows.any():
            return None
        values = self.epoch_seconds[rows]
        return float(values.min()), float(values.max())


# --------------------------------------------------------------------------------------------
# Time expressions in queries
# --------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class TimeExpression:
    """One time expression found in a query: the matched ``text``, the pattern ``kind`` that
    found it and its parsed ``values`` (numbers; meaning by kind)."""

    text: str
    kind: str
    values: tuple[int, ...] = ()
    start: int = 0  # character offset in the query
    relative: bool = field(default=False)

    def resolve(self, context: TimeContext) -> tuple[TimeRange, ...]:
        """Ranges this expression denotes; empty when it needs a reference time there is none of."""
        resolver = _RESOLVERS[self.kind]
        if self.relative and context.reference is None:
            return ()
        return resolver(self.values, context)


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


_RESOLVERS: dict[str, Callable[[tuple[int, ...], TimeContext], tuple[TimeRange, ...]]] = {
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

_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_NUMBER = (
    r"(?P<amount>\d{1,3}|"
    + "|".join(sorted((re.escape(w) for w in NUMBER_WORDS), key=len, reverse=True))
    + r")"
)
_UNIT = r"(?P<unit>day|week|month|year)s?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"

#: (kind, pattern). Earlier entries win where matches overlap; all are case-insensitive.
TIME_PATTERNS: tuple[tuple[str, str], ...] = (
    ("iso_date", r"\b(?P<year>\d{4})-(?P<month_number>\d{1,2})-(?P<day>\d{1,2})\b"),
    ("day_month_year", rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b"),
    ("month_day_year", rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b"),
    ("month_year", rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b"),
    ("past_n", rf"\b(?:past|last|previous)\s+{_NUMBER}\s+{_UNIT}\b"),
    ("ago", rf"\b{_NUMBER}\s+{_UNIT}\s+ago\b"),
    ("last_unit", r"\b(?:last|previous)\s+(?P<unit>day|week|month|year)\b"),
    ("this_unit", r"\bthis\s+(?P<unit>week|month|year)\b"),
    ("last_weekday", r"\blast\s+(?P<weekday>" + "|".join(WEEKDAYS) + r")\b"),
    ("relative_day", r"\b(?P<word>the day before yesterday|yesterday|today|tonight)\b"),
    ("year", rf"(?<![\w.$-]){_YEAR}(?![\w-]|\.\d)"),
    ("month_only", rf"\b(?:in|during|since|until|by|of|last|this|early|late|mid)\s+{_MONTH}(?!\w)"),
)
_COMPILED = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in TIME_PATTERNS)
_RELATIVE_KINDS = frozenset(
    {"relative_day", "ago", "last_unit", "this_unit", "past_n", "last_weekday", "month_only"}
)
_DAY_WORDS = {"the day before yesterday": 2, "yesterday": 1, "today": 0, "tonight": 0}


def _amount(text: str) -> int:
    word = " ".join(text.lower().split())
    return int(word) if word.isdigit() else NUMBER_WORDS[word]


def _values(kind: str, groups: Mapping[str, str | None]) -> tuple[int, ...] | None:
    """The numbers an expression of ``kind`` carries, or None when they are not a valid time."""

    def month() -> int:
        return MONTHS[str(groups["month"]).lower()]

    def unit() -> int:
        return UNITS.index(str(groups["unit"]).lower())

    if kind == "iso_date":
        return int(str(groups["year"])), int(str(groups["month_number"])), int(str(groups["day"]))
    if kind in ("day_month_year", "month_day_year"):
        return int(str(groups["year"])), month(), int(str(groups["day"]))
    if kind == "month_year":
        return int(str(groups["year"])), month()
    if kind == "year":
        return (int(str(groups["year"])),)
    if kind == "month_only":
        # "may" alone is a verb far more often than a month: only the prepositional forms count
        return (month(),)
    if kind == "relative_day":
        return (_DAY_WORDS[" ".join(str(groups["word"]).lower().split())],)
    if kind in ("ago", "past_n"):
        amount = _amount(str(groups["amount"]))
        return (amount, unit()) if amount > 0 else None
    if kind == "last_unit":
        return 1, unit()
    if kind == "this_unit":
        return 0, unit()
    if kind == "last_weekday":
        return (WEEKDAYS[str(groups["weekday"]).lower()],)
    raise KeyError(kind)


def extract_time_expressions(query: str) -> tuple[TimeExpression, ...]:
    """Time expressions in ``query``, in order of appearance; overlapping matches go to the
    earlier pattern of :data:`TIME_PATTERNS` ("8 May 2023" is one date, not a date and a year)."""
    taken: list[tuple[int, int]] = []
    found: list[TimeExpression] = []
    for kind, pattern in _COMPILED:
        for match in pattern.finditer(query):
            begin, end = match.span()
            if any(begin < other_end and other_begin < end for other_begin, other_end in taken):
                continue
            values = _values(kind, match.groupdict())
            if values is None:
                continue
            taken.append((begin, end))
            found.append(
                TimeExpression(
                    text=match.group(0),
                    kind=kind,
                    values=values,
                    start=begin,
                    relative=kind in _RELATIVE_KINDS,
                )
            )
    return tuple(sorted(found, key=lambda expression: expression.start))


def resolve_all(expressions: Iterable[TimeExpression], context: TimeContext) -> tuple[TimeRange, ...]:
    """Every range of every expression (relative ones only when there is a reference time)."""
    return tuple(time_range for expression in expressions for time_range in expression.resolve(context))


def in_ranges(epoch_seconds: FloatArray, ranges: Sequence[TimeRange]) -> npt.NDArray[np.bool_]:
    """Which entries fall inside any of ``ranges`` (NaN never does)."""
    inside = np.zeros(epoch_seconds.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        for time_range in ranges:
            inside |= (epoch_seconds >= time_range.start) & (epoch_seconds < time_range.end)
    return inside
