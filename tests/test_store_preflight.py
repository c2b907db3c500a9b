"""Store settings the data cannot hold are refused before anything is embedded or built: from
the command line on ADI (82 documents, TF-IDF: 81 dimensions) each is one line naming the key and
what would fit, exit 2, no traceback, and no store in the cache. A faiss file built over another
corpus with as many rows of the same width is refused on load (its embeddings' fingerprint), as is
a corpus whose texts are all empty for TF-IDF (one line naming the dataset)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli, smoke_settings

from retrievers.index import ExactVectorIndex, FaissVectorIndex
from retrievers.index.ann import VectorIndexError, vectors_fingerprint
from retrievers.params import ParamError
from retrievers.store.config import ChunkingConfig, StoreConfig
from retrievers.store.vector_index_config import VectorIndexConfig, check_vector_settings
from retrievers.types import Document
from viking_eval.config import ConfigError
from viking_eval.run.experiment import run_experiment

SMOKE = ["experiment=smoke", "run.latency.n_queries=0", "show_progress=false"]


def _cli(args: list[str], data: Path, out: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {"VIKING_EVAL_DATA": str(data), "VIKING_EVAL_CACHE": str(cache)}
    return run_cli(*args, f"hydra.run.dir={out}", env=env, timeout=300)


# overrides -> the one line (ADI: 82 documents; TF-IDF on it: 81 dimensions)
REFUSED = {
    "nlist": (
        ["store=ivf", "store.vector_index.nlist=1000"],
        "error: store.vector_index.nlist: 1000 exceeds the 82 rows to index (documents, or chunks with "
        "store.chunking): give at most 82, or null (= 2 lists for 82 rows)",
    ),
    "ivf_pq": (
        ["store=ivf", "store.vector_index.kind=ivf_pq"],
        "error: store.vector_index.pq_bits: 8 means 256 centroids per PQ sub-quantizer: ivf_pq needs at "
        "least 256 training rows, got 82 (82 rows): give pq_bits at most 6, or use kind ivf_flat or hnsw",
    ),
    "pq_m": (
        [
            "store=ivf",
            "store.vector_index.kind=ivf_pq",
            "store.vector_index.pq_bits=4",
            "store.vector_index.pq_m=7",
        ],
        "error: store.vector_index.pq_m: 7 must divide the embedding dimension 81: one of 1, 3, 9, 27, 81, "
        "or null (= 9)",
    ),
}


@pytest.mark.needs_data
def test_a_setting_the_data_cannot_hold_is_one_line_from_the_command_line(
    shared_datasets: Path, tmp_path: Path
) -> None:
    """The real command line (one case; the others run the same loop in this process below)."""
    overrides, line = REFUSED["nlist"]
    cache = tmp_path / "cache"
    done = _cli([*SMOKE, *overrides], shared_datasets, tmp_path / "run", cache)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr + done.stdout
    assert [text for text in done.stderr.splitlines() if text.strip()] == [line]
    # checked before the corpus was embedded or a store built (TF-IDF's fit may be cached)
    assert not (cache / "stores").exists() and not (cache / "embeddings").exists()


@pytest.mark.needs_data
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_settings_the_data_cannot_hold_are_one_line_before_any_build(
    case: str, data_env: Path, tmp_path: Path
) -> None:
    """The experiment loop (which the command line runs) refuses with the ConfigError whose line
    the command line prints after ``error: ``, before anything is embedded or built."""
    overrides, line = REFUSED[case]
    with pytest.raises(ConfigError) as caught:
        run_experiment(smoke_settings(*SMOKE[1:], *overrides), tmp_path / "run")
    assert f"error: {caught.value.line()}" == line
    cache = Path(os.environ["VIKING_EVAL_CACHE"])  # the test's own (conftest)
    assert not (cache / "stores").exists() and not (cache / "embeddings").exists()


@pytest.mark.needs_data
def test_a_fitting_ivf_pq_store_still_builds(data_env: Path, tmp_path: Path) -> None:
    overrides = ["store=ivf", "store.vector_index.kind=ivf_pq", "store.vector_index.pq_bits=4"]
    run_experiment(smoke_settings(*SMOKE[1:], *overrides), tmp_path / "run")
    environment = json.loads((tmp_path / "run" / "environment.json").read_text())
    assert "pq_m': 9" in str(environment) or '"pq_m": 9' in json.dumps(environment)


def test_all_empty_corpus_is_one_line_naming_the_dataset(tmp_path: Path) -> None:
    folder = tmp_path / "blank"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": ""}) + "\n" for i in range(5))
    )
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "hello world"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    done = _cli([*SMOKE, f"dataset.path={folder}"], tmp_path / "nodata", tmp_path / "run", tmp_path / "cache")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr + done.stdout
    lines = [text for text in done.stderr.splitlines() if text.strip()]
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {folder}: dataset blank: the embedder cannot be fitted on its corpus")
    assert "no usable terms in 5 texts (5 empty or blank" in lines[0] and "embedder=static" in lines[0]


# --------------------------------------------------------------------------- library level


def test_check_against_names_the_key_and_resolves_defaults() -> None:
    ivf_pq = VectorIndexConfig(kind="ivf_pq", pq_bits=4)
    assert check_vector_settings(ivf_pq, 82, 81) == {"nlist": 2, "pq_m": 9, "train_size": 82}
    with pytest.raises(ParamError) as caught:
        VectorIndexConfig(kind="ivf_flat", train_size=10, nlist=20).check_against(100, 8)
    assert caught.value.key == "store.vector_index.train_size"
    assert "needs at least 20 training rows, got 10 (100 rows, train_size 10)" in str(caught.value)
    assert VectorIndexConfig(kind="hnsw").check_against(1, 1) is None  # nothing to check
    docs = [Document(id=f"d{i}", text=" ".join(["word"] * 50)) for i in range(10)]
    chunked = StoreConfig(
        vector_index=VectorIndexConfig(kind="ivf_flat", nlist=30), chunking=ChunkingConfig(size=10)
    )
    assert chunked.n_rows(docs) == 50
    chunked.check_against(docs, lambda: pytest.fail("ivf_flat needs no dimension"))  # 30 lists <= 50 chunks
    with pytest.raises(ParamError, match=r"store\.vector_index\.nlist 30 exceeds the 10 rows"):
        StoreConfig(vector_index=VectorIndexConfig(kind="ivf_flat", nlist=30)).check_against(docs, lambda: 8)


def test_a_faiss_file_of_another_corpus_of_the_same_shape_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ours = rng.standard_normal((300, 16)).astype(np.float32)
    ours /= np.linalg.norm(ours, axis=1, keepdims=True)
    theirs = np.roll(ours, 1, axis=0)  # another corpus: the same rows in another order
    FaissVectorIndex.build(ExactVectorIndex(theirs), VectorIndexConfig(kind="hnsw")).save(tmp_path)
    meta = json.loads((tmp_path / "index.json").read_text())
    assert meta["vectors_sha256"] == vectors_fingerprint(theirs) != vectors_fingerprint(ours)
    with pytest.raises(VectorIndexError, match="stale: built over other embeddings of the same shape"):
        FaissVectorIndex.load(tmp_path, ExactVectorIndex(ours), "hnsw")
    assert FaissVectorIndex.load(tmp_path, ExactVectorIndex(theirs), "hnsw").size == 300
