"""The run-file retriever (retrievers/run_file.py): another system's run scored, tested and
fused like a built-in retriever; bad run files refused with file:line before any work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_cli, smoke_settings

from retrievers import BM25Retriever, ContextStore, Document, HybridRetriever, StoreConfig, TfidfEmbedder
from retrievers.builders import build_store
from retrievers.params import ParamError
from retrievers.run_file import RunFileError, RunFileRetriever, read_run_file
from viking_eval.config import ConfigError
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import independent_run  # noqa: E402 (tests/independent_run.py: rank-bm25 + pytrec_eval, no viking_eval)

DOCS = [
    Document("d1", "apple banana cherry"),
    Document("d2", "banana cherry grape"),
    Document("d3", "cherry grape lemon"),
    Document("d4", "grape lemon mango"),
    Document("d5", "lemon mango apple", metadata={"lang": "fr"}),
]
QUERIES = {"q1": "apple banana", "q2": "grape lemon", "q3": "mango"}


@pytest.fixture(scope="module")
def store() -> ContextStore:
    embedder = TfidfEmbedder(dim=4, seed=0).fit([doc.full_text for doc in DOCS])
    return build_store(DOCS, embedder, StoreConfig.from_dict({}))


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _ranked(retriever: RunFileRetriever, text: str, top_k: int = 10) -> list[tuple[str, float]]:
    return [(r.doc_id, r.score) for r in retriever.retrieve(text, top_k)]


def test_trec_run_is_served_by_score_then_doc_id(store: ContextStore, tmp_path: Path) -> None:
    # ranks in the file are ignored (d3 is "rank 1" with a lower score); d2 and d4 tie: doc id decides
    run = _write(
        tmp_path / "run.trec",
        "q1 Q0 d3 1 1.5 sys\nq1 Q0 d4 2 2.0 sys\nq1 Q0 d2 3 2.0 sys\n\nq2 Q0 d5 1 -0.5 sys\n",
    )
    retriever = RunFileRetriever(store, path=str(run), queries=QUERIES)
    assert _ranked(retriever, "apple banana") == [("d2", 2.0), ("d4", 2.0), ("d3", 1.5)]
    assert _ranked(retriever, "apple banana", top_k=2) == [("d2", 2.0), ("d4", 2.0)]
    assert _ranked(retriever, "grape lemon") == [("d5", -0.5)]
    assert retriever.retrieve_batch(list(QUERIES.values()), 10) == [
        retriever.retrieve(text, 10) for text in QUERIES.values()
    ]


def test_beir_json_results_read_the_same(store: ContextStore, tmp_path: Path) -> None:
    trec = _write(tmp_path / "run.trec", "q1 Q0 d3 1 1.5 s\nq1 Q0 d4 2 2 s\nq2 Q0 d5 1 -0.5 s\n")
    beir = _write(tmp_path / "run.json", json.dumps({"q1": {"d3": 1.5, "d4": 2}, "q2": {"d5": -0.5}}))
    from_trec = RunFileRetriever(store, path=str(trec), queries=QUERIES)
    from_json = RunFileRetriever(store, path=str(beir), queries=QUERIES)
    assert read_run_file(beir).format == "json" and read_run_file(trec).format == "trec"
    for text in QUERIES.values():
        assert _ranked(from_json, text) == _ranked(from_trec, text)


def test_unknown_ids_are_counted_and_a_missing_query_has_no_results(
    store: ContextStore, tmp_path: Path
) -> None:
    run = _write(
        tmp_path / "run.trec",
        "q1 Q0 d1 1 3 s\nq1 Q0 nosuchdoc 2 2 s\nq1 Q0 d2 3 1 s\nq9 Q0 d1 1 1 s\nq9 Q0 d3 2 0.5 s\n",
    )
    # 3 of the 5 lines name an unknown query or document: accepted only with max_unknown above 0.6
    retriever = RunFileRetriever(store, path=str(run), queries=QUERIES, max_unknown=1.0)
    results = retriever.retrieve("apple banana", 10)
    assert [r.doc_id for r in results] == ["d1", "d2"]
    stats = results[0].provenance["stats"]
    assert stats == {
        "file_queries": 2,  # q1 and q9
        "file_lines": 5,
        "file_unknown_queries": 1,  # q9 is not among the queries
        "file_unknown_doc_lines": 1,  # nosuchdoc
        "file_ambiguous_texts": 0,
        "unknown_docs": 1,  # of q1's lines
    }
    assert retriever.retrieve("mango", 10) == []  # q3: not in the file
    assert retriever.retrieve("a text that is no query", 10) == []


def test_scope_filters_and_reranking_come_from_the_kernel(store: ContextStore, tmp_path: Path) -> None:
    run = _write(tmp_path / "run.trec", "".join(f"q3 Q0 d{i} {i} {10 - i} s\n" for i in range(1, 6)))
    french = RunFileRetriever(store, path=str(run), queries=QUERIES, filters={"metadata": {"lang": "fr"}})
    assert _ranked(french, "mango") == [("d5", 5.0)]
    view = store.restricted(store.metadata_mask("lang", "fr"))
    assert _ranked(RunFileRetriever(view, path=str(run), queries=QUERIES), "mango") == [("d5", 5.0)]


def test_texts_shared_by_ids_ranked_differently_are_counted(store: ContextStore, tmp_path: Path) -> None:
    run = _write(tmp_path / "run.trec", "a Q0 d1 1 1 s\nb Q0 d2 1 1 s\n")
    retriever = RunFileRetriever(store, path=str(run), queries={"a": "same text", "b": "same text"})
    assert _ranked(retriever, "same text") == [("d1", 1.0)]  # the first id answers
    assert retriever.file_stats["file_ambiguous_texts"] == 1


def test_queries_may_come_from_a_queries_file(store: ContextStore, tmp_path: Path) -> None:
    run = _write(tmp_path / "run.trec", "q1 Q0 d1 1 1 s\n")
    queries = _write(
        tmp_path / "queries.jsonl",
        "".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in QUERIES.items()),
    )
    assert _ranked(RunFileRetriever(store, path=str(run), queries=str(queries)), "apple banana") == [
        ("d1", 1.0)
    ]
    with pytest.raises(ValueError, match="needs queries"):
        RunFileRetriever(store, path=str(run))


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "dup.trec",
            "q1 Q0 d1 1 2.0 s\nq1 Q0 d2 2 1.0 s\nq1 Q0 d1 3 0.5 s\n",
            r"dup.trec:3: query 'q1', doc 'd1' appears twice \(first at line 1\)",
        ),
        (
            "nan.trec",
            "q1 Q0 d1 1 2.0 s\nq1 Q0 d2 2 abc s\n",
            r"nan.trec:2: score 'abc' of query 'q1', doc 'd2' is not a number",
        ),
        (
            "inf.trec",
            "q1 Q0 d1 1 inf s\n",
            r"inf.trec:1: score 'inf' of query 'q1', doc 'd1' is not a finite number",
        ),
        (
            "short.trec",
            "q1 Q0 d1 1 2.0 s\nq1 d2 1.0\n",
            r"short.trec:2: expected 6 fields 'qid Q0 docid rank score tag', got 3",
        ),
        (
            "bad.json",
            '{"q1": {"d1": "high"}}',
            r"bad.json: score 'high' of query 'q1', doc 'd1' is not a number",
        ),
        ("dup.json", '{"q1": {"d1": 1, "d1": 2}}', r"dup.json: key 'd1' appears twice in one object"),
        ("broken.json", '{"q1": {"d1": 1,\n}', r"broken.json:2: not valid JSON"),
        ("missing.trec", None, r"missing.trec: run file not found"),
    ],
)
def test_bad_run_files_are_refused_with_file_and_line(
    name: str, text: str | None, message: str, store: ContextStore, tmp_path: Path
) -> None:
    path = tmp_path / name
    if text is not None:
        _write(path, text)
    with pytest.raises(RunFileError, match=message):
        read_run_file(path)
    with pytest.raises(ParamError, match=r"^path: .*" + message):  # the retriever's parameters say so too
        RunFileRetriever(store, path=str(path), queries=QUERIES)


def test_a_run_file_leg_fuses_like_the_built_in_one(store: ContextStore, tmp_path: Path) -> None:
    """The hybrid with its keyword leg read from BM25's own run equals the built-in hybrid: one
    fusion, whichever retriever a leg is."""
    embedder = TfidfEmbedder(dim=4, seed=0).fit([doc.full_text for doc in DOCS])
    texts = list(QUERIES.values())
    lines = []
    for (query_id, _), results in zip(
        QUERIES.items(), BM25Retriever(store).retrieve_batch(texts, 100), strict=True
    ):
        lines += [f"{query_id} Q0 {r.doc_id} {rank} {r.score!r} bm25" for rank, r in enumerate(results, 1)]
    run = _write(tmp_path / "bm25.trec", "\n".join(lines) + "\n")
    leg = RunFileRetriever(store, path=str(run), queries=QUERIES)
    for fusion in ("rrf", "convex", "combmnz"):
        built_in = HybridRetriever(store, embedder, fusion=fusion).retrieve_batch(texts, 5)
        fused = HybridRetriever(store, embedder, fusion=fusion, keyword_leg=leg).retrieve_batch(texts, 5)
        assert [[(r.doc_id, r.score) for r in rs] for rs in fused] == [
            [(r.doc_id, r.score) for r in rs] for rs in built_in
        ]
    with pytest.raises(ValueError, match="keyword_leg must be null or a retriever"):
        HybridRetriever(store, embedder, keyword_leg="runs/bm25.trec")


# --------------------------------------------------------------------------- through the harness


@pytest.mark.needs_data
def test_an_independent_trec_run_gets_the_identical_ndcg(data_env: Path, tmp_path: Path) -> None:
    """rank-bm25 over ADI test, written as TREC and scored by pytrec_eval without any of our
    code: the harness, reading the file as a retriever, gets the same nDCG@10 to the last bit,
    per query and on average; fused with the dense retriever through the hybrid it runs too."""
    folder = data_env / "adi"
    run = independent_run.write_run(folder, tmp_path / "adi_bm25.trec")
    expected = independent_run.per_query_ndcg_at_10(folder, run)
    settings = smoke_settings(
        "run.latency.n_queries=0",
        "+retriever@retrievers.ext=run_file",
        f"retrievers.ext.path={tmp_path / 'adi_bm25.trec'}",
        "+retriever@retrievers.fused=hybrid_rrf",
        "+retriever@retrievers.fused.keyword_leg=run_file",
        f"retrievers.fused.keyword_leg.path={tmp_path / 'adi_bm25.trec'}",
    )
    summary = run_experiment(settings, tmp_path / "out")
    by_name = {result.name: result for result in summary.results}
    assert by_name["ext"].per_query["nDCG@10"] == expected
    assert by_name["ext"].metrics["nDCG@10"] == independent_run.ndcg_at_10(folder, run)
    assert by_name["ext"].stats["file_unknown_queries"] == 0 and by_name["ext"].stats["file_lines"] == 2870
    # significance against the baseline (bm25) covers the run-file and fused retrievers too
    assert {c.retriever for c in summary.significance.comparisons} == {"dense", "ext", "fused"}
    assert by_name["fused"].metrics["nDCG@10"] > 0.3
    assert "- ext: n_queries 35, file_queries 35, file_lines 2870, file_unknown_queries 0" in (
        tmp_path / "out" / "report.md"
    ).read_text(encoding="utf-8")  # the counts are in the report too
    with open(tmp_path / "out" / "runs" / "ext.trec", encoding="utf-8") as handle:
        assert sum(1 for _ in handle) == 35 * 82  # top_k 100 over ADI's 82 documents, every query


@pytest.mark.needs_data
def test_editing_the_run_file_reruns_the_retriever(data_env: Path, tmp_path: Path) -> None:
    run = tmp_path / "run.trec"
    independent_run.write_run(data_env / "adi", run, depth=10)
    overrides = (
        "run.latency.n_queries=0",
        "~retrievers.dense",
        "+retriever@retrievers.ext=run_file",
        f"retrievers.ext.path={run}",
    )
    first = run_experiment(smoke_settings(*overrides), tmp_path / "out")
    with open(run, encoding="utf-8") as handle:
        kept = [line for line in handle if not line.startswith("1 ")]  # query 1 dropped
    run.write_text("".join(kept), encoding="utf-8")
    second = run_experiment(smoke_settings(*overrides), tmp_path / "out")
    before, after = (next(r for r in s.results if r.name == "ext") for s in (first, second))
    assert after.n_queries_without_results == before.n_queries_without_results + 1
    marker = json.loads((tmp_path / "out" / "results" / "ext.json").read_text())
    assert list(marker["key_parts"]["inputs"]) == [str(run)]


def test_a_bad_run_file_stops_the_command_before_any_work(tmp_path: Path) -> None:
    run = _write(tmp_path / "dup.trec", "q1 Q0 d1 1 2.0 s\nq1 Q0 d1 2 1.0 s\n")
    done = run_cli(
        "experiment=smoke",
        "+retriever@retrievers.ext=run_file",
        f"retrievers.ext.path={run}",
        f"hydra.run.dir={tmp_path / 'out'}",
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: retrievers.ext.path: {run}:2: query 'q1', doc 'd1' appears twice (first at line 1); one line per pair"
    )
    assert not (tmp_path / "out").exists()


def test_a_config_error_names_the_nested_leg(tmp_path: Path) -> None:
    run = _write(tmp_path / "bad.trec", "q1 Q0 d1 1 x s\n")
    with pytest.raises(ConfigError) as caught:
        smoke_settings("+retriever@retrievers.fused=hybrid_rrf", "+retriever@retrievers.fused.keyword_leg=run_file",
                  f"retrievers.fused.keyword_leg.path={run}")  # fmt: skip
    assert caught.value.line().startswith("retrievers.fused.keyword_leg.path: ")
    assert "bad.trec:1: score 'x'" in caught.value.line()


@pytest.mark.needs_data
def test_a_run_file_is_gated_like_any_retriever(data_env: Path, tmp_path: Path) -> None:
    """The gate's run-folder comparison: the same run file passes; a run file that lost the
    answers to 15 of ADI's 35 queries (its system regressed) fails on the run-file retriever only."""
    from viking_eval.gate.compare import compare_runs

    full, damaged = tmp_path / "full.trec", tmp_path / "damaged.trec"
    independent_run.write_run(data_env / "adi", full)
    damaged.write_text(
        "".join(line for line in full.read_text().splitlines(keepends=True) if int(line.split()[0]) > 15)
    )
    base = ("run.latency.n_queries=0", "~retrievers.dense", "+retriever@retrievers.ext=run_file")
    for name, path in (("before", full), ("same", full), ("after", damaged)):
        run_experiment(smoke_settings(*base, f"retrievers.ext.path={path}"), tmp_path / name)
    assert compare_runs(tmp_path / "same", tmp_path / "before").passed
    report = compare_runs(tmp_path / "after", tmp_path / "before")
    failed = {(r.retriever, r.what) for r in report.results if r.status == "FAIL"}
    assert ("ext", "nDCG@10") in failed and not any(retriever == "bm25" for retriever, _ in failed)
