"""Regression gate: passes on main with the committed baseline, fails on an injected regression
(through the real entry points, exit status included), per-query run-folder comparisons, the
record -> check round trip, and baseline files or run folders it must refuse."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import child_environment, run_cli, run_python, shared_data_env, smoke_settings

from viking_eval.gate import commands as gate
from viking_eval.gate.baseline import GateError, load_baseline, read_per_query
from viking_eval.gate.checks import plan_checks, run_gate
from viking_eval.gate.compare import compare_runs
from viking_eval.gate.record import record_baseline
from viking_eval.gate.verdicts import STATUSES, CheckResult, latency_status, metric_status
from viking_eval.measures.significance import SignificanceSettings
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
CI_BASELINE = REPO / "experiments" / "baselines" / "ci_regression.yaml"


def _ci_checks(*datasets: str) -> dict[str, Any]:
    """The committed CI baseline restricted to ``datasets``, per-query paths made absolute."""
    document = yaml.safe_load(CI_BASELINE.read_text())
    document["checks"] = [check for check in document["checks"] if check["dataset"] in datasets]
    for check in document["checks"]:
        check["per_query"] = str((CI_BASELINE.parent / check["per_query"]).resolve())
    return document


def _write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _run(args: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return run_python(args, cwd=cwd, env=child_environment())


@pytest.mark.slow
@pytest.mark.needs_data
def test_ci_gate_passes_on_main_through_the_hydra_entry(data_env: Path, tmp_path: Path) -> None:
    document = _ci_checks("adi", "medline")
    # latency is checked as in CI, but with a tolerance no machine load reaches here: this test
    # is about the entry point and the metrics; the ratio itself is checked against latency.json
    for check in document["checks"]:
        check["latency"]["tolerance"] = 100.0
    baseline = _write(tmp_path / "main.yaml", document)
    done = run_cli(
        "experiment=ci_regression",
        f"gate.baseline={baseline}",
        f"hydra.run.dir={tmp_path / 'out'}",
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.split()[:1] and line.split()[0] in STATUSES]
    assert len(lines) == 2 * (2 * 3 + 1)  # 2 datasets x (2 retrievers x 3 metrics + 1 latency ratio)
    assert all(line.startswith("OK ") for line in lines), "\n".join(lines)
    assert "gate PASS: 14 checks (14 OK, 0 OKISH, 0 FAIL, 0 IMPROVED)" in done.stdout
    # the printed ratio is BM25's search p50 over dense's in that check's own latency.json
    latency = json.loads((tmp_path / "out" / "adi" / "latency.json").read_text())["retrievers"]
    ratio = latency["bm25"]["search_p50_ms"] / latency["dense"]["search_p50_ms"]
    adi_latency = next(line for line in lines if line.split()[1] == "adi" and "search_p50_ms/dense" in line)
    assert f"{ratio:6.2f}x" in adi_latency
    # each check is a complete run folder, and the verdicts are kept next to them
    assert (tmp_path / "out" / "medline" / "report.html").is_file()
    assert (tmp_path / "out" / "gate.txt").read_text().splitlines()[-1].startswith("gate PASS")


@pytest.mark.needs_data
def test_ci_gate_fails_on_an_injected_bm25_regression(data_env: Path, tmp_path: Path) -> None:
    document = _ci_checks("cranfield")
    check = document["checks"][0]
    check["command"] += " store.bm25.k1=0.05 store.bm25.b=1.0 run.latency.n_queries=10"  # broken BM25
    del check["latency"]
    baseline = _write(tmp_path / "broken.yaml", document)
    done = _run(["-m", "viking_eval.gate", "check", str(baseline), "--output", str(tmp_path / "out")])
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    verdicts = {tuple(line.split()[1:4]): line.split()[0] for line in done.stdout.splitlines()[:-1]}
    # 225 queries: the drop is far outside the tolerance and significant after Holm over 6 checks
    assert verdicts[("cranfield", "bm25", "nDCG@10")] == "FAIL"
    assert verdicts[("cranfield", "bm25", "AP@100")] == "FAIL"
    assert {verdicts[("cranfield", "dense", metric)] for metric in ("nDCG@10", "R@100", "AP@100")} == {"OK"}
    assert done.stdout.splitlines()[-1].startswith("gate FAIL:")


def test_verdict_rules() -> None:
    assert metric_status(-0.005, 0.005, None, 0.05) == "OK"  # on the boundary
    assert metric_status(0.0051, 0.005, None, 0.05) == "IMPROVED"
    assert metric_status(-0.02, 0.005, 0.3, 0.05) == "OKISH"  # outside, not significant
    assert metric_status(-0.02, 0.005, 0.01, 0.05) == "FAIL"
    assert metric_status(-0.02, 0.005, None, 0.05) == "FAIL"  # nothing to show it is noise
    assert latency_status(2.0, 1.0, 1.0) == "OK" and latency_status(2.01, 1.0, 1.0) == "FAIL"
    assert latency_status(0.5, 1.0, 1.0) == "OK" and latency_status(0.49, 1.0, 1.0) == "IMPROVED"
    line = CheckResult("OKISH", "adi", "bm25", "nDCG@10", 0.47, 0.48, 0.005, 0.2, 0.6, 35).line()
    assert line.split()[:5] == ["OKISH", "adi", "bm25", "nDCG@10", "0.4700"]
    assert "Δ -0.0100" in line and "p 0.2 (adj. 0.6, 35 queries)" in line


# --------------------------------------------------------------------------- run-folder mode


@pytest.fixture(scope="module")
def smoke_run(shared_datasets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One smoke run (ADI, BM25 + TF-IDF dense) shared by the run-folder tests."""
    from viking_eval.run.cache import clear_memo
    from viking_eval.run.experiment import run_experiment

    folder = tmp_path_factory.mktemp("smoke") / "run"
    with shared_data_env(shared_datasets), pytest.MonkeyPatch.context() as patch:
        patch.setenv("VIKING_EVAL_CACHE", str(tmp_path_factory.mktemp("cache")))
        clear_memo()
        run_experiment(smoke_settings("run.latency.n_queries=10"), folder)
        clear_memo()
    yield folder


