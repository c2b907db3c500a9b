"""Time expressions in queries: :data:`TIME_PATTERNS` finds them, :func:`extract_time_expressions`
gives each as a :class:`TimeExpression`, which resolves into ranges against a
:class:`~retrievers.timeparse.ranges.TimeContext` (see :mod:`retrievers.timeparse`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from retrievers.timeparse.ranges import RESOLVERS, TimeContext, TimeRange
from retrievers.timeparse.words import MONTHS, NUMBER_WORDS, UNITS, WEEKDAYS

__all__ = ["TIME_PATTERNS", "TimeExpression", "extract_time_expressions", "resolve_all"]


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
        resolver = RESOLVERS[self.kind]
        if self.relative and context.reference is None:
            return ()
        return resolver(self.values, context)


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
