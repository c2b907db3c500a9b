"""MultiStrategyRetriever: query analysis, four strategies run concurrently, consensus fusion.

A query is analysed (:class:`retrievers.query_analysis.QueryAnalyzer`: intent, time expressions,
code identifiers, keywords); the intent's row of the weight table says which strategies run and
with what weight; the strategies run in a thread pool, each with a time limit; their rankings are
normalised to [0, 1], weighted and fused.

Strategies (each usable alone, all respect the store's scope ``store.allowed``):

- ``semantic``: exact dense search over the store's embeddings. Never filtered by the intent.
- ``temporal``: re-orders semantically relevant documents by time. Candidates are the
  ``temporal_pool`` documents most similar to the query among those with a time, plus as many among
  those inside the query's time range (when it has one). Score::

      in_range + max(cos, 0) * exp(-age_days / decay_days)

  ``in_range`` is 1 for documents inside a range the query names (so they come first), else 0;
  ``age_days`` is counted back from the reference time (``reference_time``: ``latest`` = the
  latest document time in the scope, e.g. a LoCoMo conversation's last session; or a fixed ISO
  8601 / epoch time), 0 for documents after it. Relevance times recency, never recency alone:
  the newest irrelevant turn does not win.
- ``structural``: matches the query's identifiers and keywords against ``metadata.func_name``,
  ``metadata.symbol``, ``metadata.path`` (``structural_fields``). Names are split into stemmed
  parts (snake_case, camelCase, dots, slashes; adjacent parts also joined: ``read_only`` ->
  ``readonly``); score = idf-weighted Dice overlap of query and name parts, plus 1 when a query
  identifier equals a whole name (or its last dotted / path segment).
- ``fulltext``: the store's BM25 index (``fulltext_scoring: bm25``), or the seed design's
  ``matches / keywords * 0.6 + importance / 10 * 0.4`` (``seed``; whole-word matches of the
  analyser's keywords, ``metadata.importance`` in 0..10, missing = 0).

Selection: ``weights[intent]`` lists the strategies to run and their weights; a strategy left
out still runs with ``evidence_weights[strategy]`` when the query carries its evidence (temporal:
a time expression; structural: a code identifier), as in the reference design. A strategy that
cannot apply (no timestamps in scope, no structural metadata, nothing to match) is skipped;
one that raises or exceeds its time limit is dropped. Both are recorded in every result's
provenance (``skipped`` / ``dropped``), never fatal.

Fusion (``fusion: consensus``, the seed design with its scale defects fixed): each strategy's
scores are normalised to [0, 1] (``normalization: minmax`` = (s - min) / (max - min), a constant
list gives 1; ``max`` = max(s, 0) / max), multiplied by ``weight / max weight of the query's
strategies`` (so a weight above 1 cannot push a score above 1), and for a document found by
``n`` strategies::

    fused = min(mean(weighted scores) + consensus_boost * (n - 1), 1.0)

E.g. 0.85, 0.72 and 0.68 from three strategies of equal weight give
``min(0.75 + 0.1 * 2, 1) = 0.95``. ``fusion: rrf``: ``sum_s weight_s / (rrf_k + rank_s)``
(Cormack et al., SIGIR 2009, weighted). Results are ranked by (score desc, doc id asc).

Batches: ``retrieve_batch`` equals ``[retrieve(q) for q in queries]`` exactly whenever the
embedder is batch-invariant and no strategy fails or times out (each strategy processes the
whole batch in one task, so its time limit is ``timeout_seconds`` per query of the batch).
A timed-out strategy's thread cannot be killed: it finishes in the background and its result
is ignored.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt
from scipy import sparse

from retrievers.kernel import check_query
from retrievers.ranking import check_top_k, top_k_1d
from retrievers.multi_strategy.analysis import (
    DEFAULT_RULES,
    INTENTS,
    QueryAnalysis,
    QueryAnalyzer,
    identifier_parts,
    parse_rules,
    split_identifier,
)
from retrievers.store import ContextStore
from retrievers.timeparse import (
    TimeContext,
    in_ranges,
    parse_timestamp,
    parse_timezone,
    resolve_all,
)
from retrievers.types import Embedder, RetrievalResult

__all__ = [
    "DEFAULT_EVIDENCE_WEIGHTS",
    "DEFAULT_WEIGHTS",
    "EVIDENCE",
    "STRATEGIES",
    "MultiStrategyParams",
    "MultiStrategyRetriever",
    "consensus_fuse",
    "normalize_scores",
    "weighted_rrf",
]

STRATEGIES: tuple[str, ...] = ("semantic", "temporal", "structural", "fulltext")
FUSIONS = ("consensus", "rrf")
NORMALIZATIONS = ("minmax", "max")
FULLTEXT_SCORINGS = ("bm25", "seed")

#: The reference design's defaults: semantic 1.0, temporal 0.8, structural 0.9, full-text 0.6;
#: TEMPORAL raises temporal to 1.2; CODE sets structural 1.2 and semantic 0.9; FACTUAL raises
#: full-text to 0.9; PREFERENCE uses semantic + full-text; MIXED uses all that apply.
DEFAULT_WEIGHTS: Mapping[str, Mapping[str, float]] = {
    "FACTUAL": {"semantic": 1.0, "fulltext": 0.9},
    "TEMPORAL": {"semantic": 1.0, "temporal": 1.2},
    "CODE": {"semantic": 0.9, "structural": 1.2},
    "PREFERENCE": {"semantic": 1.0, "fulltext": 0.6},
    "MIXED": {"semantic": 1.0, "temporal": 0.8, "structural": 0.9, "fulltext": 0.6},
}
#: strategy -> the analysis feature that makes it run even when the intent's row leaves it out
EVIDENCE: Mapping[str, str] = {"temporal": "time_expression", "structural": "code_identifier"}
DEFAULT_EVIDENCE_WEIGHTS: Mapping[str, float] = {"temporal": 0.8, "structural": 0.9}
DEFAULT_STRUCTURAL_FIELDS: tuple[str, ...] = ("func_name", "symbol", "path")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Hits = tuple[IntArray, FloatArray]  # rows, raw scores; ordered by (score desc, row asc)

_SECONDS_PER_DAY = 86400.0
_WORD_RE = re.compile(r"(?u)\b\w\w+\b")


# --------------------------------------------------------------------------------------------
# Fusion (kept here until retrievers/fusion.py exists; pure functions, tested by hand)
# --------------------------------------------------------------------------------------------


def normalize_scores(scores: npt.ArrayLike, method: str = "minmax") -> FloatArray:
    """Scores mapped to [0, 1]. ``minmax``: (s - min) / (max - min), every score 1 when they are
    all equal; ``max``: max(s, 0) / max, every score 1 when no score is positive."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values.copy()
    if not np.isfinite(values).all():
        raise ValueError("cannot normalise non-finite scores")
    if method == "minmax":
        low, high = float(values.min()), float(values.max())
        if high - low <= 0:
            return np.ones_like(values)
        return np.asarray((values - low) / (high - low), dtype=np.float64)
    if method == "max":
        high = float(values.max())
        if high <= 0:
            return np.ones_like(values)
        return np.asarray(np.clip(values, 0.0, None) / high, dtype=np.float64)
    raise ValueError(f"normalization must be one of {list(NORMALIZATIONS)}, got {method!r}")


