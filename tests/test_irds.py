"""``dataset.name=irds:<id>``: ir_datasets collections registered over local files in the tests
(no network), loaded through :func:`viking_eval.data.irds.load_irds` and through the harness, checked
against the same data written as a BEIR folder and read by :func:`viking_eval.data.beir.load_beir`."""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from conftest import smoke_settings
from http_servers import unreachable_url

from viking_eval.data import DataError, DataWarning, load_beir, load_dataset, resolve_dataset
from viking_eval.data.irds import irds_folder, load_irds, split_label
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- a small collection

TOPICS = {
    "solar": "solar panels turn sunlight into electric energy on rooftops",
    "flood": "river floods rise when heavy rain fills the valley with water",
    "bees": "honey bees pollinate flowers and keep the hive warm in winter",
    "chess": "chess openings control the centre of the board with pawns and knights",
    "bread": "sourdough bread rises slowly with wild yeast and flour and water",
    "comet": "a comet tail points away from the sun as ice turns to gas",
}
# (doc id, title, text, year); two documents per topic, a shared-word distractor, an empty one
DOCS = [
    *(
        (f"{topic}-{n}", f"{topic} notes {n}", f"{text} {'and more' if n == 2 else ''}".strip(), 2000 + n)
        for topic, text in TOPICS.items()
        for n in (1, 2)
    ),
    ("mixed", "mixed bag", "water and energy and bread and board", 1999),
    ("empty", "", "", 1998),
]
QUERIES = [
    ("q1", "how do solar panels make energy"),
    ("q2", "why do rivers flood after rain"),
    ("q3", "what do bees do in winter"),
    ("q4", "good chess openings for the centre"),
    ("q5", "how does sourdough bread rise"),
    ("q6", "which way does a comet tail point"),
    ("q7", "a query nobody judged"),
]
QRELS = [
    ("q1", "solar-1", 2),
    ("q1", "solar-2", 1),
    ("q2", "flood-1", 2),
    ("q2", "flood-2", 2),
    ("q2", "mixed", 1),
    ("q3", "bees-2", 1),
    ("q4", "chess-1", 2),
    ("q5", "bread-1", 1),
    ("q5", "bread-2", 2),
    ("q6", "comet-1", 1),
    ("q6", "comet-2", 0),
    ("q6", "no-such-doc", 1),  # dropped and counted
    ("q9", "solar-1", 1),  # unknown query: dropped and counted
]


class YearDoc(NamedTuple):
    doc_id: str
    title: str
    text: str
    year: int


@pytest.fixture(autouse=True)
def _irds_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ir_datasets' data folder (and what its import creates) stays out of the user's home."""
    home = tmp_path_factory.mktemp("ir_datasets_home")
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    monkeypatch.setenv("IR_DATASETS_DL_TRIES", "1")
    return home


def _unique(prefix: str = "viking-test") -> str:
    return f"{prefix}/{uuid.uuid4().hex[:10]}"


def write_files(folder: Path, docs=DOCS, queries=QUERIES, qrels=QRELS) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    """The collection in ir_datasets' local formats (JSONL docs, TSV queries, TREC qrels)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"docs": folder / "docs.jsonl", "queries": folder / "queries.tsv", "qrels": folder / "qrels.txt"}
    paths["docs"].write_text(
        "".join(json.dumps({"_id": d, "title": t, "text": x, "year": y}) + "\n" for d, t, x, y in docs)
    )
    paths["queries"].write_text("".join(f"{q}\t{text}\n" for q, text in queries))
    paths["qrels"].write_text("".join(f"{q} 0 {d} {r}\n" for q, d, r in qrels))
    return paths


