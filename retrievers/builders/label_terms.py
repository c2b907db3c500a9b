"""The TF-IDF of directory key terms, counted without scikit-learn, for the faiss tree builder.

:func:`retrievers.text.fit_tfidf` over :data:`retrievers.text.LABEL_PATTERN` words (what the
extractive abstracts' key terms are made of) spends most of its time in scikit-learn's Python
loop over every token. :class:`LabelTerms` counts the same terms and gives the same weights, bit
for bit (``tests/test_tree_label_terms.py`` compares them with :func:`fit_tfidf`'s matrix):

* **Words.** Each text is lowercased. A text made of ASCII characters only is cut into words
  without a Python object per word: the chunk's ASCII texts are joined by newlines into one byte
  array, and the words are the runs of 3+ letters with no word character (letter, digit, ``_``)
  on either side, which is what the pattern matches in ASCII text. Any other text is split at
  whitespace; when every piece is made of letters (``str.isalpha``), the pieces of 3+ characters
  are exactly the pattern's matches (letters are word characters that are neither digits nor
  ``_``, whitespace is not a word character), else the pattern's ``findall`` runs on the text.
  Each word's UTF-8 bytes are packed into 8-byte integers and the chunk's distinct words
  numbered in order of first appearance by a hash table compiled with numba
  (:func:`first_appearance_codes`; exact: the integers are the bytes and are compared); only
  the distinct words are made into strings. scikit-learn's English stop words
  are dropped.
* **Ids.** Terms are numbered in order of first appearance over the corpus (as scikit-learn's
  vocabulary is while it counts); a row keeps its terms in that order, the order scikit-learn
  sums a row's squares in for its L2 norm. The terms are then renamed to their alphabetical
  position (scikit-learn's ``get_feature_names_out`` order).
* **Weights.** ``(1 + ln count) * idf`` with the smooth idf ``ln((1 + n) / (1 + df)) + 1``,
  divided by the row's L2 norm: the same float64 operations in the same order as scikit-learn's
  ``TfidfTransformer`` and ``normalize``. Only the counts (2 bytes a pair when they fit) and one
  norm per row are kept; :meth:`LabelTerms.rows` computes the weights of the rows asked for.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.numba_jit import jit_enabled
from retrievers.text import LABEL_PATTERN

__all__ = ["LabelTerms", "label_stop_words"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: texts tokenized at a time (bounds the temporary lists of words)
CHUNK = 8192
_LABEL_RE = re.compile(LABEL_PATTERN)
_SKIP = -1  # a stop word
_MISSING = -2  # not seen yet
_NEWLINE = 10
_FRAME = np.array([_NEWLINE], dtype=np.uint8)
#: ASCII bytes of lowercase letters; of word characters (letters, digits, ``_``), as ``\w`` reads ASCII
_LETTERS = np.zeros(256, dtype=bool)
_LETTERS[ord("a") : ord("z") + 1] = True
_WORD_CHARACTERS = _LETTERS.copy()
_WORD_CHARACTERS[ord("0") : ord("9") + 1] = True
_WORD_CHARACTERS[ord("_")] = True
_WORD_CHARACTERS[ord("A") : ord("Z") + 1] = True  # not in lowercased text; kept for what \w is


def label_stop_words() -> frozenset[str]:
    """scikit-learn's English stop words (what ``fit_tfidf`` drops)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


