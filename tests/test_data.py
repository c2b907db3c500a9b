"""Tests for viking_eval.data: BEIR loading, validation and dataset resolution."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from viking_eval.data import (
    CHECKSUMS_FILE,
    DataError,
    DataIssues,
    DataWarning,
    data_home,
    data_search_path,
    id_problem,
    load_beir,
    load_corpus,
    load_dataset,
    load_qrels,
    load_queries,
    read_checksums,
    read_jsonl,
    record_checksums,
    resolve_dataset,
)
from viking_eval.data.splits import take_half

HEADER = "query-id\tcorpus-id\tscore\n"


def write_jsonl(path: Path, records: Iterable[Mapping[str, Any]], *, gz: bool = False) -> Path:
    """Write ``records`` one JSON object per line (gzipped when ``gz``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(record) + "\n" for record in records)
    if gz:
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def make_beir(
    folder: Path,
    *,
    corpus: list[dict[str, Any]] | None = None,
    queries: list[dict[str, Any]] | None = None,
    qrels: dict[str, str] | None = None,
    gz: bool = False,
) -> Path:
    """A tiny BEIR folder; ``qrels`` maps split -> TSV text."""
    corpus = (
        corpus
        if corpus is not None
        else [
            {"_id": "d1", "title": "Cats", "text": "Cats purr.", "metadata": {"year": 2020}},
            {"_id": "d2", "title": "", "text": "Dogs bark."},
            {"_id": "d3", "title": "Birds", "text": "Birds sing."},
        ]
    )
    queries = (
        queries
        if queries is not None
        else [
            {"_id": "q1", "text": "what purrs"},
            {"_id": "q2", "text": "what barks", "metadata": {"kind": "animal"}},
            {"_id": "q3", "text": "unjudged query"},
        ]
    )
    qrels = qrels if qrels is not None else {"test": HEADER + "q1\td1\t1\nq2\td2\t2\n"}
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / ("corpus.jsonl.gz" if gz else "corpus.jsonl"), corpus, gz=gz)
    write_jsonl(folder / "queries.jsonl", queries)
    (folder / "qrels").mkdir(exist_ok=True)
    for split, text in qrels.items():
        (folder / "qrels" / f"{split}.tsv").write_text(text, encoding="utf-8")
    return folder


# --------------------------------------------------------------------------- corpus / queries


def test_corpus_keeps_title_text_metadata_in_file_order(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"_id": "b", "title": "T", "text": "body", "metadata": {"k": [1, 2]}},
            {"_id": "a", "text": "no title"},
            {"_id": "c", "title": None, "text": "", "source": "extra"},
        ],
    )
    corpus = load_corpus(path)
    assert list(corpus) == ["b", "a", "c"]
    assert corpus["b"].title == "T" and corpus["b"].text == "body"
    assert corpus["b"].metadata == {"k": [1, 2]}
    assert corpus["b"].full_text == "T body"
    assert corpus["a"].title == "" and corpus["a"].full_text == "no title"
    assert corpus["c"].text == "" and corpus["c"].title == ""
    assert corpus["c"].metadata == {"source": "extra"}  # extra top-level keys are not lost


def test_gzipped_corpus_and_int_ids(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "corpus.jsonl.gz", [{"_id": 7, "text": "seven"}, {"_id": "8", "text": "eight"}], gz=True
    )
    corpus = load_corpus(path)
    assert list(corpus) == ["7", "8"]
    assert corpus["7"].id == "7" and corpus["7"].text == "seven"


def test_read_jsonl_skips_blank_lines_and_reports_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n   \n{"b": 2}\r\n', encoding="utf-8")
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (4, {"b": 2})]


def test_malformed_json_names_file_and_exact_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        '{"_id": "1", "text": "a"}\n\n{"_id": "2", "text": "b"}\n{"_id": "3", "text": \n', encoding="utf-8"
    )
    with pytest.raises(DataError, match=r"corpus\.jsonl:4: malformed JSON"):
        load_corpus(path)


def test_malformed_json_in_gzip_reports_line(tmp_path: Path) -> None:
    path = tmp_path / "queries.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"_id": "1", "text": "a"}\n{oops}\n'))
    with pytest.raises(DataError, match=r"queries\.jsonl\.gz:2: malformed JSON"):
        load_queries(path)


def test_line_that_is_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "1", "text": "a"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: expected a JSON object.*list"):
        load_corpus(path)


def test_non_utf8_bytes_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"_id": "1", "text": "ok"}\n{"_id": "2", "text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: not valid UTF-8"):
        load_corpus(path)


