"""Timestamps parsed at store build (counted, never guessed) and time expressions in queries,
with every expected instant and range written out by hand."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from retrievers import ContextStore, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.timeparse.document_times import DocumentTimes, TimestampConfig
from retrievers.timeparse.expressions import TIME_PATTERNS, extract_time_expressions, resolve_all
from retrievers.timeparse.ranges import TimeContext, in_ranges
from retrievers.timeparse.stamps import parse_timestamp, parse_timezone


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# -- document timestamps ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1:56 pm on 8 May, 2023", utc(2023, 5, 8, 13, 56)),  # LoCoMo session string
        ("12:05 am on 1 January, 2022", utc(2022, 1, 1, 0, 5)),  # 12 am is midnight
        ("12:30 pm on 20 October, 2023", utc(2023, 10, 20, 12, 30)),  # 12 pm is noon
        ("9:48 AM on 8 July 2023", utc(2023, 7, 8, 9, 48)),  # case and a missing comma
        ("2023-05-08", utc(2023, 5, 8)),
        ("2023-05-08T13:56:00Z", utc(2023, 5, 8, 13, 56)),
        ("2023-05-08T15:56:00+02:00", utc(2023, 5, 8, 13, 56)),
        (1683554160, utc(2023, 5, 8, 13, 56)),
        (1683554160.5, utc(2023, 5, 8, 13, 56, 0) + timedelta(microseconds=500_000)),
        ("1683554160", utc(2023, 5, 8, 13, 56)),
    ],
)
def test_parse_timestamp_accepted_forms(value: object, expected: datetime) -> None:
    parsed = parse_timestamp(value)
    assert parsed is not None and parsed.tzinfo is not None
    assert parsed == expected


@pytest.mark.parametrize(
    "value",
    [
        "garbage",
        "",
        "   ",
        "8 May 2023",
        "1:56 pm on 31 February, 2023",
        "13:00 pm on 8 May, 2023",
        "2023-13-01",
        True,
        None,
        float("nan"),
        1683554160000,
        [2023],
    ],
)
def test_parse_timestamp_refuses_what_it_would_have_to_guess(value: object) -> None:
    # 1683554160000 is milliseconds read as seconds (year ~55,000): refused, not guessed
    assert parse_timestamp(value) is None


def test_milliseconds_and_zones_when_configured() -> None:
    assert parse_timestamp(1683554160000, epoch_unit="ms") == utc(2023, 5, 8, 13, 56)
    plus_two = parse_timezone("+02:00")
    assert parse_timestamp("2023-05-08T15:56:00", tz=plus_two) == utc(2023, 5, 8, 13, 56)
    assert parse_timestamp("3:56 pm on 8 May, 2023", tz=plus_two) == utc(2023, 5, 8, 13, 56)
    assert parse_timezone("Europe/Berlin").utcoffset(datetime(2023, 7, 1)) == timedelta(hours=2)
    assert parse_timezone("-0530") == timezone(-timedelta(hours=5, minutes=30))


def test_timestamp_config_bad_input() -> None:
    with pytest.raises(ValueError, match=r"unknown store.timestamps key\(s\) \['feilds'\]"):
        TimestampConfig.from_dict({"feilds": ["timestamp"]})
    with pytest.raises(ValueError, match="unknown timezone 'Mars/Olympus'"):
        TimestampConfig(default_timezone="Mars/Olympus")
    with pytest.raises(ValueError, match=r"epoch_unit must be one of \['s', 'ms'\]"):
        TimestampConfig(epoch_unit="us")
    with pytest.raises(ValueError, match=r"store\.timestamps\.fields must not be empty"):
        TimestampConfig(fields=())
    with pytest.raises(ValueError, match=r"store\.timestamps\.fields must be a list, got 'timestamp'"):
        TimestampConfig(fields="timestamp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has repeats"):
        TimestampConfig(fields=("timestamp", "timestamp"))


DOCS = [
    Document("a", "coffee with anna", metadata={"session_date_time": "1:56 pm on 8 May, 2023"}),
    Document("b", "hiking trip", metadata={"timestamp": "2023-05-09T10:00:00Z", "session_date_time": "junk"}),
    Document(
        "c",
        "pottery class",
        metadata={"timestamp": "yesterday-ish", "session_date_time": "2:00 pm on 9 May, 2023"},
    ),
    Document("d", "painting sunrise", metadata={"timestamp": "not a time"}),
    Document("e", "camping lake", metadata={}),
    Document("f", "concert tickets", metadata={"timestamp": 1683554160}),
]


def test_document_times_count_everything(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="retrievers.timeparse"):
        times = DocumentTimes.build(DOCS, TimestampConfig())
    expected = [
        utc(2023, 5, 8, 13, 56).timestamp(),
        utc(2023, 5, 9, 10).timestamp(),  # timestamp wins over the (bad) session string
        utc(2023, 5, 9, 14).timestamp(),  # bad timestamp: counted, then the next field is used
        np.nan,
        np.nan,
        utc(2023, 5, 8, 13, 56).timestamp(),
    ]
    np.testing.assert_array_equal(times.epoch_seconds, expected)
    report = times.report
    assert (report["parsed"], report["unparseable"], report["missing"]) == (4, 1, 1)
    assert report["by_field"] == {
        "timestamp": {"parsed": 2, "unparseable": 2},
        "session_date_time": {"parsed": 2, "unparseable": 0},
    }
    assert {"doc_id": "d", "field": "timestamp", "value": "not a time"} in report["examples"]
    assert "2 value(s) did not parse (1 documents left without a time)" in caplog.text
    assert times.span() == (utc(2023, 5, 8, 13, 56).timestamp(), utc(2023, 5, 9, 14).timestamp())
    assert times.span(np.array([True, False, False, False, False, False])) == (times.epoch_seconds[0],) * 2
    assert times.span(np.array([False, False, False, True, True, False])) is None


def test_store_builds_saves_and_loads_times(tmp_path: Path) -> None:
    embedder = TfidfEmbedder(dim=3).fit([doc.full_text for doc in DOCS])
    store = build_store(DOCS, embedder)
    assert store.config.timestamps == TimestampConfig()  # on by default
    assert store.timestamps is not None and "timestamps" in store.build_seconds
    store.save(tmp_path / "store")
    assert (tmp_path / "store/timestamps/epoch_seconds.npy").is_file()
    assert not list((tmp_path / "store").rglob("*.pkl"))
    loaded = ContextStore.load(tmp_path / "store")
    assert loaded.timestamps is not None
    np.testing.assert_array_equal(loaded.timestamps.epoch_seconds, store.timestamps.epoch_seconds)
    assert loaded.timestamps.report == store.timestamps.report
    assert loaded.config == store.config
    # a scoped view shares the times; its span is over its own rows
    view = store.restricted(np.array([False, True, True, False, False, False]))
    assert view.timestamps is store.timestamps
    assert view.timestamps.span(view.allowed) == (
        utc(2023, 5, 9, 10).timestamp(),
        utc(2023, 5, 9, 14).timestamp(),
    )

    off = StoreConfig.from_dict({"timestamps": None})
    assert off.timestamps is None and off.to_dict()["timestamps"] is None
    store_off = build_store(DOCS, embedder, off)
    store_off.save(tmp_path / "off")
    assert store_off.timestamps is None and ContextStore.load(tmp_path / "off").timestamps is None
    custom = StoreConfig.from_dict(
        {"timestamps": {"fields": ["session_date_time"], "default_timezone": "+02:00"}}
    )
    assert StoreConfig.from_dict(custom.to_dict()) == custom  # JSON round trip (the cache key)
    with pytest.raises(ValueError, match=r"unknown store\.timestamps key"):
        StoreConfig.from_dict({"timestamps": {"zone": "UTC"}})


def test_document_times_load_checks_shape(tmp_path: Path) -> None:
    times = DocumentTimes.build(DOCS, TimestampConfig())
    times.save(tmp_path / "t")
    with pytest.raises(ValueError, match=r"expected float64 of shape \(7,\)"):
        DocumentTimes.load(tmp_path / "t", 7)
    with pytest.raises(ValueError, match=r"missing epoch_seconds\.npy"):
        DocumentTimes.load(tmp_path / "nothing", 6)


# -- time expressions in queries ---------------------------------------------------------------

# Friday 20 October 2023, 15:00 UTC: the reference ("now"); the scope starts in January 2022.
CONTEXT = TimeContext(reference=utc(2023, 10, 20, 15), earliest=utc(2022, 1, 5))


def ranges_of(query: str, context: TimeContext = CONTEXT) -> list[tuple[datetime, datetime]]:
    found = resolve_all(extract_time_expressions(query), context)
    return [(datetime.fromtimestamp(r.start, UTC), datetime.fromtimestamp(r.end, UTC)) for r in found]


@pytest.mark.parametrize(
    ("query", "kind", "expected"),
    [
        ("What happened on 2023-05-08?", "iso_date", [(utc(2023, 5, 8), utc(2023, 5, 9))]),
        ("What did Caroline do on 8 May, 2023?", "day_month_year", [(utc(2023, 5, 8), utc(2023, 5, 9))]),
        ("Who called on the 3rd of June 2023?", "day_month_year", [(utc(2023, 6, 3), utc(2023, 6, 4))]),
        ("Who did I meet on May 8, 2023?", "month_day_year", [(utc(2023, 5, 8), utc(2023, 5, 9))]),
        (
            "Where did Jolene spend most of September 2023?",
            "month_year",
            [(utc(2023, 9, 1), utc(2023, 10, 1))],
        ),
        ("What courses did Joanna take in 2022?", "year", [(utc(2022, 1, 1), utc(2023, 1, 1))]),
        (
            "When did Caroline attend a pride parade in August?",
            "month_only",
            [(utc(2022, 8, 1), utc(2022, 9, 1)), (utc(2023, 8, 1), utc(2023, 9, 1))],
        ),
        ("What did I eat yesterday?", "relative_day", [(utc(2023, 10, 19), utc(2023, 10, 20))]),
        ("What did I do the day before yesterday?", "relative_day", [(utc(2023, 10, 18), utc(2023, 10, 19))]),
        ("What did I fix last week?", "last_unit", [(utc(2023, 10, 9), utc(2023, 10, 16))]),
        ("Which books did I read last month?", "last_unit", [(utc(2023, 9, 1), utc(2023, 10, 1))]),
        ("Where did we travel last year?", "last_unit", [(utc(2022, 1, 1), utc(2023, 1, 1))]),
        ("What changed this week?", "this_unit", [(utc(2023, 10, 16), utc(2023, 10, 23))]),
        ("What did I start two months ago?", "ago", [(utc(2023, 8, 1), utc(2023, 9, 1))]),
        ("What did I buy 3 days ago?", "ago", [(utc(2023, 10, 17), utc(2023, 10, 18))]),
        ("Who visited a couple of weeks ago?", "ago", [(utc(2023, 10, 2), utc(2023, 10, 9))]),
        ("Which decision was made a year ago?", "ago", [(utc(2022, 1, 1), utc(2023, 1, 1))]),
        (
            "What did I do in the past 3 days?",
            "past_n",
            [(utc(2023, 10, 17, 15), utc(2023, 10, 20, 15, 0, 1))],
        ),
        (
            "What happened over the last two months?",
            "past_n",
            [(utc(2023, 8, 20, 15), utc(2023, 10, 20, 15, 0, 1))],
        ),
        ("What did we talk about last Friday?", "last_weekday", [(utc(2023, 10, 13), utc(2023, 10, 14))]),
        ("What did we talk about last Monday?", "last_weekday", [(utc(2023, 10, 16), utc(2023, 10, 17))]),
    ],
)
def test_every_time_pattern(query: str, kind: str, expected: list[tuple[datetime, datetime]]) -> None:
    expressions = extract_time_expressions(query)
    assert [expression.kind for expression in expressions] == [kind]
    assert ranges_of(query) == expected


def test_every_pattern_kind_is_tested() -> None:
    tested = {
        "iso_date",
        "day_month_year",
        "month_day_year",
        "month_year",
        "year",
        "month_only",
        "relative_day",
        "last_unit",
        "this_unit",
        "ago",
        "past_n",
        "last_weekday",
    }
    assert {kind for kind, _ in TIME_PATTERNS} == tested


def test_no_false_times() -> None:
    for query in [
        "May I ask what Melanie painted?",  # "may" the verb
        "How did John feel after being able to jog without pain?",
        "python 3.10 f-strings",  # a version, not a year
        "What is the price of $2000 tickets?",
        "What did Caroline research?",
    ]:
        assert extract_time_expressions(query) == (), query


def test_overlaps_go_to_the_more_specific_pattern() -> None:
    expressions = extract_time_expressions("Did we meet on 8 May 2023 or in 2022, or yesterday?")
    assert [(e.kind, e.text) for e in expressions] == [
        ("day_month_year", "8 May 2023"),
        ("year", "2022"),
        ("relative_day", "yesterday"),
    ]


def test_relative_expressions_need_a_reference() -> None:
    no_reference = TimeContext(reference=None)
    assert ranges_of("What did I do yesterday?", no_reference) == []
    assert ranges_of("What happened in 2022?", no_reference) == [(utc(2022, 1, 1), utc(2023, 1, 1))]
    with pytest.raises(ValueError, match="timezone-aware"):
        TimeContext(reference=datetime(2023, 1, 1))


def test_in_ranges_skips_missing_times() -> None:
    found = resolve_all(extract_time_expressions("in 2022"), CONTEXT)
    epochs = np.array([utc(2022, 3, 1).timestamp(), np.nan, utc(2023, 1, 1).timestamp()])
    np.testing.assert_array_equal(in_ranges(epochs, found), [True, False, False])  # end is exclusive
