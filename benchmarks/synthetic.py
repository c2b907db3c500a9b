"""Synthetic corpora for the scale benchmarks: token documents, clustered vectors, a context tree.

No public dataset here reaches 1M documents, so the growth and store benchmarks make their own,
deterministically (the same ``n`` and seed give the same corpus, and any range of rows is the
same whatever the chunking):

* **Token documents** (:func:`token_documents`): ids ``d0000000``, ``d0000001``, ... (sorted as
  strings in row order); each text is 100-200 words (uniform; 150 on average) drawn from a Zipf
  law (``p(rank r) ~ 1 / (r + 2.7)``, Mandelbrot's form of natural text's word frequencies) over
  a vocabulary of 50,000 pseudo-words made of consonant-vowel syllables (``ba``, ``keto``,
  ``mivusa``, ...; a few are English stopwords such as ``to``, and stemming merges a few), so
  the BM25 postings have natural lengths: the commonest term is in almost every document, term
  1,000 in ~1%. A document gets a 3-8 word title and ``{"source": "synthetic", "group": g}``
  metadata when ``with_titles`` is set.
* **Queries** (:func:`token_queries`): 4 words each from the same law restricted to ranks >= 50
  (people do not search for the commonest words).
* **Vectors** (:func:`clustered_vectors`, from ``test_bench_ann.py``): 384-d float32, ``n / 1000``
  unit gaussian centres (at least 16), each row a centre plus ``0.05 N(0, I)`` noise,
  L2-normalised.
* **A context tree** (:func:`tree_nodes`): the shape of the k-means tree (directories of at most
  32 leaves, branching 8) over rows in order, with extractive-looking texts: a directory's
  abstract is its first three documents' titles and eight words (~150 characters), its overview
  ten titles and 24 words (~500), a leaf's abstract its title; directory records are unit
  random vectors. Only for timing loads: building the real k-means tree is what
  ``growth.py`` measures.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import cache
from operator import itemgetter

import numpy as np
from test_bench_ann import DIM, clustered_vectors

__all__ = [
    "DIM",
    "VOCABULARY",
    "clustered_vectors",
    "doc_id",
    "token_documents",
    "token_queries",
    "token_texts",
    "tree_nodes",
    "vocabulary",
]

VOCABULARY = 50_000
CHUNK = 10_000  # documents per generator: any row range is the same however it is cut
_CONSONANTS = "bcdfghjklmnprstvwxyz"  # 20
_VOWELS = "aeiou"  # 5


@cache
def vocabulary() -> tuple[str, ...]:
    """The pseudo-words, commonest first: word ``i`` spells ``i`` in base 100, one
    consonant-vowel syllable per digit (``ba`` is 0; every word is distinct)."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    words = []
    for i in range(VOCABULARY):
        digits = [i % 100]
        rest = i // 100
        while rest:
            digits.append(rest % 100)
            rest //= 100
        words.append("".join(syllables[d] for d in reversed(digits)))
    return tuple(words)


@cache
def _cdf(first_rank: int = 0) -> np.ndarray:
    ranks = np.arange(VOCABULARY, dtype=np.float64)
    weights = 1.0 / (ranks + 2.7)
    weights[:first_rank] = 0.0
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _draw(rng: np.random.Generator, size: int, first_rank: int = 0) -> np.ndarray:
    ids = np.searchsorted(_cdf(first_rank), rng.random(size), side="right")
    return np.minimum(ids, VOCABULARY - 1)


def doc_id(row: int) -> str:
    return f"d{row:07d}"


def token_texts(start: int, stop: int, *, seed: int = 0) -> Iterator[str]:
    """The texts of rows ``start:stop`` (see the module docstring)."""
    for text, _ in _rows(start, stop, seed=seed, titles=False):
        yield text