def _copy_with(run: Path, destination: Path, change: Any) -> Path:
    """A copy of ``run`` whose per_query.csv rows pass through ``change(row) -> row | None``."""
    shutil.copytree(run, destination)
    path = destination / "per_query.csv"
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        columns = list(reader.fieldnames or [])
        rows = [changed for row in reader if (changed := change(row)) is not None]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return destination


def _shift(retriever: str, metric: str, delta: float, query_ids: set[str] | None = None) -> Any:
    def change(row: dict[str, str]) -> dict[str, str]:
        if row["retriever"] == retriever and (query_ids is None or row["query_id"] in query_ids):
            row[metric] = repr(min(1.0, max(0.0, float(row[metric]) + delta)))
        return row

    return change


@pytest.mark.needs_data
def test_run_against_itself_is_all_ok(smoke_run: Path) -> None:
    report = compare_runs(smoke_run, smoke_run, latency_reference="dense")
    assert report.passed and {r.status for r in report.results} == {"OK"}
    assert len(report.results) == 2 * 5 + 1  # 2 retrievers x 5 metrics, bm25's latency ratio
    latency = next(r for r in report.results if r.is_latency)
    assert latency.observed == latency.expected  # the same latency.json on both sides


@pytest.mark.needs_data
def test_damaged_run_fails_and_a_small_drop_is_okish(smoke_run: Path, tmp_path: Path) -> None:
    damaged = _copy_with(smoke_run, tmp_path / "damaged", _shift("bm25", "nDCG@10", -0.2))
    report = compare_runs(damaged, smoke_run)
    verdicts = {(r.retriever, r.what): r.status for r in report.results}
    assert verdicts[("bm25", "nDCG@10")] == "FAIL" and not report.passed
    assert {status for key, status in verdicts.items() if key != ("bm25", "nDCG@10")} == {"OK"}
    assert gate.main(["compare", str(damaged), str(smoke_run)], run=run_experiment) == 1
    # 3 of 35 queries lose 0.1: mean -0.0086 is outside the tolerance but not significant
    with open(smoke_run / "per_query.csv") as handle:
        first_three = {row["query_id"] for row in csv.DictReader(handle) if row["retriever"] == "bm25"}
    picked = set(sorted(first_three)[:3])
    small = _copy_with(smoke_run, tmp_path / "small", _shift("dense", "AP@100", -0.1, picked))
    result = next(
        r for r in compare_runs(small, smoke_run).results if (r.retriever, r.what) == ("dense", "AP@100")
    )
    assert result.status == "OKISH", result.line()
    assert result.p_adjusted is not None and result.p_adjusted > 0.05
    improved = _copy_with(smoke_run, tmp_path / "improved", _shift("dense", "R@10", +0.2))
    statuses = {(r.retriever, r.what): r.status for r in compare_runs(improved, smoke_run).results}
    assert statuses[("dense", "R@10")] == "IMPROVED"
    assert gate.main(["compare", str(improved), str(smoke_run), "--metrics", "R@10"], run=run_experiment) == 0


