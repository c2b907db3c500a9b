"""BM25 over the project's tokenizer (:func:`retrievers.text.tokenize`), scored by bm25s.

``BM25Index`` wraps ``bm25s`` (sparse, precomputed per-term document scores) so the same text
always becomes the same terms for documents and queries, and vocabulary ids are assigned
deterministically (sorted terms), which makes saved indexes byte-reproducible. Results follow the
ranking order (score desc, row asc); documents matching no query term are left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import numpy.typing as npt

from retrievers.ranking import check_mask, check_positive_int, top_k_1d
from retrievers.text import WORD_PATTERN, check_stemmer, check_texts, progress, stopword_set, tokenize

__all__ = ["BM25_METHODS", "BM25Index"]

_TOKENIZE_CHUNK = 2000  # documents per tokenize() call while a progress bar is shown


def _progress_bar(total: int, desc: str) -> Any:
    """A labelled tqdm bar on stderr, or None where tqdm is not installed (it comes with
    sentence-transformers; this library does not require it)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="doc", dynamic_ncols=True)


Float32Array = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]
Hits = list[tuple[Float32Array, IndexArray]]


# --------------------------------------------------------------------------------------------

#: bm25s scoring variants (Kamphuis et al., ECIR 2020). With N documents, df documents holding the
#: term, tf its count in a document of length dl, and avgdl the mean length:
#:   lucene:    idf = ln(1 + (N - df + 0.5) / (df + 0.5));  tfc = tf / (tf + k1 * (1 - b + b * dl / avgdl))
#:   robertson: idf = ln(max(1, (N - df + 0.5) / (df + 0.5)));  tfc as lucene
#:   atire:     idf = ln(N / df);  tfc = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
#:   bm25l:     idf = ln((N + 1) / (df + 0.5));  c = tf / (1 - b + b * dl / avgdl);
#:              tfc = (k1 + 1) * (c + delta) / (k1 + c + delta)
#:   bm25+:     idf = ln((N + 1) / df);  tfc = tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)) + delta
#: A document's score is the sum over query terms (repeats counted) of idf * tfc.
BM25_METHODS = ("robertson", "atire", "lucene", "bm25l", "bm25+")

_PARAMS_FILE = "bm25_index.json"
_FORMAT = "viking_eval.retrievers.BM25Index"
_FORMAT_VERSION = 1


def _check_bm25_params(
    k1: object, b: object, method: object, delta: object, stopwords: str | None, stemmer: str | None
) -> dict[str, object]:
    """Validated parameters as the dict stored in ``BM25Index.params``."""
    if isinstance(k1, bool) or not isinstance(k1, int | float) or not (math.isfinite(k1) and k1 > 0):
        raise ValueError(f"k1 must be a finite number > 0, got {k1!r}")
    if isinstance(b, bool) or not isinstance(b, int | float) or not 0.0 <= b <= 1.0:
        raise ValueError(f"b must be in [0, 1], got {b!r}")
    if method not in BM25_METHODS:
        raise ValueError(f"method must be one of {list(BM25_METHODS)}, got {method!r}")
    if (
        isinstance(delta, bool)
        or not isinstance(delta, int | float)
        or not (math.isfinite(delta) and delta >= 0)
    ):
        raise ValueError(f"delta must be a finite number >= 0, got {delta!r}")
    stopword_set(stopwords)
    check_stemmer(stemmer)
    return {
        "k1": float(k1),
        "b": float(b),
        "method": method,
        "delta": float(delta),
        "stopwords": stopwords,
        "stemmer": stemmer,
        "token_pattern": WORD_PATTERN,
    }


