"""The retriever contract enforced on every result list (viking_eval/run/contract.py), a run file of
another dataset (retrievers/run_file.py max_unknown) and metrics deeper than the run: each breach
is one typed error from evaluate() and one line with exit 2 from the command line, never a wrong
number scored in silence."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_cli

import viking_eval
from retrievers import BM25Retriever, ContextStore, StoreConfig
from retrievers.builders import build_store
from retrievers.types import RetrievalResult
from viking_eval.config import ConfigError, load_settings
from viking_eval.config.compose import compose_config, hydra_session
from viking_eval.data import DataError, load_dataset
from viking_eval.run.contract import RetrieverContractError, check_batch, check_results
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
SMOKE = ["experiment=smoke", "run.latency.n_queries=0"]

# retrievers that break one rule each; the constructor is (store, embedder=None) so that a config
# can name them with _target_
BREAKERS = '''
from __future__ import annotations

import math

from retrievers.baselines import BM25Retriever
from retrievers.types import RetrievalResult


class _Base:
    def __init__(self, store, embedder=None):
        self.bm25 = BM25Retriever(store)

    def retrieve(self, query, top_k=10):
        return self.bm25.retrieve(query, top_k)

    def retrieve_batch(self, queries, top_k=10):
        return [self.retrieve(query, top_k) for query in queries]


class Greedy(_Base):
    """Returns every document BM25 scores, whatever top_k."""

    def retrieve(self, query, top_k=10):
        return self.bm25.retrieve(query, 10_000)


class Twice(_Base):
    def retrieve(self, query, top_k=10):
        results = self.bm25.retrieve(query, top_k)
        return [*results[: top_k - 1], results[0]]


class Tuples(_Base):
    def retrieve(self, query, top_k=10):
        return [(r.doc_id, r.score) for r in self.bm25.retrieve(query, top_k)]


class NotANumber(_Base):
    def retrieve(self, query, top_k=10):
        results = self.bm25.retrieve(query, top_k)
        return [RetrievalResult(results[0].doc_id, math.nan), *results[1:]]


class StringScore(_Base):
    def retrieve(self, query, top_k=10):
        return [RetrievalResult(r.doc_id, str(r.score)) for r in self.bm25.retrieve(query, top_k)]


class Unknown(_Base):
    def retrieve(self, query, top_k=10):
        return [RetrievalResult("no-such-doc", 1.0)]


class ShortBatch(_Base):
    def retrieve_batch(self, queries, top_k=10):
        return [self.retrieve(query, top_k) for query in queries[1:]]
'''


@pytest.fixture(scope="module")
def breakers_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``contract_breakers`` written to a temporary folder and put on sys.path."""
    folder = tmp_path_factory.mktemp("breakers")
    (folder / "contract_breakers.py").write_text(textwrap.dedent(BREAKERS), encoding="utf-8")
    sys.path.insert(0, str(folder))
    yield str(folder)
    sys.path.remove(str(folder))
    sys.modules.pop("contract_breakers", None)