@pytest.mark.needs_data
def test_run_folder_comparison_refuses_bad_input(smoke_run: Path, tmp_path: Path) -> None:
    without = tmp_path / "without"
    shutil.copytree(smoke_run, without)
    (without / "per_query.csv").unlink()
    with pytest.raises(
        GateError, match=r"baseline run folder .*without has no per_query.csv; a per-query comparison needs"
    ):
        compare_runs(smoke_run, without)
    fewer = _copy_with(smoke_run, tmp_path / "fewer", lambda row: None if row["query_id"] == "1" else row)
    with pytest.raises(
        GateError,
        match=r"query sets differ \(34 vs 35 queries; 0 only in the first.*1 only in the baseline, e\.g\. \['1'\]",
    ):
        compare_runs(fewer, smoke_run)
    assert gate.main(["compare", str(fewer), str(smoke_run)], run=run_experiment) == 2
    only_bm25 = _copy_with(
        smoke_run, tmp_path / "only_bm25", lambda row: row if row["retriever"] == "bm25" else None
    )
    with pytest.raises(GateError, match=r"lacks retriever\(s\) \['dense'\] of the baseline run"):
        compare_runs(only_bm25, smoke_run)
    with pytest.raises(
        GateError, match=r"has no metric 'P@5' \(it has \['AP@100', 'R@10', 'R@100', 'RR@10', 'nDCG@10'\]\)"
    ):
        compare_runs(smoke_run, smoke_run, metrics=["P@5"])


