"""The structural strategy: the query's identifiers and keywords against names in metadata.

Names are read from ``metadata[field]`` for each of ``structural_fields`` (default
``func_name``, ``symbol``, ``path``) and split into stemmed parts
(:mod:`retrievers.multi_strategy.identifiers`: snake_case, camelCase, dots, slashes; adjacent
parts also joined, ``read_only`` -> ``readonly``). Score: the idf-weighted Dice overlap of the
query's parts and a row's name parts, plus 1 when a query identifier equals a whole name (or its
last dotted / path segment, or the basename without extension). Rows outside the retriever's mask
and rows without a name never score.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from retrievers.multi_strategy.analysis import QueryAnalysis
from retrievers.multi_strategy.identifiers import identifier_parts, split_identifier
from retrievers.multi_strategy.strategies.base import Hits, QueryContext, SharedIndexes, hits
from retrievers.ranking import top_k_1d
from retrievers.store import ContextStore

__all__ = ["StructuralStrategy"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class _NameIndex:
    """Stemmed name parts per row (sparse, binary), their idf, and whole names -> rows."""

    matrix: sparse.csr_matrix
    vocabulary: dict[str, int]
    idf: FloatArray
    row_weight: FloatArray
    has_name: BoolArray
    exact: dict[str, IntArray]


def _normal_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _name_keys(name: str) -> set[str]:
    """A name, its last dotted segment and its path basename (with and without extension)."""
    keys = {_normal_name(name)}
    last = re.split(r"[./\\:]", name.strip("/\\"))
    keys.add(_normal_name(last[-1]))
    base = re.split(r"[/\\]", name.strip("/\\"))[-1]
    keys.add(_normal_name(base))
    keys.add(_normal_name(base.rsplit(".", 1)[0]))
    return {key for key in keys if key}


def _build_name_index(documents: Sequence[Any], fields: Sequence[str]) -> _NameIndex:
    vocabulary: dict[str, int] = {}
    indptr = [0]
    indices: list[int] = []
    has_name = np.zeros(len(documents), dtype=bool)
    exact: dict[str, list[int]] = {}
    for row, doc in enumerate(documents):
        names = [
            str(doc.metadata[key])
            for key in fields
            if isinstance(doc.metadata.get(key), str) and doc.metadata[key]
        ]
        parts: set[str] = set()
        for name in names:
            parts |= identifier_parts(split_identifier(name))
            for key in _name_keys(name):
                exact.setdefault(key, []).append(row)
        if names:
            has_name[row] = True
        # ids in sorted part order, not set order: set order changes with the process's hash seed,
        # and with it the order (so the last bits) of the idf sums below
        indices += sorted(vocabulary.setdefault(part, len(vocabulary)) for part in sorted(parts))
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.float64)
    matrix = sparse.csr_matrix(
        (data, np.asarray(indices, dtype=np.int64), np.asarray(indptr, dtype=np.int64)),
        shape=(len(documents), max(len(vocabulary), 1)),
    )
    n_named = max(int(has_name.sum()), 1)
    document_frequency = np.asarray(matrix.sum(axis=0), dtype=np.float64).ravel()
    idf = np.log1p(n_named / np.maximum(document_frequency, 1.0))
    row_weight = np.asarray(matrix @ idf, dtype=np.float64).ravel()
    return _NameIndex(
        matrix=matrix,
        vocabulary=vocabulary,
        idf=idf,
        row_weight=row_weight,
        has_name=has_name,
        exact={key: np.unique(np.asarray(rows, dtype=np.int64)) for key, rows in exact.items()},
    )


class StructuralStrategy:
    """Identifier-aware matching of the query against names in metadata (scored, not boolean)."""

    name = "structural"

    def __init__(self, store: ContextStore, scope: BoolArray, fields: Sequence[str]) -> None:
        self.store = store
        self.scope = scope
        self.fields = tuple(fields)
        self._index: _NameIndex | None = None
        self._in_scope: BoolArray = np.zeros(len(store), dtype=bool)

    @property
    def index(self) -> _NameIndex:
        """The name index, built on first use and shared by every retriever over these documents."""
        if self._index is None:
            key = "names:" + "\x1f".join(self.fields)
            index: _NameIndex = SharedIndexes.get(
                self.store.documents, key, lambda: _build_name_index(self.store.documents, self.fields)
            )
            self._in_scope = index.has_name & self.scope
            self._index = index
        return self._index

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        index = self.index
        if not self._in_scope.any():
            return f"no document in scope has a name in metadata {list(self.fields)}"
        if not analysis.identifiers and not analysis.keywords:
            return "the query has no identifier or keyword"
        if (
            not any(term in index.vocabulary for term in analysis.structural_terms)
            and self._exact_rows(analysis).size == 0
        ):
            return "no query identifier or keyword matches a name part"
        return None

    def _exact_rows(self, analysis: QueryAnalysis) -> IntArray:
        keys = {key for identifier in analysis.identifiers for key in _name_keys(identifier)}
        found = [self.index.exact[key] for key in sorted(keys) if key in self.index.exact]
        return np.unique(np.concatenate(found)) if found else np.empty(0, dtype=np.int64)

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        return [self._one(context.analysis, depth) for context in contexts]

    def _one(self, analysis: QueryAnalysis, depth: int) -> Hits:
        index = self.index
        term_ids = sorted({index.vocabulary[t] for t in analysis.structural_terms if t in index.vocabulary})
        query_weight = np.zeros(index.idf.shape[0], dtype=np.float64)
        query_weight[term_ids] = index.idf[term_ids]
        matched = np.asarray(index.matrix @ query_weight, dtype=np.float64).ravel()
        total = float(query_weight.sum()) + index.row_weight
        with np.errstate(invalid="ignore", divide="ignore"):
            dice = np.where(total > 0, 2.0 * matched / np.where(total > 0, total, 1.0), 0.0)
        dice[self._exact_rows(analysis)] += 1.0
        candidates = self._in_scope & (dice > 0)
        if not candidates.any():
            return hits([], [])
        return hits(*top_k_1d(dice, depth, mask=candidates))
