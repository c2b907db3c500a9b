"""``python -m viking_eval``: exit status 0 / 1 / 2 and one clean line for every bad input
(issue 12: config and data errors, the gate's overrides; issue 13: one entry per program;
issue 14: --help). Where the exit status matters the whole command line runs (``run_cli``: in
this process as a child would, tests/conftest.py; ``fresh_process=True`` where the process itself
is tested); runs are tiny (ADI or Medline, TF-IDF, no latency timing unless a gate check needs it)."""

from __future__ import annotations

import ast
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import preflight_error, run_cli

from viking_eval import cli

SPREAD_OVER_WORKERS = True  # tests/conftest.py: independent tests, each to the next free worker

REPO = Path(__file__).resolve().parents[1]
SMOKE = ["experiment=smoke", "run.latency.n_queries=0"]


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a refused command: exactly one ``error:`` line and no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


# --------------------------------------------------------------------------- config errors: exit 2


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["dataset.strict=maybe"], "error: dataset.strict: must be true or false, got 'maybe'"),
        (["run.top_k=abc"], "error: run.top_k: must be an integer in [1, 10000], got 'abc'"),
        (
            ["experiment=quickstrat"],
            "error: experiment: no option 'quickstrat' (did you mean 'quickstart'?); the options are: ",
        ),
        (["run.foo=1"], "error: run.foo: no such key; run has: top_k, batch_size, "),
        (
            ["run.metrics=[nDCG@0]"],
            "error: run.metrics: metric 'nDCG@0': the cutoff after @ must be an integer >= 1",
        ),
    ],
)
def test_config_error_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], line: str
) -> None:
    """The pre-flight's line in this process (``python -m viking_eval`` calls it before Hydra's
    app: :func:`test_a_config_error_through_the_real_command_line` runs that path)."""
    assert preflight_error(capsys, *SMOKE, *args, f"hydra.run.dir={tmp_path / 'run'}").startswith(line)
    assert not (tmp_path / "run").exists()  # refused before anything ran


def test_a_config_error_through_the_real_command_line(tmp_path: Path) -> None:
    """``python -m viking_eval`` with a bad value: the pre-flight's one line, exit 2, no run folder."""
    result = run_cli(*SMOKE, "run.top_k=0", f"hydra.run.dir={tmp_path / 'run'}")
    assert _one_error_line(result) == "error: run.top_k: must be an integer in [1, 10000], got 0"
    assert not (tmp_path / "run").exists()  # refused before anything ran


