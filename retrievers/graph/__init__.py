"""The graph retriever family: seeds, then multi-hop traversal of the store's edges.

* ``params.py``: :class:`GraphParams`, the query-time parameters and the hop decay;
* ``traversal.py``: the walks of both scoring modes (propagated best path, oasis's first edge);
* ``retriever.py``: :class:`GraphRetriever` on the kernel: seeds, scores, ``graph_top_k``
  selection, provenance (the algorithm is described there).
"""

from retrievers.graph.params import GraphParams
from retrievers.graph.retriever import GraphRetriever

__all__ = ["GraphParams", "GraphRetriever"]