def write_beir(folder: Path, docs=DOCS, queries=QUERIES, qrels=QRELS) -> Path:  # type: ignore[no-untyped-def]
    """The same collection as a BEIR folder (``year`` becomes metadata there too)."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": t, "text": x, "year": y}) + "\n" for d, t, x, y in docs)
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries)
    )
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{r}\n" for q, d, r in qrels)
    )
    return folder


def register_files(paths: dict[str, Path], name: str | None = None) -> str:
    """Register ``paths`` as an ir_datasets collection; returns its id."""
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import JsonlDocs, TrecQrels, TsvQueries
    from ir_datasets.util import LocalDownload

    name = name or _unique() + "/test"
    mapping = {"doc_id": "_id", "title": "title", "text": "text", "year": "year"}
    ir_datasets.registry.register(
        name,
        Dataset(
            JsonlDocs(LocalDownload(paths["docs"]), doc_cls=YearDoc, mapping=mapping),
            TsvQueries(LocalDownload(paths["queries"])),
            TrecQrels(
                LocalDownload(paths["qrels"]), {0: "not relevant", 1: "relevant", 2: "highly relevant"}
            ),
        ),
    )
    return name


# in-memory components, for record types no local file format produces
class ListDocs:
    def __init__(self, records: Iterable[Any]) -> None:
        self.records = list(records)

    def docs_iter(self) -> Any:
        return iter(self.records)

    def docs_handler(self) -> Any:
        return self

    def docs_cls(self) -> type:
        return type(self.records[0])


class ListQueries:
    def __init__(self, records: Iterable[Any]) -> None:
        self.records = list(records)

    def queries_iter(self) -> Any:
        return iter(self.records)

    def queries_handler(self) -> Any:
        return self

    def queries_cls(self) -> type:
        return type(self.records[0])


class ListQrels:
    def __init__(self, records: Iterable[Any]) -> None:
        self.records = list(records)

    def qrels_iter(self) -> Any:
        return iter(self.records)

    def qrels_handler(self) -> Any:
        return self

    def qrels_defs(self) -> dict[int, str]:
        return {}


def register_records(docs: Iterable[Any], queries: Iterable[Any], qrels: Iterable[Any]) -> str:
    import ir_datasets
    from ir_datasets.datasets.base import Dataset

    name = _unique()
    ir_datasets.registry.register(name, Dataset(ListDocs(docs), ListQueries(queries), ListQrels(qrels)))
    return name


class Doc(NamedTuple):
    doc_id: str
    text: str


class Qry(NamedTuple):
    query_id: str
    text: str


class Qrel(NamedTuple):
    query_id: str
    doc_id: str
    relevance: Any


GOOD_DOCS = [Doc("d1", "alpha beta"), Doc("d2", "gamma delta")]
GOOD_QUERIES = [Qry("q1", "alpha")]
GOOD_QRELS = [Qrel("q1", "d1", 1)]


# --------------------------------------------------------------------------- the same data, two paths


def test_load_irds_equals_load_beir_of_the_same_data(tmp_path: Path) -> None:
    name = register_files(write_files(tmp_path / "irds"))
    beir_folder = write_beir(tmp_path / "beir")
    with pytest.warns(DataWarning, match=r"irds:viking-test/.*dropped judgments.*'no-such-doc'.*'q9'"):
        irds = load_irds(f"irds:{name}")
    with pytest.warns(DataWarning):
        beir = load_beir(beir_folder, "test")
    assert irds.name == f"irds:{name}" and irds.split == "test"
    assert irds.corpus == beir.corpus  # ids, titles, texts, and "year" in metadata
    assert irds.queries == beir.queries and list(irds.queries) == list(beir.queries)
    assert irds.qrels == beir.qrels
    assert irds.issues == beir.issues
    assert irds.issues.as_dict() == {
        "qrels_unknown_docs": 1,
        "qrels_unknown_queries": 1,
        "empty_documents": 1,
        "unjudged_queries": 1,
    }
    assert all(isinstance(rel, int) for docs in irds.qrels.values() for rel in docs.values())
    assert set(irds.files) == {f"irds:{name}#docs", f"irds:{name}#queries", f"irds:{name}#qrels"}
    # the bare id works too, and loading twice gives the same fingerprint
    with pytest.warns(DataWarning):
        again = load_irds(name, "test")
    assert again.fingerprint == irds.fingerprint and again.files == irds.files
    # the harness's own entry point and resolver route irds: names here
    with pytest.warns(DataWarning):
        assert load_dataset(f"irds:{name}", "test").qrels == irds.qrels
    assert resolve_dataset(f"irds:{name}") == irds.folder == irds_folder(name)


def test_fingerprint_notices_a_changed_document(tmp_path: Path) -> None:
    base = register_files(write_files(tmp_path / "a", qrels=QRELS[:11]))
    changed_docs = [(d, t, x + " changed" if d == "bees-2" else x, y) for d, t, x, y in DOCS]
    changed = register_files(write_files(tmp_path / "b", docs=changed_docs, qrels=QRELS[:11]))
    first, second = load_irds(base), load_irds(changed)
    assert first.files[f"irds:{base}#queries"] != second.files[f"irds:{changed}#queries"]  # id is in each sum
    differing = {
        key.split("#")[1]
        for key in first.files
        if first.files[key] != second.files[key.replace(base, changed)]
    }
    assert differing == {"docs", "queries", "qrels"}
    assert first.fingerprint != second.fingerprint


def test_harness_run_on_irds_equals_the_beir_folder_run(tmp_path: Path) -> None:
    name = register_files(write_files(tmp_path / "irds"))
    beir_folder = write_beir(tmp_path / "synthetic")
    with pytest.warns(DataWarning):
        via_irds = run_experiment(
            smoke_settings("run.latency.n_queries=0", f"dataset.name=irds:{name}"), tmp_path / "run_irds"
        )
    with pytest.warns(DataWarning):
        via_beir = run_experiment(
            smoke_settings("run.latency.n_queries=0", f"dataset.path={beir_folder}"), tmp_path / "run_beir"
        )
    assert via_irds.metrics() == via_beir.metrics()
    assert [r.per_query for r in via_irds.results] == [r.per_query for r in via_beir.results]
    assert via_irds.results[0].n_queries == 6
    assert 0.3 < via_irds.metrics()["bm25"]["nDCG@10"] <= 1.0
    document = json.loads((tmp_path / "run_irds" / "metrics.json").read_text())
    assert document["dataset"] == f"irds:{name}" and document["split"] == "test"
    assert f"irds:{name}" in (tmp_path / "run_irds" / "report.md").read_text()
    environment = json.loads((tmp_path / "run_irds" / "environment.json").read_text())
    assert set(environment["dataset_files"]) == {
        f"irds:{name}#{kind}" for kind in ("docs", "queries", "qrels")
    }


# --------------------------------------------------------------------------- errors


def test_unknown_id_is_one_line_listing_similar_ids(tmp_path: Path) -> None:
    name = register_files(write_files(tmp_path))
    with pytest.raises(DataError) as caught:
        load_irds(f"irds:{name[:-2]}/tset")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"irds:{name[:-2]}/tset: unknown ir_datasets id")
    assert f"similar ids: {name}" in message and "python -m ir_datasets list" in message
    with pytest.raises(DataError, match=r"^irds:beir/scifac: unknown .*beir/scifact"):
        resolve_dataset("irds:beir/scifac")  # the gate's check, before anything is read
    for bad in ("irds:", "irds: beir/scifact", "irds:beir scifact"):
        with pytest.raises(DataError, match="not an ir_datasets id"):
            load_irds(bad)


@pytest.mark.parametrize(
    ("docs", "queries", "qrels", "expected"),
    [
        (
            [*GOOD_DOCS, Doc("d1", "again")],
            GOOD_QUERIES,
            GOOD_QRELS,
            r": docs record 3 \(doc_id 'd1'\): duplicate doc_id \(first at record 1\)$",
        ),
        (
            [Doc("d 1", "x"), *GOOD_DOCS],
            GOOD_QUERIES,
            GOOD_QRELS,
            r": docs record 1 \(doc_id 'd 1'\): doc_id 'd 1' contains whitespace",
        ),
        (
            GOOD_DOCS,
            [Qry("q1", "a"), Qry("q1", "b")],
            GOOD_QRELS,
            r": queries record 2 \(query_id 'q1'\): duplicate query_id \(first at record 1\)$",
        ),
        (
            GOOD_DOCS,
            [Qry("q\t1", "a")],
            GOOD_QRELS,
            r": queries record 1 \(query_id 'q\\t1'\): query_id 'q\\t1' contains whitespace",
        ),
        (
            GOOD_DOCS,
            GOOD_QUERIES,
            [Qrel("q1", "d 2", 1)],
            r": qrels record 1: doc_id 'd 2' contains whitespace",
        ),
        (
            GOOD_DOCS,
            GOOD_QUERIES,
            [Qrel("q1", "d1", "high")],
            r": qrels record 1: relevance of \('q1', 'd1'\) must be an integer, got 'high'$",
        ),
        (
            GOOD_DOCS,
            GOOD_QUERIES,
            [Qrel("q1", "d1", 1), Qrel("q1", "d1", 2)],
            r": qrels record 2: judgment \('q1', 'd1'\) = 2 contradicts record 1 \(= 1\)",
        ),
        (
            GOOD_DOCS,
            [Qry("q1", "  ")],
            GOOD_QRELS,
            r": queries record 1 \(query_id 'q1'\): judged query has empty text",
        ),
    ],
    ids=[
        "duplicate-doc",
        "space-in-doc-id",
        "duplicate-query",
        "tab-in-query-id",
        "space-in-qrels-id",
        "relevance-not-int",
        "contradicting-judgments",
        "empty-judged-query",
    ],
)
def test_bad_data_names_the_id_and_the_record(
    docs: list[Any], queries: list[Any], qrels: list[Any], expected: str
) -> None:
    name = register_records(docs, queries, qrels)
    with pytest.raises(DataError, match=f"^irds:{name}{expected}") as caught:
        load_irds(f"irds:{name}")
    assert "\n" not in str(caught.value)
    assert caught.value.line is not None


def test_strict_refuses_unknown_judgments_and_relevance_strings_are_ints() -> None:
    name = register_records(GOOD_DOCS, GOOD_QUERIES, [Qrel("q1", "d1", "2"), Qrel("q1", "d9", 1)])
    with pytest.raises(
        DataError,
        match=r"strict mode: 1 judgment\(s\) name doc ids not in its docs \(first: record 2, doc 'd9'\)",
    ):
        load_irds(name, strict=True)
    with pytest.warns(DataWarning, match="1 naming unknown documents"):
        assert load_irds(name).qrels == {"q1": {"d1": 2}}
    unjudged_empty = register_records(GOOD_DOCS, [*GOOD_QUERIES, Qry("q2", "")], GOOD_QRELS)
    assert load_irds(unjudged_empty).issues.unjudged_queries == 1  # excluded like any unjudged query


# --------------------------------------------------------------------------- split rules


def _collection() -> tuple[str, str]:
    """A collection with ``test`` and ``train`` ids sharing one document component."""
    import ir_datasets
    from ir_datasets.datasets.base import Dataset

    base = _unique()
    docs = ListDocs(GOOD_DOCS)
    queries = ListQueries([Qry("q1", "alpha"), Qry("q2", "gamma")])
    ir_datasets.registry.register(base, Dataset(docs, queries))
    ir_datasets.registry.register(f"{base}/test", Dataset(docs, queries, ListQrels([Qrel("q1", "d1", 1)])))
    ir_datasets.registry.register(f"{base}/train", Dataset(docs, queries, ListQrels([Qrel("q2", "d2", 1)])))
    return base, f"{base}/test"


def test_split_is_the_ids_own() -> None:
    base, test_id = _collection()
    assert split_label(test_id) == "test" and split_label(f"{base}/train") == "train"
    for split in (None, "test", f"irds:{test_id}"):
        assert list(load_irds(test_id, split).queries) == ["q1"]
    with pytest.raises(
        DataError, match=rf"split 'train' does not match the id, .*set dataset.name=irds:{base}/train$"
    ):
        load_irds(test_id, "train")
    with pytest.raises(
        DataError, match=rf"split 'dev' does not match .*ids instead: {base}/test, {base}/train$"
    ):
        load_irds(test_id, "dev")
    # a sweep's tune_split may name another id of the same collection
    train = load_irds(test_id, f"irds:{base}/train")
    assert train.name == f"irds:{base}/train" and train.split == "train" and list(train.queries) == ["q2"]
    other = register_records(GOOD_DOCS, GOOD_QUERIES, GOOD_QRELS)
    with pytest.raises(DataError, match="is not an id of the same collection"):
        load_irds(test_id, f"irds:{other}")
    with pytest.raises(DataError, match=rf"^irds:{base}: has no qrels, .*: {base}/test, {base}/train$"):
        load_irds(base)


# --------------------------------------------------------------------------- field mapping


class NewsDoc(NamedTuple):
    doc_id: str
    url: str
    headline: str
    body: str
    raw_html: bytes
    published: dt.datetime
    spans: tuple[Any, ...]


class Span(NamedTuple):
    start: int
    text: str


class WarcLikeDoc(NamedTuple):
    doc_id: str
    title: str
    body: bytes

    def default_text(self) -> str:
        return f"{self.title} {self.body.decode()}"


class Topic(NamedTuple):
    query_id: str
    title: str
    description: str
    narrative: str


def test_field_mapping_title_text_metadata_and_query_text() -> None:
    published = dt.datetime(2020, 5, 17, 8, 30)
    news = NewsDoc(
        "n1", "http://x/1", "Storm hits coast", "Heavy rain fell.", b"<html>", published, (Span(0, "Heavy"),)
    )
    warc = WarcLikeDoc("w1", "Page", b"raw words")
    topic = Topic("t1", "storm coast", "Find reports of storms.", "Relevant documents describe...")
    name = register_records([news], [topic], [Qrel("t1", "n1", 1)])
    dataset = load_irds(name)
    doc = dataset.corpus["n1"]
    assert (doc.title, doc.text) == ("Storm hits coast", "Heavy rain fell.")
    assert doc.metadata == {
        "url": "http://x/1",
        "published": "2020-05-17T08:30:00",
        "spans": [{"start": 0, "text": "Heavy"}],
    }  # bytes left out; datetime and namedtuples as JSON
    query = dataset.queries["t1"]
    assert query.text == "storm coast"  # a TREC topic's title
    assert query.metadata == {
        "description": "Find reports of storms.",
        "narrative": "Relevant documents describe...",
    }

    # no text field: ir_datasets' default_text(), which holds the title, and no separate title
    fallback = load_irds(register_records([warc], [Qry("q", "words")], [Qrel("q", "w1", 1)]))
    assert (fallback.corpus["w1"].title, fallback.corpus["w1"].text) == ("", "Page raw words")
    assert fallback.corpus["w1"].metadata == {"title": "Page"}

    # explicit fields (Python API)
    chosen = load_irds(name, text_field="url", title_field="body", query_field="description")
    assert (chosen.corpus["n1"].title, chosen.corpus["n1"].text) == ("Heavy rain fell.", "http://x/1")
    assert chosen.queries["t1"].text == "Find reports of storms."
    assert chosen.files != dataset.files  # what the harness sees changed: so does the checksum
    with pytest.raises(DataError, match=r"docs record 1 \(doc_id 'n1'\): text_field='nope' is not a field"):
        load_irds(name, text_field="nope")


# --------------------------------------------------------------------------- offline


def _downloading_collection(home: Path, url: str) -> tuple[str, Path]:
    """A collection whose files ir_datasets must download (as a real one's are): docs from a
    cached download of ``url``, queries and qrels from local files."""
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
    from ir_datasets.util import Download, LocalDownload, RequestsDownload

    name = _unique()
    cache_path = home / name / "docs.tsv"
    local = write_files(home / "local")
    local["queries"].write_text("q1\talpha\n")
    local["qrels"].write_text("q1 0 d1 1\n")
    download = Download([RequestsDownload(url)], cache_path=str(cache_path), expected_md5="0" * 32)
    ir_datasets.registry.register(
        name,
        Dataset(
            TsvDocs(download),
            TsvQueries(LocalDownload(local["queries"])),
            TrecQrels(LocalDownload(local["qrels"]), {}),
        ),
    )
    return name, cache_path


def test_offline_is_one_line_saying_which_file_and_where(
    _irds_home: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import ir_datasets

    original_path = ir_datasets.util.Download.path
    url = unreachable_url("/collection.tar.gz")
    name, cache_path = _downloading_collection(_irds_home, url)
    with pytest.raises(DataError) as caught:
        load_irds(f"irds:{name}")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"irds:{name}: ir_datasets could not get a file it needs: {url} (md5 {'0' * 32})"
    )
    assert f"put it at {cache_path}" in message and "cannot connect" in message
    assert f"IR_DATASETS_HOME (now {_irds_home})" in message
    assert "Download failed" not in capfd.readouterr().err  # ir_datasets' own retry chatter held back
    # the file put where the message says: the load works, offline
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    cache_path.write_text("d1\talpha beta\n")
    assert list(load_irds(name).corpus) == ["d1"]
    assert ir_datasets.util.Download.path is original_path  # the wrapper is gone again
    assert not logging.getLogger("ir_datasets").filters


def test_missing_local_file_and_parse_errors_are_one_line(tmp_path: Path) -> None:
    paths = write_files(tmp_path)
    name = register_files(paths)
    paths["qrels"].write_text("q1 d1 1\n")  # 3 columns where TrecQrels expects 4
    with pytest.raises(
        DataError,
        match=rf"^irds:{name}: ir_datasets failed reading its qrels: RuntimeError: expected 4 columns, got 3$",
    ):
        load_irds(name)
    paths["queries"].unlink()
    with pytest.raises(DataError) as caught:
        load_irds(name)
    assert "\n" not in str(caught.value) and str(paths["queries"]) in str(caught.value)