@pytest.fixture
def breakers(breakers_folder: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The folder of ``contract_breakers``, a module configs may name (its classes break the contract
    on purpose): allowed by VIKING_EVAL_ALLOW_TARGETS, as a user allows their own classes."""
    monkeypatch.setenv("VIKING_EVAL_ALLOW_TARGETS", "contract_breakers")
    return breakers_folder


@pytest.fixture(scope="module")
def adi_store(shared_datasets: Path) -> ContextStore:
    dataset = load_dataset(str(shared_datasets / "adi"))
    docs = sorted(dataset.corpus.values(), key=lambda doc: doc.id)
    return build_store(docs, None, StoreConfig.from_dict({}))


def _cli(tmp_path: Path, *overrides: str, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    """``experiment=smoke`` (ADI) with ``overrides`` into ``tmp_path/run``, ``pythonpath`` importable."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [pythonpath, str(REPO)]))} if pythonpath else None
    return run_cli(*SMOKE, *overrides, f"hydra.run.dir={tmp_path / 'run'}", env=env, timeout=300)


# --------------------------------------------------------------------------- the checks themselves


def test_each_breach_is_one_line_naming_retriever_query_and_breach() -> None:
    good = [RetrievalResult("d1", 2.0), RetrievalResult("d2", 1)]  # an int score is a number
    assert check_results("mine", "q1", good, {"d1", "d2"}, 2) == good
    cases: list[tuple[list[object], str]] = [
        (good, "2 results for top_k=1; return at most top_k"),
        (
            [RetrievalResult("d1", 2.0), RetrievalResult("d1", 1.0)],
            "doc 'd1' is returned twice (results 1 and 2)",
        ),
        ([("d1", 2.0)], "result 1 is a tuple ('d1', 2.0), not a retrievers.types.RetrievalResult"),
        ([RetrievalResult("d1", math.nan)], "result 1 (doc 'd1'): score nan is not finite"),
        ([RetrievalResult("d1", math.inf)], "result 1 (doc 'd1'): score inf is not finite"),
        ([RetrievalResult("d1", "2.0")], "result 1 (doc 'd1'): score '2.0' is not a number"),  # type: ignore[arg-type]
        ([RetrievalResult("d1", True)], "result 1 (doc 'd1'): score True is not a number"),
        ([RetrievalResult(7, 1.0)], "result 1: doc id 7 is not a string"),  # type: ignore[arg-type]
        ([RetrievalResult("d3", 1.0)], "result 1: doc 'd3' is not a document of the corpus"),
    ]
    for results, breach in cases:
        top_k = 1 if breach.startswith("2 results") else 10
        with pytest.raises(RetrieverContractError) as caught:
            check_results("mine", "q1", results, {"d1", "d2"}, top_k)
        message = str(caught.value)
        assert message.startswith(f"retriever 'mine', query 'q1': {breach}"), message
        assert "\n" not in message and isinstance(caught.value, DataError)  # the CLI's one line, exit 2
    with pytest.raises(RetrieverContractError, match=r"retrieve_batch returned 1 result lists for 2 queries"):
        check_batch("mine", ["q1", "q2"], [[]])
    with pytest.raises(RetrieverContractError, match=r"retrieve_batch returned NoneType None, not a list"):
        check_batch("mine", ["q1"], None)
    with pytest.raises(RetrieverContractError, match=r"query 'q1': the result list is a NoneType"):
        check_batch("mine", ["q1"], [None])


# --------------------------------------------------------------------------- through evaluate()


@pytest.mark.needs_data
def test_evaluate_refuses_a_retriever_that_breaks_the_contract_on_adi(
    breakers: str, data_env: Path, adi_store: ContextStore
) -> None:
    import contract_breakers as mod

    # the case: a retriever returning more than top_k was scored on all of them (R@100
    # at top_k 10 far above what 10 results can give); it is refused now
    expected = {
        mod.Greedy: r"retriever 'greedy', query '1': \d+ results for top_k=10",
        mod.Twice: r"retriever 'twice', query '1': doc '\w+' is returned twice \(results 1 and 10\)",
        mod.Tuples: r"retriever 'tuples', query '1': result 1 is a tuple",
        mod.NotANumber: r"retriever 'notanumber', query '1': result 1 \(doc '\w+'\): score nan is not finite",
        mod.StringScore: r"retriever 'stringscore', query '1': result 1 \(doc '\w+'\): score '[\d.]+' is not a number",
        mod.Unknown: r"retriever 'unknown', query '1': result 1: doc 'no-such-doc' is not a document",
        mod.ShortBatch: r"retriever 'shortbatch', a batch of queries: retrieve_batch returned 34 result lists for 35",
    }
    for cls, message in expected.items():
        with pytest.raises(RetrieverContractError, match=message):
            viking_eval.evaluate(cls(adi_store), "adi", metrics=["R@100"], top_k=10, latency_queries=0)
    # the same retriever within the contract gives the numbers BM25 gives
    within = viking_eval.evaluate(
        {"bm25": BM25Retriever(adi_store), "base": mod._Base(adi_store)},
        "adi",
        metrics=["nDCG@10", "R@10"],
        top_k=10,
        latency_queries=0,
    )
    assert within.results[0].metrics == within.results[1].metrics


@pytest.mark.needs_data
def test_evaluate_refuses_a_config_retriever_too(breakers: str, data_env: Path, tmp_path: Path) -> None:
    with pytest.raises(
        RetrieverContractError, match=r"retriever 'greedy', query '1': \d+ results for top_k=10"
    ):
        viking_eval.evaluate(
            {"greedy": {"_target_": "contract_breakers.Greedy"}},
            "adi",
            embedder="tfidf",
            top_k=10,
            latency_queries=0,
            output_dir=tmp_path / "out",
        )
    assert not (tmp_path / "out" / "metrics.json").exists()  # nothing that looks finished


@pytest.mark.needs_data
def test_the_cli_prints_one_line_and_exits_2(breakers: str, data_env: Path, tmp_path: Path) -> None:
    done = _cli(
        tmp_path, "run.top_k=10", "+retrievers.greedy._target_=contract_breakers.Greedy", pythonpath=breakers
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("error: retriever 'greedy', query '1': 52 results for top_k=10; return at most top_k")
    )
    status = json.loads((tmp_path / "run" / "status.json").read_text(encoding="utf-8"))
    assert status["status"] == "failed" and "52 results for top_k=10" in status["error"]
    assert not (tmp_path / "run" / "metrics.json").exists()


# --------------------------------------------------------------------------- a run file of another dataset


def _medline_run(shared_datasets: Path, path: Path) -> Path:
    """BM25 over MedLine, top 100 of each of its 30 queries, as a TREC run (2,831 lines)."""
    medline = load_dataset(str(shared_datasets / "medline"))
    docs = sorted(medline.corpus.values(), key=lambda doc: doc.id)
    bm25 = BM25Retriever(build_store(docs, None, StoreConfig.from_dict({})))
    lines = [
        f"{qid} Q0 {r.doc_id} {rank} {r.score!r} bm25"
        for qid, query in medline.queries.items()
        for rank, r in enumerate(bm25.retrieve(query.text, 100), start=1)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.needs_data
def test_medline_run_scored_on_adi_is_refused_with_the_counts(
    data_env: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = _medline_run(data_env, tmp_path / "medline_bm25.trec")
    assert sum(1 for _ in run.open(encoding="utf-8")) == 2831
    done = _cli(tmp_path, "+retriever@retrievers.ext=run_file", f"retrievers.ext.path={run}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: retrievers.ext.max_unknown: run file {run}: 2,610 of 2,831 lines (92.2%)")
    assert "2,610 lines naming a document the store does not hold" in line and "max_unknown: 1.0" in line
    # evaluate(): the same refusal, one typed error
    with pytest.raises(ConfigError) as caught:
        viking_eval.evaluate(
            {"ext": {"_target_": "retrievers.run_file.RunFileRetriever", "path": str(run)}},
            "adi",
            embedder="tfidf",
            latency_queries=0,
        )
    assert caught.value.line() == line.removeprefix("error: ")
    # allowed on purpose: scored, with one warning line giving the count
    with caplog.at_level(logging.WARNING, logger="retrievers.run_file"):
        allowed = viking_eval.evaluate(
            {
                "ext": {
                    "_target_": "retrievers.run_file.RunFileRetriever",
                    "path": str(run),
                    "max_unknown": 1.0,
                }
            },
            "adi",
            embedder="tfidf",
            latency_queries=0,
        )
    warnings = [
        record.getMessage() for record in caplog.records if "2,610 of 2,831 lines" in record.getMessage()
    ]
    assert len(warnings) == 1 and warnings[0].startswith(f"run file {run}: 2,610 of 2,831 lines (92.2%)")
    assert allowed.results[0].stats["file_unknown_doc_lines"] == 2610


def test_a_few_unknown_lines_are_scored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from retrievers import Document
    from retrievers.params import ParamError
    from retrievers.run_file import RunFileRetriever

    store = build_store(
        [Document(f"d{i}", f"text {i}") for i in range(1, 5)], None, StoreConfig.from_dict({})
    )
    queries = {"q1": "one", "q2": "two"}
    # 2 of 5 lines unknown (x9 is no document, q7 no query): under half, accepted and warned about
    mostly_known = tmp_path / "ok.trec"
    mostly_known.write_text(
        "q1 Q0 d1 1 3 s\nq1 Q0 x9 2 2 s\nq1 Q0 d2 3 1 s\nq2 Q0 d3 1 1 s\nq7 Q0 d1 1 1 s\n"
    )
    with caplog.at_level(logging.WARNING, logger="retrievers.run_file"):
        retriever = RunFileRetriever(store, path=str(mostly_known), queries=queries)
        RunFileRetriever(store, path=str(mostly_known), queries=queries)  # built again: said once
    said = [r.getMessage() for r in caplog.records if r.name == "retrievers.run_file"]
    assert len(said) == 1
    assert said[0] == (
        f"run file {mostly_known}: 2 of 5 lines (40.0%) name a query or a document unknown here (1 lines of 1 "
        "of its 3 query ids, which are not among the 2 queries; 1 lines naming a document the store does "
        "not hold), dropped (scored as not retrieved); 0 query texts shared by ids ranked differently"
    )
    assert [r.doc_id for r in retriever.retrieve("one", 10)] == ["d1", "d2"]
    # 3 of 5 unknown: refused, naming the setting; 0.6 accepts it
    mostly_unknown = tmp_path / "bad.trec"
    mostly_unknown.write_text(
        "q1 Q0 d1 1 3 s\nq1 Q0 x9 2 2 s\nq1 Q0 x8 3 1 s\nq2 Q0 d3 1 1 s\nq7 Q0 d1 1 1 s\n"
    )
    with pytest.raises(
        ParamError, match=r"3 of 5 lines \(60.0%\) .* Refused above max_unknown=0.5"
    ) as caught:
        RunFileRetriever(store, path=str(mostly_unknown), queries=queries)
    assert caught.value.key == "max_unknown"
    assert RunFileRetriever(store, path=str(mostly_unknown), queries=queries, max_unknown=0.6).retrieve(
        "two", 5
    )


# --------------------------------------------------------------------------- metrics deeper than the run


@pytest.mark.needs_data
def test_a_metric_deeper_than_the_run_is_computed_warned_and_marked(
    data_env: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with hydra_session():
        settings = load_settings(compose_config([*SMOKE, "run.top_k=10", "run.metrics=[R@10,R@100,nDCG@10]"]))
    with caplog.at_level(logging.WARNING, logger="viking_eval.run.experiment"):
        summary = run_experiment(settings, tmp_path / "out")
    said = [r.getMessage() for r in caplog.records if "shallower" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("run.top_k=10 is shallower than the cutoff of R@100:")
    metrics = summary.results[0].metrics
    assert metrics["R@100"] == metrics["R@10"]  # what ten results can give, computed, not hidden
    folder = tmp_path / "out"
    document = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    assert set(document["depth_limited"]) == {"R@100"}
    assert document["depth_limited"]["R@100"]["cutoff"] == 100
    assert document["depth_limited"]["R@100"]["run_top_k"] == 10
    assert (
        (folder / "metrics.csv")
        .read_text(encoding="utf-8")
        .splitlines()[0]
        .startswith("retriever,R@10,R@100 (depth 10),nDCG@10,")
    )
    report = (folder / "report.md").read_text(encoding="utf-8")
    assert "R@100 (depth 10)" in report and "Warning: metric deeper than the run." in report
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert "<th>R@100 (depth 10)</th>" in page and "Warning: metric deeper than the run." in page
    assert "<th>R@10 (depth" not in page  # only the deeper one is marked


def test_a_store_index_refuses_exactly_the_ids_a_dict_of_the_corpus_refuses() -> None:
    """check_results asks a store's id index about a whole result list at once; it must refuse the
    same doc ids as a membership test in the corpus: an id padded with NUL, the empty id, an id
    longer than every stored one, a near miss, a lone surrogate, whatever the characters."""
    from retrievers.store.ids import IdColumn, RowIndex

    corpus = {doc_id: None for doc_id in ("a", "abc", "é", "zz", "d\u00e9j\u00e0")}
    index = RowIndex(IdColumn.from_strings(sorted(corpus)))
    asked = ["abc\x00", "", "abcd" * 10, "b", "ab", "déjà", "é", "zz", "a", "\ud800"]
    for doc_id in asked:
        results = [RetrievalResult(doc_id, 1.0)]
        for known in (corpus, index):
            if doc_id in corpus:
                assert check_results("r", "q", results, known, 10) == results
            else:
                with pytest.raises(RetrieverContractError, match="is not a document of the corpus"):
                    check_results("r", "q", results, known, 10)
