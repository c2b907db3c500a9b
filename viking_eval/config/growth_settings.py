"""``growth``: the growth protocol's settings (viking_eval/growth/, ``experiment=locomo_growth``,
docs/growth.md).

``by`` set makes the command a growth run: the corpus is added to the memory in steps and, after
each step, the questions whose judged documents are all in memory are evaluated. How documents
are ordered into steps:

- ``metadata``: by the value of the document metadata key ``order_key`` (LoCoMo: ``session``), numbers
  in numeric order, other values as text; one step per value, or the values cut into ``steps``
  runs of equal length;
- ``id``: by document id, cut into ``steps`` steps of equal size;
- ``time``: by the timestamp in the metadata key ``order_key`` (epoch seconds, ISO 8601, or LoCoMo's
  ``1:56 pm on 8 May, 2023``; ties by id), cut into ``steps`` steps of equal size.

``ingest``: ``add`` (default) puts each step's documents into the store with
``ContextStore.add`` (incremental: BM25 and exact search as a rebuild's, the tree inserted into
and edges updated); ``rebuild`` builds the whole store again at every step.

``keep_runs``: keep each step's TREC run files (``steps/<n>/runs/``); off by default, since a run
file per retriever per step adds up. Every option is checked before any data is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from retrievers.params import Params, param

__all__ = ["GrowthSettings"]


@dataclass(frozen=True)
class GrowthSettings(Params):
    """See the module docstring."""

    SECTION = "growth"

    by: str | None = param(
        None, choices=("metadata", "id", "time"), doc="how documents are ordered into steps; null = no growth"
    )
    order_key: str | None = param(None, non_empty=True, doc="by=metadata or time: the document metadata key")
    steps: int | None = param(
        None, low=1, high=100_000, doc="the number of steps (by=metadata: null = one per value)"
    )
    keep_runs: bool = param(False, doc="keep every step's run files")
    ingest: str = param(
        "add",
        choices=("add", "rebuild"),
        doc="how a step's documents enter the memory: add = ContextStore.add (incremental), "
        "rebuild = the whole store built again",
    )

    def check(self) -> None:
        if self.by is None:
            return
        if self.by in ("metadata", "time") and self.order_key is None:
            raise self.fail(
                "order_key", f"growth.by={self.by} needs the document metadata key that orders them"
            )
        if self.by == "id" and self.order_key is not None:
            raise self.fail("order_key", "growth.by=id orders documents by id: set growth.order_key=null")
        if self.by in ("id", "time") and self.steps is None:
            raise self.fail("steps", f"growth.by={self.by} needs the number of steps (an integer >= 1)")
