"""BM25's raw counts and the scoring from them: what keeps an incremental index exact.

:class:`TermCounts` is a BM25 index before scoring: for every term (sorted, as the vocabulary
ids are) the rows holding it, ascending, with the term's count in each (CSC, the very layout of
bm25s's score matrix: ``rows`` is its ``indices`` array), and every row's length in terms.
:func:`score_counts` turns counts into bm25s's score arrays with bm25s's formulas; a fresh build
(:meth:`retrievers.index.BM25Index.build`) and a changed index (:meth:`TermCounts.changed`)
both go through it, so the global statistics (N, document frequencies, avgdl) are recomputed on
every change and a changed index holds the same float32 scores as a fresh build of the same
texts, bit for bit: every score is an element-wise function of (term, count, row length) and of
the global statistics, computed by the same numpy operations in any order.

A change does not re-read the index's texts: the kept rows' counts are renumbered (rows shift
when ids are inserted in the middle: the store's rows are sorted by id), the new texts are
tokenized alone, and the two sorted runs are merged (no sort of the whole index). Scoring every
pair again costs a few vectorised passes over the index (no tokenizing): the "merge on demand" of
Lucene's segments, done at every change.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.text import TermIds

__all__ = ["TermCounts", "encode_pairs", "idf", "score_counts"]

Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]

#: pairs scored at a time: float64 temporaries of 512 KiB, reused from the heap block after
#: block and near the cache (a block of 4M pairs made every temporary a fresh 32 MB mapping,
#: whose page faults cost more system time than the arithmetic)
_SCORE_BLOCK = 1 << 16


@dataclass(frozen=True)
class TermCounts:
    """Term counts of an index in CSC form (see the module docstring)."""

    terms: tuple[str, ...]  #: sorted; term id = position
    indptr: IntArray  #: (n_terms + 1,) where each term's run starts
    rows: Int32Array  #: (nnz,) the row of each pair, ascending within a term
    tf: Int32Array  #: (nnz,) the term's count in that row
    lengths: IntArray  #: (n_rows,) terms per row (stopwords excluded)

    @property
    def n_rows(self) -> int:
        return int(self.lengths.shape[0])

    def doc_freq(self) -> IntArray:
        return np.diff(self.indptr).astype(np.int64)

    def changed(
        self,
        keep: npt.NDArray[np.bool_],
        new_rows: IntArray,
        texts: Sequence[str],
        params: dict[str, object],
        vocab: Mapping[str, int] | None = None,
    ) -> TermCounts:
        """The counts after a change: the rows where ``keep`` is True stay (in order), the
        ``texts`` are added, and ``new_rows[i]`` is the row of ``texts[i]`` in the result (the
        kept rows fill the other rows, in order). Terms no row holds any more are dropped.
        ``vocab``: each of :attr:`terms` to its id, when the caller has it (else made here)."""
        if vocab is None:
            vocab = dict(zip(self.terms, range(len(self.terms)), strict=True))
        n_kept = int(np.count_nonzero(keep))
        n_total = n_kept + len(texts)
        is_new = np.zeros(n_total, dtype=np.bool_)
        is_new[new_rows] = True
        if np.count_nonzero(is_new) != len(texts):
            raise ValueError("new_rows must name distinct rows, one per new text")
        if n_kept == self.n_rows and np.array_equal(new_rows, np.arange(self.n_rows, n_total)):
            return self._appended(texts, params, vocab)
        kept_to = np.full(self.n_rows, -1, dtype=np.int64)
        kept_to[keep] = np.flatnonzero(~is_new)
        # the new texts' pairs
        new_term_local, new_row_local, new_tf, new_lengths, new_terms = encode_pairs(texts, params)
        union, old_map, new_map = _union(self.terms, vocab, new_terms)
        # the kept rows' pairs, renumbered (monotone: runs stay ascending), terms in the union
        old_term = np.repeat(old_map, self.doc_freq())
        old_rows = kept_to[self.rows]
        old_tf = self.tf
        alive = old_rows >= 0
        if not alive.all():
            old_term, old_rows, old_tf = old_term[alive], old_rows[alive], old_tf[alive]
        old_keys = (old_term << 32) | old_rows
        new_keys = (new_map[new_term_local] << 32) | np.asarray(new_rows, dtype=np.int64)[new_row_local]
        order = np.argsort(new_keys, kind="stable")
        new_keys, new_tf = new_keys[order], new_tf[order]
        # merge two sorted runs: the new pairs' places, then the old pairs fill the rest in order
        places = np.searchsorted(old_keys, new_keys) + np.arange(new_keys.size)
        total = old_keys.size + new_keys.size
        rows = np.empty(total, dtype=np.int32)
        tf = np.empty(total, dtype=np.int32)
        rows[places], tf[places] = new_keys & 0xFFFFFFFF, new_tf
        from_old = np.ones(total, dtype=np.bool_)
        from_old[places] = False
        rows[from_old], tf[from_old] = old_rows, old_tf
        df = np.bincount(old_term, minlength=len(union)) + np.bincount(new_keys >> 32, minlength=len(union))
        present = df > 0
        if not present.any():
            raise ValueError(
                "no document has an indexable term after tokenization (words of 2+ characters that "
                "are not stopwords); cannot build a BM25 index"
            )
        indptr = np.zeros(int(present.sum()) + 1, dtype=np.int64)
        np.cumsum(df[present], out=indptr[1:])
        lengths = np.empty(n_total, dtype=np.int64)
        lengths[~is_new] = self.lengths[keep]
        lengths[new_rows] = new_lengths
        return TermCounts(
            terms=tuple(itertools.compress(union, present.tolist())),
            indptr=indptr,
            rows=rows,
            tf=tf,
            lengths=lengths,
        )

    def _appended(
        self, texts: Sequence[str], params: dict[str, object], vocab: Mapping[str, int]
    ) -> TermCounts:
        """:meth:`changed` when every row stays and the texts come after them (new ids sort
        after every stored id): each term's run gains the new rows at its end, so the old pairs
        keep their order and fill the places the new ones leave (no keys, no merge search); no
        term disappears."""
        term_local, row_local, new_tf, new_lengths, new_terms = encode_pairs(texts, params)
        union, old_map, new_map = _union(self.terms, vocab, new_terms)
        term = new_map[term_local]
        order = np.argsort(term * len(texts) + row_local, kind="stable")  # by (term, row)
        term, rows, tf = term[order], row_local[order] + self.n_rows, new_tf[order]
        old_df = np.zeros(len(union), dtype=np.int64)
        old_df[old_map] = self.doc_freq()
        new_df = np.bincount(term, minlength=len(union))
        indptr = np.zeros(len(union) + 1, dtype=np.int64)
        np.cumsum(old_df + new_df, out=indptr[1:])
        nnz = int(indptr[-1])
        out_rows = np.empty(nnz, dtype=np.int32)
        out_tf = np.empty(nnz, dtype=np.int32)
        starts = np.concatenate(([0], np.cumsum(new_df)[:-1]))
        rank = np.arange(term.size, dtype=np.int64) - starts[term]
        new_places = indptr[term] + old_df[term] + rank
        out_rows[new_places] = rows
        out_tf[new_places] = tf
        # the old pairs keep their order (old terms keep theirs in the union): they fill the rest
        old_places = np.ones(nnz, dtype=np.bool_)
        old_places[new_places] = False
        out_rows[old_places] = self.rows
        out_tf[old_places] = self.tf
        return TermCounts(
            terms=union,
            indptr=indptr,
            rows=out_rows,
            tf=out_tf,
            lengths=np.concatenate((np.asarray(self.lengths, dtype=np.int64), new_lengths)),
        )


def _union(
    old_terms: tuple[str, ...], vocab: Mapping[str, int], new_terms: Sequence[str]
) -> tuple[tuple[str, ...], IntArray, IntArray]:
    """The sorted union of ``old_terms`` (sorted; ``vocab`` numbers them) and ``new_terms``,
    with each old and each new term's place in it. Only the terms not in ``vocab`` are sorted
    and placed (by bisection); the old terms shift by the number placed before them."""
    found = np.fromiter(map(vocab.get, new_terms, itertools.repeat(-1)), dtype=np.int64, count=len(new_terms))
    unseen = sorted({term for term, at in zip(new_terms, found.tolist(), strict=True) if at < 0})
    if not unseen:
        return old_terms, np.arange(len(old_terms), dtype=np.int64), found
    # unseen[j] goes before old_terms[places[j]]: an old term moves up by the unseen terms before it
    places = np.fromiter(map(bisect.bisect_left, itertools.repeat(old_terms), unseen), dtype=np.int64)
    old_map = np.arange(len(old_terms), dtype=np.int64) + np.searchsorted(
        places, np.arange(len(old_terms)), "right"
    )
    unseen_at = places + np.arange(len(unseen), dtype=np.int64)
    union = np.empty(len(old_terms) + len(unseen), dtype=object)
    union[old_map] = np.asarray(old_terms, dtype=object)
    union[unseen_at] = np.asarray(unseen, dtype=object)
    missing = found < 0
    unseen_of = dict(zip(unseen, unseen_at.tolist(), strict=True))
    found[missing] = np.fromiter(
        (unseen_of[term] for term, new in zip(new_terms, missing.tolist(), strict=True) if new),
        dtype=np.int64,
    )
    found[~missing] = old_map[found[~missing]]
    return tuple(union.tolist()), old_map, found


def encode_pairs(
    texts: Sequence[str], params: dict[str, object], *, first: int = 0
) -> tuple[IntArray, IntArray, Int32Array, IntArray, list[str]]:
    """The distinct (text, term) pairs of ``texts``: ``(term, text, count, lengths, terms)``,
    terms numbered by first appearance (``terms`` lists them), pairs sorted by (text, term id).
    The tokenizer of :meth:`retrievers.index.BM25Index.build` (:class:`~retrievers.text.TermIds`)."""
    encoder = TermIds(stopwords=params["stopwords"], stemmer=params["stemmer"])  # type: ignore[arg-type]
    ids, counts = encoder.encode(list(texts), first=first)
    owner = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
    pairs, tf = np.unique((owner << 32) | ids.astype(np.int64), return_counts=True)
    return pairs & 0xFFFFFFFF, pairs >> 32, tf.astype(np.int32), counts.astype(np.int64), encoder.terms


def idf(method: str, df: int, n_docs: int) -> float:
    """bm25s's idf of a term in ``df`` of ``n_docs`` documents (see :data:`BM25_METHODS`)."""
    if method == "robertson":
        inner = (n_docs - df + 0.5) / (df + 0.5)
        return math.log(max(inner, 1))
    if method == "lucene":
        return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
    if method == "atire":
        return math.log(n_docs / df)
    if method == "bm25l":
        return math.log((n_docs + 1) / (df + 0.5))
    return math.log((n_docs + 1) / df)  # bm25+


