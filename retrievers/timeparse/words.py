"""The words time expressions and LoCoMo timestamps are made of: month and weekday names (English,
with abbreviations), number words, calendar units."""

from __future__ import annotations

import calendar

__all__ = ["MONTHS", "NUMBER_WORDS", "UNITS", "WEEKDAYS"]

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