@pytest.mark.needs_data
def test_runner_programs_run_gate_and_compare(
    data_env: Path, smoke_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The functions the CLI calls, one per program: evaluate, run + compare, gate; and the
    gate's own command line, handed the experiment loop (issue 13: the gate never imports it)."""
    from viking_eval import cli

    objectives = cli.run_program(smoke_settings("run.latency.n_queries=0"), tmp_path / "run")
    assert set(objectives) == {"bm25", "dense"} and set(objectives["bm25"]) == {
        "nDCG@10",
        "R@10",
        "R@100",
        "RR@10",
        "AP@100",
    }
    assert "report: " in capsys.readouterr().out
    # the same configuration scores the same per query as the stored smoke run: every verdict OK
    status = cli.compare_program(
        smoke_settings("run.latency.n_queries=0", f"gate.baseline_run={smoke_run}"), tmp_path / "compared"
    )
    assert status == 0
    assert (
        (tmp_path / "compared" / "gate.txt").read_text().splitlines()[-1].startswith("gate PASS: 10 checks")
    )
    # a damaged stored run makes the same program fail
    damaged = _copy_with(smoke_run, tmp_path / "damaged", _shift("bm25", "nDCG@10", 0.2))
    assert (
        cli.compare_program(
            smoke_settings("run.latency.n_queries=0", f"gate.baseline_run={damaged}"), tmp_path / "again"
        )
        == 1
    )
    # a baseline file that cannot be used: exit status 2, one line naming it
    missing = tmp_path / "missing.yaml"
    assert cli.gate_program(smoke_settings(f"gate.baseline={missing}"), tmp_path / "gate") == 2
    assert f"baseline file {missing} does not exist" in capsys.readouterr().err
    assert gate.main(["compare", str(smoke_run), str(smoke_run)], run=run_experiment) == 0


# --------------------------------------------------------------------------- baseline files


@pytest.mark.needs_data
def test_record_then_check_round_trip(data_env: Path, tmp_path: Path) -> None:
    document = _ci_checks("adi")
    check = document["checks"][0]
    check["metrics"] = {"bm25": {"nDCG@10": 0.0, "RR@10": 0.0}}  # placeholders to be recorded
    check["command"] += " run.latency.n_queries=10"
    check["latency"]["tolerance"] = 100.0
    del check["per_query"]
    path = _write(tmp_path / "adi.yaml", document)
    record_baseline(path, tmp_path / "record", run_experiment)
    recorded = yaml.safe_load(path.read_text())
    metrics = json.loads((tmp_path / "record" / "adi" / "metrics.json").read_text())["retrievers"]["bm25"][
        "metrics"
    ]
    assert recorded["checks"][0]["metrics"]["bm25"] == {
        "nDCG@10": round(metrics["nDCG@10"], 4),
        "RR@10": round(metrics["RR@10"], 4),
    }
    assert recorded["checks"][0]["per_query"] == "adi/adi.csv"
    stored = read_per_query(tmp_path / "adi" / "adi.csv")
    assert sorted(stored) == ["bm25"] and sorted(stored["bm25"]) == ["RR@10", "nDCG@10"]
    report = run_gate(path, tmp_path / "check", run_experiment)
    assert report.passed and [r.status for r in report.results] == ["OK", "OK", "OK"]


def _plan(tmp_path: Path, document: dict[str, Any]) -> None:
    plan_checks(load_baseline(_write(tmp_path / "baseline.yaml", document)))


def _adi() -> dict[str, Any]:
    return _ci_checks("adi")


@pytest.mark.needs_data
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["checks"][0].update(
                command=d["checks"][0]["command"].replace("dataset=adi", "dataset=nosuch")
            ),
            r"check 'adi': the command .* does not compose: .*(dataset/nosuch|dataset: no option 'nosuch')",
        ),
        (
            lambda d: d["checks"][0].update(dataset="medline"),
            r"check 'medline': dataset is 'medline' but the command evaluates 'adi'",
        ),
        (
            lambda d: d["checks"][0]["metrics"].update(hybrid={"nDCG@10": 0.5}),
            r"metrics: unknown retriever 'hybrid'; the command configures \['bm25', 'dense'\]",
        ),
        (
            lambda d: d["checks"][0]["metrics"]["bm25"].update({"P@5": 0.3}),
            r"metric 'P@5' is not computed by the command; it computes \['nDCG@10', 'R@10', 'R@100', 'RR@10', 'AP@100'\]",
        ),
        (
            lambda d: d["checks"][0]["metrics"]["bm25"].update({"nDGC@10": 0.3}),
            r"metrics.bm25: unknown metric 'nDGC@10'",
        ),
        (
            lambda d: d["checks"][0]["latency"].update(reference="exact"),
            r"latency: unknown retriever 'exact'; the command configures \['bm25', 'dense'\]",
        ),
        (
            lambda d: d["checks"][0]["metrics"]["bm25"].update({"nDCG@10": 0.52}),
            r"bm25 nDCG@10: the expected value 0.52 does not match the mean 0.480217 of .*adi.csv",
        ),
        (
            lambda d: d["checks"][0].update(per_query="/nonexistent/adi.csv"),
            r"per_query file /nonexistent/adi.csv does not exist",
        ),
        (
            lambda d: d["checks"][0].update(
                command="python -m viking_eval -m experiment=ci_regression dataset=adi"
            ),
            r"the command may hold Hydra overrides only .* got \['-m'\]",
        ),
        (
            lambda d: d["checks"][0].update(command="python run.py dataset=adi"),
            r"the command must be 'python -m viking_eval <overrides>'",
        ),
        (
            lambda d: d["checks"][0].update(
                command="python -m viking_eval experiment=ci_regression dataset=adi"
            ),
            r"sets gate.baseline/baseline_run; add gate.baseline=null",
        ),
        (lambda d: d["checks"][0].update(tolerence=0.01), r"checks\[0\]: unknown key\(s\) \['tolerence'\]"),
        (lambda d: d.update(tolerance=-1), r"tolerance: must be in \[0.0, 1.0\], got -1"),
        (
            lambda d: d["checks"][0]["metrics"]["bm25"].update({"R@100": "high"}),
            r"metrics.bm25.R@100: expected a finite number, got 'high'",
        ),
        (
            lambda d: d.update(significance={"test": "sign"}),
            r"significance: significance.test must be one of",
        ),
    ],
)
def test_bad_baseline_files_are_refused_before_anything_runs(
    data_env: Path, tmp_path: Path, edit: Any, message: str
) -> None:
    document = _adi()
    edit(document)
    with pytest.raises(GateError, match=message):
        _plan(tmp_path, document)