def test_not_gzip_despite_suffix(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(b'{"_id": "1", "text": "plain"}\n')
    with pytest.raises(DataError, match=r"corpus\.jsonl\.gz: not a valid gzip file"):
        load_corpus(path)


def test_duplicate_ids_name_both_lines(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "corpus.jsonl",
        [{"_id": "1", "text": "a"}, {"_id": "2", "text": "b"}, {"_id": 1, "text": "c"}],
    )
    with pytest.raises(DataError, match=r"corpus\.jsonl:3: duplicate _id '1' \(first seen at line 1\)"):
        load_corpus(path)
    qpath = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q", "text": "a"}, {"_id": "q", "text": "b"}])
    with pytest.raises(DataError, match=r"queries\.jsonl:2: duplicate _id 'q' \(first seen at line 1\)"):
        load_queries(qpath)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"text": "no id"}, r"missing '_id'"),
        ({"_id": "", "text": "x"}, r"'_id' is empty"),
        ({"_id": 1.5, "text": "x"}, r"'_id' must be a string or integer, got float"),
        ({"_id": True, "text": "x"}, r"'_id' must be a string or integer, got bool"),
        ({"_id": "1"}, r"missing 'text'"),
        ({"_id": "1", "text": None}, r"missing 'text'|'text' must be a string"),
        ({"_id": "1", "text": 3}, r"'text' must be a string, got int"),
        ({"_id": "1", "text": "x", "title": 3}, r"'title' must be a string, got int"),
        ({"_id": "1", "text": "x", "metadata": [1]}, r"'metadata' must be a JSON object, got list"),
        (
            {"_id": "1", "text": "x", "k": 1, "metadata": {"k": 2}},
            r"key 'k' appears both at top level and inside",
        ),
    ],
)
def test_bad_corpus_records(tmp_path: Path, record: dict[str, Any], message: str) -> None:
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"_id": "ok", "text": "fine"}, record])
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: " + f"(?:{message})"):
        load_corpus(path)


def test_empty_corpus_and_empty_queries(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"corpus\.jsonl: the corpus is empty"):
        load_corpus(corpus)
    queries = tmp_path / "queries.jsonl"
    queries.write_text("", encoding="utf-8")
    with pytest.raises(DataError, match=r"queries\.jsonl: the query file is empty"):
        load_queries(queries)


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.jsonl: file not found"):
        load_corpus(tmp_path / "nope.jsonl")


def test_queries_keep_metadata(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "queries.jsonl", [{"_id": 3, "text": "hi", "metadata": {"answer": "x"}}])
    queries = load_queries(path)
    assert list(queries) == ["3"]
    assert queries["3"].text == "hi" and queries["3"].metadata == {"answer": "x"}


# --------------------------------------------------------------------------- qrels


def test_qrels_with_and_without_header_and_crlf(tmp_path: Path) -> None:
    with_header = tmp_path / "a.tsv"
    with_header.write_bytes(b"query-id\tcorpus-id\tscore\r\nq1\td1\t1\r\nq1\td2\t0\r\nq2\td1\t2\r\n")
    without = tmp_path / "b.tsv"
    without.write_text("q1\td1\t1\nq1\td2\t0\n\nq2\td1\t2\n", encoding="utf-8")
    expected = {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 2}}
    assert load_qrels(with_header) == expected
    assert load_qrels(without) == expected


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("q1\td1\t1\nq1\td2\n", 3, r"expected 3 tab-separated fields"),
        ("q1\td1\t1\nq1 d2 1\n", 3, r"space-separated TREC"),
        ("q1\td1\t1\nq1\td2\t1.0\n", 3, r"score must be an integer, got '1.0'"),
        ("q1\td1\t1\nq1\td2\thigh\n", 3, r"score must be an integer"),
        ("q1\td1\t1\n\td2\t1\n", 3, r"empty query-id or corpus-id"),
        ("q1\td1\t1\nq1\td1\t2\n", 3, r"contradicts line 2"),
    ],
)
def test_bad_qrels_rows_report_line(tmp_path: Path, body: str, line: int, message: str) -> None:
    path = tmp_path / "test.tsv"
    path.write_text(HEADER + body, encoding="utf-8")
    with pytest.raises(DataError, match=rf"test\.tsv:{line}: .*{message}"):
        load_qrels(path)


