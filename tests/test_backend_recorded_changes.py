"""Backends follow a store change from the rows its history records (issue 29): no pass over the
rows or the database, the same searches as a fresh write, and a record that does not fit the
rows (forged history, forged digests) refused in one line; stores without records, and backend
identities of the first scheme, still followed by comparing every row.

Helpers and the PostgreSQL fixture are tests/test_backend_changes.py's (a real libSQL file, a
Qdrant local folder, the session's embedded PostgreSQL).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from backend_cases import WORDS
from test_backend_changes import EMBEDDER, assert_same_searches, base_store, new_doc, opened, place, server

from retrievers.backends import BackendConfig, BackendError
from retrievers.backends.base import legacy_identity
from retrievers.store import ContextStore, StoreVersions
from retrievers.store.row_digests import DIGEST_FILE, compute_digests, known_digests, remember_digests
from retrievers.types import Document

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:platformdirs")

__all__ = ["place", "server"]  # fixtures used here, defined in test_backend_changes

KINDS = ["libsql", "qdrant", "postgres"]


def versioned_step(versions: StoreVersions, rng: np.random.Generator) -> ContextStore:
    """One random add (ids anywhere in the order), delete or update, committed; the new
    version as loaded from its folder (records and digests read from the files)."""
    ids = list(versions.load().doc_ids)
    kind = rng.choice(["add", "delete", "update"])
    if kind == "add":
        free = sorted({f"d{i:03d}" for i in range(60)} - set(ids))
        picked = rng.choice(free, int(rng.integers(1, 5)), replace=False)
        versions.add([new_doc(str(doc_id), rng) for doc_id in picked], EMBEDDER)
    else:
        picked = [str(doc_id) for doc_id in rng.choice(ids, int(rng.integers(1, 4)), replace=False)]
        if kind == "delete":
            versions.delete(picked)
        else:
            versions.update([new_doc(doc_id, rng) for doc_id in picked], EMBEDDER)
    return versions.load()


def no_row_comparison(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the fallback (reading every held digest) fail: only the recorded path works."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the change compared every row instead of following the record")

    module = f"retrievers.backends.{kind}_backend"
    if kind == "qdrant":
        monkeypatch.setattr(f"{module}.QdrantBackend._compared", refused)
    else:
        monkeypatch.setattr(f"{module}.row_change", refused)


@pytest.mark.parametrize("kind", KINDS)
def test_versions_followed_from_their_records_equal_a_fresh_write(
    kind: str, place: Callable[[str, str], BackendConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(21)
    versions = StoreVersions.create(tmp_path / "versions", base_store())
    store = versions.load()
    opened(place(kind, "grown"), store).close()
    no_row_comparison(kind, monkeypatch)
    for step in range(7):
        store = versioned_step(versions, rng)
        digests = known_digests(store)  # read from the version's folder, not hashed now
        assert digests is not None and np.array_equal(digests, compute_digests(store))
        if step % 3 != 1:  # the others skip a version: two records followed at once
            backend = opened(place(kind, "grown"), store)
            change = backend.last_change
            backend.close()
            assert change is not None and change.kept > 0
    grown = opened(place(kind, "grown"), store)
    fresh = opened(place(kind, "fresh"), store)
    try:
        assert fresh.last_change is None and grown.identity == fresh.identity
        assert_same_searches(grown, fresh, store)
    finally:
        grown.close()
        fresh.close()


def test_a_version_folder_holds_its_records_and_digests(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    versions = StoreVersions.create(tmp_path / "v", base_store())
    changed = versions.update([new_doc("d010", rng)], EMBEDDER)  # row 5 of 20
    meta = json.loads((tmp_path / "v" / "v000002" / "store.json").read_text())
    rows = meta["history"][-1]["rows"]
    assert rows["removed"] == [5] and rows["added"] == [5]
    assert rows["added_digests"] == [bytes(compute_digests(changed, [5])[0]).hex()]
    assert rows["removed_digests"] == [bytes(compute_digests(versions.load(1), [5])[0]).hex()]
    assert np.array_equal(np.load(tmp_path / "v" / "v000002" / DIGEST_FILE), compute_digests(changed))
    assert "rows" not in changed.history[-1].to_dict()  # reports show counts, not rows
    # a store.json written before rows were recorded loads, its versions without records
    for version in meta["history"]:
        version.pop("rows", None)
    (tmp_path / "v" / "v000002" / "store.json").write_text(json.dumps(meta))
    assert [version.rows for version in versions.load().history] == [None, None]


def test_a_store_without_records_is_followed_by_comparing_every_row(
    place: Callable[[str, str], BackendConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    import retrievers.backends.libsql_backend as libsql_backend

    rng = np.random.default_rng(7)
    store = base_store()
    opened(place("libsql", "s"), store).close()
    changed = store.delete(["d004"]).add([new_doc("z1", rng)], EMBEDDER)
    old = copy.copy(changed)  # as loaded from a store.json written before rows were recorded
    old.history = tuple(dataclasses.replace(version, rows=None) for version in changed.history)
    compared = {"n": 0}
    original = libsql_backend.row_change

    def counted(*args: Any, **kwargs: Any) -> Any:
        compared["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(libsql_backend, "row_change", counted)
    backend = opened(place("libsql", "s"), old)
    fresh = opened(place("libsql", "fresh"), old)
    try:
        assert compared["n"] == 1 and backend.last_change is not None
        assert backend.last_change.drop.tolist() == list(range(2, 20))  # d004 gone: every row after moves
        assert_same_searches(backend, fresh, old)
    finally:
        backend.close()
        fresh.close()


def forged(store: ContextStore, **rows: Any) -> ContextStore:
    """``store`` with its last version's row record changed (``rows``: RowRecord fields)."""
    copied = copy.copy(store)
    last = store.history[-1]
    assert last.rows is not None
    record = dataclasses.replace(last.rows, **rows)
    copied.history = (*store.history[:-1], dataclasses.replace(last, rows=record))
    return copied


