"""``experiment=fuse`` (viking_eval/fuse/): the grid and Optuna find the weights a brute-force loop
written here finds on a small hand-made case; the program fuses two run files of ADI, tuned on
the tune half and reported on the holdout half, its numbers recomputed here from its own output;
bad options and a run of another dataset are one line, exit 2."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import compose_settings, run_cli

from retrievers.fusion import fuse_runs
from viking_eval.config import Settings
from viking_eval.fuse.optimise import grid, grid_search, optuna_search, weight_grid
from viking_eval.measures.metrics import evaluate, parse_metrics

AP = parse_metrics(["AP"])


def _case() -> tuple[list[dict[str, dict[str, float]]], dict[str, dict[str, int]]]:
    """Three legs over 12 documents, 5 queries with 3 relevant documents each (seeded)."""
    rnd = random.Random(0)
    docs = [f"d{i}" for i in range(12)]
    qrels = {f"q{j}": dict.fromkeys(rnd.sample(docs, 3), 1) for j in range(5)}
    runs = [{q: {d: round(rnd.random(), 3) for d in rnd.sample(docs, 8)} for q in qrels} for _ in range(3)]
    return runs, qrels


def test_grid_and_optuna_find_the_brute_force_best_weights() -> None:
    runs, qrels = _case()

    def objective(weights: tuple[float, ...] | None, params: dict[str, float]) -> float:
        return evaluate(fuse_runs(runs, "wsum", weights=weights), qrels, AP).aggregate["AP"]

    # brute force, written here: every (a, b, c) in tenths with a + b + c = 1
    values = {}
    for a in range(11):
        for b in range(11 - a):
            weights = (a / 10, b / 10, (10 - a - b) / 10)
            values[weights] = objective(weights, {})
    best_value = max(values.values())
    best = [w for w, v in values.items() if v == best_value]
    assert len(best) == 1  # a unique best, so the searches must find exactly it
    assert len(weight_grid(3, 0.1)) == len(values) == 66

    found = grid_search("wsum", 3, 0.1, objective)
    assert found.weights == pytest.approx(best[0]) and found.value == best_value and found.evaluated == 66
    tuned = optuna_search("wsum", 3, 0.1, objective, trials=150, seed=0)
    assert tuned.weights == pytest.approx(best[0]) and tuned.value == best_value


def test_grid_includes_the_method_parameters() -> None:
    points = grid("rrf", 2, 0.5)  # weights (0,1), (.5,.5), (1,0) x k in 10..100 by 10
    assert len(points) == 3 * 10
    assert points[0] == ((0.0, 1.0), {"k": 10}) and points[-1] == ((1.0, 0.0), {"k": 100})
    with pytest.raises(ValueError, match="step must divide 1"):
        weight_grid(2, 0.3)


@pytest.fixture(scope="module")
def adi_legs(tmp_path_factory: pytest.TempPathFactory, shared_datasets: Path) -> Path:
    folder = tmp_path_factory.mktemp("legs")
    env = {"VIKING_EVAL_DATA": str(shared_datasets)}
    done = run_cli("experiment=smoke", f"hydra.run.dir={folder}", "run.latency.n_queries=0", env=env)
    assert done.returncode == 0, done.stderr
    return folder


def _settings(legs: Path, *options: str) -> Settings:
    runs = f"fuse.runs=[{legs}/runs/bm25.trec,{legs}/runs/dense.trec]"
    return compose_settings("experiment=fuse", runs, *options)


@pytest.mark.needs_data
def test_fuse_program_tunes_on_one_half_and_reports_on_the_other(
    adi_legs: Path, data_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from viking_eval.fuse.program import fuse_program

    out = tmp_path / "fused"
    assert fuse_program(_settings(adi_legs, "fuse.method=wsum", "fuse.optimise=grid"), out) == 0
    assert "fusion wsum (min-max; weights=" in capsys.readouterr().out
    result = json.loads((out / "fuse.json").read_text())
    assert result["tuning"]["queries"] == "test[tune half]" and result["tuning"]["candidates"] == 11
    assert result["reported"]["queries"] == "test[holdout half]"
    # recomputed here: the chosen weights on the holdout queries, from the run files
    from viking_eval.data.splits import load_for_phase

    report, _ = load_for_phase(str(data_env / "adi"), "final", split="test", tune_split="partition")
    tune, _ = load_for_phase(str(data_env / "adi"), "tune", split="test", tune_split="partition")
    assert not set(report.qrels) & set(tune.qrels)
    legs = []
    for name in ("bm25", "dense"):
        run: dict[str, dict[str, float]] = {}
        for line in (adi_legs / "runs" / f"{name}.trec").read_text().splitlines():
            q, _, doc, _, score, _ = line.split()
            run.setdefault(q, {})[doc] = float(score)
        legs.append(run)
    ndcg = parse_metrics(["nDCG@10"])
    tuning = [{q: r[q] for q in tune.qrels if q in r} for r in legs]
    on_tune = [
        evaluate(fuse_runs(tuning, "wsum", weights=w), tune.qrels, ndcg).aggregate["nDCG@10"]
        for w in weight_grid(2, 0.1)
    ]
    assert result["tuning"]["value"] == pytest.approx(max(on_tune))
    chosen = tuple(result["weights"])
    assert on_tune[weight_grid(2, 0.1).index(chosen)] == max(on_tune)
    held = [{q: r[q] for q in report.qrels if q in r} for r in legs]
    expected = evaluate(fuse_runs(held, "wsum", weights=chosen), report.qrels, ndcg).aggregate["nDCG@10"]
    assert result["metrics"]["fused:wsum"]["nDCG@10"] == pytest.approx(expected)
    assert (out / "runs" / "fused.trec").read_text().count("\n") > 0


@pytest.mark.needs_data
@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["fuse.method=borda"], "fuse.method: must be one of ['sum', 'wsum'"),
        (
            ["fuse.norm=l2"],
            "fuse.norm: must be one of ['min-max', 'max', 'sum', 'zmuv', 'rank', 'borda', 'none']",
        ),
        (["fuse.method=wsum", "fuse.weights=[1.0]"], "fuse.weights: got 1 weights for 2 runs"),
        (["fuse.method=rrf", "+fuse.params.phi=0.5"], "fuse.params: rrf has no parameter 'phi'"),
    ],
)
def test_bad_options_are_refused_before_any_file_is_read(
    adi_legs: Path, options: list[str], says: str
) -> None:
    from viking_eval.config.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        _settings(adi_legs, *options)
    assert says in raised.value.line()


@pytest.mark.needs_data
def test_a_run_of_another_dataset_is_refused(adi_legs: Path, data_env: Path, tmp_path: Path) -> None:
    from viking_eval.config.errors import ConfigError
    from viking_eval.fuse.program import fuse_program

    with pytest.raises(ConfigError) as raised:
        fuse_program(_settings(adi_legs, "dataset=cisi"), tmp_path)
    assert raised.value.line() == (
        f"fuse.runs[0]: {adi_legs}/runs/bm25.trec is a run of dataset 'adi' (its run folder's "
        "config.yaml), and this fusion is over 'cisi': fuse runs of one dataset, or set dataset=adi"
    )


@pytest.mark.needs_data
def test_a_run_ranking_documents_of_another_corpus_is_one_line_exit_2(
    adi_legs: Path, data_env: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.trec"
    lines = (adi_legs / "runs" / "bm25.trec").read_text().splitlines()
    q, q0, _, rank, score, tag = lines[2].split()
    lines[2] = f"{q} {q0} 9999 {rank} {score} {tag}"
    other.write_text("\n".join(lines) + "\n")
    done = run_cli(
        "experiment=fuse",
        f"hydra.run.dir={tmp_path / 'out'}",
        f"fuse.runs=[{other},{adi_legs}/runs/dense.trec]",
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: fuse.runs[0]: {other}:3: query {q!r} ranks document '9999', which is not in adi's corpus: "
        "a run of another dataset?"
    )
