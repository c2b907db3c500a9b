"""Rank and score fusion (see each module for formulas and sources).

* :mod:`retrievers.fusion.core`: what the retriever families fuse with: weighted RRF, convex
  combination, CombSUM / CombMNZ over normalised scores, consensus fusion, context fusion, the
  tie-breaking order (:func:`ranked`).
* :mod:`retrievers.fusion.norms`, :mod:`retrievers.fusion.methods`,
  :mod:`retrievers.fusion.supervised`, :mod:`retrievers.fusion.runs`: every fusion method and
  normalisation of ranx, by name (:data:`METHODS`, :func:`fuse_runs`, :func:`fuse_legs`), the
  supervised ones learning from judged training runs (:func:`train`). docs/fusion.md lists them.
"""

from __future__ import annotations

from retrievers.fusion.core import (
    NORMALIZATIONS,
    ContextParams,
    Normalization,
    comb_mnz,
    comb_sum,
    consensus_fuse,
    context_fusion,
    context_graph,
    convex_combination,
    edge_neighbours,
    max_consensus_fuse,
    neighbour_graph,
    normalize_scores,
    ranked,
    reciprocal_rank_fusion,
    weighted_average_fusion,
)
from retrievers.fusion.norms import NORMS, normalise_legs
from retrievers.fusion.runs import (
    METHODS,
    MISSING,
    SUPERVISED,
    FusionMethod,
    Model,
    check_options,
    fuse_legs,
    fuse_runs,
    method_spec,
    train,
)

__all__ = [
    "METHODS",
    "MISSING",
    "NORMALIZATIONS",
    "NORMS",
    "SUPERVISED",
    "ContextParams",
    "FusionMethod",
    "Model",
    "Normalization",
    "check_options",
    "comb_mnz",
    "comb_sum",
    "consensus_fuse",
    "context_fusion",
    "context_graph",
    "convex_combination",
    "edge_neighbours",
    "fuse_legs",
    "fuse_runs",
    "max_consensus_fuse",
    "method_spec",
    "neighbour_graph",
    "normalise_legs",
    "normalize_scores",
    "ranked",
    "reciprocal_rank_fusion",
    "train",
    "weighted_average_fusion",
]