@dataclass(frozen=True)
class LabelTerms:
    """Every text's label terms and their counts (CSR: row ``i``'s pairs are
    ``indptr[i]:indptr[i + 1]``, in order of the terms' first appearance in the corpus), the
    terms in alphabetical order (``term_ids`` index them), their idf and each row's L2 norm."""

    terms: tuple[str, ...]
    indptr: IntArray
    term_ids: npt.NDArray[np.int32]
    counts: npt.NDArray[np.integer]
    idf: FloatArray
    norms: FloatArray

    @classmethod
    def count(cls, texts: Iterable[str]) -> LabelTerms:
        """Count the label terms of ``texts`` (read once, :data:`CHUNK` at a time: a generator
        keeps only that many in memory); no term anywhere gives an empty vocabulary."""
        stop = label_stop_words()
        word_ids: dict[str, int] = {}
        n_terms = 0
        known_heads = np.zeros(0, dtype=np.uint64)  # the words of at most 8 bytes, packed, sorted
        known_terms = np.zeros(0, dtype=np.int64)  # and their term ids (_SKIP: not a term)
        chunk_ids: list[npt.NDArray[np.int32]] = []
        chunk_counts: list[npt.NDArray[np.integer]] = []
        chunk_sizes: list[IntArray] = []
        stream = iter(texts)
        while chunk := list(itertools.islice(stream, CHUNK)):
            n_texts_chunk = len(chunk)
            words = _ChunkWords.cut([text.lower() for text in chunk])
            del chunk
            codes, first, heads = words.factorized()
            # the chunk's distinct words, in order of first appearance: those of at most 8 bytes
            # seen in an earlier chunk are found by their bytes (one integer), the others are
            # made into strings and looked up; new ones are numbered in turn
            known = np.full(first.size, _MISSING, dtype=np.int64)
            short = words.lengths[first] <= 8
            if known_heads.size:
                slot = np.minimum(np.searchsorted(known_heads, heads), known_heads.size - 1)
                hit = short & (known_heads[slot] == heads)
                known[hit] = known_terms[slot[hit]]
            unknown = np.flatnonzero(known == _MISSING)
            for position, word in zip(unknown.tolist(), words.text_of(first[unknown]), strict=True):
                term = word_ids.get(word, _MISSING)
                if term == _MISSING:
                    if word in stop:
                        term = _SKIP
                    else:
                        term = n_terms
                        n_terms += 1
                    word_ids[word] = term
                known[position] = term
            added = unknown[short[unknown]]
            if added.size:  # kept sorted by their bytes
                order = np.argsort(heads[added])
                at = np.searchsorted(known_heads, heads[added][order])
                known_heads = np.insert(known_heads, at, heads[added][order])
                known_terms = np.insert(known_terms, at, known[added][order])
            ids = known[codes]
            keep = ids >= 0
            width = max(n_terms, 1)
            pairs = words.owner[keep] * width + ids[keep]
            pairs.sort(kind="stable")  # already in row order: the runs make the sort cheap
            new_pair = np.ones(pairs.size, dtype=bool)
            np.not_equal(pairs[1:], pairs[:-1], out=new_pair[1:])
            starts = np.flatnonzero(new_pair)
            pair_counts = np.diff(np.append(starts, pairs.size))
            pairs = pairs[starts]
            rows = pairs // width
            chunk_sizes.append(np.bincount(rows, minlength=n_texts_chunk))
            chunk_ids.append((pairs - rows * width).astype(np.int32))
            narrow = pair_counts.max(initial=0) <= np.iinfo(np.uint16).max
            chunk_counts.append(pair_counts.astype(np.uint16 if narrow else np.int64))
        row_sizes = np.concatenate(chunk_sizes) if chunk_sizes else np.zeros(0, dtype=np.int64)
        n_texts = row_sizes.size
        indptr = np.zeros(n_texts + 1, dtype=np.int64)
        np.cumsum(row_sizes, out=indptr[1:])
        vocabulary = [word for word, term in word_ids.items() if term >= 0]  # first-appearance order
        alphabetical = sorted(range(len(vocabulary)), key=vocabulary.__getitem__)
        rename = np.empty(len(vocabulary), dtype=np.int32)
        rename[np.asarray(alphabetical, dtype=np.int64)] = np.arange(len(vocabulary), dtype=np.int32)
        term_ids = np.concatenate(chunk_ids) if chunk_ids else np.zeros(0, dtype=np.int32)
        del chunk_ids
        term_ids = rename[term_ids] if term_ids.size else term_ids.astype(np.int32)
        counts: npt.NDArray[np.integer] = (
            np.concatenate(chunk_counts) if chunk_counts else np.zeros(0, dtype=np.uint16)
        )  # uint16 unless a count passes 65,535 (then int64)
        del chunk_counts
        df = np.bincount(term_ids, minlength=len(vocabulary)).astype(np.float64)
        df += 1.0
        idf = np.full_like(df, fill_value=n_texts + 1, dtype=np.float64)
        idf /= df
        np.log(idf, out=idf)
        idf += 1.0
        terms = tuple(vocabulary[i] for i in alphabetical)
        norms = _row_norms(indptr, term_ids, counts, idf)
        return cls(terms=terms, indptr=indptr, term_ids=term_ids, counts=counts, idf=idf, norms=norms)

    def rows(self, rows: IntArray) -> tuple[IntArray, FloatArray]:
        """The pairs of ``rows`` one row after the other: ``(term ids, normalised weights)``."""
        starts = self.indptr[rows]
        sizes = self.indptr[rows + 1] - starts
        positions = _ranges(starts, sizes)
        terms = self.term_ids[positions].astype(np.int64)
        weights = _tf_idf(self.counts[positions], self.idf[terms])
        weights /= np.repeat(self.norms[rows], sizes)
        return terms, weights


