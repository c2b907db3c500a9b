"""What a saved vector index must have been built over: :func:`vectors_fingerprint` of the
embeddings, kept in ``index.json`` (:mod:`retrievers.index.ann`) and compared when the file is
loaded."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

__all__ = ["vectors_fingerprint"]

#: rows of the embeddings an index file's fingerprint reads (:func:`vectors_fingerprint`)
_FINGERPRINT_ROWS = 1024


def vectors_fingerprint(vectors: npt.ArrayLike) -> str:
    """What an index file must have been built over: sha256 of the matrix's shape and of up to
    :data:`_FINGERPRINT_ROWS` rows spread evenly over it (the first and last included), so a
    file built over another corpus with as many rows of the same width is told apart without
    reading every row of a large matrix."""
    matrix = np.asarray(vectors)
    n_rows = int(matrix.shape[0])
    picked = np.unique(
        np.linspace(0, max(n_rows - 1, 0), num=min(n_rows, _FINGERPRINT_ROWS)).astype(np.int64)
    )
    digest = hashlib.sha256(f"{matrix.shape}".encode())
    digest.update(np.ascontiguousarray(matrix[picked], dtype=np.float32).tobytes())
    return digest.hexdigest()