def _row_part(
    method: str, doc_len: IntArray, avg_len: np.floating[Any], k1: float, b: float
) -> npt.NDArray[np.float64]:
    """The part of bm25s's term-frequency component that depends on the document alone, once
    per row (the same float64 operations bm25s does per pair, so the same values): ``1 - b + b *
    l_d / l_avg``, times ``k1`` except for bm25l."""
    norm = b * doc_len.astype(np.float64) / avg_len  # b * l_d / l_avg
    if method in ("robertson", "lucene"):
        return k1 * ((1 - b) + norm)
    if method == "bm25l":
        return 1 - b + norm
    return k1 * (1 - b + norm)


def _tfc(
    method: str,
    tf: Float32Array,
    row_part: npt.NDArray[np.float64],
    k1: float,
    delta: float,
) -> npt.NDArray[np.float64]:
    """bm25s's term-frequency component, with its dtypes: ``tf`` is float32, the length norm a
    float64 scalar per document in bm25s (``row_part``: :func:`_row_part` of each pair's row,
    the same operations in the same order), so most arithmetic is float64, but ``tf * (k1 +
    1)`` stays float32 (a Python float does not widen a float32 array)."""
    if method in ("robertson", "lucene"):
        return tf / (row_part + tf)
    if method == "atire":
        return (tf * np.float32(k1 + 1)) / (tf + row_part)
    if method == "bm25l":
        c = tf / row_part
        return ((k1 + 1) * (c + delta)) / (k1 + c + delta)
    return (np.float32(k1 + 1) * tf) / (row_part + tf) + delta


