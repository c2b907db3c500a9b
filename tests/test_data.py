"""Tests for viking_eval.data: BEIR loading, validation and dataset resolution."""

from __future__ import annotations

import gzip
import hashlib
import json
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from viking_eval.data import (
    DataError,
    DataIssues,
    DataWarning,
    data_search_path,
    load_beir,
    load_corpus,
    load_dataset,
    load_qrels,
    load_queries,
    read_jsonl,
    resolve_dataset,
)

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
        DataError, match=r"strict mode: 1 judgment\(s\) name doc ids.*test\.tsv:3, doc 'ghost'"
    ):
        load_beir(folder, strict=True)


def test_strict_mode_raises_on_unknown_query(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "t", qrels={"test": HEADER + "q1\td1\t1\nq9\td1\t1\n"})
    with pytest.raises(DataError, match=r"1 judgment\(s\) name query ids.*test\.tsv:3, query 'q9'"):
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


def test_search_path_order_env_then_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("VIKING_EVAL_DATA", f"{tmp_path / 'a'}::~/b:")
    repo = tmp_path / "repo_datasets"
    assert data_search_path(repo) == [tmp_path / "a", tmp_path / "home" / "b", repo]


def test_search_path_default_is_repo_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VIKING_EVAL_DATA", raising=False)
    assert data_search_path() == [Path(__file__).resolve().parents[1] / "datasets"]


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
    assert "'nosuch' not found" in message
    assert str(tmp_path / "one") in message
    assert f"{tmp_path / 'missing'}  (does not exist)" in message
    assert str(tmp_path / "repo") in message
    assert message.index(str(tmp_path / "one")) < message.index(str(tmp_path / "repo"))
    assert "datasets found there: alpha, zeta." in message
    assert "not_a_dataset" not in message


# --------------------------------------------------------------------------- the shared datasets


@pytest.fixture
def shared_env(shared_datasets: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VIKING_EVAL_DATA", str(shared_datasets))
    return shared_datasets


def test_scifact_test_split(shared_env: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = load_dataset("scifact", "test", strict=True)
    assert ds.folder == shared_env / "scifact"
    assert len(ds.corpus) == 5183
    assert len(ds.queries) == 300
    assert ds.num_judgments == 339
    assert ds.issues == DataIssues(0, 0, 0, 809)
    assert set(ds.files) == {"corpus.jsonl.gz", "queries.jsonl", "qrels/test.tsv"}
    # the decompressed corpus is byte-identical to BEIR's corpus.jsonl (PROVENANCE.md); we hash the gzip as read
    gz_bytes = (shared_env / "scifact" / "corpus.jsonl.gz").read_bytes()
    assert ds.files["corpus.jsonl.gz"] == hashlib.sha256(gz_bytes).hexdigest()
    assert all(ds.corpus[d].title for d in list(ds.corpus)[:50])


def test_scifact_train_split(shared_env: Path) -> None:
    ds = load_dataset("scifact", "train")
    assert len(ds.queries) == 809
    assert ds.num_judgments == 919
    assert ds.issues.unjudged_queries == 300


def test_adi(shared_env: Path) -> None:
    ds = load_dataset("adi")
    assert len(ds.corpus) == 82
    assert len(ds.queries) == 35
