"""Columnar, memory-mapped documents and tree nodes (retrievers/store/columns.py, issue 17).

Round trips of every field through the columns (unicode, empty texts, metadata of every JSON
type), the id index, a store built into its folder, the format bump (an old store is refused
with a message to rebuild; the harness's cache key names the format so it rebuilds).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import memory_mapped

from retrievers import ContextStore, Document, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.store import STORE_FORMAT, ContextTree
from retrievers.store.columns import DocumentColumns
from retrievers.store.ids import IdColumn, RowIndex
from retrievers.store.text_column import TextColumn, TextColumnWriter
from retrievers.types import ContextNode

TEXTS = [
    "",
    "plain ascii",
    "caf\u00e9 na\u00efve \u00fcber",  # 2-byte UTF-8
    "\u6587\u66f8\u691c\u7d22",  # 3-byte
    "emoji \U0001f600 and \U0001f9ea",  # 4-byte
    "e\u0301 combining",  # a combining accent
    "nul \x00 inside a text",
    "line\nbreaks\tand\r\nreturns",
    "",
]


def test_text_column_round_trips_unicode_and_empty_strings(tmp_path: Path) -> None:
    column = TextColumn.from_strings(TEXTS)
    assert len(column) == len(TEXTS) and list(column) == TEXTS and column == TEXTS
    assert [column[i] for i in range(len(TEXTS))] == TEXTS
    assert column[-1] == TEXTS[-1] and column[2:5] == TEXTS[2:5]
    with pytest.raises(IndexError):
        column[len(TEXTS)]
    column.save(tmp_path, "text")
    loaded = TextColumn.load(tmp_path, "text")
    assert memory_mapped(loaded.blob) and type(loaded.blob) is np.ndarray and list(loaded) == TEXTS
    # an all-ASCII block decodes in one call; a mixed block per string: both give the strings
    ascii_only = TextColumn.from_strings(["abc", "", "de"])
    assert list(ascii_only) == ["abc", "", "de"]
    empty = TextColumn.from_strings([])
    assert len(empty) == 0 and list(empty) == []


def test_text_column_writer_streams_and_an_interrupted_write_leaves_no_file(tmp_path: Path) -> None:
    many = [f"row {i} \u00e9" * (i % 5) for i in range(10_000)]  # more than one block of offsets
    with TextColumnWriter(tmp_path, "many") as writer:
        for text in many:
            writer.append(text)
    assert list(TextColumn.load(tmp_path, "many")) == many
    assert np.load(tmp_path / "many.offsets.npy").shape == (10_001,)
    with pytest.raises(RuntimeError), TextColumnWriter(tmp_path, "broken") as writer:
        writer.append("half")
        raise RuntimeError("killed")
    assert not list(tmp_path.glob("broken.*"))


def test_fixed_width_gathers_rows_without_a_loop() -> None:
    column = TextColumn.from_strings(["a", "", "caf\u00e9", "zz"])
    assert column.fixed_width().tolist() == [b"a", b"", "caf\u00e9".encode(), b"zz"]
    assert column.fixed_width([3, 0]).tolist() == [b"zz", b"a"]


def test_ids_and_row_index() -> None:
    ids = ["a", "a#0", "b", "caf\u00e9", "\u6587"]  # sorted as Python sorts them
    column = IdColumn.from_strings(ids)
    assert column == ids and list(column) == ids and column[1:3] == ids[1:3]
    rows = [4, 0, 3, 0, 1]  # any order, repeats: each id as indexing one row gives it
    assert column.take(np.array(rows)) == column.take(rows) == [column[row] for row in rows]
    assert column.take([]) == []
    assert "b" in column and "c" not in column
    index = RowIndex(column)
    assert [index[doc_id] for doc_id in ids] == [0, 1, 2, 3, 4]
    assert index.get("zzz") is None and index.get("zzz", -1) == -1
    assert index.get("a\u00e9tr\u00e8s-long-id-longer-than-any") is None  # wider than the array
    assert "" not in index and 3 not in index  # type: ignore[comparison-overlap]
    with pytest.raises(KeyError):
        index["nope"]
    assert dict(index.items()) == {doc_id: row for row, doc_id in enumerate(ids)}
    assert index == {doc_id: row for row, doc_id in enumerate(ids)}
    wanted = np.array([b"b", b"x", "\u6587".encode(), b"much-longer-than-width"])
    assert index.rows(wanted).tolist() == [2, -1, 4, -1]
    assert index.rows(np.array(["a#0", "q"])).tolist() == [1, -1]
    with pytest.raises(ValueError, match="sorted without duplicates"):
        IdColumn.from_strings(["b", "a"])
    with pytest.raises(ValueError, match="NUL"):
        IdColumn.from_strings(["a\x00"])


def _documents() -> list[Document]:
    metadata = [
        {},
        {"title": "caf\u00e9", "n": 3, "x": 0.1, "ok": True, "none": None, "list": [1, "two", {"three": 3}]},
        {"nested": {"deep": {"\u6587": ["\U0001f600"]}}, "big": 2**60, "neg": -1.5e-300},
        {"conversation": "c1", "session": "s1"},
    ]
    docs = [
        Document(f"d{i}", text, title=TEXTS[-1 - i] if i % 2 else "", metadata=metadata[i % len(metadata)])
        for i, text in enumerate(TEXTS)
    ]
    docs.append(Document("d\u00e9", "unicode id", title="t", metadata={"k": "v"}))
    return sorted(docs, key=lambda doc: doc.id)


def _lexical_store(docs: list[Document]) -> ContextStore:
    return build_store(docs, None, StoreConfig(timestamps=None))


def test_documents_round_trip_through_a_saved_store(tmp_path: Path) -> None:
    docs = _documents()
    store = _lexical_store(docs)
    assert store.documents == docs and list(store.documents) == docs
    store.save(tmp_path / "s")
    loaded = ContextStore.load(tmp_path / "s")
    assert loaded.documents == docs and docs == list(loaded.documents)
    assert [loaded.documents[i] for i in range(len(docs))] == docs
    assert loaded.documents[-1] == docs[-1] and loaded.documents[1:3] == docs[1:3]
    assert loaded.doc_ids == [doc.id for doc in docs] == sorted(loaded.doc_ids)
    assert all(loaded.row_of[doc.id] == row for row, doc in enumerate(docs))
    assert [loaded.documents.full_text(i) for i in range(len(docs))] == [doc.full_text for doc in docs]
    assert loaded.metadata_mask("conversation", "c1").tolist() == [
        doc.metadata.get("conversation") == "c1" for doc in docs
    ]
    # metadata is decoded per read: changing a returned dict changes nothing stored
    loaded.documents[0].metadata["added"] = 1  # type: ignore[index]
    assert "added" not in loaded.documents[0].metadata
    # searches see the same texts
    assert (
        loaded.bm25.search(["unicode id"], 3)[0][1].tolist()
        == store.bm25.search(["unicode id"], 3)[0][1].tolist()
    )


def test_metadata_mask_is_the_rows_whose_value_reads_the_same_as_a_string(tmp_path: Path) -> None:
    metadata = [
        {"conv": "c1"},
        {"conv": 1},  # a number: "1"
        {},
        {"other": "c1", "nested": {"conv": "c1"}},  # the key only below the top level: not a match
        {"conv": "c1", "\u00e9t\u00e9": True},
        {"conv": None},  # "None"
        {"\u00e9t\u00e9": "oui"},
    ]
    docs = [Document(f"d{i}", f"text {i}", metadata=data) for i, data in enumerate(metadata)]
    build_store(docs, None, StoreConfig(timestamps=None)).save(tmp_path / "s")
    store = ContextStore.load(tmp_path / "s")

    def by_hand(key: str, value: object) -> list[bool]:
        return [key in doc.metadata and str(doc.metadata[key]) == str(value) for doc in store.documents]

    asks = [("conv", "c1"), ("conv", 1), ("conv", "1"), ("conv", None), ("conv", "c9"), ("nested", "x")]
    asks += [("\u00e9t\u00e9", True), ("\u00e9t\u00e9", "oui"), ("missing", "c1")]
    for key, value in asks:  # each key grouped at its first ask; later asks read the groups
        assert store.metadata_mask(key, value).tolist() == by_hand(key, value), (key, value)
    view = store.restricted(store.metadata_mask("conv", "c1"))
    assert view.metadata_mask("conv", 1).tolist() == by_hand("conv", 1)  # over every row, as the store
    assert by_hand("conv", "c1") == [True, False, False, False, True, False, False]


def test_metadata_that_json_cannot_hold_is_refused_naming_the_document() -> None:
    bad = [Document("a", "text", metadata={"when": object()})]
    with pytest.raises(ValueError, match=r"document 'a': metadata: cannot be stored as JSON"):
        _lexical_store(bad)
    with pytest.raises(ValueError, match="NUL"):
        _lexical_store([Document("a\x00", "text")])


def test_an_old_store_is_refused_with_a_message_to_rebuild(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    _lexical_store(_documents()).save(folder)
    meta = json.loads((folder / "store.json").read_text())
    meta["format"] = 2  # what the JSON-lines layout wrote
    (folder / "store.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"store format 2 is not 3 .*rebuild the store"):
        ContextStore.load(folder)
    with pytest.raises(ValueError, match=r"missing store\.json"):
        ContextStore.load(tmp_path / "nothing")


def test_the_harness_cache_key_names_the_store_format(monkeypatch: pytest.MonkeyPatch) -> None:
    # an entry built by an older layout is never found by this one: the store is rebuilt
    import viking_eval.run.store as run_store

    assert STORE_FORMAT == 3
    source = Path(run_store.__file__).read_text(encoding="utf-8")
    assert 'f"format:{STORE_FORMAT}"' in source


def _tree_nodes() -> list[ContextNode]:
    root = "viking://resources"
    return [
        ContextNode(
            root, 0, None, abstract="root \u00e9", content="overview \U0001f600", metadata={"depth": 0}
        ),
        ContextNode(f"{root}/caf%C3%A9", 0, root, abstract="a dir", metadata={"n": [1, 2]}),
        ContextNode(f"{root}/caf%C3%A9/d0", 2, f"{root}/caf%C3%A9", abstract="", doc_id="d0"),
        ContextNode(f"{root}/caf%C3%A9/d\u00e9", 2, f"{root}/caf%C3%A9", abstract="leaf", doc_id="d\u00e9"),
        ContextNode(f"{root}/z", 0, root, abstract="z dir", content=""),
        ContextNode(f"{root}/z/d1", 2, f"{root}/z", abstract="x", doc_id="d1"),
    ]


def test_tree_nodes_round_trip_and_leaf_rows_come_from_the_saved_file(tmp_path: Path) -> None:
    docs = _documents()
    store = _lexical_store(docs)
    nodes = _tree_nodes()
    tree = ContextTree(nodes)
    ordered = sorted(nodes, key=lambda node: node.uri)
    assert tree.nodes == ordered and list(tree.nodes) == ordered
    assert tree.uris == [node.uri for node in ordered]
    assert list(tree.doc_ids) == [node.doc_id for node in ordered]
    assert list(tree.context_types) == ["resource"] * len(nodes)
    assert all(tree.index_of[node.uri] == i for i, node in enumerate(ordered))
    assert "viking://resources/nope" not in tree.index_of and tree.index_of.get("x") is None
    rows = tree.leaf_rows(store.row_of)
    assert rows.tolist() == [-1 if node.doc_id is None else store.row_of[node.doc_id] for node in ordered]
    assert tree.leaf_rows({doc.id: i for i, doc in enumerate(docs)}).tolist() == rows.tolist()  # a dict too
    store = store.with_parts(tree=tree)
    store.save(tmp_path / "s")
    assert (tmp_path / "s" / "tree" / "leaf_rows.npy").is_file()
    loaded = ContextStore.load(tmp_path / "s")
    assert loaded.tree is not None and loaded.tree.nodes == ordered
    assert loaded.tree.leaf_rows(loaded.row_of) is loaded.tree.leaf_rows(loaded.row_of)  # the saved array
    assert loaded.tree.leaf_rows(loaded.row_of).tolist() == rows.tolist()
    assert np.array_equal(loaded.tree.depth, tree.depth) and np.array_equal(
        loaded.tree.child_ptr, tree.child_ptr
    )
    assert [loaded.tree.uris[i] for i in loaded.tree.children(0)] == [tree.uris[i] for i in tree.children(0)]
    # a store missing a leaf's document is refused by name
    with pytest.raises(ValueError, match=r"names document 'd\\u00e9'|names document 'dé'"):
        ContextTree(nodes).leaf_rows(RowIndex(IdColumn.from_strings(["d0", "d1"])))


def test_a_store_built_into_its_folder_equals_one_built_in_memory(tmp_path: Path) -> None:
    docs = [
        Document(f"doc{i:03d}", f"text number {i} about topic {i % 7} and caf\u00e9", title=f"T{i}")
        for i in range(300)
    ]
    embedder = TfidfEmbedder(dim=16, seed=0).fit([doc.full_text for doc in docs])
    config = StoreConfig.from_dict(
        {"hierarchy": {"builder": "kmeans", "max_leaf_size": 16, "overview": False}, "chunking": {"size": 4}}
    )
    in_memory = build_store(docs, embedder, config)
    folder = tmp_path / "built"
    streamed = build_store(docs, embedder, config, folder=folder)
    assert isinstance(streamed.embeddings, np.memmap) and memory_mapped(streamed.documents.texts.blob)
    assert (folder / "store.json").is_file()
    in_memory.save(tmp_path / "saved")
    for path in sorted((tmp_path / "saved").rglob("*")):
        twin = folder / path.relative_to(tmp_path / "saved")
        if path.is_file() and path.name != "store.json":
            assert twin.read_bytes() == path.read_bytes(), path.relative_to(tmp_path / "saved")
    loaded = ContextStore.load(folder)
    assert loaded.documents == in_memory.documents and loaded.parent_documents == in_memory.parent_documents
    assert np.array_equal(loaded.embeddings, in_memory.embeddings)
    # saving a store into the folder it lives in rewrites nothing it is mapped from
    before = {path: path.stat().st_mtime_ns for path in folder.rglob("*.npy")}
    streamed.save(folder)
    loaded.save(folder)
    assert {path: path.stat().st_mtime_ns for path in folder.rglob("*.npy")} == before
    assert ContextStore.load(folder).documents == in_memory.documents


def test_a_loaded_store_saved_elsewhere_copies_its_embeddings_file(tmp_path: Path) -> None:
    docs = [Document(f"d{i:02d}", f"words {i} here and there") for i in range(20)]
    embedder = TfidfEmbedder(dim=4, seed=0).fit([doc.text for doc in docs])
    build_store(docs, embedder).save(tmp_path / "a")
    loaded = ContextStore.load(tmp_path / "a")
    loaded.save(tmp_path / "b")
    assert (tmp_path / "b" / "embeddings.npy").read_bytes() == (
        tmp_path / "a" / "embeddings.npy"
    ).read_bytes()
    assert ContextStore.load(tmp_path / "b").documents == docs


def test_document_columns_compare_with_any_sequence() -> None:
    docs = _documents()
    columns = DocumentColumns.from_documents(docs)
    assert columns == docs and columns != docs[:-1] and columns != "text"
    assert columns.__eq__(3) is NotImplemented