def consensus_fuse(contributions: Sequence[float], consensus_boost: float) -> float:
    """``min(mean(contributions) + consensus_boost * (n - 1), 1.0)`` for a document found by
    ``n = len(contributions)`` strategies (contributions already normalised and weighted)."""
    if not contributions:
        raise ValueError("consensus_fuse needs at least one contribution")
    mean = math.fsum(contributions) / len(contributions)
    return min(mean + consensus_boost * (len(contributions) - 1), 1.0)


def weighted_rrf(ranks: Mapping[str, int], weights: Mapping[str, float], k: int) -> float:
    """Weighted reciprocal rank fusion: ``sum_s weights[s] / (k + ranks[s])`` (ranks from 1)."""
    return math.fsum(weights[name] / (k + rank) for name, rank in ranks.items())


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_range(name: str, value: object, low: float, high: float, *, low_open: bool = False) -> None:
    ok = False
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be in {bracket}{low:g}, {high:g}], got {value!r}")


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


def _check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def _strategy_weights(where: str, row: object) -> dict[str, float]:
    if not isinstance(row, Mapping):
        raise ValueError(f"{where} must map strategy names to weights, got {row!r}")
    out: dict[str, float] = {}
    for strategy, weight in row.items():
        if strategy not in STRATEGIES:
            raise ValueError(f"{where}: unknown strategy {strategy!r}; strategies are {list(STRATEGIES)}")
        _check_range(f"{where}.{strategy}", weight, 0.0, 100.0)
        out[str(strategy)] = float(weight)
    return out