def _rows(start: int, stop: int, *, seed: int, titles: bool) -> Iterator[tuple[str, str]]:
    words = [word + " " for word in vocabulary()]
    chunks = range(start // CHUNK, (stop - 1) // CHUNK + 1) if stop > start else range(0)
    for chunk in chunks:
        rng = np.random.default_rng([seed, 2, chunk])
        lengths = rng.integers(100, 201, CHUNK)
        ids = _draw(rng, int(lengths.sum()))
        title_lengths = rng.integers(3, 9, CHUNK)
        title_ids = _draw(rng, int(title_lengths.sum()), first_rank=50)
        ends = np.cumsum(lengths)
        title_ends = np.cumsum(title_lengths)
        lo = chunk * CHUNK
        for row in range(max(start, lo), min(stop, lo + CHUNK)):
            i = row - lo
            picked = ids[ends[i] - lengths[i] : ends[i]].tolist()
            text = "".join(itemgetter(*picked)(words)).rstrip()
            title = ""
            if titles:
                picked = title_ids[title_ends[i] - title_lengths[i] : title_ends[i]].tolist()
                title = "".join(itemgetter(*picked)(words)).rstrip().capitalize()
            yield text, title


def token_documents(start: int, stop: int, *, seed: int = 0, with_titles: bool = True) -> Iterator[object]:
    """``retrievers.Document`` values for rows ``start:stop`` (imported lazily, so the module
    can be used with an older checkout of the library on ``PYTHONPATH``)."""
    from retrievers.types import Document

    for row, (text, title) in enumerate(_rows(start, stop, seed=seed, titles=with_titles), start=start):
        metadata = {"source": "synthetic", "group": f"g{row % 100:02d}"} if with_titles else {}
        yield Document(id=doc_id(row), text=text, title=title, metadata=metadata)


def token_queries(n_queries: int, *, seed: int = 0) -> list[str]:
    """``n_queries`` queries of 4 words (ranks >= 50 of the same law)."""
    rng = np.random.default_rng([seed, 3])
    words = vocabulary()
    ids = _draw(rng, 4 * n_queries, first_rank=50).reshape(n_queries, 4)
    return [" ".join(words[i] for i in row) for row in ids.tolist()]


def tree_nodes(
    n_rows: int, *, seed: int = 0, root: str = "viking://resources"
) -> tuple[list[object], np.ndarray]:
    """The nodes of a k-means-shaped tree over rows ``0..n_rows-1`` (see the module docstring)
    and one record vector per directory (level 0, in node order of creation)."""
    from retrievers.types import ContextNode

    documents = token_documents(0, n_rows, seed=seed)
    titles = [doc.title for doc in documents]  # type: ignore[attr-defined]
    words = vocabulary()
    rng = np.random.default_rng([seed, 4])
    nodes: list[object] = []

    def directory(uri: str, parent: str | None, lo: int, hi: int, depth: int) -> None:
        terms = " ".join(words[i] for i in rng.integers(50, 5000, 24).tolist())
        nodes.append(
            ContextNode(
                uri=uri,
                level=0,
                parent_uri=parent,
                abstract="; ".join(titles[lo : lo + 3]) + ". Key terms: " + " ".join(terms.split()[:8]) + ".",
                content="; ".join(titles[lo : lo + 10]) + ". Key terms: " + terms + ".",
                metadata={"n_documents": hi - lo, "depth": depth},
            )
        )
        if hi - lo <= 32:
            for row in range(lo, hi):
                nodes.append(
                    ContextNode(
                        uri=f"{uri}/{doc_id(row)}",
                        level=2,
                        parent_uri=uri,
                        abstract=titles[row],
                        doc_id=doc_id(row),
                    )
                )
            return
        k = min(8, math.ceil((hi - lo) / 32))
        step = math.ceil((hi - lo) / k)
        for index, begin in enumerate(range(lo, hi, step)):
            directory(f"{uri}/c{index}", uri, begin, min(hi, begin + step), depth + 1)

    directory(root, None, 0, n_rows, 0)
    n_directories = sum(1 for node in nodes if node.level != 2)  # type: ignore[attr-defined]
    vectors = rng.standard_normal((n_directories, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return nodes, vectors