@pytest.mark.parametrize("kind", ["libsql", "postgres"])
def test_a_record_that_does_not_fit_the_rows_is_refused(
    kind: str, place: Callable[[str, str], BackendConfig]
) -> None:
    rng = np.random.default_rng(12)
    store = base_store()
    opened(place(kind, "s"), store).close()
    held_digests = compute_digests(store)
    updated = store.update([new_doc("d010", rng)], EMBEDDER)  # row 5 replaced
    record = updated.history[-1].rows
    assert record is not None
    silent = forged(updated, removed=(), removed_digests=(), added=(), added_digests=())
    lying_digests = forged(updated, removed=(), removed_digests=(), added=(), added_digests=())
    remember_digests(lying_digests, held_digests)  # parts that hide the replaced row
    cases = {
        "the removed row's digest": (
            forged(updated, removed_digests=("00" * 16,)),
            "does not lead from the rows it holds",
        ),
        "no change recorded": (silent, "does not lead from the rows it holds"),
        "digests hiding the change": (lying_digests, r"row digests \(.*\) do not match its rows"),
        "the added row's digest": (forged(updated, added_digests=("ff" * 16,)), "does not fit its rows"),
        "a row out of range": (forged(updated, added=(25,)), "does not fit its rows"),
    }
    for name, (bad, message) in cases.items():
        with pytest.raises(BackendError, match=message) as error:
            opened(place(kind, "s"), bad)
        assert "\n" not in str(error.value), name
    backend = opened(place(kind, "s"), store)  # nothing was written: the held version is served
    assert backend.last_change is None
    backend.close()
    backend = opened(place(kind, "s"), updated)  # the true record is followed
    assert backend.last_change is not None and backend.last_change.write.tolist() == [5]
    backend.close()


