"""Every ir-measures measure by name (viking_eval/measures/metrics.py): the harness's values of
measures other tools compute (gdeval's ERR, cwl_eval's RBP / SDCG / INST / NERR, compat) equal
ir-measures called directly on a real run (BM25 on ADI) ordered by the project's tie rule; the
measures pytrec_eval computes still go to pytrec_eval; a misspelt, intent-aware or incomplete
measure is one line naming the key, exit status 2."""

from __future__ import annotations

import math
from pathlib import Path

import ir_measures
import pytest
from conftest import preflight_error

from viking_eval import evaluate as evaluate_harness
from viking_eval.measures.metrics import MetricError, parse_metric, parse_metrics, provider_of

pytestmark = pytest.mark.needs_data

OTHER_TOOLS = [
    "ERR@10",
    "ERR@20",
    "RBP(p=0.8,rel=1)",
    "SDCG(max_rel=1)@10",
    "INST(T=3.0,max_rel=1)",
    "NERR10(max_rel=1)",
    "BPM(T=1.0,max_rel=1)@10",
    "Compat(p=0.8)",
]


def _read_trec(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        run.setdefault(query_id, {})[doc_id] = float(score)
    return run


def _tie_rule(run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Written here, not imported: each query's documents by (score desc, doc id asc), scores
    replaced by n - rank so that no tool can order ties its own way."""
    out: dict[str, dict[str, float]] = {}
    for query_id, docs in run.items():
        order = sorted(docs.items(), key=lambda pair: (-pair[1], pair[0]))
        out[query_id] = {doc_id: float(len(order) - rank) for rank, (doc_id, _) in enumerate(order)}
    return out


@pytest.fixture(scope="module")
def adi_bm25(
    tmp_path_factory: pytest.TempPathFactory, shared_datasets: Path
) -> tuple[dict[str, float], Path]:
    """The harness's means of every measure for BM25 on ADI, and the run folder it wrote."""
    folder = tmp_path_factory.mktemp("adi_bm25")
    summary = evaluate_harness(
        {"bm25": {"_target_": "retrievers.BM25Retriever"}},
        shared_datasets / "adi",
        metrics=["nDCG@10", "AP", *OTHER_TOOLS],
        latency_queries=0,
        output_dir=folder,
    )
    return summary.metrics()["bm25"], folder


def test_measures_of_other_tools_equal_ir_measures_called_directly(
    adi_bm25: tuple[dict[str, float], Path], shared_datasets: Path
) -> None:
    ours, folder = adi_bm25
    run = _read_trec(folder / "runs" / "bm25.trec")
    qrels: dict[str, dict[str, int]] = {}
    for line in (shared_datasets / "adi" / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query_id, doc_id, grade = line.split("\t")
        qrels.setdefault(query_id, {})[doc_id] = int(grade)
    ranked = _tie_rule({query_id: run.get(query_id, {}) for query_id in qrels})
    assert any(len(set(docs.values())) < len(docs) for docs in run.values()), "ADI's BM25 run has ties"
    for name in ["nDCG@10", "AP", *OTHER_TOOLS]:
        measure = ir_measures.parse_measure(name)
        values = {v.query_id: float(v.value) for v in ir_measures.iter_calc([measure], qrels, ranked)}
        expected = math.fsum(values.get(query_id, 0.0) for query_id in qrels) / len(qrels)
        assert ours[name] == pytest.approx(expected, rel=1e-9, abs=1e-12), name
    assert ours["ERR@10"] > 0 and ours["RBP(p=0.8,rel=1)"] > 0  # computed, not a silent 0


def test_pytrec_eval_keeps_its_measures_and_other_tools_take_the_rest() -> None:
    # cwl_eval also computes AP, P and RR: pytrec_eval must keep them so no existing number moves
    for name in ("AP", "AP@100", "P@5", "RR", "nDCG@10", "R@100"):
        assert provider_of(parse_metric(name).measure) == "pytrec_eval", name
    assert provider_of(parse_metric("RR@10").measure) == "msmarco"  # as before cwl_eval was installed
    assert provider_of(parse_metric("ERR@10").measure) == "gdeval"
    assert provider_of(parse_metric("RBP(p=0.8,rel=1)").measure) == "cwl_eval"
    assert provider_of(parse_metric("Compat(p=0.8)").measure) == "compat"


def test_gdeval_reads_any_query_id() -> None:
    # gdeval.pl accepts numeric topics only: the harness numbers them and maps them back
    from viking_eval.measures.metrics import evaluate

    run = {"conv-1_q0": {"a": 2.0, "b": 1.0}, "conv-1_q1": {"c": 1.0, "a": 0.5}}
    qrels = {"conv-1_q0": {"b": 1}, "conv-1_q1": {"c": 2}}
    result = evaluate(run, qrels, parse_metrics(["ERR@10"]))
    # ERR (Chapelle et al. 2009), max grade 4: R(g) = (2^g - 1) / 16; q0: b at rank 2 -> R / 2
    assert result.per_query["ERR@10"]["conv-1_q0"] == pytest.approx((1 / 16) / 2)
    assert result.per_query["ERR@10"]["conv-1_q1"] == pytest.approx(3 / 16)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("alpha_nDCG@20", r"intent-aware: it needs judgments per query subtopic"),
        ("ERR_IA@20", r"intent-aware"),
        ("NRBP", r"intent-aware"),
        ("INST", r"metric 'INST': parameter max_rel is required; INST's parameters: T \(float"),
        ("RBP(p=0.8)", r"not computed here with these parameters \(RBP's parameters: .*rel \(int"),
        ("nERR@10", r"unknown metric 'nERR@10'; accepted measures: .*ir-measur.es"),
    ],
)
def test_measures_that_cannot_be_computed_are_refused(bad: str, message: str) -> None:
    with pytest.raises(MetricError, match=message):
        parse_metric(bad)


@pytest.mark.parametrize(
    ("metric", "says"),
    [
        ("nDCGG@10", "unknown metric 'nDCGG@10'; accepted measures:"),
        ("alpha_nDCG@20", "is intent-aware"),
    ],
)
def test_cli_refuses_a_bad_measure_in_one_line(
    data_env: Path, capsys: pytest.CaptureFixture[str], metric: str, says: str
) -> None:
    line = preflight_error(capsys, "experiment=smoke", f"run.metrics=[{metric}]")  # exit 2, one line
    assert line.startswith("error: run.metrics: ") and says in line
    assert "https://ir-measur.es/en/latest/measures.html" in line or "intent" in line
