"""One timestamp value into an aware datetime: epoch numbers (s or ms), ISO 8601 and LoCoMo's
session strings (``"1:56 pm on 8 May, 2023"``), and time zone names (see :mod:`retrievers.timeparse`)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from retrievers.timeparse.words import MONTHS

__all__ = ["EPOCH_LIMIT_SECONDS", "parse_timestamp", "parse_timezone"]

#: epoch values beyond this many seconds from 1970 are refused (year ~5138): most likely ms
EPOCH_LIMIT_SECONDS = 1e11
_EPOCH_UNITS: dict[str, float] = {"s": 1.0, "ms": 1000.0}


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