def test_a_first_scheme_identity_is_followed_or_refused(
    place: Callable[[str, str], BackendConfig],
) -> None:
    import libsql

    rng = np.random.default_rng(14)
    store = base_store()
    other = base_store(42)
    for name, held in (("s", store), ("o", other)):
        opened(place("libsql", name), held).close()
        legacy = json.loads(legacy_identity(held).to_json())
        legacy.pop("scheme")  # as written before identities had schemes
        db = libsql.connect(str(place("libsql", name).url))
        db.execute("UPDATE viking_meta SET value = ? WHERE key = 'identity'", (json.dumps(legacy),))
        if name == "o":
            db.execute("DELETE FROM viking_meta WHERE key = 'store_key'")  # keys not kept either
        db.commit()
        db.close()
    backend = opened(place("libsql", "s"), store)  # its own store: every row compared, none written
    assert backend.last_change is not None and backend.last_change.empty
    assert backend.identity.scheme == 2
    backend.close()
    assert opened(place("libsql", "s"), store).last_change is None  # upgraded: reused
    with pytest.raises(BackendError, match="holds another corpus") as error:
        opened(place("libsql", "o"), store.add([new_doc("d001", rng)], EMBEDDER))
    assert "\n" not in str(error.value)


def test_qdrant_writes_only_the_changed_points_when_the_mean_length_moves(
    place: Callable[[str, str], BackendConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qdrant's text index keeps the BM25 statistics: documents much longer than the stored ones
    move the mean length, yet only the new points are written (no kept point rewritten), and the
    keyword searches and scores equal a fresh write's. A collection without the keyword layout
    mark (the sparse-vector layout written before) is written again, not followed."""
    from qdrant_client import QdrantClient

    from retrievers.backends.qdrant_backend import QdrantBackend

    rng = np.random.default_rng(17)
    store = base_store()
    opened(place("qdrant", "s"), store).close()
    longer = [
        Document(id=f"e{i}", title="", text=" ".join(rng.choice(WORDS, 40)), metadata={"conversation": "c1"})
        for i in range(3)
    ]
    changed = store.add(longer, EMBEDDER)
    written: list[tuple[str, int]] = []
    original = QdrantBackend._call

    def spied(self: QdrantBackend, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        if method in ("upsert", "update_vectors") and args and args[0] == self.docs:
            written.append((method, len(kwargs["points"])))
        return original(self, what, method, *args, **kwargs)

    monkeypatch.setattr(QdrantBackend, "_call", spied)
    backend = opened(place("qdrant", "s"), changed)
    assert written == [("upsert", 3)]
    fresh = opened(place("qdrant", "fresh"), changed)
    try:
        assert_same_searches(backend, fresh, changed)
    finally:
        backend.close()
        fresh.close()
    client = QdrantClient(path=str(place("qdrant", "s").url))
    client.overwrite_payload(
        "viking_meta",
        payload={k: v for k, v in client.retrieve("viking_meta", [0])[0].payload.items() if k != "keywords"},
        points=[0],
    )
    client.close()
    written.clear()
    opened(place("qdrant", "s"), changed).close()
    assert written == [("upsert", len(changed))]  # the whole collection written again


def test_qdrant_reads_back_exactly_the_terms_written() -> None:
    """Terms written for Qdrant's text index come back from its word tokenizer (local mode's copy
    of the server's: split on non-alphanumerics, lowercase) one token per term, and two distinct
    terms never give the same token (a term spelled like another's encoding included)."""
    from qdrant_client.local.payload_filters import unindexed_text_tokens

    from retrievers.backends.qdrant_backend import encoded_terms

    terms = ["cat", "x63", "c", "xray", "foo_bar", "café", "p53", "12", "İ", "ǅ", "straße", "x"]
    tokens = unindexed_text_tokens(encoded_terms(terms))
    assert len(tokens) == len(terms) and len(set(tokens)) == len(terms)
    assert tokens[:3] == ["cat", "x783633", "c"]  # plain terms as themselves; "x63" encoded, not "c"'s twin
