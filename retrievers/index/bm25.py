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
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Literal

import bm25s
import numpy as np
import numpy.typing as npt

from retrievers.index.bm25_counts import TermCounts, score_counts
from retrievers.progress import ShowProgress, open_bar
from retrievers.ranking import check_mask, check_positive_int
from retrievers.text import (
    WORD_PATTERN,
    TermIds,
    check_stemmer,
    check_texts,
    progress,
    stopword_set,
    tokenize,
)

__all__ = ["BM25_METHODS", "BM25Index"]


#: a query's candidates are found by merging its postings when they hold at most 1/32 of the
#: corpus (a sort of a few rows), else by marking them in a mask of the corpus
_MERGE_FACTOR = 32
#: ... and when they hold at least 1/4 of it, the top k is chosen among every row's score (one
#: argpartition over the corpus, as bm25s's users do), with a check that it only holds matches
_DENSE_FACTOR = 4

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
_TF_FILE = "tf.npy"  #: the term counts (TermCounts.tf), saved next to bm25s's files
_LENGTHS_FILE = "lengths.npy"  #: terms per row
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

    def __init__(
        self, model: Any, params: dict[str, object], size: int, counts: TermCounts | None = None
    ) -> None:
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
        #: term counts per (term, row) and row lengths (what :meth:`changed` recomputes scores
        #: from); None for an index saved before they were kept (a change then rebuilds it)
        self.counts: TermCounts | None = counts

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
        show_progress: ShowProgress = False,
    ) -> BM25Index:
        """Index ``texts`` (row i = document i).

        Defaults k1=0.9, b=0.4 with Lucene idf are Pyserini's BEIR "flat" settings. ``k1 > 0``,
        ``0 <= b <= 1``, ``method`` in ``BM25_METHODS``, ``delta >= 0`` (used by bm25l/bm25+ only).
        At least one document must keep a term after tokenization. ``show_progress``: one
        labelled bar, ``bm25 index (<n> docs)`` (:mod:`retrievers.progress`).

        Built in chunks (:func:`_build_counts`): texts become integer term ids chunk by chunk
        (:class:`~retrievers.text.TermIds`), each chunk is reduced to its (document, term,
        count) triples, the counts are filled term-major from those, and scored by
        :func:`~retrievers.index.bm25_counts.score_counts`, so memory never holds the corpus's
        tokens; the counts are kept (:attr:`counts`) so that :meth:`changed` is exact. ``texts`` may be any
        sequence (read a chunk at a time). The arrays are those bm25s's own ``index()``
        computes, value for value (tested), saved and loaded by bm25s.
        """
        params = _check_bm25_params(k1, b, method, delta, stopwords, stemmer)
        if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
            raise ValueError(
                f"texts must be a sequence of strings (not a single string), got {type(texts).__name__}"
            )
        if not len(texts):
            raise ValueError("texts must hold at least 1 document, got 0")
        bar = open_bar(show_progress, len(texts), f"bm25 index ({len(texts):,} docs)", "doc")
        with bar if bar is not None else nullcontext():
            counts = _build_counts(texts, params, bar=bar)
        return cls.from_counts(counts, params)

    @classmethod
    def from_counts(cls, counts: TermCounts, params: dict[str, object]) -> BM25Index:
        """The index of ``counts`` (scored by :func:`score_counts`: the arrays a fresh build of
        the same texts holds, bit for bit)."""
        data, nonoccurrence = score_counts(counts, params)
        model = bm25s.BM25(
            k1=float(params["k1"]),  # type: ignore[arg-type]
            b=float(params["b"]),  # type: ignore[arg-type]
            delta=float(params["delta"]),  # type: ignore[arg-type]
            method=params["method"],
            dtype="float32",
            int_dtype="int32",
            backend="numpy",
            csc_backend="numpy",
        )
        model.scores = {
            "data": data,
            "indices": counts.rows,
            "indptr": counts.indptr,
            "num_docs": counts.n_rows,
        }
        model.vocab_dict = dict(zip(counts.terms, range(len(counts.terms)), strict=True))
        model.nonoccurrence_array = nonoccurrence
        model.unique_token_ids_set = None  # used only by bm25s's own retrieve(), never here
        return cls(model, params, counts.n_rows, counts)

    def changed(self, keep: npt.ArrayLike, new_rows: npt.ArrayLike, texts: Sequence[str]) -> BM25Index:
        """A new index (this one is left as it is): the rows where ``keep`` is True stay, in
        order, and ``texts`` are added as rows ``new_rows`` of the result (the kept rows fill the
        others, in order). Every score is recomputed from the counts with the new N, document
        frequencies and mean length (:mod:`retrievers.index.bm25_counts`), so the result equals
        :meth:`build` over the resulting texts bit for bit; only ``texts`` are tokenized. An index
        loaded without counts (saved by an older version) cannot change: ValueError."""
        if self.counts is None:
            raise ValueError(
                "this BM25 index was saved without its term counts (tf.npy, lengths.npy; an older "
                "version); it cannot be changed in place: rebuild it from the documents"
            )
        kept = np.asarray(keep, dtype=np.bool_)
        if kept.shape != (self.size,):
            raise ValueError(f"keep has shape {kept.shape}, expected ({self.size},)")
        items = list(texts)
        rows = np.asarray(new_rows, dtype=np.int64).reshape(-1)
        if rows.size != len(items):
            raise ValueError(f"{rows.size} new rows for {len(items)} texts")
        total = int(kept.sum()) + len(items)
        if rows.size and (rows.min() < 0 or rows.max() >= total):
            raise ValueError(f"new_rows must lie in [0, {total - 1}]")
        return self.from_counts(self.counts.changed(kept, rows, items, self.params, self._vocab), self.params)

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

        Cost: the query terms' postings, not the corpus. Scores are summed into a float32
        array term by term as bm25s sums them (the same values), the candidates are the union
        of the postings (merged when short, marked when long), and the top ``k`` is chosen
        among the candidates only. Each query is answered alone, so a batch equals its
        queries one at a time.
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
            results.append(self._top_k(term_ids, k, allowed))
        return results

    def _top_k(
        self, term_ids: list[int], k: int, allowed: npt.NDArray[np.bool_] | None
    ) -> tuple[Float32Array, IndexArray]:
        """The top ``k`` candidates of one query (see :meth:`search`)."""
        starts = self._indptr[term_ids].tolist()
        ends = self._indptr[np.asarray(term_ids) + 1].tolist()
        data = self._model.scores["data"]
        postings = [self._indices[a:b] for a, b in zip(starts, ends, strict=True)]
        total = sum(end - start for start, end in zip(starts, ends, strict=True))
        # bm25s's sums: float32, term by term in query order (rows are distinct within a term)
        scores = np.zeros(self.size, dtype=np.float32)
        for rows, start, end in zip(postings, starts, ends, strict=True):
            np.add.at(scores, rows, data[start:end])
        nonoccurrence = self._model.nonoccurrence_array
        floor = np.float32(0.0)
        if nonoccurrence is not None:  # bm25l / bm25+: bm25s adds this floor to every document
            floor = nonoccurrence[np.asarray(term_ids, dtype=np.int32)].sum()
            scores += floor
        if total * _DENSE_FACTOR >= self.size and k < self.size:
            found = self._top_k_dense(scores, k, allowed, floor)
            if found is not None:
                return found
        if len(set(term_ids)) == 1:
            candidates = np.asarray(postings[0], dtype=np.int64)
        elif total * _MERGE_FACTOR <= self.size:  # few postings: merge them (runs are sorted)
            merged = np.sort(np.concatenate(postings), kind="stable")
            keep = np.empty(merged.size, dtype=np.bool_)
            keep[:1] = True
            np.not_equal(merged[1:], merged[:-1], out=keep[1:])
            candidates = merged[keep].astype(np.int64)
        else:
            matched = np.zeros(self.size, dtype=np.bool_)
            for rows in postings:
                matched[rows] = True
            candidates = np.flatnonzero(matched)
        if allowed is not None:
            candidates = candidates[allowed[candidates]]
        values = scores[candidates]
        if candidates.size > k:
            kth = values[np.argpartition(-values, k - 1)[k - 1]]
            best = values >= kth  # ties with the k-th score are all kept: the row decides below
            candidates, values = candidates[best], values[best]
        order = np.lexsort((candidates, -values))[:k]
        return values[order].astype(np.float32, copy=False), candidates[order].astype(np.int64, copy=False)

    @staticmethod
    def _top_k_dense(
        scores: Float32Array, k: int, allowed: npt.NDArray[np.bool_] | None, floor: np.float32
    ) -> tuple[Float32Array, IndexArray] | None:
        """Many postings: the top ``k`` among every row's score, as bm25s + argpartition
        chooses, or None when that cannot be the candidates' top ``k``.

        A row that matched no term scores the floor exactly (0, or bm25l/bm25+'s constant), so
        when the k-th best score is above the floor every row at or above it matched a term.
        Rows tying with the k-th score outside the partition's k are re-admitted (a count of
        the ties tells whether there are any), so the row decides ties as everywhere."""
        work = scores if allowed is None else np.where(allowed, scores, np.float32(-np.inf))
        top = np.argpartition(-work, k - 1)[:k]  # on the negated scores: fast with many equal floors
        values = work[top]
        kth = values.min()
        if not kth > floor:
            return None
        if np.count_nonzero(work == kth) > np.count_nonzero(values == kth):
            top = np.union1d(top[values > kth], np.flatnonzero(work == kth))
            values = work[top]
        order = np.lexsort((top, -values))[:k]
        return values[order].astype(np.float32, copy=False), top[order].astype(np.int64, copy=False)

    def save(self, folder: Path) -> None:
        """Write the index into ``folder`` (created if needed): bm25s's own files (``.npy`` arrays,
        JSON vocabulary and parameters) plus ``bm25_index.json`` with our parameters. No pickle."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._model.save(str(folder), show_progress=False)
        if self.counts is not None:
            np.save(folder / _TF_FILE, np.ascontiguousarray(self.counts.tf), allow_pickle=False)
            np.save(folder / _LENGTHS_FILE, np.ascontiguousarray(self.counts.lengths), allow_pickle=False)
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
        counts = None
        if (folder / _TF_FILE).is_file() and (folder / _LENGTHS_FILE).is_file():
            mode: Literal["r"] | None = "r" if mmap else None
            tf = np.load(folder / _TF_FILE, mmap_mode=mode, allow_pickle=False)
            lengths = np.load(folder / _LENGTHS_FILE, mmap_mode=mode, allow_pickle=False)
            indices = model.scores["indices"]
            if tf.shape != indices.shape or lengths.shape != (size,):
                raise ValueError(
                    f"{folder}: {_TF_FILE} / {_LENGTHS_FILE} have shapes {tf.shape} / {lengths.shape}, "
                    f"expected {indices.shape} / ({size},); rebuild the index"
                )
            by_id = sorted(model.vocab_dict.items(), key=lambda item: item[1])
            counts = TermCounts(
                terms=tuple(term for term, _ in by_id),
                indptr=np.asarray(model.scores["indptr"], dtype=np.int64),
                rows=indices,
                tf=tf,
                lengths=lengths,
            )
        return cls(model, params, size, counts)


def _model_value(model: Any, key: str) -> object:
    """A scoring parameter of a ``bm25s.BM25`` (floats as float, for comparison with params)."""
    value = getattr(model, key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


_BUILD_CHUNK = 8192  # documents tokenized and reduced at a time


def _build_counts(texts: Sequence[str], params: dict[str, object], *, bar: Any = None) -> TermCounts:
    """The term counts of ``texts`` (:class:`~retrievers.index.bm25_counts.TermCounts`: terms
    sorted, each term's rows ascending), built in chunks of documents.

    Pass 1 turns each chunk into term ids (ids of first appearance) and keeps only its distinct
    (document, term) pairs with their counts (8 bytes a pair; the final index is 8 bytes a
    pair too). Pass 2 renumbers terms in sorted order and scatters each chunk's counts into the
    column-major (CSC) arrays, each term's documents ascending, freeing the chunk's pairs as it
    goes. Scores are computed from the counts by :func:`score_counts`.
    """
    encoder = TermIds(stopwords=params["stopwords"], stemmer=params["stemmer"])  # type: ignore[arg-type]
    n_docs = len(texts)
    lengths = np.empty(n_docs, dtype=np.int64)
    chunks: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32]]] = []
    for begin in range(0, n_docs, _BUILD_CHUNK):
        stop = min(n_docs, begin + _BUILD_CHUNK)
        ids, counts = encoder.encode([texts[i] for i in range(begin, stop)], first=begin)
        lengths[begin:stop] = counts
        owner = np.repeat(np.arange(stop - begin, dtype=np.int64), counts)
        pairs, tf = np.unique((owner << 32) | ids.astype(np.int64), return_counts=True)
        chunks.append(
            (
                (pairs & 0xFFFFFFFF).astype(np.int32),  # term (first-appearance id)
                tf.astype(np.int32),
                np.bincount((pairs >> 32).astype(np.int64), minlength=stop - begin).astype(np.int32),
            )
        )
        if bar is not None:
            bar.update(stop - begin)
    n_terms = len(encoder.terms)
    if n_terms == 0:
        raise ValueError(
            "no document has an indexable term after tokenization (words of 2+ characters that "
            "are not stopwords); cannot build a BM25 index"
        )
    if bar is not None:
        bar.set_postfix_str("scoring")
    terms = encoder.terms
    order = sorted(range(n_terms), key=terms.__getitem__)
    renumber = np.empty(n_terms, dtype=np.int64)
    renumber[np.asarray(order, dtype=np.int64)] = np.arange(n_terms)
    sorted_names = tuple(terms[old] for old in order)
    del encoder, terms, order
    doc_freq = np.zeros(n_terms, dtype=np.int64)
    for first_ids, _, _ in chunks:
        doc_freq += np.bincount(renumber[first_ids], minlength=n_terms)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(doc_freq, out=indptr[1:])
    nnz = int(indptr[-1])
    tf_out = np.empty(nnz, dtype=np.int32)
    indices = np.empty(nnz, dtype=np.int32)
    heads = indptr[:-1].copy()
    first_doc = 0
    while chunks:
        term_old, tf_counts, per_doc = chunks.pop(0)  # freed as the index fills
        term: IndexArray = renumber[term_old]
        docs = first_doc + np.repeat(np.arange(per_doc.size, dtype=np.int64), per_doc)
        first_doc += per_doc.size
        if not term.size:  # no document of the chunk kept a term
            continue
        by_term = np.argsort(term, kind="stable")  # documents stay ascending within a term
        sorted_terms = term[by_term]
        starts = np.flatnonzero(np.concatenate(([True], sorted_terms[1:] != sorted_terms[:-1])))
        sizes = np.diff(np.append(starts, sorted_terms.size))
        rank = np.arange(sorted_terms.size) - np.repeat(starts, sizes)
        positions = heads[sorted_terms] + rank
        tf_out[positions] = tf_counts[by_term]
        indices[positions] = docs[by_term]
        heads[sorted_terms[starts]] += sizes
    return TermCounts(terms=sorted_names, indptr=indptr, rows=indices, tf=tf_out, lengths=lengths)