def _check_weights(weights: object) -> dict[str, dict[str, float]]:
    if not isinstance(weights, Mapping):
        raise ValueError(f"weights must map each intent to strategy weights, got {weights!r}")
    unknown = sorted(str(intent) for intent in weights if intent not in INTENTS)
    if unknown:
        raise ValueError(f"weights: unknown intent(s) {unknown}; intents are {list(INTENTS)}")
    missing = [intent for intent in INTENTS if intent not in weights]
    if missing:
        raise ValueError(
            f"weights: the table has no row for intent(s) {missing}; every intent of {list(INTENTS)} needs one"
        )
    table: dict[str, dict[str, float]] = {}
    for intent in INTENTS:
        row = _strategy_weights(f"weights.{intent}", weights[intent])
        if not any(weight > 0 for weight in row.values()):
            raise ValueError(f"weights.{intent} must give at least one strategy a weight > 0, got {row}")
        table[intent] = row
    return table


def _parse_reference(value: object) -> float | None:
    """``latest`` -> None (the scope's latest time); else epoch seconds."""
    if value == "latest":
        return None
    parsed = parse_timestamp(value) if isinstance(value, str) or _is_number(value) else None
    if parsed is None:
        raise ValueError(
            f"reference_time must be 'latest', an ISO 8601 time ('2023-10-20T12:00:00Z') or epoch seconds, got {value!r}"
        )
    return parsed.timestamp()


@dataclass(frozen=True)
class MultiStrategyParams:
    """Every query-time parameter of :class:`MultiStrategyRetriever`, validated.

    - ``weights``: intent -> {strategy: weight in [0, 100]}; a row for each of FACTUAL, TEMPORAL,
      CODE, PREFERENCE, MIXED; strategies are semantic, temporal, structural, fulltext.
    - ``evidence_weights``: {temporal|structural: weight}: run it with this weight when the query
      has a time expression / code identifier and the intent's row leaves it out ({} = never).
    - ``strategies``: the strategies that may run at all (default: all four).
    - ``rules``: the analyser's rule table (list of {intent, weight, pattern|feature}); null =
      the defaults of retrievers.query_analysis. ``mixed_ratio`` in (0, 1], ``min_intent_score``
      >= 0, ``default_intent``: see QueryAnalyzer.
    - ``fusion``: consensus | rrf; ``normalization``: minmax | max; ``consensus_boost`` in [0, 1];
      ``rrf_k`` in [1, 10000].
    - ``candidate_k`` in [1, 10000]: each strategy returns max(top_k, candidate_k) candidates.
    - ``decay_days`` in (0, 1e6]; ``reference_time``: latest | ISO 8601 | epoch seconds;
      ``temporal_pool`` in [1, 10000].
    - ``structural_fields``: metadata keys holding names; ``fulltext_scoring``: bm25 | seed.
    - ``timeout_seconds`` in (0, 3600] per strategy and query; ``query_batch_size`` in [1, 65536].
    """

    weights: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: DEFAULT_WEIGHTS)
    evidence_weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_EVIDENCE_WEIGHTS)
    strategies: Sequence[str] = STRATEGIES
    rules: Sequence[Mapping[str, Any]] | None = None
    mixed_ratio: float = 0.75
    min_intent_score: float = 1.0
    default_intent: str = "FACTUAL"
    fusion: str = "consensus"
    normalization: str = "minmax"
    consensus_boost: float = 0.1
    rrf_k: int = 60
    candidate_k: int = 100
    decay_days: float = 30.0
    reference_time: str | float = "latest"
    temporal_pool: int = 100
    structural_fields: Sequence[str] = DEFAULT_STRUCTURAL_FIELDS
    fulltext_scoring: str = "bm25"
    timeout_seconds: float = 10.0
    query_batch_size: int = 256

    def __post_init__(self) -> None:
        # stored as plain, private copies so that later changes to the caller's dicts do nothing
        object.__setattr__(self, "weights", _check_weights(self.weights))
        evidence = _strategy_weights("evidence_weights", self.evidence_weights)
        not_evidence = sorted(set(evidence) - set(EVIDENCE))
        if not_evidence:
            raise ValueError(
                f"evidence_weights: {not_evidence} have no evidence feature; only {sorted(EVIDENCE)} do"
            )
        object.__setattr__(self, "evidence_weights", evidence)
        if (
            isinstance(self.strategies, str)
            or not isinstance(self.strategies, Sequence)
            or not self.strategies
        ):
            raise ValueError(
                f"strategies must be a non-empty list drawn from {list(STRATEGIES)}, got {self.strategies!r}"
            )
        unknown = [name for name in self.strategies if name not in STRATEGIES]
        if unknown:
            raise ValueError(
                f"strategies: unknown strategy name(s) {unknown}; strategies are {list(STRATEGIES)}"
            )
        object.__setattr__(self, "strategies", tuple(name for name in STRATEGIES if name in self.strategies))
        if self.rules is not None:
            parse_rules(self.rules)
            object.__setattr__(self, "rules", tuple(dict(rule) for rule in self.rules))
        _check_range("mixed_ratio", self.mixed_ratio, 0.0, 1.0, low_open=True)
        _check_range("min_intent_score", self.min_intent_score, 0.0, 1e6)
        _check_choice("default_intent", self.default_intent, INTENTS)
        _check_choice("fusion", self.fusion, FUSIONS)
        _check_choice("normalization", self.normalization, NORMALIZATIONS)
        _check_range("consensus_boost", self.consensus_boost, 0.0, 1.0)
        _check_int("rrf_k", self.rrf_k, 1, 10_000)
        _check_int("candidate_k", self.candidate_k, 1, 10_000)
        _check_range("decay_days", self.decay_days, 0.0, 1e6, low_open=True)
        _parse_reference(self.reference_time)
        _check_int("temporal_pool", self.temporal_pool, 1, 10_000)
        fields_ = self.structural_fields
        if isinstance(fields_, str) or not isinstance(fields_, Sequence) or not fields_:
            raise ValueError(f"structural_fields must be a non-empty list of metadata keys, got {fields_!r}")
        if any(not isinstance(name, str) or not name for name in fields_):
            raise ValueError(f"structural_fields must hold non-empty strings, got {list(fields_)}")
        object.__setattr__(self, "structural_fields", tuple(fields_))
        _check_choice("fulltext_scoring", self.fulltext_scoring, FULLTEXT_SCORINGS)
        _check_range("timeout_seconds", self.timeout_seconds, 0.0, 3600.0, low_open=True)
        _check_int("query_batch_size", self.query_batch_size, 1, 65_536)

    @property
    def reference_epoch(self) -> float | None:
        return _parse_reference(self.reference_time)


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryContext:
    """What a strategy gets for one query: its analysis and (for dense strategies) its vector."""

    analysis: QueryAnalysis
    vector: npt.NDArray[np.float32] | None


