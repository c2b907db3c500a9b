"""Metadata filters: validation of config values, masks by doc id / metadata / time range, the
store's own scope kept, and conditions that cannot match warning instead of failing."""

from __future__ import annotations

import numpy as np
import pytest

from retrievers import ContextStore, Document, StoreConfig
from retrievers.builders import build_store
from retrievers.filters import FilterWarning, MetadataFilter, TimeWindow, filter_mask


class OneHot:
    name = "onehot"
    dim = 4

    def encode(self, texts, *, kind):  # type: ignore[no-untyped-def]
        rows = np.zeros((len(texts), 4), dtype=np.float32)
        rows[:, 0] = 1.0
        return rows


DOCS = [
    Document("a", "alpha", metadata={"lang": "en", "year": 2020, "timestamp": "2024-01-01T00:00:00Z"}),
    Document("b", "beta", metadata={"lang": "de", "year": 2021, "timestamp": 1717200000}),  # 2024-06-01
    Document("c", "gamma", metadata={"lang": "en", "timestamp": "not a time"}),
    Document("d", "delta", metadata={"lang": "fr", "year": "2021"}),
]


@pytest.fixture(scope="module")
def store() -> ContextStore:
    return build_store(DOCS, OneHot())


def mask(store: ContextStore, values: dict) -> list[str]:  # type: ignore[type-arg]
    allowed = filter_mask(store, MetadataFilter.from_dict(values))
    return [doc_id for doc_id, keep in zip(store.doc_ids, allowed, strict=True) if keep]


def test_masks_by_doc_id_metadata_and_time(store: ContextStore) -> None:
    assert mask(store, {"doc_ids": ["d", "b", "zzz"]}) == ["b", "d"]
    assert mask(store, {"metadata": {"lang": "en"}}) == ["a", "c"]
    assert mask(store, {"metadata": {"lang": ["de", "fr"]}}) == ["b", "d"]
    assert mask(store, {"metadata": {"year": 2021}}) == ["b", "d"]  # compared as strings: 2021 == "2021"
    assert mask(store, {"metadata": {"lang": "en", "year": 2020}}) == ["a"]  # every key must match
    assert mask(store, {"time_range": {"start": "2024-03-01"}}) == ["b"]
    assert mask(store, {"time_range": {"end": 1709251200}}) == ["a"]  # 2024-03-01 as epoch seconds
    # inclusive bounds; documents without a parseable time never pass
    assert mask(store, {"time_range": {"start": "2024-01-01T00:00:00+00:00", "end": "2024-06-01"}}) == [
        "a",
        "b",
    ]
    assert mask(store, {"metadata": {"lang": "en"}, "time_range": {"start": 0}}) == ["a"]


def test_the_stores_own_scope_is_kept(store: ContextStore) -> None:
    view = store.restricted(np.array([True, True, False, False]))
    assert mask(view, {"metadata": {"year": 2021}}) == ["b"]


def test_conditions_that_cannot_match_warn_and_match_nothing(store: ContextStore) -> None:
    with pytest.warns(FilterWarning, match="no document has metadata key 'colour'"):
        assert mask(store, {"metadata": {"colour": "red"}}) == []
    with pytest.warns(FilterWarning, match="no document has a time in metadata key 'created'"):
        assert mask(store, {"time_range": {"start": 0, "field": "created"}}) == []
    with pytest.warns(FilterWarning, match="none of the 2 ids is in the store"):
        assert mask(store, {"doc_ids": ["x", "y"]}) == []


def test_chunks_pass_a_doc_id_filter_through_their_parent() -> None:
    docs = [Document("p", "one two three four"), Document("q", "five six")]
    chunked = build_store(docs, OneHot(), StoreConfig.from_dict({"chunking": {"size": 2}}))
    assert chunked.doc_ids == ["p#0", "p#1", "q#0"]
    assert mask(chunked, {"doc_ids": ["p"]}) == ["p#0", "p#1"]
    assert mask(chunked, {"doc_ids": ["q#0"]}) == ["q#0"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"ids": ["a"]}, r"unknown filters key\(s\) \['ids'\]"),
        ({"doc_ids": "a"}, "filters.doc_ids must be a list or null, got 'a'"),
        ({"doc_ids": ["a", ""]}, r"filters.doc_ids\[1\] must be a non-empty string"),
        ({"metadata": ["lang"]}, "filters.metadata must be a mapping"),
        (
            {"metadata": {"lang": []}},
            "filters.metadata.lang must be a string, number, boolean or a non-empty list",
        ),
        ({"metadata": {"lang": {"x": 1}}}, "filters.metadata.lang must be a string"),
        ({"time_range": {"start": "yesterday"}}, "filters.time_range.start is not an ISO 8601 time"),
        ({"time_range": {}}, "filters.time_range.start or end must be given"),
        ({"time_range": {"start": "2024-02-01", "end": "2024-01-01"}}, "start '2024-02-01' is after end"),
        ({"time_range": {"start": 0, "until": 5}}, r"unknown filters.time_range key\(s\) \['until'\]"),
        (
            {"time_range": {"start": True}},
            "filters.time_range.start must be a string or a number or null, got True",
        ),
    ],
)
def test_bad_filters_are_rejected_with_the_key(values: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        MetadataFilter.from_dict(values)


def test_empty_filter() -> None:
    assert MetadataFilter.from_dict({}).is_empty
    assert not MetadataFilter(time_range=TimeWindow(start=0)).is_empty
