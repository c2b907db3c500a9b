"""The TF-IDF embedder encodes without scikit-learn (``retrievers.text.tfidf_rows``: importing it
costs 1.2 s a process) and gives scikit-learn's numbers bit for bit: the rows of the fitted
``TfidfVectorizer.transform`` (indices, pointers and float32 data) and ``TruncatedSVD.transform``
of them, on every shared dataset's documents and queries and on hand-made edge cases; and a
fitted embedder restored from its files encodes in a fresh process that never imports it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.decomposition import TruncatedSVD

from retrievers.embedders.base import unit_rows
from retrievers.embedders.tfidf import TfidfEmbedder
from retrievers.text import fit_tfidf, tfidf_rows

REPO = Path(__file__).resolve().parents[1]

EDGE_TEXTS = [
    "",  # nothing
    "   \n\t ",
    "the of and a an",  # stop words only
    "xyzzy plugh",  # unknown words only
    "P53 p53 p53! P53? (p53)",  # one term, repeated, mixed case and punctuation
    "Über die Straße: naïve café façade, ÜBER alles",  # non-ASCII word characters and case
    "x_1 x_1 snake_case 42 4 2 1984",  # underscores and digits are word characters
    "a b c d e f",  # 1-character tokens are separators
    "protein " * 300,  # a long row: its norm summed over many equal squares
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho",
]
CORPUS = [
    "P53 protein binds DNA and the p53 pathway controls cell death",
    "Über Straßen und Cafés: naïve façade studies of the city",
    "snake_case names like x_1 and 1984 in source code",
    "alpha beta gamma delta: the Greek letters in protein naming",
    "cell death, apoptosis and the protein pathway of p53 in cancer",
    "kappa lambda mu: light chains of the antibody protein",
]


def _same_rows(expected: object, got: object) -> None:
    assert got.shape == expected.shape  # type: ignore[attr-defined]
    for part in ("indptr", "indices", "data"):
        want, have = getattr(expected, part), getattr(got, part)
        assert np.array_equal(want, have), part
    assert got.data.dtype == expected.data.dtype and got.data.tobytes() == expected.data.tobytes()  # type: ignore[attr-defined]


def _check(fit_texts: list[str], texts: list[str], dim: int) -> None:
    vectorizer, matrix = fit_tfidf(fit_texts, dtype=np.float32, max_features=100_000)
    expected = vectorizer.transform(texts)
    vocabulary = {str(term): int(column) for term, column in vectorizer.vocabulary_.items()}
    rows = tfidf_rows(texts, vocabulary, np.asarray(vectorizer.idf_))
    _same_rows(expected, rows)
    svd = TruncatedSVD(n_components=dim, algorithm="randomized", n_iter=7, random_state=0).fit(matrix)
    embedder = TfidfEmbedder(dim=dim).fit(fit_texts)
    want = unit_rows(svd.transform(expected))
    got = embedder.encode(texts, kind="document")
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()


def test_edge_cases_equal_scikit_learn() -> None:
    _check(CORPUS, CORPUS + EDGE_TEXTS, dim=4)


def test_a_text_without_known_terms_is_an_empty_row() -> None:
    vectorizer, _ = fit_tfidf(CORPUS, dtype=np.float32)
    vocabulary = {str(term): int(column) for term, column in vectorizer.vocabulary_.items()}
    rows = tfidf_rows(["", "the of", "xyzzy"], vocabulary, np.asarray(vectorizer.idf_))
    assert rows.shape == (3, len(vocabulary)) and rows.nnz == 0


@pytest.mark.needs_data
@pytest.mark.parametrize("name", ["adi", "cisi", "cosqa", "cranfield", "locomo", "medline", "scifact"])
def test_every_shared_dataset_equals_scikit_learn(name: str, data_env: Path) -> None:
    from viking_eval.data import load_dataset

    dataset = load_dataset(name, "test")
    documents = [f"{doc.title} {doc.text}" for doc in list(dataset.corpus.values())[:1500]]
    queries = [query.text for query in dataset.queries.values()]
    _check(documents, documents + queries, dim=32)


def test_a_restored_embedder_encodes_without_importing_scikit_learn(tmp_path: Path) -> None:
    fitted = TfidfEmbedder(dim=4).fit(CORPUS)
    fitted.save_fitted(tmp_path)
    expected = fitted.encode(CORPUS + EDGE_TEXTS, kind="query")
    np.save(tmp_path / "expected.npy", expected)
    script = (
        "import sys, numpy as np\n"
        "from pathlib import Path\n"
        "from retrievers.embedders.tfidf import TfidfEmbedder\n"
        f"folder = Path({str(tmp_path)!r})\n"
        "embedder = TfidfEmbedder.load_fitted(folder)\n"
        f"got = embedder.encode({CORPUS + EDGE_TEXTS!r}, kind='query')\n"
        "assert got.tobytes() == np.load(folder / 'expected.npy').tobytes(), 'other vectors'\n"
        "print(sorted(m for m in sys.modules if m == 'sklearn' or m.startswith('sklearn.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_saved_idf_that_does_not_fit_the_vocabulary_is_refused(tmp_path: Path) -> None:
    TfidfEmbedder(dim=4).fit(CORPUS).save_fitted(tmp_path)
    np.save(tmp_path / "idf.npy", np.ones(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"idf of shape \(3,\)"):
        TfidfEmbedder.load_fitted(tmp_path)
