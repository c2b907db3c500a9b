"""The graph retriever's query-time parameters and the hop decay they define.

The edges themselves are a store setting (``store.edges``); everything here can change without
rebuilding the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from retrievers.kernel import BIG, RetrieverParams
from retrievers.params import check_number, is_number, param

__all__ = ["MAX_HOPS", "OASIS_DECAY_PAST_LIST", "SCORING_MODES", "GraphParams"]

SCORING_MODES: tuple[str, ...] = ("propagated", "oasis")
#: oasis's factor for hops past the end of its decay list
OASIS_DECAY_PAST_LIST = 0.5
MAX_HOPS = 10
#: the range of a hop decay factor
DECAY_LOW, DECAY_HIGH = 0.0, 1.0


@dataclass(frozen=True)
class GraphParams(RetrieverParams):
    """Query-time parameters of the graph retriever: the kernel's (see RetrieverParams) plus these.

    ``hop_decay`` is a number d in [0, 1] (hop h has the factor d**h) or a non-empty list of
    numbers in [0, 1] (hop h has ``hop_decay[h]``; see :meth:`hop_factor` past its end);
    ``relation_filter`` is kept sorted and without repeats."""

    seed_top_k: int = param(10, low=1, high=BIG, doc="seeds taken from the vector search")
    seed_keyword_weight: float = param(
        0.0, low=0.0, high=1.0, doc="> 0: BM25 seeds fused in by normalised weighted RRF (0 = vector only)"
    )
    rrf_k: int = param(60, low=1, high=BIG, doc="RRF constant of the seed fusion")
    max_hops: int = param(2, low=0, high=MAX_HOPS, doc="traversal depth (0 = seeds only)")
    bidirectional: bool = param(False, doc="also walk edges backwards")
    relation_filter: tuple[str, ...] | None = param(
        None, non_empty=True, doc="relations to follow; null = all"
    )
    min_traversal_score: float = param(0.0, low=0.0, high=1.0, doc="follow only edges with weight >= this")
    vector_weight: float = param(0.7, low=0.0, high=1.0, doc="weight of the seed score")
    graph_weight: float = param(0.3, low=0.0, high=1.0, doc="weight of the graph bonus")
    hop_decay: float | tuple[float, ...] = param(
        (1.0, 0.7, 0.5),
        low=DECAY_LOW,
        high=DECAY_HIGH,
        non_empty=True,
        doc="factor of hop h = hop_decay[h] ([0] is the seeds'); a number d means d**h",
    )
    scoring: Literal["propagated", "oasis"] = param(
        "propagated", doc="propagated: best path, source relevance carried | oasis: oasis's exact scoring"
    )
    graph_top_k: int = param(0, low=0, high=BIG, doc="slots of the list reserved for graph-found documents")
    max_frontier: int = param(0, low=0, high=BIG, doc="documents of a hop expanded further (0 = all)")
    rescore_reached: bool = param(
        True, doc="graph-found documents also get vector_weight * their own cosine (false: oasis)"
    )
    vector_fill: bool = param(
        True,
        doc="vector search ranks past the seeds are candidates too, scored by their own cosine "
        "(false: the list is seeds + graph-found only, as in oasis)",
    )

    def __post_init__(self) -> None:
        # A union whose every form fails gets a generic message ("a number or a list"); check
        # hop_decay first in the form its value has, so the message names the range it missed.
        decay = self.hop_decay
        if is_number(decay):
            check_number(self.key("hop_decay"), decay, DECAY_LOW, DECAY_HIGH)
        elif isinstance(decay, Sequence) and not isinstance(decay, str):
            if not decay:
                raise self.fail("hop_decay", "must not be empty")
            for i, value in enumerate(decay):
                check_number(self.key(f"hop_decay[{i}]"), value, DECAY_LOW, DECAY_HIGH)
        super().__post_init__()
        if self.relation_filter is not None:
            object.__setattr__(self, "relation_filter", tuple(sorted(set(self.relation_filter))))

    def hop_factor(self, hop: int) -> float:
        """The decay factor of a document reached at ``hop`` >= 1: ``hop_decay[hop]``, or
        ``hop_decay ** hop`` for a single number. Past the end of the list the last value holds
        (``propagated``) or the factor is oasis's constant 0.5 (``oasis``)."""
        if isinstance(self.hop_decay, float):
            return float(self.hop_decay**hop)
        if hop < len(self.hop_decay):
            return self.hop_decay[hop]
        return self.hop_decay[-1] if self.scoring == "propagated" else OASIS_DECAY_PAST_LIST