def _tfc_at_zero(method: str, k1: float, b: float, delta: float, avg_len: np.floating[Any]) -> float:
    """bm25s's tfc for tf = 0 at the average length (the bm25l / bm25+ non-occurrence score)."""
    norm = b * avg_len / avg_len
    if method == "bm25l":
        c = 0 / (1 - b + norm)
        return float(((k1 + 1) * (c + delta)) / (k1 + c + delta))
    num = (k1 + 1) * 0
    den = k1 * (1 - b + norm) + 0
    return float((num / den) + delta)


def score_counts(counts: TermCounts, params: dict[str, object]) -> tuple[Float32Array, Float32Array | None]:
    """bm25s's ``data`` array (one float32 score per pair, the layout of ``counts``) and its
    non-occurrence array (bm25l / bm25+; else None), from the counts and the global statistics
    they give: N rows, each term's document frequency, the mean row length (bm25s:
    ``np.array(lengths).mean()``; idf per term in Python, stored as float32)."""
    k1, b, delta = float(params["k1"]), float(params["b"]), float(params["delta"])  # type: ignore[arg-type]
    method = str(params["method"])
    n_docs = counts.n_rows
    doc_freq = counts.doc_freq()
    avg_len = counts.lengths.mean()
    # idf per distinct document frequency (far fewer than terms), in Python floats as bm25s
    distinct, of_term = np.unique(doc_freq, return_inverse=True)
    idf_values = [idf(method, df, n_docs) for df in distinct.tolist()]
    idfs = np.zeros(doc_freq.size, dtype=np.float32)
    idfs[:] = np.asarray(idf_values, dtype=np.float64)[of_term]
    nonoccurrence: Float32Array | None = None
    if method in ("bm25l", "bm25+"):
        floor = _tfc_at_zero(method, k1, b, delta, avg_len)
        nonoccurrence = np.zeros(doc_freq.size, dtype=np.float32)
        nonoccurrence[:] = np.asarray([value * floor for value in idf_values], dtype=np.float64)[of_term]
    row_part = _row_part(method, counts.lengths, avg_len, k1, b)
    indptr = counts.indptr
    nnz = int(indptr[-1])
    data = np.empty(nnz, dtype=np.float32)
    for start in range(0, nnz, _SCORE_BLOCK):
        stop = min(nnz, start + _SCORE_BLOCK)
        # the terms whose runs meet [start, stop), and how many of their pairs lie in it
        first = int(np.searchsorted(indptr, start, side="right")) - 1
        last = int(np.searchsorted(indptr, stop, side="left"))
        in_block = np.minimum(indptr[first + 1 : last + 1], stop) - np.maximum(indptr[first:last], start)
        values = np.repeat(idfs[first:last], in_block) * _tfc(
            method, counts.tf[start:stop].astype(np.float32), row_part[counts.rows[start:stop]], k1, delta
        )
        if nonoccurrence is not None:
            values -= np.repeat(nonoccurrence[first:last], in_block)
        data[start:stop] = values
    return data, nonoccurrence
