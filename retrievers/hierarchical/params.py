"""The hierarchical retriever's query-time parameters (the tree itself is a store setting,
``store.hierarchy``), declared once; :mod:`retrievers.params` validates them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from retrievers.kernel import BIG, RetrieverParams
from retrievers.params import param

__all__ = ["HierarchicalParams"]


@dataclass(frozen=True)
class HierarchicalParams(RetrieverParams):
    """OpenViking's knobs (the kernel's, see RetrieverParams, plus these). ``reranker`` scores
    start points and children inside the traversal (``mode: thinking``), so ``rerank_depth``
    does not apply and is refused."""

    alpha: float = param(0.5, low=0.0, high=1.0, doc="final = alpha * child + (1 - alpha) * parent")
    global_search_levels: tuple[int, ...] = param(
        (0, 1),
        choices=(0, 1, 2),
        non_empty=True,
        unique=True,
        doc="records searched first: 0 abstracts, 1 overviews, 2 leaves",
    )
    global_search_topk: int = param(10, low=1, high=BIG, doc="global search limit is max(top_k, this)")
    child_limit: int | None = param(
        None, low=1, high=BIG, doc="children kept per directory; null = max(2 * top_k, 20)"
    )
    threshold: float | None = param(None, doc="keep final > threshold (>= if inclusive); null = off")
    threshold_inclusive: bool = param(False, doc="compare with >= instead of >")
    max_convergence_rounds: int | None = param(
        3, low=1, high=1000, doc="stable top-k rounds before stopping; null = never stop early"
    )
    stagnation_exit: bool = param(True, doc="also stop when the pool has not grown for that many rounds")
    leaf_keyword_weight: float = param(
        0.0,
        low=0.0,
        high=1.0,
        doc="leaf score = (1 - w) * cosine + w * BM25 / the query's best BM25 in scope (0 = cosine only)",
    )
    directory_search: Literal["exact", "ivf", "hnsw"] = param(
        "exact",
        doc="global search over directory records: exact (every record) or ivf (faiss inverted file, "
        "records found rescored exactly; retrievers/hierarchical/directory_index.py); with leaf_probe, "
        "how the leaf directories are ranked: exact, ivf or hnsw (a graph over their records)",
    )
    directory_nprobe: int = param(16, low=1, high=BIG, doc="directory_search ivf: lists probed per query")
    leaf_probe: int = param(
        0,
        low=0,
        high=BIG,
        doc="0 = off; P > 0: the global directory search is a probe of the best P leaf directories, "
        "every member scored at once (retrievers/hierarchical/leaf_probe.py); directory_search picks "
        "how the leaf directories are ranked",
    )
    mode: Literal["quick", "thinking"] = param(
        "thinking", doc="thinking: rerank when a reranker is set; quick: vector scores only"
    )

    def check(self) -> None:
        super().check()
        if self.rerank_depth is not None:
            raise self.fail(
                "rerank_depth",
                "does not apply to the hierarchical retriever: its reranker scores the start points and "
                "the children of each popped directory (mode: thinking); leave it null",
            )
        if self.directory_nprobe != 16 and self.directory_search != "ivf":
            raise self.fail(
                "directory_nprobe", "is for directory_search: ivf; set it or drop directory_nprobe"
            )
        if self.directory_search == "hnsw" and not self.leaf_probe:
            raise self.fail(
                "directory_search",
                "hnsw ranks the leaf directories of the leaf probe: set leaf_probe (> 0), or use "
                "directory_search exact or ivf",
            )
        if self.leaf_probe and self.reranker is not None and self.mode == "thinking":
            raise self.fail(
                "leaf_probe",
                "does not go with a reranker in mode: thinking (the probe scores every member of P "
                "leaf directories at once, which a reranker would be asked to read); set leaf_probe: 0 "
                "or mode: quick",
            )
        # one canonical form: the levels as sorted ints (1.0 passes the choices check as 1)
        object.__setattr__(
            self, "global_search_levels", tuple(sorted(int(level) for level in self.global_search_levels))
        )