def test_bad_sweep_value_refused_before_any_job_runs(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    result = run_cli("-m", *SMOKE, "run.top_k=10,abc", f"hydra.sweep.dir={sweep_dir}")
    assert _one_error_line(result) == (
        "error: run.top_k: must be an integer in [1, 10000], got 'abc' "
        "(job 1 of the sweep: experiment=smoke run.latency.n_queries=0 run.top_k=abc)"
    )
    assert not sweep_dir.exists()


def test_debug_switch_shows_the_traceback(tmp_path: Path) -> None:
    result = run_cli(*SMOKE, "run.top_k=abc", env={"VIKING_EVAL_DEBUG": "1"})
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert (
        result.stderr.strip().splitlines()[-1]
        == "error: run.top_k: must be an integer in [1, 10000], got 'abc'"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        # sweeps: every job is checked, values from hydra.sweeper.params too
        (
            ["-m", *SMOKE, "store.bm25.k1=0.6,0"],
            "error: store.bm25.k1: must be a number in (0, 100], got 0 (job 1",
        ),
        (["-m", *SMOKE, "dataset=adi,nope"], "error: dataset: no option 'nope'; the options are: "),
        (["-m", *SMOKE, "store.bm25.method=lucene,okapi"], "error: store.bm25.method: must be one of ["),
        # a multirun's objective must name a computed metric
        (
            ["-m", *SMOKE, "store.bm25.k1=0.6,0.9", "sweep.objective=bm25.P@5"],
            "error: sweep.objective: 'bm25.P@5' names no computed metric",
        ),
        # Optuna studies: the sweeper's settings, the part every trial shares, each choice
        (
            ["-m", *SMOKE, "hparams_search=bm25_optuna", "hydra.sweeper.direction=up"],
            "error: hydra.sweeper.direction: 'up' is not one of",
        ),
        (
            ["-m", *SMOKE, "hparams_search=bm25_optuna", "hydra.sweeper.sampler=best"],
            "error: hydra.sweeper.sampler: unknown sampler 'best'",
        ),
        (
            ["-m", *SMOKE, "hparams_search=bm25_optuna", "run.top_k=0"],
            "error: run.top_k: must be an integer in [1, 10000], got 0",
        ),
        (
            ["-m", *SMOKE, "hparams_search=bm25_optuna", "store.bm25.method=choice(lucene,okapi)"],
            "error: store.bm25.method: must be one of",
        ),
        (
            ["-m", *SMOKE, "hparams_search=bm25_optuna", "run.metrics=[R@10]"],
            "error: sweep.objective: 'bm25.nDCG@10' names no computed metric",
        ),
        # override syntax, + on an existing key, ~ on a setting
        ([*SMOKE, "run.top_k=[1,"], "error: command line: cannot parse 'run.top_k=[1,'"),
        (
            [*SMOKE, "+run.top_k=5"],
            "error: run.top_k: is already in the config: write run.top_k=<value> without the +",
        ),
        ([*SMOKE, "~run.top_k"], "error: run.top_k: cannot be deleted"),
        # unknown config group options, also for a retriever or reranker added with +
        (
            [*SMOKE, "+retriever@retrievers.x=bm26"],
            "error: retriever: no option 'bm26' (did you mean 'bm25'?); the options are: bm25, dense, ",
        ),
        (
            [*SMOKE, "+retriever@retrievers.h=hybrid_rrf", "+reranker@retrievers.h.reranker=colbert"],
            "error: reranker: no option 'colbert'",
        ),
        # BM25 settings on a retriever (issue 12 item 7)
        (
            [*SMOKE, "+retriever@retrievers.bm25b=bm25", "retrievers.bm25b.k1=1.2"],
            "error: retrievers.bm25b.k1: k1 is a store setting, not a retriever's: write store.bm25.k1=<value>",
        ),
        # metric names
        (
            [*SMOKE, "run.metrics=[nDCG@10,alpha_nDCG@10]"],
            "error: run.metrics: metric 'alpha_nDCG@10' is intent-aware",
        ),
        ([*SMOKE, "run.metrics=[nDCG@ten]"], "error: run.metrics: unknown metric 'nDCG@ten'"),
        # a _target_ that is no retriever
        (
            [*SMOKE, "+retrievers.x._target_=os.system"],
            "error: retrievers.x._target_: 'os.system' is not a retriever class",
        ),
    ],
)
def test_preflight_refuses_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    assert preflight_error(capsys, *argv).startswith(line)


def test_preflight_accepts_good_commands(capsys: pytest.CaptureFixture[str]) -> None:
    cli.preflight([*SMOKE, "dataset.ignore_identical_ids=no"])
    cli.preflight(["-m", *SMOKE, "store.bm25.k1=0.6,0.9", "dataset=adi,medline"])
    cli.preflight(["-m", *SMOKE, "hparams_search=bm25_optuna", "hydra.sweeper.n_trials=2"])
    cli.preflight(["--help"])  # Hydra's to answer
    assert capsys.readouterr().err == ""


def test_gate_overrides_leave_out_what_chooses_the_gate() -> None:
    overrides = ["experiment=ci_regression", "gate.baseline=x.yaml", "store.bm25.k1=0.05", "+run.foo=1"]
    assert cli.gate_overrides(overrides) == ["store.bm25.k1=0.05", "+run.foo=1"]


# --------------------------------------------------------------------------- the gate (issue 12 item 1)


def _medline_baseline(tmp_path: Path, command_extra: str = "") -> Path:
    """A copy of the CI baseline file with its Medline check only (BM25 AP@100 fails with k1 0.05)."""
    source = REPO / "experiments" / "baselines" / "ci_regression.yaml"
    document = yaml.safe_load(source.read_text(encoding="utf-8"))
    check = next(check for check in document["checks"] if check["dataset"] == "medline")
    check["command"] = f"{check['command']} {command_extra}".strip()
    check["per_query"] = str((source.parent / check["per_query"]).resolve())
    document["checks"] = [check]
    path = tmp_path / "baseline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def _gate_failed(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "FAIL     medline     bm25" in result.stdout
    assert "gate FAIL:" in result.stdout


@pytest.mark.slow
@pytest.mark.needs_data
def test_gate_applies_command_line_overrides_to_every_check(data_env: Path, tmp_path: Path) -> None:
    baseline = _medline_baseline(tmp_path)
    run_dir = tmp_path / "gate"
    result = run_cli(
        "experiment=ci_regression",
        f"gate.baseline={baseline}",
        "store.bm25.k1=0.05",
        f"hydra.run.dir={run_dir}",
    )
    assert "gate: applying overrides to every check: store.bm25.k1=0.05" in result.stderr
    _gate_failed(result)
    assert "overrides applied to every check: store.bm25.k1=0.05" in (run_dir / "gate.txt").read_text()
    config = yaml.safe_load((run_dir / "medline" / "config.yaml").read_text())
    assert config["store"]["bm25"]["k1"] == 0.05