@dataclass(frozen=True)
class _ChunkWords:
    """The label words of a chunk of lowercased texts, in text order: word ``j`` is the bytes
    ``buffer[starts[j]:starts[j] + lengths[j]]`` (UTF-8) of text ``owner[j]``."""

    buffer: npt.NDArray[np.uint8]
    starts: IntArray
    lengths: IntArray
    owner: IntArray

    @classmethod
    def cut(cls, lows: list[str]) -> _ChunkWords:
        plain = np.fromiter((low.isascii() for low in lows), dtype=bool, count=len(lows))
        rows = np.flatnonzero(plain)
        joined = "\n".join(itertools.compress(lows, plain.tolist())).encode("ascii")
        buffer = np.frombuffer(joined, dtype=np.uint8)
        starts, lengths = _ascii_words(buffer)
        text_starts = np.zeros(rows.size, dtype=np.int64)
        np.cumsum([len(lows[i]) + 1 for i in rows.tolist()][:-1], out=text_starts[1:])
        per_text = np.diff(np.searchsorted(starts, text_starts), append=starts.size)
        owner = np.repeat(rows, per_text)  # the words are in text order
        others = np.flatnonzero(~plain).tolist()
        # texts with other characters: Python's own word splitting, then the same bytes form
        found: list[str] = []
        found_owner: list[int] = []
        for i in others:
            pieces = lows[i].split()
            words = pieces if "".join(pieces).isalpha() else _LABEL_RE.findall(lows[i])
            words = [word for word in words if len(word) >= 3]
            found += words
            found_owner += [i] * len(words)
        if not found:
            return cls(buffer, starts, lengths, owner)
        other = np.frombuffer("\n".join(found).encode("utf-8"), dtype=np.uint8)
        ends = np.append(np.flatnonzero(other == _NEWLINE), other.size)  # words hold no newline
        other_starts = np.append(0, ends[:-1] + 1)
        all_owner = np.concatenate([owner, np.asarray(found_owner, dtype=np.int64)])
        order = np.argsort(all_owner, kind="stable")  # each text's words together, in text order
        return cls(
            buffer=np.concatenate([buffer, np.array([_NEWLINE], dtype=np.uint8), other]),
            starts=np.concatenate([starts, other_starts + buffer.size + 1])[order],
            lengths=np.concatenate([lengths, ends - other_starts])[order],
            owner=all_owner[order],
        )

    def factorized(self) -> tuple[IntArray, IntArray, npt.NDArray[np.uint64]]:
        """Each word's position in the list of distinct words (listed in order of first
        appearance), where each distinct word first appears, and its first 8 bytes packed (the
        whole word when it is no longer): the words' bytes packed 8 at a time into integers and
        numbered (:func:`first_appearance_codes`), one 8-byte slice after another (only the
        words that long take part in a later slice)."""
        padded = np.concatenate([self.buffer, np.zeros(8, dtype=np.uint8)])
        heads = _packed(padded, self.starts, self.lengths, 0)
        codes, n_distinct = first_appearance_codes(heads)
        part = 1
        while (longer := np.flatnonzero(self.lengths > 8 * part)).size:
            slice_codes, slice_distinct = first_appearance_codes(
                _packed(padded, self.starts[longer], self.lengths[longer], part)
            )
            combined = codes * (slice_distinct + 1)
            combined[longer] += slice_codes + 1
            codes, n_distinct = first_appearance_codes(combined.view(np.uint64))
            part += 1
        before = np.concatenate(([-1], np.maximum.accumulate(codes)[:-1])) if codes.size else codes
        first = np.flatnonzero(codes > before)  # the first appearance of code 0, 1, 2, ...
        if first.size != n_distinct:  # internal check: one first appearance per code
            raise AssertionError("label words: numbered codes out of order")
        return codes, first, heads[first]

    def text_of(self, positions: IntArray) -> list[str]:
        """The words at ``positions`` as strings."""
        data = self.buffer.tobytes()
        return [
            data[start : start + length].decode("utf-8")
            for start, length in zip(
                self.starts[positions].tolist(), self.lengths[positions].tolist(), strict=True
            )
        ]