def test_qrels_bad_first_row_is_not_mistaken_for_header(tmp_path: Path) -> None:
    path = tmp_path / "test.tsv"
    path.write_text("q1\td1\tyes\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"test\.tsv:1: score must be an integer"):
        load_qrels(path)


def test_qrels_header_only_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "test.tsv"
    path.write_text(HEADER, encoding="utf-8")
    with pytest.raises(DataError, match=r"no judgments"):
        load_qrels(path)


# --------------------------------------------------------------------------- load_beir


def test_load_beir_clean_folder(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny", gz=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean folder warns about nothing
        ds = load_beir(folder)
    assert ds.name == "tiny" and ds.split == "test" and ds.folder == folder
    assert list(ds.corpus) == ["d1", "d2", "d3"]
    assert ds.corpus["d1"].metadata == {"year": 2020}
    assert list(ds.queries) == ["q1", "q2"]  # q3 has no judgment in this split
    assert ds.queries["q2"].metadata == {"kind": "animal"}
    assert ds.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    assert ds.issues == DataIssues(0, 0, 0, 1)
    assert ds.issues.as_dict() == {
        "qrels_unknown_docs": 0,
        "qrels_unknown_queries": 0,
        "empty_documents": 0,
        "unjudged_queries": 1,
    }
    assert set(ds.files) == {"corpus.jsonl.gz", "queries.jsonl", "qrels/test.tsv"}
    assert (
        ds.files["qrels/test.tsv"] == hashlib.sha256((folder / "qrels" / "test.tsv").read_bytes()).hexdigest()
    )
    assert ds.num_judgments == 2


def test_load_beir_queries_follow_queries_file_order(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "t", qrels={"test": "q2\td2\t1\nq1\td1\t1\n"})
    ds = load_beir(folder)
    assert list(ds.queries) == ["q1", "q2"]
    assert list(ds.qrels) == ["q1", "q2"]


def test_unknown_docs_and_queries_warn_and_are_counted(tmp_path: Path) -> None:
    qrels = HEADER + "q1\td1\t1\nq1\tghost\t1\nq2\tghost2\t1\nzz\td1\t1\nzz\td2\t1\n"
    folder = make_beir(tmp_path / "t", qrels={"test": qrels})
    with pytest.warns(DataWarning, match=r"2 naming unknown documents.*2 naming unknown queries"):
        ds = load_beir(folder)
    assert ds.issues.qrels_unknown_docs == 2
    assert ds.issues.qrels_unknown_queries == 2
    # q2's only judged document is unknown: q2 is dropped and counted as unjudged (with q3)
    assert ds.qrels == {"q1": {"d1": 1}}
    assert list(ds.queries) == ["q1"]
    assert ds.issues.unjudged_queries == 2


def test_strict_mode_raises_on_unknown_doc_with_line(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "t", qrels={"test": HEADER + "q1\td1\t1\nq1\tghost\t1\n"})
    with pytest.raises(
        DataError, match=r"test\.tsv:3: strict mode: 1 judgment\(s\) name doc ids.*line 3, doc 'ghost'"
    ):
        load_beir(folder, strict=True)


def test_strict_mode_raises_on_unknown_query(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "t", qrels={"test": HEADER + "q1\td1\t1\nq9\td1\t1\n"})
    with pytest.raises(
        DataError, match=r"test\.tsv:3: strict mode: 1 judgment\(s\) name query ids.*line 3, query 'q9'"
    ):
        load_beir(folder, strict=True)


def test_empty_documents_are_kept_and_counted(tmp_path: Path) -> None:
    corpus = [
        {"_id": "d1", "title": "T", "text": "x"},
        {"_id": "d2", "title": "  ", "text": ""},
        {"_id": "d3", "text": "\n"},
        {"_id": "d4", "title": "only title", "text": ""},
    ]
    ds = load_beir(make_beir(tmp_path / "t", corpus=corpus))
    assert len(ds.corpus) == 4
    assert ds.issues.empty_documents == 2


def test_missing_split_lists_available_splits(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "t", qrels={"train": "q1\td1\t1\n", "dev": "q2\td2\t1\n"})
    with pytest.raises(DataError, match=r"no qrels for split 'test'.*splits available: dev, train"):
        load_beir(folder, "test")
    assert load_beir(folder, "dev").qrels == {"q2": {"d2": 1}}


def test_split_name_cannot_escape_qrels(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "t")
    with pytest.raises(DataError, match=r"invalid split name"):
        load_beir(folder, "../corpus")


def test_missing_files_and_ambiguous_corpus(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"not a directory"):
        load_beir(tmp_path / "absent")
    folder = make_beir(tmp_path / "t")
    write_jsonl(folder / "corpus.jsonl.gz", [{"_id": "x", "text": "y"}], gz=True)
    with pytest.raises(DataError, match=r"both corpus\.jsonl and corpus\.jsonl\.gz exist"):
        load_beir(folder)
    (folder / "corpus.jsonl").unlink()
    (folder / "corpus.jsonl.gz").unlink()
    with pytest.raises(DataError, match=r"no corpus\.jsonl or corpus\.jsonl\.gz"):
        load_beir(folder)


# --------------------------------------------------------------------------- resolving names


def test_search_path_order_env_then_repo_then_data_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("VIKING_EVAL_DATA", f"{tmp_path / 'a'}::~/b:")
    repo = tmp_path / "repo_datasets"
    home_data = tmp_path / "home" / ".local" / "share" / "viking_eval" / "datasets"
    assert data_search_path(repo) == [tmp_path / "a", tmp_path / "home" / "b", repo, home_data]


def test_search_path_default_is_repo_datasets_then_data_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VIKING_EVAL_DATA", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_home() == tmp_path / "xdg" / "viking_eval" / "datasets"
    assert data_search_path() == [Path(__file__).resolve().parents[1] / "datasets", data_home()]


def test_several_env_folders_first_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_beir(
        tmp_path / "one" / "tiny", corpus=[{"_id": "first", "text": "1"}], qrels={"test": "q1\tfirst\t1\n"}
    )
    make_beir(
        tmp_path / "two" / "tiny", corpus=[{"_id": "second", "text": "2"}], qrels={"test": "q1\tsecond\t1\n"}
    )
    only_two = make_beir(tmp_path / "two" / "other")
    monkeypatch.setenv("VIKING_EVAL_DATA", f"{tmp_path / 'one'}:{tmp_path / 'two'}")
    repo = tmp_path / "repo"
    assert resolve_dataset("tiny", repo) == first
    assert resolve_dataset("other", repo) == only_two
    ds = load_dataset("tiny", repo_datasets=repo)
    assert list(ds.corpus) == ["first"] and ds.name == "tiny"


def test_repo_datasets_is_searched_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIKING_EVAL_DATA", raising=False)
    local = make_beir(tmp_path / "repo" / "tiny")
    assert resolve_dataset("tiny", tmp_path / "repo") == local


def test_existing_directory_path_is_used_as_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIKING_EVAL_DATA", str(tmp_path / "elsewhere"))
    folder = make_beir(tmp_path / "direct")
    assert resolve_dataset(str(folder), tmp_path / "repo") == folder
    assert load_dataset(str(folder), repo_datasets=tmp_path / "repo").name == "direct"


def test_unknown_dataset_lists_folders_and_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_beir(tmp_path / "one" / "zeta")
    make_beir(tmp_path / "repo" / "alpha")
    (tmp_path / "one" / "not_a_dataset").mkdir()
    monkeypatch.setenv("VIKING_EVAL_DATA", f"{tmp_path / 'one'}:{tmp_path / 'missing'}")
    with pytest.raises(DataError) as info:
        resolve_dataset("nosuch", tmp_path / "repo")
    message = str(info.value)
    # one line: the name, what is wrong, the folders searched, what exists, what to do
    assert "\n" not in message
    assert message.startswith("nosuch: dataset not found in 4 folder(s) searched: ")
    assert "datasets there: alpha, zeta" in message
    assert "set VIKING_EVAL_DATA to a folder holding nosuch/" in message  # not in the registry
    assert "python -m viking_eval.data.download nosuch" not in message
    assert info.value.path == Path("nosuch") and info.value.line is None
    assert str(tmp_path / "one") in message
    assert f"{tmp_path / 'missing'} (does not exist)" in message
    assert str(tmp_path / "repo") in message
    assert message.index(str(tmp_path / "one")) < message.index(str(tmp_path / "repo"))
    assert "not_a_dataset" not in message


# --------------------------------------------------------------------------- the shared datasets


@pytest.mark.needs_data
def test_scifact_test_split(data_env: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = load_dataset("scifact", "test", strict=True)
    assert ds.folder == data_env / "scifact"
    assert len(ds.corpus) == 5183
    assert len(ds.queries) == 300
    assert ds.num_judgments == 339
    assert ds.issues == DataIssues(0, 0, 0, 809)
    assert set(ds.files) == {"corpus.jsonl.gz", "queries.jsonl", "qrels/test.tsv"}
    # the decompressed corpus is byte-identical to BEIR's corpus.jsonl (PROVENANCE.md); we hash the gzip as read
    gz_bytes = (data_env / "scifact" / "corpus.jsonl.gz").read_bytes()
    assert ds.files["corpus.jsonl.gz"] == hashlib.sha256(gz_bytes).hexdigest()
    assert all(ds.corpus[d].title for d in list(ds.corpus)[:50])


@pytest.mark.needs_data
def test_scifact_train_split(data_env: Path) -> None:
    ds = load_dataset("scifact", "train")
    assert len(ds.queries) == 809
    assert ds.num_judgments == 919
    assert ds.issues.unjudged_queries == 300


@pytest.mark.needs_data
def test_adi(data_env: Path) -> None:
    ds = load_dataset("adi")
    assert len(ds.corpus) == 82
    assert len(ds.queries) == 35


# --------------------------------------------------------------------------- one clean line per bad input
#
# Issue 12: every data error is one line that starts with ``<file>:<line>:`` (``<file>:`` where no
# line applies) and carries the same location in ``DataError.path`` / ``.line``. One case per
# class of bad input; the id names the class.

Case = tuple[Path, int | None]  # the file and line the error must name


def _corpus_lines(folder: Path, *lines: str) -> Case:
    """A BEIR folder whose corpus is ``lines`` verbatim after one good document."""
    make_beir(folder)
    (folder / "corpus.jsonl").write_text(
        json.dumps({"_id": "d1", "text": "Cats purr."}) + "\n" + "".join(line + "\n" for line in lines),
        encoding="utf-8",
    )
    return folder / "corpus.jsonl", 2


def _malformed_json(folder: Path) -> Case:
    return _corpus_lines(folder, '{"_id": "d2", "text": ')


def _non_object_json(folder: Path) -> Case:
    return _corpus_lines(folder, '["d2", "text"]')


def _missing_id(folder: Path) -> Case:
    return _corpus_lines(folder, '{"text": "no id"}')


def _duplicate_id(folder: Path) -> Case:
    return _corpus_lines(folder, '{"_id": "d1", "text": "again"}')


def _non_string_text(folder: Path) -> Case:
    return _corpus_lines(folder, '{"_id": "d2", "text": 42}')


def _whitespace_doc_id(folder: Path) -> Case:
    return _corpus_lines(folder, json.dumps({"_id": "doc 2", "text": "x"}))


def _control_char_doc_id(folder: Path) -> Case:
    return _corpus_lines(folder, json.dumps({"_id": "doc\x072", "text": "x"}))


def _whitespace_query_id(folder: Path) -> Case:
    make_beir(folder, queries=[{"_id": "q1", "text": "a"}, {"_id": "q\t2", "text": "b"}])
    return folder / "queries.jsonl", 2


def _whitespace_qrels_doc_id(folder: Path) -> Case:
    make_beir(folder, qrels={"test": HEADER + "q1\td1\t1\nq2\td 2\t1\n"})
    return folder / "qrels" / "test.tsv", 3


def _control_char_qrels_query_id(folder: Path) -> Case:
    make_beir(folder, qrels={"test": "q1\td1\t1\nq\x1f2\td2\t1\n"})
    return folder / "qrels" / "test.tsv", 2


def _empty_query_text(folder: Path) -> Case:
    make_beir(folder, queries=[{"_id": "q1", "text": "a"}, {"_id": "q2", "text": ""}])
    return folder / "queries.jsonl", 2


def _blank_query_text(folder: Path) -> Case:
    make_beir(folder, queries=[{"_id": "q1", "text": " \t\u00a0"}])
    return folder / "queries.jsonl", 1


def _invalid_utf8(folder: Path) -> Case:
    make_beir(folder)
    (folder / "queries.jsonl").write_bytes(b'{"_id": "q1", "text": "a"}\n{"_id": "q2", "text": "caf\xe9"}\n')
    return folder / "queries.jsonl", 2


def _qrels_field_count(folder: Path) -> Case:
    make_beir(folder, qrels={"test": HEADER + "q1\td1\t1\nq2\td2\n"})
    return folder / "qrels" / "test.tsv", 3


def _qrels_space_separated(folder: Path) -> Case:
    make_beir(folder, qrels={"test": "q1 0 d1 1\n"})
    return folder / "qrels" / "test.tsv", 1


def _qrels_non_integer_score(folder: Path) -> Case:
    make_beir(folder, qrels={"test": HEADER + "q1\td1\t0.5\n"})
    return folder / "qrels" / "test.tsv", 2


def _qrels_contradiction(folder: Path) -> Case:
    make_beir(folder, qrels={"test": "q1\td1\t1\nq2\td2\t1\nq1\td1\t0\n"})
    return folder / "qrels" / "test.tsv", 3


def _qrels_empty(folder: Path) -> Case:
    make_beir(folder, qrels={"test": HEADER})
    return folder / "qrels" / "test.tsv", None


def _empty_corpus(folder: Path) -> Case:
    make_beir(folder)
    (folder / "corpus.jsonl").write_text("\n", encoding="utf-8")
    return folder / "corpus.jsonl", None


def _empty_queries(folder: Path) -> Case:
    make_beir(folder, queries=[])
    return folder / "queries.jsonl", None


def _gzip_truncated(folder: Path) -> Case:
    make_beir(folder)
    (folder / "corpus.jsonl").unlink()
    first = "".join(json.dumps({"_id": f"d{i}", "text": "t"}) + "\n" for i in (1, 2)).encode()
    rest = (json.dumps({"_id": "d3", "text": "t"}) + "\n").encode()
    # two gzip members, the second cut off after its header: lines 1-2 decompress, line 3 cannot
    (folder / "corpus.jsonl.gz").write_bytes(gzip.compress(first) + gzip.compress(rest)[:12])
    return folder / "corpus.jsonl.gz", 3


def _gzip_not_gzip(folder: Path) -> Case:
    make_beir(folder)
    (folder / "corpus.jsonl").rename(folder / "corpus.jsonl.gz")
    return folder / "corpus.jsonl.gz", None


def _missing_corpus(folder: Path) -> Case:
    make_beir(folder)
    (folder / "corpus.jsonl").unlink()
    return folder, None


def _missing_queries(folder: Path) -> Case:
    make_beir(folder)
    (folder / "queries.jsonl").unlink()
    return folder, None


def _ambiguous_corpus(folder: Path) -> Case:
    make_beir(folder)
    write_jsonl(folder / "corpus.jsonl.gz", [{"_id": "x", "text": "y"}], gz=True)
    return folder / "corpus.jsonl.gz", None


def _missing_split(folder: Path) -> Case:
    make_beir(folder, qrels={"train": "q1\td1\t1\n"})
    return folder / "qrels" / "test.tsv", None


def _not_a_directory(folder: Path) -> Case:
    folder.write_text("a file, not a BEIR folder", encoding="utf-8")
    return folder, None


def _strict_unknown_doc(folder: Path) -> Case:
    make_beir(folder, qrels={"test": "q1\td1\t1\nq2\td2\t1\nq2\tghost\t1\n"})
    return folder / "qrels" / "test.tsv", 3


def _checksum_mismatch(folder: Path) -> Case:
    make_beir(folder)
    record_checksums(folder)
    (folder / "qrels" / "test.tsv").write_text("q1\td1\t1\n", encoding="utf-8")
    return folder / "qrels" / "test.tsv", None


def _checksum_file_missing(folder: Path) -> Case:
    make_beir(folder, qrels={"test": "q1\td1\t1\n", "train": "q2\td2\t1\n"})
    record_checksums(folder)
    (folder / "qrels" / "train.tsv").unlink()
    return folder / "qrels" / "train.tsv", None


def _checksums_malformed(folder: Path) -> Case:
    make_beir(folder)
    (folder / CHECKSUMS_FILE).write_text('{\n  "files": {\n    "corpus.jsonl": \n', encoding="utf-8")
    return folder / CHECKSUMS_FILE, 4


DATA_ERROR_CASES = {
    "malformed_json_line": (_malformed_json, r"malformed JSON"),
    "json_line_not_an_object": (_non_object_json, r"expected a JSON object per line, got list"),
    "missing_id": (_missing_id, r"missing '_id'"),
    "duplicate_id": (_duplicate_id, r"duplicate _id 'd1' \(first seen at line 1\)"),
    "text_not_a_string": (_non_string_text, r"'text' must be a string, got int"),
    "doc_id_with_whitespace": (
        _whitespace_doc_id,
        r"doc id 'doc 2' contains whitespace \(' ' at position 4\)",
    ),
    "doc_id_with_control_char": (_control_char_doc_id, r"doc id 'doc\\x072' contains a control character"),
    "query_id_with_whitespace": (_whitespace_query_id, r"query id 'q\\t2' contains whitespace"),
    "qrels_doc_id_with_whitespace": (_whitespace_qrels_doc_id, r"corpus-id 'd 2' contains whitespace"),
    "qrels_query_id_with_control_char": (
        _control_char_qrels_query_id,
        r"query-id 'q\\x1f2' contains (whitespace|a control character)",
    ),
    "empty_query_text": (_empty_query_text, r"query 'q2' has empty text"),
    "blank_query_text": (_blank_query_text, r"query 'q1' has empty text"),
    "invalid_utf8": (_invalid_utf8, r"not valid UTF-8 \(byte b'\\xe9' at column 27\)"),
    "qrels_wrong_field_count": (_qrels_field_count, r"expected 3 tab-separated fields.*got 2"),
    "qrels_space_separated": (_qrels_space_separated, r"got 1 \(a space-separated TREC qrels file\?\)"),
    "qrels_non_integer_score": (_qrels_non_integer_score, r"score must be an integer, got '0\.5'"),
    "qrels_contradicting_judgment": (_qrels_contradiction, r"contradicts line 1"),
    "qrels_without_judgments": (_qrels_empty, r"no judgments"),
    "empty_corpus": (_empty_corpus, r"the corpus is empty"),
    "empty_queries": (_empty_queries, r"the query file is empty"),
    "gzip_truncated": (_gzip_truncated, r"damaged or truncated after 2 complete line\(s\)"),
    "gzip_suffix_on_plain_text": (_gzip_not_gzip, r"not a valid gzip file \(no gzip header\)"),
    "missing_corpus_file": (_missing_corpus, r"no corpus\.jsonl or corpus\.jsonl\.gz"),
    "missing_queries_file": (_missing_queries, r"no queries\.jsonl or queries\.jsonl\.gz"),
    "corpus_and_gz_both_present": (_ambiguous_corpus, r"both corpus\.jsonl and corpus\.jsonl\.gz exist"),
    "missing_split": (
        _missing_split,
        r"no qrels for split 'test' \(file not found\); splits available: train$",
    ),
    "dataset_folder_is_a_file": (_not_a_directory, r"not a directory"),
    "strict_unknown_document": (_strict_unknown_doc, r"strict mode: 1 judgment\(s\) name doc ids"),
    "checksum_mismatch": (_checksum_mismatch, r"sha256 [0-9a-f]{64} differs from [0-9a-f]{64} recorded in"),
    "checksummed_file_missing": (_checksum_file_missing, r"listed in .*CHECKSUMS\.json but missing"),
    "checksums_file_malformed": (_checksums_malformed, r"malformed JSON"),
}


@pytest.mark.parametrize("case", sorted(DATA_ERROR_CASES))
def test_every_data_error_is_one_line_naming_file_and_line(tmp_path: Path, case: str) -> None:
    make_case, message = DATA_ERROR_CASES[case]
    folder = tmp_path / "ds"
    path, line = make_case(folder)
    with pytest.raises(DataError) as info:
        load_beir(folder, strict=True)
    error = info.value
    text = str(error)
    prefix = f"{path}:{line}: " if line is not None else f"{path}: "
    assert text.startswith(prefix), text
    assert "\n" not in text
    assert re.search(message, text[len(prefix) :]), text
    assert error.path == path and error.line == line


def test_unknown_dataset_first_line_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIKING_EVAL_DATA", str(tmp_path))
    with pytest.raises(DataError) as info:
        load_dataset("nope", repo_datasets=tmp_path / "repo")
    assert str(info.value).splitlines()[0].startswith("nope: dataset not found in ")
    assert info.value.path == Path("nope")


def test_data_error_keeps_its_location_through_pickle() -> None:
    # Hydra launchers (joblib, submitit) send exceptions between processes
    import pickle

    error = pickle.loads(pickle.dumps(DataError("a.tsv:3: bad", path="a.tsv", line=3)))
    assert (str(error), error.path, error.line) == ("a.tsv:3: bad", Path("a.tsv"), 3)
    assert DataError("plain").path is None  # other modules may still raise it with a message only


# --------------------------------------------------------------------------- ids TREC can carry


@pytest.mark.parametrize(
    "char", [" ", "\t", "\n", "\r", "\u00a0", "\u2028", "\u3000", "\x00", "\x1b", "\x7f", "\x85"]
)
def test_ids_that_a_trec_line_cannot_carry_are_refused(char: str) -> None:
    value = f"doc{char}1"
    # what the refusal prevents: a TREC run line with such an id has more than 6 fields, or a
    # byte that trec_eval's parser does not treat as part of the id
    assert id_problem(value) is not None
    assert id_problem(value).endswith("at position 4)")  # type: ignore[union-attr]


@pytest.mark.parametrize("value", ["d1", "MED-10", "0", "doc_1.2", "caf\u00e9", "\u6587\u66f8", "a/b#c"])
def test_ordinary_ids_are_accepted(value: str) -> None:
    assert id_problem(value) is None
    assert len(f"q1 Q0 {value} 1 1.0 run".split()) == 6


def test_whitespace_in_an_unjudged_query_id_is_still_refused(tmp_path: Path) -> None:
    # the file is wrong whichever split is loaded, so the error does not depend on the split
    folder = make_beir(tmp_path / "t", queries=[{"_id": "q1", "text": "a"}, {"_id": "q 9", "text": "b"}])
    with pytest.raises(DataError, match=r"queries\.jsonl:2: query id 'q 9' contains whitespace"):
        load_beir(folder)


# --------------------------------------------------------------------------- fingerprints and checksums


def test_fingerprint_changes_with_every_file_that_changes_a_number(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "t", qrels={"test": "q1\td1\t1\nq2\td2\t2\n", "train": "q1\td2\t1\n"})
    base = load_beir(folder)
    assert set(base.files) == {"corpus.jsonl", "queries.jsonl", "qrels/test.tsv"}
    assert len(base.fingerprint) == 64
    # an identical copy elsewhere, under another name, is the same data
    copy = make_beir(tmp_path / "copy", qrels={"test": "q1\td1\t1\nq2\td2\t2\n"})
    assert load_beir(copy, name="other").fingerprint == base.fingerprint
    # another split of the same folder is other data
    assert load_beir(folder, "train").fingerprint != base.fingerprint
    # a split that is not read does not move this split's fingerprint
    (folder / "qrels" / "train.tsv").write_text("q2\td1\t1\n", encoding="utf-8")
    assert load_beir(folder).fingerprint == base.fingerprint
    seen = {base.fingerprint}
    edits = {
        "qrels/test.tsv": "q1\td1\t1\nq2\td2\t1\n",  # one relevance grade
        "queries.jsonl": json.dumps({"_id": "q1", "text": "what purrs?"})
        + "\n"
        + json.dumps({"_id": "q2", "text": "what barks"})
        + "\n",
        "corpus.jsonl": json.dumps({"_id": "d1", "text": "Cats purr"})
        + "\n"
        + json.dumps({"_id": "d2", "text": "Dogs bark."})
        + "\n",
    }
    for rel, text in edits.items():
        (folder / rel).write_text(text, encoding="utf-8")
        fingerprint = load_beir(folder).fingerprint
        assert fingerprint not in seen, rel
        seen.add(fingerprint)


def test_fingerprint_of_a_partition_half_names_half_key_and_seed(tmp_path: Path) -> None:
    queries = [{"_id": f"q{i}", "text": f"query {i}"} for i in range(8)]
    qrels = "".join(f"q{i}\td1\t1\n" for i in range(8))
    dataset = load_beir(make_beir(tmp_path / "t", queries=queries, qrels={"test": qrels}))
    tune = take_half(dataset, "tune", key=None, seed=0)
    fingerprints = {
        dataset.fingerprint,
        tune.fingerprint,
        take_half(dataset, "holdout", key=None, seed=0).fingerprint,
        take_half(dataset, "tune", key=None, seed=1).fingerprint,
        take_half(dataset, "tune", key="group", seed=0).fingerprint,
    }
    assert len(fingerprints) == 5
    assert tune.fingerprint == take_half(dataset, "tune", key=None, seed=0).fingerprint
    assert (
        dataclasses.replace(tune, subset="").fingerprint
        == dataclasses.replace(dataset, split=tune.split).fingerprint
    )


def test_recorded_checksums_are_verified_on_load(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "t", qrels={"test": "q1\td1\t1\n", "train": "q2\td2\t1\n"})
    (folder / "README.txt").write_text("notes", encoding="utf-8")
    files = record_checksums(folder, source="https://example.invalid/t.zip")
    assert set(files) == {"corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/train.tsv", "README.txt"}
    assert read_checksums(folder) == files
    recorded = json.loads((folder / CHECKSUMS_FILE).read_text(encoding="utf-8"))
    assert recorded["source"] == "https://example.invalid/t.zip"
    assert files["queries.jsonl"] == hashlib.sha256((folder / "queries.jsonl").read_bytes()).hexdigest()
    assert not list(folder.glob(".*part"))  # written beside, renamed into place
    dataset = load_beir(folder)
    assert dataset.checksums_verified == tuple(sorted(files))
    # a file that is not read for this split is verified too
    (folder / "README.txt").write_text("edited", encoding="utf-8")
    with pytest.raises(DataError, match=r"README\.txt: sha256 .* differs from"):
        load_beir(folder)
    (folder / CHECKSUMS_FILE).unlink()  # the documented way to accept a change: nothing to verify
    assert load_beir(folder).checksums_verified == ()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"files": []}', r"expected a JSON object with a 'files' object"),
        ('{"files": {"corpus.jsonl": "abc"}}', r"files\.corpus\.jsonl: expected 64 lowercase hex digits"),
        ('{"files": {"../x": "' + "0" * 64 + '"}}', r"files\.\.\./x: paths must be relative"),
        ('{"files": {"/etc/passwd": "' + "0" * 64 + '"}}', r"files\./etc/passwd: paths must be relative"),
    ],
)
def test_bad_checksums_file_is_refused(tmp_path: Path, content: str, message: str) -> None:
    folder = make_beir(tmp_path / "t")
    (folder / CHECKSUMS_FILE).write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=rf"^{re.escape(str(folder / CHECKSUMS_FILE))}: {message}"):
        load_beir(folder)


def test_unreadable_file_is_one_line(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "t")
    (folder / "queries.jsonl").unlink()
    os.symlink(folder / "nowhere", folder / "queries.jsonl")  # a dangling link: listed, not readable
    with pytest.raises(DataError) as info:
        load_queries(folder / "queries.jsonl")
    assert str(info.value) == f"{folder / 'queries.jsonl'}: file not found"


def test_paths_the_system_cannot_look_at_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # stat() on a 300-character name fails with ENAMETOOLONG, which is not "missing": for root too
    too_long = tmp_path / ("x" * 300)
    with pytest.raises(DataError) as info:
        load_beir(too_long)
    assert str(info.value) == f"{too_long}: cannot read: File name too long"
    assert info.value.path == too_long
    # looked up by name, such a folder is only not found, and does not hide the other folders
    found = make_beir(tmp_path / "ok" / "tiny")
    monkeypatch.setenv("VIKING_EVAL_DATA", f"{too_long}:{tmp_path / 'ok'}")
    assert resolve_dataset("tiny", tmp_path / "repo") == found
    with pytest.raises(DataError, match=r"^x{300}: dataset not found"):
        resolve_dataset("x" * 300, tmp_path / "repo")
