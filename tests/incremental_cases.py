"""Shared helpers of the incremental-store tests: a deterministic embedder and a synthetic corpus
(a helper module of tests/test_incremental*.py, not a conftest fixture)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from retrievers import Document

WORDS = [
    "apple",
    "banana",
    "cherry",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
    "the",
    "and",
    "of",
    "running",
    "runs",
]


class HashEmbedder:
    """Static vectors: each word hashes to a signed unit in 32 dimensions; rows L2-normalised.
    The same text always gives the same vector, whatever else is embedded with it."""

    name = "hash-embedder-32"
    dim = 32

    def encode(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                code = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
                out[i, code % self.dim] += 1.0 if (code >> 8) & 1 else -1.0
            out[i, (i * 0) + 1] += 0.25  # never a zero row
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / norms


def make_doc(rng: np.random.Generator, number: int, *, version: int = 0) -> Document:
    """A document of 2-16 words (some texts have only stopwords), in one of 3 conversations."""
    size = int(rng.integers(2, 17))
    text = " ".join(rng.choice(WORDS, size).tolist())
    return Document(
        f"d{number:05d}",
        text,
        title="" if number % 4 else f"title {number} v{version}",
        metadata={"conv": f"c{number % 3}", "turn": number, "date": f"2024-01-{1 + number % 28:02d}"},
    )