def first_appearance_codes(keys: npt.NDArray[np.uint64]) -> tuple[IntArray, int]:
    """Each key's number among the distinct keys, numbered in order of first appearance, and
    how many there are (``pandas.factorize``'s answer, which the library does not import): an
    open-addressing hash table compiled by numba; keys are compared, not only hashed."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    bits = 4
    while (1 << bits) < 2 * keys.size:  # at most half full
        bits += 1
    table_keys = np.empty(1 << bits, dtype=np.uint64)
    table_codes = np.full(1 << bits, -1, dtype=np.int64)
    codes = np.empty(keys.size, dtype=np.int64)
    n_distinct = _compiled_numbering()(keys, table_keys, table_codes, codes, 64 - bits)
    return codes, int(n_distinct)


def _numbering(
    keys: npt.NDArray[np.uint64],
    table_keys: npt.NDArray[np.uint64],
    table_codes: IntArray,
    codes: IntArray,
    shift: int,
) -> int:
    """:func:`first_appearance_codes`'s loop: slot = the top bits of key x 2^64 / golden ratio,
    then the next free or equal slot."""
    mask = np.uint64(table_keys.size - 1)
    multiplier = np.uint64(0x9E3779B97F4A7C15)
    top = np.uint64(shift)
    one = np.uint64(1)
    n_distinct = 0
    for i in range(keys.size):
        key = keys[i]
        slot = (key * multiplier) >> top
        while True:
            code = table_codes[slot]
            if code < 0:
                table_keys[slot] = key
                table_codes[slot] = n_distinct
                codes[i] = n_distinct
                n_distinct += 1
                break
            if table_keys[slot] == key:
                codes[i] = code
                break
            slot = (slot + one) & mask
    return n_distinct


_NUMBERING: Any = None
_NUMBERING_LOCK = threading.Lock()


def _compiled_numbering() -> Any:
    """:func:`_numbering` compiled (once per process, even with ``NUMBA_DISABLE_JIT`` set)."""
    global _NUMBERING
    if _NUMBERING is None:
        with _NUMBERING_LOCK:
            if _NUMBERING is None:
                from numba import types

                with jit_enabled() as numba:
                    signature = types.int64(
                        types.uint64[::1], types.uint64[::1], types.int64[::1], types.int64[::1], types.int64
                    )
                    _NUMBERING = numba.njit(signature, nogil=True)(_numbering)
    return _NUMBERING


def _ascii_words(buffer: npt.NDArray[np.uint8]) -> tuple[IntArray, IntArray]:
    """Starts and lengths of the runs of 3+ letters in lowercased ASCII ``buffer`` with no word
    character (letter, digit, ``_``) just before or after: the matches of ``LABEL_PATTERN``."""
    letter = _LETTERS[buffer]
    # the runs' edges alternate: start, end, start, end, ... (the buffer is framed by non-letters)
    edges = np.flatnonzero(np.diff(letter.view(np.int8), prepend=np.int8(0), append=np.int8(0)))
    starts, ends = edges[0::2], edges[1::2]
    long_enough = ends - starts >= 3
    starts, ends = starts[long_enough], ends[long_enough]
    framed = np.concatenate([_FRAME, buffer, _FRAME])  # framed[i + 1] is buffer[i]
    alone = ~(_WORD_CHARACTERS[framed[starts]] | _WORD_CHARACTERS[framed[ends + 1]])
    return starts[alone], (ends - starts)[alone]


def _packed(
    padded: npt.NDArray[np.uint8], starts: IntArray, lengths: IntArray, part: int
) -> npt.NDArray[np.uint64]:
    """Bytes ``8 * part`` to ``8 * part + 7`` of each word (longer than ``8 * part`` bytes) as
    one little-endian integer, zero past its end: a word's bytes are never zero, so different
    words give different sequences of integers. ``padded`` ends with 8 zero bytes."""
    unaligned = np.ndarray(shape=(padded.size - 7,), dtype="<u8", buffer=padded, strides=(1,))
    packed = np.asarray(unaligned[starts + 8 * part], dtype=np.uint64)
    rest = lengths - 8 * part
    short = rest < 8
    bits = (rest[short] * 8).astype(np.uint64)
    packed[short] &= (np.uint64(1) << bits) - np.uint64(1)
    return packed


def _ranges(starts: IntArray, sizes: IntArray) -> IntArray:
    """``concatenate([arange(s, s + k) for s, k in zip(starts, sizes)])`` without the loop."""
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(sizes)
    return np.repeat(starts - (ends - sizes), sizes) + np.arange(total, dtype=np.int64)


def _tf_idf(counts: npt.NDArray[np.generic], idf: FloatArray) -> FloatArray:
    weights = counts.astype(np.float64)
    np.log(weights, out=weights)
    weights += 1.0
    weights *= idf
    return weights


def _row_norms(
    indptr: IntArray, term_ids: npt.NDArray[np.int32], counts: npt.NDArray[np.generic], idf: FloatArray
) -> FloatArray:
    """Each row's L2 norm of its weights before normalising, its squares summed one after the
    other in the row's order (as scikit-learn's ``inplace_csr_row_normalize_l2`` does); 1 for a
    row without terms (nothing to divide)."""
    n = indptr.size - 1
    norms = np.ones(n, dtype=np.float64)
    for first in range(0, n, CHUNK):
        last = min(n, first + CHUNK)
        lo, hi = int(indptr[first]), int(indptr[last])
        squares = _tf_idf(counts[lo:hi], idf[term_ids[lo:hi]])
        squares *= squares
        starts = indptr[first:last] - lo
        sizes = indptr[first + 1 : last + 1] - indptr[first:last]
        total = np.zeros(last - first, dtype=np.float64)
        order = np.argsort(-sizes, kind="stable")  # rows still summing are a prefix of this order
        longest = int(sizes.max()) if sizes.size else 0
        active = order.size
        for j in range(longest):
            while active and sizes[order[active - 1]] <= j:
                active -= 1
            rows = order[:active]
            total[rows] += squares[starts[rows] + j]
        nonzero = total > 0.0
        norms[first:last][nonzero] = np.sqrt(total[nonzero])
    return norms