@pytest.mark.slow
@pytest.mark.needs_data
def test_gate_baseline_command_with_a_regression_fails(data_env: Path, tmp_path: Path) -> None:
    baseline = _medline_baseline(tmp_path, "store.bm25.k1=0.05")
    result = run_cli(
        "experiment=ci_regression",
        f"gate.baseline={baseline}",
        f"hydra.run.dir={tmp_path / 'gate'}",
    )
    assert "applying overrides" not in result.stderr
    _gate_failed(result)


@pytest.mark.needs_data
def test_gate_override_that_contradicts_a_check_is_refused(data_env: Path, tmp_path: Path) -> None:
    baseline = _medline_baseline(tmp_path)
    result = run_cli(
        "experiment=ci_regression",
        f"gate.baseline={baseline}",
        "dataset=adi",
        f"hydra.run.dir={tmp_path / 'gate'}",
    )
    line = _one_error_line(result)
    assert line.startswith("error: gate: ") and "dataset is 'medline' but the command evaluates 'adi'" in line


# --------------------------------------------------------------------------- data errors and bugs


def _bad_dataset(tmp_path: Path) -> Path:
    folder = tmp_path / "bad"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "", "text": "one"}\n{"_id": "d2", "text": \n'
    )
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "one"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return folder


def test_data_error_is_one_line_exit_2_and_marks_the_run_failed(tmp_path: Path) -> None:
    folder = _bad_dataset(tmp_path)
    run_dir = tmp_path / "run"
    result = run_cli(*SMOKE, f"dataset.path={folder}", "dataset.name=bad", f"hydra.run.dir={run_dir}")
    line = _one_error_line(result)
    assert line.startswith(f"error: {folder / 'corpus.jsonl'}:2: ")
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and status["error"] == line.removeprefix("error: ")
    assert not (run_dir / "metrics.json").exists()


class ExplodingRetriever:
    """A retriever whose construction fails like a bug would (for the exit-1 path)."""

    @dataclass(frozen=True)
    class Params:
        pass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom: a bug, not a bad input")

    def retrieve(self, query: str, top_k: int = 10) -> list[Any]:  # the contract, never reached
        return []

    def retrieve_batch(self, queries: list[str], top_k: int = 10) -> list[list[Any]]:
        return [[] for _ in queries]


@pytest.mark.needs_data
def test_a_bug_keeps_its_traceback_and_exits_1(data_env: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        *SMOKE,
        "+retrievers.boom._target_=test_cli.ExplodingRetriever",
        f"hydra.run.dir={run_dir}",
        env={"VIKING_EVAL_ALLOW_TARGETS": "test_cli"},
    )
    assert result.returncode == 1
    assert "RuntimeError: boom: a bug, not a bad input" in result.stderr
    assert "error: " not in result.stderr
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"


# --------------------------------------------------------------------------- one entry, --help


def test_main_module_is_a_thin_entry() -> None:
    """Issue 13: ``__main__`` imports the CLI's entry and calls it; the programs live elsewhere."""
    tree = ast.parse((REPO / "viking_eval" / "__main__.py").read_text(encoding="utf-8"))
    statements = [node for node in tree.body if not isinstance(node, ast.Expr)]  # the docstring
    assert [type(node).__name__ for node in statements] == ["ImportFrom", "ImportFrom", "If"]
    assert ast.unparse(statements[1]) == "from viking_eval.cli import main"
    assert ast.unparse(statements[2].body[0]) == "raise SystemExit(main())"


def test_help_names_experiments_groups_environment_and_exit_codes(tmp_path: Path) -> None:
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    experiments = sorted(path.stem for path in (REPO / "conf" / "experiment").glob("*.yaml"))
    assert f"experiment: {', '.join(experiments)}" in text
    for group in ("dataset", "embedder", "store", "retriever", "reranker", "hparams_search"):
        assert f"\n{group}: " in text
    for name in ("VIKING_EVAL_DATA", "VIKING_EVAL_CACHE", "HF_HUB_OFFLINE", "VIKING_EVAL_DEBUG"):
        assert name in text
    assert "Exit status:" in text and "\n  2  invalid config or data" in text
    assert "python -m viking_eval experiment=ci_regression store.bm25.k1=0.05" in text
    assert "== Config ==" not in text  # no config dump: --cfg job prints it
