"""TF-IDF + truncated SVD (latent semantic analysis): a fast, torch-free embedder for unit tests
and quick sweeps, not for quality. scikit-learn is imported only when :meth:`TfidfEmbedder.fit` runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrievers.embedders.base import EncodeKind, FloatMatrix, check_kind, check_texts, unit_rows
from retrievers.embedders.models import FINGERPRINT_LEN
from retrievers.params import check_int
from retrievers.text import fit_tfidf, tfidf_rows

__all__ = ["CorpusFitError", "NotFittedError", "TfidfEmbedder"]

_NOT_FITTED = "TfidfEmbedder must be fit(...) on the corpus first"


class CorpusFitError(ValueError):
    """The texts given to :meth:`TfidfEmbedder.fit` cannot be fitted (no usable term: every text
    empty or stop words only; fewer than 2 documents or 2 distinct terms): a property of the
    corpus, not of the code; the message says what was found."""


class NotFittedError(RuntimeError, AttributeError):
    """Raised when an unfitted :class:`TfidfEmbedder` is used.

    A ``RuntimeError`` for callers; also an ``AttributeError`` so that ``hasattr`` (and with it
    ``isinstance(embedder, Embedder)`` on Python 3.11) answers False instead of raising.
    """


class TfidfEmbedder:
    """TF-IDF + truncated SVD (latent semantic analysis), then L2 normalisation.

    ``TfidfVectorizer(sublinear_tf=True, stop_words="english", token_pattern=r"(?u)\\b\\w\\w+\\b")``
    (float32) followed by ``TruncatedSVD(dim, algorithm="randomized", n_iter=7, random_state=seed)``.
    Fast and torch-free (SciFact's 5,183 documents at 256 dimensions on two cores: 4-7 s to fit,
    about 1 s to encode): for unit tests and quick sweeps. It must be :meth:`fit` on the corpus
    before :meth:`encode`; queries and documents are embedded the same way (``kind`` is only
    validated).

    The SVD cannot have more components than ``min(n_features, n_docs) - 1``, so ``fit`` caps
    ``dim`` there and :attr:`dim` reports the effective width (``requested_dim`` keeps the request).
    A text with no term of the fitted vocabulary gets an all-zero row: cosine 0 with everything,
    never NaN.

    The SVD runs on :data:`FIT_BLAS_THREADS` BLAS threads whatever the process has: OpenBLAS
    started on one thread (``OPENBLAS_NUM_THREADS=1`` or ``OMP_NUM_THREADS=1``, one core, a Ray or
    Slurm worker) rounds its LU, QR and products otherwise than once it has run on two or more
    (then 2 or 4 threads give the same bits), and the fit's name could not tell the two apart: a cache
    would have handed one process's vectors to another that would have computed others.
    """

    N_ITER = 7
    #: v3: the SVD on FIT_BLAS_THREADS threads (v2's one-thread processes fitted other bits)
    VERSION = "v3"  # part of the name: bump when the same settings and texts give other vectors
    #: the BLAS threads of the fit, raised or lowered to it (class docstring)
    FIT_BLAS_THREADS = 2

    def __init__(
        self,
        dim: int = 256,
        *,
        seed: int = 0,
        min_df: int = 1,
        max_features: int | None = 100_000,
    ) -> None:
        dim = check_int("dim", dim, 1)
        seed = check_int("seed", seed, 0, 2**32 - 1)
        min_df = check_int("min_df", min_df, 1)
        max_features = check_int("max_features", max_features, 1, nullable=True)
        self.requested_dim = dim
        self.seed = seed
        self.min_df = min_df
        self.max_features = max_features
        self._dim = dim
        self._name: str | None = None
        # the fitted state: term -> column, the columns' idf, the SVD basis transposed (terms x
        # dim, C order: SciPy's sparse-times-dense product copies a dense operand that is not C
        # contiguous, the whole basis on every call: 6 of the 6.8 ms one SciFact query took)
        self._vocabulary: dict[str, int] = {}
        self._idf: Any = None
        self._projection: Any = None

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has run."""
        return self._name is not None

    @property
    def dim(self) -> int:
        """Effective embedding width after :meth:`fit`; the requested width before it."""
        return self._dim

    # Setters only so that mypy accepts this class as an ``Embedder`` (see SentenceTransformerEmbedder).

    @property
    def name(self) -> str:
        """``tfidf-svd:v3:<effective dim>:<seed>:<min_df>:<max_features>:<corpus hash>``.

        ``v3`` is the algorithm version (v2: a float32 TF-IDF matrix; v3: the SVD on
        :data:`FIT_BLAS_THREADS` threads); it changes whenever the same settings and texts would
        give other vectors, so no cache entry or tuned file is reused across such a change.

        The corpus hash is the first 16 hex digits of SHA-256 over the fit texts, each as its
        length (8 bytes) followed by its UTF-8 bytes, so the same texts in the same order give the
        same name and no two text lists collide by concatenation.
        """
        if self._name is None:
            raise NotFittedError(_NOT_FITTED)
        return self._name

    def fit(self, texts: Sequence[str]) -> TfidfEmbedder:
        """Learn the vocabulary, IDF weights and SVD basis from ``texts``; returns ``self``."""
        items = check_texts(texts, "TfidfEmbedder.fit")
        from sklearn.decomposition import TruncatedSVD
        from threadpoolctl import threadpool_limits

        try:
            # float32 halves the SVD time on SciFact with the same explained variance
            vectorizer, matrix = fit_tfidf(
                items, min_df=self.min_df, max_features=self.max_features, dtype=np.float32
            )
        except ValueError as exc:  # empty vocabulary, or min_df above the number of documents
            blank = sum(1 for text in items if not text.strip())
            raise CorpusFitError(
                f"TfidfEmbedder.fit found no usable terms in {len(items)} texts ({blank} empty or blank; "
                f"min_df={self.min_df}, English stop words removed): {exc}"
            ) from exc
        n_docs, n_features = matrix.shape
        effective = min(self.requested_dim, n_features - 1, n_docs - 1)
        if effective < 1:
            raise CorpusFitError(
                f"TfidfEmbedder needs at least 2 documents and 2 distinct terms to fit an SVD; got "
                f"{n_docs} documents and {n_features} terms"
            )
        svd = TruncatedSVD(
            n_components=effective,
            algorithm="randomized",
            n_iter=self.N_ITER,
            random_state=self.seed,
        )
        # every BLAS loaded by now (numpy's, SciPy's through the import above) on the same
        # threads, so the fit is the same in any process (class docstring)
        with threadpool_limits(limits=self.FIT_BLAS_THREADS, user_api="blas"):
            svd.fit(matrix)

        digest = hashlib.sha256()
        for text in items:
            data = text.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        self._vocabulary = {str(term): int(column) for term, column in vectorizer.vocabulary_.items()}
        self._idf = np.asarray(vectorizer.idf_)
        self._projection = np.ascontiguousarray(np.asarray(svd.components_).T)
        self._dim = effective
        self._name = (
            f"tfidf-svd:{self.VERSION}:{effective}:{self.seed}:{self.min_df}:{self.max_features}:"
            f"{digest.hexdigest()[:FINGERPRINT_LEN]}"
        )
        return self

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> FloatMatrix:
        """Embed ``texts``: float32 ``(len(texts), dim)``, unit rows or all-zero rows (no known term)."""
        check_kind(kind)
        if not self.fitted:
            raise NotFittedError(_NOT_FITTED)
        items = check_texts(texts, "TfidfEmbedder.encode")
        if not items:
            return np.zeros((0, self._dim), dtype=np.float32)
        # scikit-learn's vectorizer and SVD transform, bit for bit, without importing it
        return unit_rows(tfidf_rows(items, self._vocabulary, self._idf) @ self._projection)

    # -- the fitted state as files (no pickle) ------------------------------------------------------

    _STATE = "tfidf_state.json"

    def save_fitted(self, folder: Path) -> None:
        """Write the fitted state into ``folder``: the vocabulary and settings as JSON, the idf
        weights and the SVD basis as ``.npy``. :meth:`load_fitted` restores an embedder that encodes
        bit for bit the same and has the same :attr:`name`."""
        if not self.fitted:
            raise NotFittedError(_NOT_FITTED)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {
            "version": self.VERSION,
            "name": self.name,
            "dim": self._dim,
            "settings": {
                "dim": self.requested_dim,
                "seed": self.seed,
                "min_df": self.min_df,
                "max_features": self.max_features,
            },
            "vocabulary": self._vocabulary,
        }
        (folder / self._STATE).write_text(json.dumps(state, sort_keys=True), encoding="utf-8")
        np.save(folder / "idf.npy", self._idf, allow_pickle=False)
        # the basis as fitted (dim x terms, C order), the same bytes as before the transposed copy
        np.save(folder / "components.npy", np.ascontiguousarray(self._projection.T), allow_pickle=False)

    @classmethod
    def load_fitted(cls, folder: Path) -> TfidfEmbedder:
        """An embedder restored from :meth:`save_fitted` files (ValueError if they do not fit);
        scikit-learn is not imported."""
        folder = Path(folder)
        state = json.loads((folder / cls._STATE).read_text(encoding="utf-8"))
        if state.get("version") != cls.VERSION:
            raise ValueError(
                f"{folder}: TF-IDF state version {state.get('version')!r} is not {cls.VERSION!r}"
            )
        embedder = cls(**state["settings"])
        vocabulary = {str(term): int(column) for term, column in state["vocabulary"].items()}
        idf = np.load(folder / "idf.npy", allow_pickle=False)
        components = np.load(folder / "components.npy", allow_pickle=False)
        if components.shape != (state["dim"], len(vocabulary)) or idf.shape != (len(vocabulary),):
            raise ValueError(
                f"{folder}: idf of shape {idf.shape} or SVD basis of shape {components.shape} does not "
                "fit the saved state"
            )
        embedder._vocabulary = vocabulary
        embedder._idf = idf
        embedder._projection = np.ascontiguousarray(components.T)
        embedder._dim = int(state["dim"])
        embedder._name = str(state["name"])
        return embedder

    def __repr__(self) -> str:
        state = f"dim={self._dim}" if self.fitted else f"requested_dim={self.requested_dim}, unfitted"
        return f"TfidfEmbedder({state}, seed={self.seed}, min_df={self.min_df}, max_features={self.max_features})"