class Strategy(Protocol):
    name: str

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        """Why this strategy cannot apply to this query (None = it applies)."""

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        """Up to ``depth`` (rows, raw scores) per query, by (score desc, row asc)."""


def _hits(scores: npt.ArrayLike, rows: npt.ArrayLike) -> Hits:
    return np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float64)


def _scope_mask(store: ContextStore) -> BoolArray:
    return np.ones(len(store), dtype=bool) if store.allowed is None else np.asarray(store.allowed, dtype=bool)


class _SharedIndexes:
    """Per-corpus structures (token sets, name parts) built once and shared by every retriever
    and scoped view over the same documents list (the runner makes one retriever per scope)."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _entries: ClassVar[dict[tuple[int, str], tuple[object, object]]] = {}
    _max_entries: ClassVar[int] = 8

    @classmethod
    def get(cls, documents: object, key: str, build: Callable[[], Any]) -> Any:
        with cls._lock:
            entry = cls._entries.get((id(documents), key))
            if entry is not None and entry[0] is documents:
                return entry[1]
            value = build()
            if len(cls._entries) >= cls._max_entries:
                cls._entries.pop(next(iter(cls._entries)))
            # the documents list is kept alive with the entry, so its id cannot be reused
            cls._entries[(id(documents), key)] = (documents, value)
            return value


class SemanticStrategy:
    """Dense exact search over the store (cosine on L2-normalised vectors)."""

    name = "semantic"

    def __init__(self, store: ContextStore) -> None:
        self.store = store

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        return None

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        vectors = [context.vector for context in contexts]
        if any(vector is None for vector in vectors):
            raise RuntimeError("no query vector (the embedder failed)")
        matrix = np.stack([vector for vector in vectors if vector is not None])
        return [
            _hits(scores, rows)
            for scores, rows in self.store.vectors.search(matrix, depth, mask=self.store.allowed)
        ]


class TemporalStrategy:
    """Semantic candidates re-ordered by time range and recency (see the module docstring)."""

    name = "temporal"

    def __init__(
        self, store: ContextStore, *, decay_days: float, reference_epoch: float | None, pool: int
    ) -> None:
        self.store = store
        self.decay_days = decay_days
        self.pool = pool
        self.reason: str | None = None
        self.reference_epoch = float("nan")
        self.context = TimeContext(reference=None)
        times = store.timestamps
        if times is None:
            self.reason = "the store was built without timestamps (store.timestamps is off)"
            return
        span = times.span(store.allowed)
        if span is None:
            self.reason = "no document in scope has a timestamp"
            return
        tz: tzinfo = UTC
        if store.config.timestamps is not None:
            tz = parse_timezone(store.config.timestamps.default_timezone)
        self.reference_epoch = span[1] if reference_epoch is None else reference_epoch
        self.context = TimeContext(
            reference=datetime.fromtimestamp(self.reference_epoch, tz=tz),
            earliest=datetime.fromtimestamp(span[0], tz=tz),
            tz=tz,
        )
        self.timed = times.has_time(store.allowed)
        self.epochs = np.asarray(times.epoch_seconds, dtype=np.float64)

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        return self.reason

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        return [self._one(context, depth) for context in contexts]

    def _one(self, context: QueryContext, depth: int) -> Hits:
        if self.reason is not None:
            raise RuntimeError(self.reason)
        if context.vector is None:
            raise RuntimeError("no query vector (the embedder failed)")
        similarity = self.store.vectors.scores(context.vector).astype(np.float64)
        ranges = resolve_all(context.analysis.time_expressions, self.context)
        _, rows = top_k_1d(similarity, self.pool, mask=self.timed)
        inside = np.zeros(len(self.epochs), dtype=bool)
        if ranges:
            inside = in_ranges(self.epochs, ranges) & self.timed
            if inside.any():
                _, in_rows = top_k_1d(similarity, self.pool, mask=inside)
                rows = np.union1d(rows, in_rows)
        rows = np.sort(np.asarray(rows, dtype=np.int64))
        age_days = np.maximum(self.reference_epoch - self.epochs[rows], 0.0) / _SECONDS_PER_DAY
        recency = np.exp(-age_days / self.decay_days)
        scores = inside[rows].astype(np.float64) + np.maximum(similarity[rows], 0.0) * recency
        order = np.lexsort((rows, -scores))[:depth]
        return rows[order], scores[order]


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
        indices += sorted(vocabulary.setdefault(part, len(vocabulary)) for part in parts)
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

    def __init__(self, store: ContextStore, fields: Sequence[str]) -> None:
        self.store = store
        self.fields = tuple(fields)
        self._index: _NameIndex | None = None
        self._in_scope: BoolArray | None = None

    @property
    def index(self) -> _NameIndex:
        if self._index is None:
            key = "names:" + "\x1f".join(self.fields)
            index: _NameIndex = _SharedIndexes.get(
                self.store.documents, key, lambda: _build_name_index(self.store.documents, self.fields)
            )
            self._in_scope = index.has_name & _scope_mask(self.store)
            self._index = index
        return self._index

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        index = self.index
        if self._in_scope is None or not self._in_scope.any():
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
        in_scope = self._in_scope if self._in_scope is not None else index.has_name & _scope_mask(self.store)
        term_ids = sorted({index.vocabulary[t] for t in analysis.structural_terms if t in index.vocabulary})
        query_weight = np.zeros(index.idf.shape[0], dtype=np.float64)
        query_weight[term_ids] = index.idf[term_ids]
        matched = np.asarray(index.matrix @ query_weight, dtype=np.float64).ravel()
        total = float(query_weight.sum()) + index.row_weight
        with np.errstate(invalid="ignore", divide="ignore"):
            dice = np.where(total > 0, 2.0 * matched / np.where(total > 0, total, 1.0), 0.0)
        exact_rows = self._exact_rows(analysis)
        dice[exact_rows] += 1.0
        candidates = in_scope & (dice > 0)
        if not candidates.any():
            return _hits([], [])
        scores, rows = top_k_1d(dice, depth, mask=candidates)
        return _hits(scores, rows)


def _token_rows(documents: Sequence[Any]) -> dict[str, IntArray]:
    """token -> rows holding it (whole lowercase words of 2+ characters of title and text)."""
    postings: dict[str, list[int]] = {}
    for row, doc in enumerate(documents):
        for token in set(_WORD_RE.findall(doc.full_text.lower())):
            postings.setdefault(token, []).append(row)
    return {token: np.asarray(rows, dtype=np.int64) for token, rows in postings.items()}


def _importance(documents: Sequence[Any]) -> FloatArray:
    values = np.zeros(len(documents), dtype=np.float64)
    for row, doc in enumerate(documents):
        raw = doc.metadata.get("importance")
        if _is_number(raw) and math.isfinite(float(raw)):
            values[row] = min(max(float(raw), 0.0), 10.0)
    return values


class FullTextStrategy:
    """BM25 over the store's index, or the seed design's keyword-ratio-plus-importance score."""

    name = "fulltext"

    def __init__(self, store: ContextStore, scoring: str) -> None:
        self.store = store
        self.scoring = scoring

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        if self.scoring == "seed" and not analysis.keywords:
            return "the query has no keyword"
        return None

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        if self.scoring == "bm25":
            queries = [context.analysis.query for context in contexts]
            return [_hits(s, r) for s, r in self.store.bm25.search(queries, depth, mask=self.store.allowed)]
        postings: dict[str, IntArray] = _SharedIndexes.get(
            self.store.documents, "tokens", lambda: _token_rows(self.store.documents)
        )
        importance: FloatArray = _SharedIndexes.get(
            self.store.documents, "importance", lambda: _importance(self.store.documents)
        )
        scope = _scope_mask(self.store)
        results: list[Hits] = []
        for context in contexts:
            keywords = context.analysis.keywords
            matches = np.zeros(len(self.store), dtype=np.float64)
            for keyword in keywords:
                rows = postings.get(keyword)
                if rows is not None:
                    matches[rows] += 1.0
            candidates = scope & (matches > 0)
            if not keywords or not candidates.any():
                results.append(_hits([], []))
                continue
            scores = matches / len(keywords) * 0.6 + importance / 10.0 * 0.4
            top_scores, top_rows = top_k_1d(scores, depth, mask=candidates)
            results.append(_hits(top_scores, top_rows))
        return results


# --------------------------------------------------------------------------------------------
# The retriever
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    weights: dict[str, float]  # strategies to run (in STRATEGIES order) and their weights
    skipped: dict[str, str]


class MultiStrategyRetriever:
    """Query analysis, concurrent strategies with time limits, consensus (or RRF) fusion.

    ``retrieve`` / ``retrieve_batch`` as every retriever; each result's provenance holds the
    query's ``intent``, ``fusion``, per-strategy ``rank``/``score``/``normalized``/``weight``
    (``strategies``), ``n_strategies``, and the query's ``skipped`` and ``dropped`` strategies
    with the reason.
    """

    Params = MultiStrategyParams

    def __init__(
        self,
        store: ContextStore,
        embedder: Embedder | None = None,
        *,
        weights: Mapping[str, Mapping[str, float]] = DEFAULT_WEIGHTS,
        evidence_weights: Mapping[str, float] = DEFAULT_EVIDENCE_WEIGHTS,
        strategies: Sequence[str] = STRATEGIES,
        rules: Sequence[Mapping[str, Any]] | None = None,
        mixed_ratio: float = 0.75,
        min_intent_score: float = 1.0,
        default_intent: str = "FACTUAL",
        fusion: str = "consensus",
        normalization: str = "minmax",
        consensus_boost: float = 0.1,
        rrf_k: int = 60,
        candidate_k: int = 100,
        decay_days: float = 30.0,
        reference_time: str | float = "latest",
        temporal_pool: int = 100,
        structural_fields: Sequence[str] = DEFAULT_STRUCTURAL_FIELDS,
        fulltext_scoring: str = "bm25",
        timeout_seconds: float = 10.0,
        query_batch_size: int = 256,
    ) -> None:
        self.params = MultiStrategyParams(
            weights=weights,
            evidence_weights=evidence_weights,
            strategies=strategies,
            rules=rules,
            mixed_ratio=mixed_ratio,
            min_intent_score=min_intent_score,
            default_intent=default_intent,
            fusion=fusion,
            normalization=normalization,
            consensus_boost=consensus_boost,
            rrf_k=rrf_k,
            candidate_k=candidate_k,
            decay_days=decay_days,
            reference_time=reference_time,
            temporal_pool=temporal_pool,
            structural_fields=structural_fields,
            fulltext_scoring=fulltext_scoring,
            timeout_seconds=timeout_seconds,
            query_batch_size=query_batch_size,
        )
        params = self.params
        needs_vectors = any(name in params.strategies for name in ("semantic", "temporal"))
        if needs_vectors:
            if embedder is None:
                raise ValueError("the semantic and temporal strategies need an embedder; pass embedder=")
            if embedder.name != store.embedder_name:
                raise ValueError(
                    f"embedder {embedder.name!r} is not the one the store was built with ({store.embedder_name!r})"
                )
        self.store = store
        self.embedder = embedder
        self.analyzer = QueryAnalyzer(
            DEFAULT_RULES if params.rules is None else params.rules,
            mixed_ratio=params.mixed_ratio,
            min_score=params.min_intent_score,
            default_intent=params.default_intent,
        )
        available: dict[str, Callable[[], Strategy]] = {
            "semantic": lambda: SemanticStrategy(store),
            "temporal": lambda: TemporalStrategy(
                store,
                decay_days=params.decay_days,
                reference_epoch=params.reference_epoch,
                pool=params.temporal_pool,
            ),
            "structural": lambda: StructuralStrategy(store, params.structural_fields),
            "fulltext": lambda: FullTextStrategy(store, params.fulltext_scoring),
        }
        #: the strategies this retriever may run, by name (replaceable, e.g. in tests)
        self.strategies: dict[str, Strategy] = {name: available[name]() for name in params.strategies}

    # -- planning ------------------------------------------------------------------------------

    def plan(self, analysis: QueryAnalysis) -> _Plan:
        """Which strategies run for this query, with which weights, and which are skipped (why)."""
        row = dict(self.params.weights[analysis.intent])
        features = {
            "time_expression": bool(analysis.time_expressions),
            "code_identifier": bool(analysis.identifiers),
        }
        for name, feature in EVIDENCE.items():
            if name not in row and features[feature] and name in self.params.evidence_weights:
                row[name] = self.params.evidence_weights[name]
        weights: dict[str, float] = {}
        skipped: dict[str, str] = {}
        for name in STRATEGIES:
            weight = row.get(name, 0.0)
            if weight <= 0:
                continue
            strategy = self.strategies.get(name)
            if strategy is None:
                skipped[name] = "not enabled (strategies)"
                continue
            reason = strategy.unavailable(analysis)
            if reason is not None:
                skipped[name] = reason
                continue
            weights[name] = weight
        return _Plan(weights=weights, skipped=skipped)

    # -- retrieval -----------------------------------------------------------------------------

    def retrieve(self, query: str, top_k: int = 10) -> list[RetrievalResult]:
        return self.retrieve_batch([query], top_k)[0]

    def retrieve_batch(self, queries: Sequence[str], top_k: int = 10) -> list[list[RetrievalResult]]:
        check_top_k(top_k)
        for query in queries:
            check_query(query)
        queries = list(queries)
        if not queries:
            return []
        analyses = [self.analyzer.analyze(query) for query in queries]
        plans = [self.plan(analysis) for analysis in analyses]
        vectors, encode_error = self._encode(queries, plans)
        contexts = [
            QueryContext(analysis=analysis, vector=None if vectors is None else vectors[i])
            for i, analysis in enumerate(analyses)
        ]
        depth = max(top_k, self.params.candidate_k)
        outcomes = self._run(plans, contexts, depth, encode_error)
        return [
            self._fuse(
                analyses[i],
                plans[i],
                {name: found[i] for name, found in outcomes.items() if i in found},
                top_k,
            )
            for i in range(len(queries))
        ]

    def _encode(self, queries: list[str], plans: list[_Plan]) -> tuple[np.ndarray | None, str | None]:
        if self.embedder is None or not any(
            name in plan.weights for plan in plans for name in ("semantic", "temporal")
        ):
            return None, None
        try:
            size = self.params.query_batch_size
            blocks = [
                self.embedder.encode(queries[s : s + size], kind="query")
                for s in range(0, len(queries), size)
            ]
            vectors = np.ascontiguousarray(np.concatenate(blocks), dtype=np.float32)
            if vectors.shape != (len(queries), self.store.dim) or not np.isfinite(vectors).all():
                raise ValueError(f"embedder returned shape {vectors.shape} or non-finite values")
        except Exception as error:  # the strategies that need vectors are dropped, not the query
            return None, f"embedder failed: {type(error).__name__}: {error}"
        return vectors, None

    def _run(
        self, plans: list[_Plan], contexts: list[QueryContext], depth: int, encode_error: str | None
    ) -> dict[str, dict[int, Hits | str]]:
        """Each planned strategy over its queries, concurrently; per strategy, query index ->
        hits, or the reason it was dropped for that query."""
        members = {name: [i for i, plan in enumerate(plans) if name in plan.weights] for name in STRATEGIES}
        members = {name: indices for name, indices in members.items() if indices}
        outcomes: dict[str, dict[int, Hits | str]] = {}
        if not members:
            return outcomes
        executor = ThreadPoolExecutor(max_workers=len(members), thread_name_prefix="multi-strategy")
        try:
            futures: dict[str, Future[list[Hits]]] = {}
            for name, indices in members.items():
                if encode_error is not None and name in ("semantic", "temporal"):
                    outcomes[name] = dict.fromkeys(indices, encode_error)
                    continue
                batch = [contexts[i] for i in indices]
                futures[name] = executor.submit(self.strategies[name].search, batch, depth)
            start = time.monotonic()
            for name, future in futures.items():
                indices = members[name]
                limit = self.params.timeout_seconds * len(indices)
                try:
                    found = future.result(timeout=max(0.0, start + limit - time.monotonic()))
                    if len(found) != len(indices):
                        raise RuntimeError(f"returned {len(found)} result lists for {len(indices)} queries")
                    outcomes[name] = dict(zip(indices, found, strict=True))
                except FutureTimeout:
                    future.cancel()
                    reason = f"timed out after {limit:g} s"
                    outcomes[name] = dict.fromkeys(indices, reason)
                except Exception as error:
                    outcomes[name] = dict.fromkeys(indices, f"failed: {type(error).__name__}: {error}")
        finally:
            # never wait for a timed-out strategy: its thread ends on its own, its result is unused
            executor.shutdown(wait=False, cancel_futures=True)
        return outcomes

    def _fuse(
        self, analysis: QueryAnalysis, plan: _Plan, found: Mapping[str, Hits | str], top_k: int
    ) -> list[RetrievalResult]:
        params = self.params
        dropped = {name: outcome for name, outcome in found.items() if isinstance(outcome, str)}
        lists = {name: outcome for name, outcome in found.items() if not isinstance(outcome, str)}
        max_weight = max(plan.weights.values(), default=1.0)
        per_row: dict[int, dict[str, dict[str, float]]] = {}
        for name in STRATEGIES:
            if name not in lists:
                continue
            rows, raw = lists[name]
            if not np.isfinite(raw).all():
                dropped[name] = "failed: returned non-finite scores"
                continue
            normalized = normalize_scores(raw, params.normalization)
            weight = plan.weights[name]
            for rank, (row, score, norm) in enumerate(
                zip(rows.tolist(), raw.tolist(), normalized.tolist(), strict=True), 1
            ):
                per_row.setdefault(row, {})[name] = {
                    "rank": rank,
                    "score": score,
                    "normalized": norm,
                    "weight": weight,
                }
        scored: list[tuple[float, int]] = []
        for row, by_strategy in per_row.items():
            if params.fusion == "consensus":
                contributions = [
                    entry["weight"] / max_weight * entry["normalized"] for entry in by_strategy.values()
                ]
                score = consensus_fuse(contributions, params.consensus_boost)
            else:
                score = weighted_rrf(
                    {name: int(entry["rank"]) for name, entry in by_strategy.items()},
                    {name: entry["weight"] for name, entry in by_strategy.items()},
                    params.rrf_k,
                )
            scored.append((score, row))
        scored.sort(key=lambda item: (-item[0], item[1]))  # rows are in doc id order
        doc_ids = self.store.doc_ids
        return [
            RetrievalResult(
                doc_id=doc_ids[row],
                score=score,
                provenance={
                    "intent": analysis.intent,
                    "fusion": params.fusion,
                    "strategies": per_row[row],
                    "n_strategies": len(per_row[row]),
                    "skipped": plan.skipped,
                    "dropped": dropped,
                },
            )
            for score, row in scored[:top_k]
        ]
