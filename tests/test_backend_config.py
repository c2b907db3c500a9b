"""store.backend* in the harness and in load_tuned: checked keys outside the store's key, a run
through a backend on ADI equal to the local run on its vector leg, bad input in one line (exit 2),
a backend lost mid-run exit 1 with the run marked failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from backend_cases import QUERIES, assert_same_runs, corpus, embedder_for, run
from conftest import compose_settings, run_cli

from retrievers import DenseRetriever, HybridRetriever, load_tuned
from retrievers.backends import BackendConfig, BackendError, BackendLost, attach, open_backend
from retrievers.builders import build_store
from retrievers.tuned import TunedFileError
from viking_eval.config import ConfigError, load_settings
from viking_eval.config.compose import compose_config, hydra_session
from viking_eval.run.experiment import run_experiment


def test_backend_keys_are_checked_and_stay_out_of_the_store_settings() -> None:
    plain = compose_settings("experiment=smoke")
    chosen = compose_settings(
        "experiment=smoke",
        "store.backend=postgres",
        "store.backend_url=postgresql://h/db",
        "store.backend_index=hnsw",
    )
    assert plain.backend == BackendConfig() and plain.backend.is_local
    assert (chosen.backend.backend, chosen.backend.backend_index) == ("postgres", "hnsw")
    assert chosen.store == plain.store  # same store, same cache key: only where searches run differs
    assert not any(key.startswith("backend") for key in chosen.store.to_dict())
    with pytest.raises(ConfigError) as error:
        compose_settings("experiment=smoke", "store.backend=mysql")
    assert (
        error.value.line()
        == "store.backend: must be one of ['local', 'libsql', 'postgres', 'qdrant'], got 'mysql'"
    )
    with pytest.raises(ConfigError) as error:
        compose_settings("experiment=smoke", "store.backend=qdrant", "store.backend_index=ivfflat")
    assert error.value.line() == (
        "store.backend_index: 'ivfflat' is not an index of store.backend=qdrant; allowed: exact, hnsw"
    )


def _trec(path: Path) -> list[list[tuple[str, float]]]:
    runs: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        query, _, doc, _, score, _ = line.split()
        runs.setdefault(query, []).append((doc, float(score)))
    return [runs[query] for query in sorted(runs)]


def _experiment(out: Path, *overrides: str) -> None:
    from omegaconf import OmegaConf

    with hydra_session():
        cfg = compose_config(["experiment=smoke", "run.latency.n_queries=0", *overrides])
        run_experiment(load_settings(cfg), out, config_yaml=OmegaConf.to_yaml(cfg, resolve=True))


@pytest.mark.needs_data
def test_adi_run_through_libsql_equals_the_local_run(data_env: Path, tmp_path: Path) -> None:
    _experiment(tmp_path / "local")
    _experiment(tmp_path / "libsql", "store.backend=libsql", f"store.backend_url={tmp_path / 'adi.db'}")
    assert_same_runs(
        _trec(tmp_path / "local/runs/dense.trec"), _trec(tmp_path / "libsql/runs/dense.trec"), "ADI dense"
    )
    # the keyword leg is FTS5's own bm25(): not bm25s's scores
    assert _trec(tmp_path / "local/runs/bm25.trec") != _trec(tmp_path / "libsql/runs/bm25.trec")
    environment = json.loads((tmp_path / "libsql/environment.json").read_text())
    assert '"kind": "libsql"' in json.dumps(environment)


@pytest.mark.needs_data
def test_unreachable_backend_is_one_line_exit_2(data_env: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli(
        "experiment=smoke",
        "store.backend=postgres",
        f"hydra.run.dir={out}",
        env={
            "VIKING_EVAL_STORE_URL": f"postgresql://postgres@/postgres?host={tmp_path}"
        },  # from the environment
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "store.backend=postgres: cannot connect to" in errors[0]
    assert "Traceback" not in result.stderr
    assert json.loads((out / "status.json").read_text())["status"] == "failed"
    assert not (out / "metrics.json").exists()


def test_lost_backend_exits_1_and_marks_the_run_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from viking_eval.cli import _marked_on_failure

    with pytest.raises(SystemExit) as stopped, _marked_on_failure(tmp_path):
        raise BackendLost("store.backend=postgres (h/db): SELECT failed: server closed the connection")
    assert stopped.value.code == 1
    assert json.loads((tmp_path / "status.json").read_text())["status"] == "failed"
    with pytest.raises(SystemExit) as refused, _marked_on_failure(tmp_path):
        raise BackendError("store.backend=libsql: cannot open x")
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "error: store.backend=libsql: cannot open x"


def test_load_tuned_serves_from_a_backend(tmp_path: Path) -> None:
    docs = corpus(40)
    embedder = embedder_for(docs)
    store = build_store(docs, embedder)
    path = tmp_path / "tuned.yaml"
    document = {
        "format": 1,
        "retriever": {"class": "HybridRetriever", "params": {}},
        "embedder": {"class": "TfidfEmbedder", "params": {"dim": 16, "seed": 0}, "name": embedder.name},
        "store": store.config.to_dict(),
    }
    path.write_text(yaml.safe_dump(document))
    url = str(tmp_path / "serve.db")
    served = load_tuned(
        path, store=store, embedder=embedder, backend={"backend": "libsql", "backend_url": url}
    )
    assert served.store.backend is not None and served.store.backend.kind == "libsql"
    local = load_tuned(path, store=store, embedder=embedder)
    assert local.store.backend is None
    assert run(served) != run(local)  # the keyword leg is FTS5's
    backend = open_backend(BackendConfig(backend="libsql", backend_url=url), store)  # reused, not rewritten
    assert backend.write(store) is False
    assert_same_runs(
        run(DenseRetriever(store, embedder)), run(DenseRetriever(attach(store, backend), embedder)), "dense"
    )
    assert isinstance(HybridRetriever(attach(store, backend), embedder).retrieve(QUERIES[0], 3), list)
    document["store"] = {**store.config.to_dict(), "backend": "postgres"}  # never from a tuned file
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(TunedFileError, match="backend"):
        load_tuned(path, store=store, embedder=embedder)