class BM25Index:
    """BM25 over :func:`tokenize` terms, scored by bm25s's precomputed sparse index.

    bm25s stores, for every (term, document) pair, the document's score contribution in a CSC
    matrix (one column per term), so a query's scores are the sum of a few columns: no loop over
    documents. Build with :meth:`build`; ``params`` holds every setting that changes scores.
    """

    def __init__(self, model: Any, params: dict[str, object], size: int) -> None:
        """Wrap a built or loaded ``bm25s.BM25``; use :meth:`build` or :meth:`load` instead."""
        self._model = model
        self.params: dict[str, object] = dict(params)
        stopwords, stemmer = params["stopwords"], params["stemmer"]
        self._stopwords: str | None = stopwords if isinstance(stopwords, str) else None
        self._stemmer: str | None = stemmer if isinstance(stemmer, str) else None
        self.size: int = size
        self._vocab: dict[str, int] = model.vocab_dict
        self._indptr: npt.NDArray[np.integer[Any]] = model.scores["indptr"]
        self._indices: npt.NDArray[np.integer[Any]] = model.scores["indices"]

    @classmethod
    def build(
        cls,
        texts: Sequence[str],
        *,
        k1: float = 0.9,
        b: float = 0.4,
        method: str = "lucene",
        delta: float = 0.5,
        stopwords: str | None = "en",
        stemmer: str | None = "english",
        show_progress: bool = False,
    ) -> BM25Index:
        """Index ``texts`` (row i = document i).

        Defaults k1=0.9, b=0.4 with Lucene idf are Pyserini's BEIR "flat" settings. ``k1 > 0``,
        ``0 <= b <= 1``, ``method`` in ``BM25_METHODS``, ``delta >= 0`` (used by bm25l/bm25+ only).
        At least one document must keep a term after tokenization. ``show_progress``: one
        labelled bar on stderr, ``bm25 index (<n> docs)``, instead of bm25s's own.
        """
        params = _check_bm25_params(k1, b, method, delta, stopwords, stemmer)
        items = check_texts(texts, "texts")
        if not items:
            raise ValueError("texts must hold at least 1 document, got 0")
        bar = _progress_bar(len(items), f"bm25 index ({len(items):,} docs)") if show_progress else None
        if bar is None:
            corpus_tokens = tokenize(items, stopwords=stopwords, stemmer=stemmer)
        else:  # in chunks, for the bar's steps: the terms are those of one call
            corpus_tokens = []
            for begin in range(0, len(items), _TOKENIZE_CHUNK):
                chunk = items[begin : begin + _TOKENIZE_CHUNK]
                corpus_tokens += tokenize(chunk, stopwords=stopwords, stemmer=stemmer)
                bar.update(len(chunk))
            bar.set_postfix_str("scoring")
        vocabulary = sorted({term for terms in corpus_tokens for term in terms})
        if not vocabulary:
            raise ValueError(
                "no document has an indexable term after tokenization (words of 2+ characters that "
                "are not stopwords); cannot build a BM25 index"
            )
        vocab = {term: i for i, term in enumerate(vocabulary)}
        corpus_ids = [[vocab[term] for term in terms] for terms in corpus_tokens]
        model = bm25s.BM25(
            k1=float(k1),
            b=float(b),
            delta=float(delta),
            method=method,
            dtype="float32",
            int_dtype="int32",
            backend="numpy",
            csc_backend="numpy",
        )
        # A (token ids, vocabulary) tuple is bm25s's input for pre-tokenized corpora: the
        # vocabulary ids stay ours (sorted terms), so saved indexes are byte-reproducible.
        model.index((corpus_ids, vocab), create_empty_token=False, show_progress=False)
        if bar is not None:
            bar.close()
        return cls(model, params, len(items))

    def _term_ids(self, terms: Sequence[str]) -> list[int]:
        """Vocabulary ids of the known ``terms`` (unknown terms score nothing; repeats kept)."""
        return [self._vocab[term] for term in terms if term in self._vocab]

    def _scores_from_ids(self, term_ids: list[int]) -> Float32Array:
        if not term_ids:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._model.get_scores_from_ids(term_ids), dtype=np.float32)

    def _tokenize(self, texts: Sequence[str], show_progress: bool = False) -> list[list[str]]:
        return tokenize(texts, stopwords=self._stopwords, stemmer=self._stemmer, show_progress=show_progress)

    def scores(self, query: str) -> Float32Array:
        """BM25 score of ``query`` for every document: ``(size,)`` float32.

        Documents holding no query term score 0 with robertson/atire/lucene; bm25l and bm25+ give
        them a constant floor (sum over query terms of idf * tfc(tf=0)).
        """
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {type(query).__name__}")
        return self._scores_from_ids(self._term_ids(self._tokenize([query])[0]))

    def search(
        self,
        queries: Sequence[str],
        k: int,
        *,
        mask: npt.ArrayLike | None = None,
        show_progress: bool = False,
    ) -> Hits:
        """Top ``k`` documents per query by (score desc, row index asc).

        Only documents containing at least one query term are candidates (with the default
        lucene method these are exactly the documents with a score > 0), so a query whose terms
        are all stopwords or unknown gets an empty result. ``mask`` (bool, ``size``) further
        restricts candidates to True entries. Returns one ``(scores float32, indices int64)``
        pair per query, each of length ``min(k, candidates)``.
        """
        k = check_positive_int(k, "k")
        items = check_texts(queries, "queries")
        allowed = None if mask is None else check_mask(mask, self.size)
        results: Hits = []
        for terms in progress(self._tokenize(items), len(items), "bm25 search", show_progress):
            term_ids = self._term_ids(terms)
            if not term_ids:
                results.append((np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64)))
                continue
            matched = np.zeros(self.size, dtype=np.bool_)
            for term_id in term_ids:
                matched[self._indices[self._indptr[term_id] : self._indptr[term_id + 1]]] = True
            if allowed is not None:
                matched &= allowed
            top_scores, top_index = top_k_1d(self._scores_from_ids(term_ids), k, mask=matched)
            results.append((top_scores.astype(np.float32, copy=False), top_index))
        return results

    def save(self, folder: Path) -> None:
        """Write the index into ``folder`` (created if needed): bm25s's own files (``.npy`` arrays,
        JSON vocabulary and parameters) plus ``bm25_index.json`` with our parameters. No pickle."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._model.save(str(folder), show_progress=False)
        meta = {"format": _FORMAT, "version": _FORMAT_VERSION, "size": self.size, "params": self.params}
        (folder / _PARAMS_FILE).write_text(
            json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> BM25Index:
        """Read an index written by :meth:`save`; with ``mmap`` the score arrays are memory-mapped
        read-only instead of loaded. Scores equal those of the saved index exactly."""
        folder = Path(folder)
        meta_path = folder / _PARAMS_FILE
        if not meta_path.is_file():
            raise ValueError(f"{folder} is not a saved BM25Index (missing {_PARAMS_FILE})")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != _FORMAT or meta.get("version") != _FORMAT_VERSION:
            raise ValueError(
                f"{meta_path}: format {meta.get('format')!r} version {meta.get('version')!r} is not "
                f"{_FORMAT!r} version {_FORMAT_VERSION}; rebuild the index"
            )
        saved = meta["params"]
        params = _check_bm25_params(
            saved["k1"], saved["b"], saved["method"], saved["delta"], saved["stopwords"], saved["stemmer"]
        )
        if params != saved:
            raise ValueError(
                f"{meta_path}: parameters {saved} do not match this version's tokenizer ({params})"
            )
        model = bm25s.BM25.load(str(folder), mmap=bool(mmap), load_corpus=False, show_progress=False)
        for key in ("k1", "b", "method", "delta"):
            found = _model_value(model, key)
            if found != params[key]:
                raise ValueError(
                    f"{folder}: bm25s files say {key}={found!r}, {_PARAMS_FILE} says {params[key]!r}"
                )
        size = int(meta["size"])
        if int(model.scores["num_docs"]) != size:
            raise ValueError(
                f"{folder}: bm25s files hold {model.scores['num_docs']} documents, expected {size}"
            )
        return cls(model, params, size)


def _model_value(model: Any, key: str) -> object:
    """A scoring parameter of a ``bm25s.BM25`` (floats as float, for comparison with params)."""
    value = getattr(model, key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
