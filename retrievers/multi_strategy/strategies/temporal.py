"""The temporal strategy: semantically relevant documents re-ordered by time.

Candidates are the ``pool`` documents most similar to the query among those with a time, plus as
many among those inside the query's time range (when it names one), all within the retriever's
mask (scope and filters: the time span and the pool are taken over the allowed rows only).
Score::

    in_range + max(cos, 0) * exp(-age_days / decay_days)

``in_range`` is 1 for documents inside a range the query names (so they come first), else 0;
``age_days`` is counted back from the reference time (``latest`` = the latest document time
among the allowed rows, e.g. a LoCoMo conversation's last session; or a fixed time), 0 for
documents after it. Relevance times recency, never recency alone: the newest irrelevant turn
does not win.

``scoring`` other than ``relevance`` reproduces the Memory-Arc seed's
``TemporalRetrievalStrategy``, which ignores relevance: the candidates are the timed documents
inside the query's time range when it names one (the seed takes +-1 day around its first time
expression; here the analyser's resolved ranges) and some lie there, else those of the last
``window_days`` days before the reference time (the seed: 30; None = every timed document), and

* ``recency``: ``score = exp(-age_days / decay_days)`` (the seed: ``2.71828 ** (-age_days / 30)``);
* ``flat``: ``score = 0.8`` for every candidate (the seed with ``boost_recent=False``): ties, which
  the ranking order breaks by row (doc id).

So the newest turns of the conversation come first whatever the question asks, which is what makes
the seed's temporal strategy wrong for "when did X happen?".
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo

import numpy as np
import numpy.typing as npt

from retrievers.multi_strategy.analysis import QueryAnalysis
from retrievers.multi_strategy.strategies.base import Hits, QueryContext
from retrievers.ranking import order_rows, top_k_1d
from retrievers.store import ContextStore
from retrievers.timeparse.expressions import resolve_all
from retrievers.timeparse.ranges import TimeContext, in_ranges
from retrievers.timeparse.stamps import parse_timezone

__all__ = ["TemporalStrategy"]

_SECONDS_PER_DAY = 86400.0
#: the Memory-Arc seed's score of every temporal match without recency (``boost_recent=False``)
FLAT_SCORE = 0.8


class TemporalStrategy:
    """Semantic candidates re-ordered by time range and recency (see the module docstring)."""

    name = "temporal"

    def __init__(
        self,
        store: ContextStore,
        mask: npt.NDArray[np.bool_] | None,
        *,
        decay_days: float,
        reference_epoch: float | None,
        pool: int,
        scoring: str = "relevance",
        window_days: float | None = None,
    ) -> None:
        self.store = store
        self.decay_days = decay_days
        self.pool = pool
        self.scoring = scoring
        self.window_days = window_days
        self.reason: str | None = None
        self.reference_epoch = float("nan")
        self.context = TimeContext(reference=None)
        times = store.timestamps
        if times is None:
            self.reason = "the store was built without timestamps (store.timestamps is off)"
            return
        span = times.span(mask)
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
        self.timed = times.has_time(mask)
        self.epochs = np.asarray(times.epoch_seconds, dtype=np.float64)

    def unavailable(self, analysis: QueryAnalysis) -> str | None:
        return self.reason

    def search(self, contexts: Sequence[QueryContext], depth: int) -> list[Hits]:
        return [self._one(context, depth) for context in contexts]

    def _one(self, context: QueryContext, depth: int) -> Hits:
        if self.reason is not None:
            raise RuntimeError(self.reason)
        if self.scoring != "relevance":
            return self._seed(context, depth)
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
        order = order_rows(rows, scores)[:depth]
        return scores[order], rows[order]

    def _seed(self, context: QueryContext, depth: int) -> Hits:
        """Memory-Arc's scoring (``recency`` or ``flat``), relevance ignored (module docstring)."""
        candidates = self.timed
        ranges = resolve_all(context.analysis.time_expressions, self.context)
        inside = in_ranges(self.epochs, ranges) & self.timed if ranges else None
        if inside is not None and inside.any():
            candidates = inside
        elif self.window_days is not None:
            since = self.reference_epoch - self.window_days * _SECONDS_PER_DAY
            candidates = self.timed & (self.epochs >= since) & (self.epochs <= self.reference_epoch)
        rows = np.flatnonzero(candidates).astype(np.int64)
        if self.scoring == "flat":
            scores = np.full(rows.size, FLAT_SCORE, dtype=np.float64)
        else:
            age_days = np.maximum(self.reference_epoch - self.epochs[rows], 0.0) / _SECONDS_PER_DAY
            scores = np.exp(-age_days / self.decay_days)
        order = order_rows(rows, scores)[:depth]
        return scores[order], rows[order]
