"""The retriever contract (retrievers/types.py), enforced on every result list the harness scores.

A retriever, built in (a ``_target_`` config) or handed to ``viking_eval.evaluate`` as an object,
returns for each query a list of :class:`~retrievers.types.RetrievalResult` with

- at most ``top_k`` results (``run.top_k``: the depth every metric and the run file assume),
- doc ids that are strings, each at most once, each a document of the corpus (or of the store:
  a chunked store's parent documents, never chunks),
- finite real-number scores (an int, a float or a numpy number; not a bool, a string or NaN).

``retrieve_batch(queries, top_k)`` returns one such list per query. A breach is a
:class:`RetrieverContractError`: one line naming the retriever, the query and what is wrong, never
a traceback from deep inside the scoring (``'tuple' object has no attribute 'score'``). It is a
:class:`~viking_eval.data.DataError` (bad input: the retriever's output), so the command line
prints it as ``error: ...`` and exits 2, and marks the run folder failed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Container, Sequence

import numpy as np

from retrievers.store.ids import RowIndex
from retrievers.types import RetrievalResult
from viking_eval.data import DataError

__all__ = ["RetrieverContractError", "check_batch", "check_results"]

#: where the contract is written, for the messages
CONTRACT = "the contract in retrievers/types.py, docs/api.md"


class RetrieverContractError(DataError):
    """A retriever returned something the contract does not allow; ``retriever`` and
    ``query_id`` say where (``query_id`` is None for a batch-level breach)."""

    def __init__(self, retriever: str, query_id: str | None, what: str) -> None:
        where = f"query {query_id!r}" if query_id is not None else "a batch of queries"
        super().__init__(f"retriever {retriever!r}, {where}: {what} ({CONTRACT})")
        self.retriever = retriever
        self.query_id = query_id
        self.what = what


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_batch(retriever: str, query_ids: Sequence[str], batch: object) -> list[Sequence[object]]:
    """``retrieve_batch``'s return value: a list (or tuple) with one result list per query."""
    if not isinstance(batch, list | tuple):
        raise RetrieverContractError(
            retriever,
            None,
            f"retrieve_batch returned {type(batch).__name__} {_short(batch)}, not a list with one result "
            f"list per query",
        )
    if len(batch) != len(query_ids):
        raise RetrieverContractError(
            retriever,
            None,
            f"retrieve_batch returned {len(batch)} result lists for {len(query_ids)} queries "
            f"(first query {query_ids[0]!r})",
        )
    for query_id, results in zip(query_ids, batch, strict=True):
        if not isinstance(results, list | tuple):
            raise RetrieverContractError(
                retriever, query_id, f"the result list is a {type(results).__name__} {_short(results)}"
            )
    return list(batch)


def check_results(
    retriever: str, query_id: str, results: Sequence[object], known: Container[str], top_k: int
) -> list[RetrievalResult]:
    """One query's results checked against the contract (module docstring); returned as a list
    of RetrievalResult. Raises RetrieverContractError on the first breach."""
    if len(results) > top_k:
        raise RetrieverContractError(
            retriever,
            query_id,
            f"{len(results)} results for top_k={top_k}; return at most top_k (run.top_k), the depth "
            "every metric and the run file assume",
        )
    unknown = _unknown_ranks(results, known)
    seen: dict[str, int] = {}
    checked: list[RetrievalResult] = []
    for rank, result in enumerate(results, start=1):
        if not isinstance(result, RetrievalResult):
            raise RetrieverContractError(
                retriever,
                query_id,
                f"result {rank} is a {type(result).__name__} {_short(result)}, not a "
                "retrievers.types.RetrievalResult(doc_id, score)",
            )
        doc_id, score = result.doc_id, result.score
        if not isinstance(doc_id, str):
            raise RetrieverContractError(
                retriever, query_id, f"result {rank}: doc id {_short(doc_id)} is not a string"
            )
        if isinstance(score, bool) or not isinstance(score, numbers.Real):
            raise RetrieverContractError(
                retriever,
                query_id,
                f"result {rank} (doc {doc_id!r}): score {_short(score)} is not a number",
            )
        if not math.isfinite(float(score)):
            raise RetrieverContractError(
                retriever, query_id, f"result {rank} (doc {doc_id!r}): score {score} is not finite"
            )
        if doc_id in seen:
            raise RetrieverContractError(
                retriever,
                query_id,
                f"doc {doc_id!r} is returned twice (results {seen[doc_id]} and {rank}); each doc id at most once",
            )
        seen[doc_id] = rank
        if rank in unknown:
            raise RetrieverContractError(
                retriever,
                query_id,
                f"result {rank}: doc {doc_id!r} is not a document of the corpus",
            )
        checked.append(result)
    return checked


def _unknown_ranks(results: Sequence[object], known: Container[str]) -> set[int]:
    """The ranks (from 1) of results whose doc id is a string that is not in ``known``. A store's
    id index (:class:`~retrievers.store.ids.RowIndex`) answers for the whole list in one binary
    search (a lookup a result took most of the check's time); the ids it cannot hold as fixed-width
    bytes (empty, holding NUL, or not encodable as UTF-8) are not documents."""
    strings = [
        (rank, result.doc_id)
        for rank, result in enumerate(results, start=1)
        if isinstance(result, RetrievalResult) and isinstance(result.doc_id, str)
    ]
    if not isinstance(known, RowIndex):
        return {rank for rank, doc_id in strings if doc_id not in known}
    unknown: set[int] = set()
    ranks: list[int] = []
    encoded: list[bytes] = []
    for rank, doc_id in strings:
        try:
            data = doc_id.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no stored id (check_id encodes every one)
            data = b""
        if not data or b"\x00" in data:
            unknown.add(rank)
        else:
            ranks.append(rank)
            encoded.append(data)
    if encoded:
        rows = known.rows(np.array(encoded, dtype=np.bytes_))
        unknown.update(rank for rank, row in zip(ranks, rows.tolist(), strict=True) if row < 0)
    return unknown