def test_a_dataset_that_is_not_on_disk_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIKING_EVAL_DATA", str(tmp_path / "empty"))
    with pytest.raises(GateError, match=r"check 'adi': dataset 'adi': .*not found"):
        _plan(tmp_path, _adi())


@pytest.mark.needs_data
def test_gate_cli_reports_a_bad_file_with_exit_status_2(data_env: Path, tmp_path: Path) -> None:
    document = _adi()
    document["checks"][0]["metrics"]["bm25"]["MAP@1000"] = 0.4
    path = _write(tmp_path / "bad.yaml", document)
    done = run_cli(
        "experiment=ci_regression",
        f"gate.baseline={path}",
        f"hydra.run.dir={tmp_path / 'out'}",
    )
    assert done.returncode == 2
    # one line naming the file's problem (worded "gate error: ..." or "error: gate: ...")
    assert "gate" in done.stderr and "metric 'MAP@1000' is not computed by the command" in done.stderr
    assert not (tmp_path / "out" / "adi").exists()  # refused before any run


@pytest.mark.needs_data
def test_committed_ci_baseline_is_consistent(data_env: Path) -> None:
    baseline = load_baseline(CI_BASELINE)
    assert [(check.name, check.dataset) for check in baseline.checks] == [
        ("adi", "adi"),
        ("medline", "medline"),
        ("cranfield", "cranfield"),
        ("scifact", "scifact"),
        ("locomo-hybrid", "locomo"),
        ("locomo-graph", "locomo"),
        ("locomo-multi", "locomo"),
        ("locomo-hier", "locomo"),
        ("cisi-graph", "cisi"),
        ("scifact-hier", "scifact"),
        ("scifact-hybrid", "scifact"),
        ("cosqa-multi", "cosqa"),
    ]
    assert baseline.significance == SignificanceSettings(test="t-test", correction="holm", alpha=0.05)
    planned = plan_checks(baseline)  # composes every command, reads and checks every per-query file
    gated: dict[str, set[str]] = {}  # retriever class -> gated retriever names
    for item in planned:
        # no MiniLM (torch) in CI: TF-IDF for the four BM25/dense checks (timed against dense), static
        # vectors for the families' checks
        bm25_dense = item.check.name in ("adi", "medline", "cranfield", "scifact")
        embedder = "TfidfEmbedder" if bm25_dense else "StaticEmbedder"
        assert item.settings.embedder["_target_"] == f"retrievers.embedders.{embedder}"
        if bm25_dense:
            assert item.check.latency is not None and item.check.latency.reference == "dense"
        targets = {spec.name: spec.target for spec in item.settings.retrievers}
        for retriever in item.check.metrics:
            gated.setdefault(targets[retriever], set()).add(retriever)
        assert item.stored is not None
        n_queries = {len(values) for by_metric in item.stored.values() for values in by_metric.values()}
        assert len(n_queries) == 1
    # every retriever family is gated, with its seed-faithful preset and the tuned configuration
    assert gated == {
        "retrievers.baselines.BM25Retriever": {"bm25"},
        "retrievers.baselines.DenseRetriever": {"dense"},
        "retrievers.hybrid.HybridRetriever": {"hybrid_rrf", "oasis", "hybrid_tuned"},
        "retrievers.graph.GraphRetriever": {"graph", "graph_oasis", "graph_walks", "graph_tuned"},
        "retrievers.multi_strategy.MultiStrategyRetriever": {
            "multi_strategy",
            "memory_arc",
            "multi_strategy_tuned",
        },
        "retrievers.hierarchical.HierarchicalRetriever": {
            "hier",
            "hier_leaves",
            "hier_tuned",
            "openviking",
            "openviking_topk3",
        },
    }
