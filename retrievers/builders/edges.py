"""Edge builders: run once at store build, merged into one :class:`~retrievers.store.edges.EdgeSet`.

Any combination, from :class:`~retrievers.store.edge_config.EdgeConfig`:

- ``similar_to``: each document's ``k`` nearest neighbours by cosine of the store embeddings,
  kept when the cosine is >= ``min_sim`` (weight = cosine); ``same_keys`` limits neighbours to
  documents that agree on those metadata keys (LoCoMo: the same conversation). Exact search,
  ``O(n^2 / groups)`` dot products in blocks.
- ``sequence``: consecutive documents within a group (``group_keys``, e.g. LoCoMo's conversation
  and session), in ``order_key`` order (e.g. ``turn_index``; ties and a missing key: doc id order).
- ``references``: links given by the data: metadata ``fields`` naming other document ids, as a
  single id, a list of ids, or a list of lists whose ``id_index``-th element is the id (CISI's
  ``xrefs`` entries are ``[other_doc, count, this_doc]``).
- ``mentions``: documents sharing rare terms: each document's ``terms_per_doc`` top TF-IDF terms
  (the BM25 tokenizer's stemmed terms, :func:`retrievers.text.tokenize`, weighted ``(1 + ln tf)
  * ln(N / df)``); a term among the top terms of more than ``max_fanout`` documents links none
  (its fan-out is capped); weight = shared terms / ``terms_per_doc``.
- ``llm``: typed edges an OpenAI-compatible LLM names within batches of documents.

Bad links are dropped and counted (see :class:`~retrievers.store.edges.EdgeReport`) and logged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from retrievers.builders.edge_groups import RowGroups, group_name, remember
from retrievers.llm import ChatClient, LLMError, parse_json_content
from retrievers.params import is_int, is_number
from retrievers.ranking import top_k_rows
from retrievers.store.edge_config import (
    LLM_RELATIONS,
    EdgeConfig,
    LLMEdgeConfig,
    MentionEdgeConfig,
    ReferenceEdgeConfig,
    SequenceEdgeConfig,
    SimilarityEdgeConfig,
)
from retrievers.store.edges import MAX_EXAMPLES, EdgeReport, EdgeSet
from retrievers.text import tokenize
from retrievers.types import Document, Edge

__all__ = ["build_edges"]

log = logging.getLogger(__name__)

_SIMILARITY_BLOCK = 1024

IntArray = npt.NDArray[np.int64]


@dataclass
class _Links:
    """Edges collected from the builders before they become one EdgeSet."""

    sources: list[IntArray] = field(default_factory=list)
    targets: list[IntArray] = field(default_factory=list)
    weights: list[npt.NDArray[np.float64]] = field(default_factory=list)
    relations: list[str] = field(default_factory=list)
    report: EdgeReport = field(default_factory=EdgeReport)

    def add(
        self, relation: str, sources: npt.ArrayLike, targets: npt.ArrayLike, weights: npt.ArrayLike
    ) -> None:
        src = np.asarray(sources, dtype=np.int64)
        self.sources.append(src)
        self.targets.append(np.asarray(targets, dtype=np.int64))
        self.weights.append(np.broadcast_to(np.asarray(weights, dtype=np.float64), src.shape).copy())
        self.relations.append(relation)


def _group_rows(
    documents: Sequence[Document],
    keys: Sequence[str],
    report: EdgeReport,
    what: str,
    known: dict[tuple[str, ...], RowGroups] | None = None,
) -> list[IntArray]:
    """Rows grouped by their values of metadata ``keys`` (one group of all rows when there are no
    keys); documents lacking a key belong to no group and are counted as ``<what>.missing_key``.
    With ``known``, the rows' groups are put in it under ``tuple(keys)`` (for later changes:
    :mod:`retrievers.builders.edge_groups`)."""
    if not keys:
        return [np.arange(len(documents), dtype=np.int64)]
    groups: dict[tuple[str, ...], list[int]] = {}
    for row, doc in enumerate(documents):
        name = group_name(doc.metadata, keys)
        if name is None:
            report.drop(f"{what}.missing_key", 1, doc.id)
            continue
        groups.setdefault(name, []).append(row)
    ordered = [(name, np.asarray(rows, dtype=np.int64)) for name, rows in sorted(groups.items())]
    if known is not None:
        code = np.full(len(documents), -1, dtype=np.int64)
        for i, (_, rows_of_group) in enumerate(ordered):
            code[rows_of_group] = i
        known[tuple(keys)] = RowGroups(code, tuple(name for name, _ in ordered))
    return [rows for _, rows in ordered]


def _similarity_edges(
    documents: Sequence[Document],
    embeddings: npt.ArrayLike,
    config: SimilarityEdgeConfig,
    links: _Links,
    known: dict[tuple[str, ...], RowGroups] | None = None,
) -> None:
    matrix = np.asarray(embeddings, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(documents):
        raise ValueError(
            f"similar_to edges need one embedding row per document, got shape {matrix.shape} "
            f"for {len(documents)} documents"
        )
    for rows in _group_rows(documents, config.same_keys, links.report, "similar_to", known):
        k = min(config.k, rows.size - 1)
        if k < 1:
            continue
        group = matrix[rows]
        for start in range(0, rows.size, _SIMILARITY_BLOCK):
            block = group[start : start + _SIMILARITY_BLOCK] @ group.T
            local = np.arange(block.shape[0])
            block[local, start + local] = -np.inf  # never its own neighbour
            scores, columns = top_k_rows(block, k)
            keep = np.isfinite(scores) & (scores >= config.min_sim)
            src = np.repeat(rows[start + local], k).reshape(-1, k)[keep]
            links.add(
                "similar_to",
                src,
                rows[columns[keep]],
                np.clip(scores[keep].astype(np.float64), 0.0, 1.0),
            )


def _order_value(value: object) -> tuple[int, float, str]:
    """Numbers (and numeric strings) in numeric order, then other values as strings."""
    if is_number(value):
        return (0, float(value), "")
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return (1, 0.0, text)
    return (0, number, "") if math.isfinite(number) else (1, 0.0, text)


def _sequence_edges(
    documents: Sequence[Document],
    config: SequenceEdgeConfig,
    links: _Links,
    known: dict[tuple[str, ...], RowGroups] | None = None,
) -> None:
    for rows in _group_rows(documents, config.group_keys, links.report, "sequence", known):
        ordered: list[tuple[tuple[int, float, str], int]] = []
        for row in rows.tolist():
            metadata = documents[row].metadata
            if config.order_key is None:
                ordered.append(((0, 0.0, ""), row))
            elif config.order_key in metadata:
                ordered.append((_order_value(metadata[config.order_key]), row))
            else:
                links.report.drop("sequence.missing_order_key", 1, documents[row].id)
        ordered.sort()  # by order value, then row (= doc id) for ties
        chain = np.asarray([row for _, row in ordered], dtype=np.int64)
        if chain.size > 1:
            links.add("sequence", chain[:-1], chain[1:], config.weight)


def _reference_id(value: object) -> str | None:
    """A referenced document id: strings as they are, integers (and integral floats) in decimal."""
    if isinstance(value, str):
        return value or None
    if is_int(value):
        return str(int(value))
    if is_number(value) and math.isfinite(float(value)) and float(value).is_integer():
        return str(int(float(value)))
    return None


def _reference_edges(
    documents: Sequence[Document], row_of: Mapping[str, int], config: ReferenceEdgeConfig, links: _Links
) -> None:
    relation = config.relation
    sources: list[int] = []
    targets: list[int] = []
    for row, doc in enumerate(documents):
        for name in config.fields:
            if name not in doc.metadata or doc.metadata[name] is None:
                continue
            value = doc.metadata[name]
            entries = value if isinstance(value, list | tuple) else [value]
            for entry in entries:
                if isinstance(entry, list | tuple):
                    entry = entry[config.id_index] if config.id_index < len(entry) else None
                target = _reference_id(entry)
                if target is None:
                    links.report.drop(f"{relation}.bad_value", 1, f"{doc.id}.{name}: {entry!r}")
                    continue
                target_row = row_of.get(target)
                if target_row is None:
                    links.report.drop(f"{relation}.unknown_id", 1, f"{doc.id} -> {target!r}")
                    continue
                sources.append(row)
                targets.append(target_row)
    links.add(relation, sources, targets, config.weight)


def _mention_edges(documents: Sequence[Document], config: MentionEdgeConfig, links: _Links) -> None:
    tokens = tokenize([doc.full_text for doc in documents])
    n_docs = len(documents)
    doc_freq: dict[str, int] = {}
    for terms in tokens:
        for term in set(terms):
            doc_freq[term] = doc_freq.get(term, 0) + 1
    postings: dict[str, list[int]] = {}
    for row, terms in enumerate(tokens):
        counts: dict[str, int] = {}
        for term in terms:
            counts[term] = counts.get(term, 0) + 1
        # sublinear tf x idf; a term in one document only links nothing and is skipped
        scored = sorted(
            (-(1.0 + math.log(count)) * math.log(n_docs / doc_freq[term]), term)
            for term, count in counts.items()
            if doc_freq[term] > 1
        )
        for _, term in scored[: config.terms_per_doc]:
            postings.setdefault(term, []).append(row)
    pair_counts: dict[tuple[int, int], int] = {}
    over = 0
    for term in sorted(postings):
        rows = postings[term]
        if len(rows) > config.max_fanout:
            over += 1
            continue
        for a in rows:
            for b in rows:
                if a != b:
                    pair_counts[(a, b)] = pair_counts.get((a, b), 0) + 1
    links.report.drop("mentions.terms_over_fanout", over)
    kept = sorted((pair, shared) for pair, shared in pair_counts.items() if shared >= config.min_shared)
    links.add(
        "mentions",
        [a for (a, _), _ in kept],
        [b for (_, b), _ in kept],
        [min(shared / config.terms_per_doc, 1.0) for _, shared in kept],
    )


_LLM_SYSTEM_PROMPT = """You find relationships between passages. Each passage is given as [id]: text.
For every pair of passages A, B where A clearly relates to B, give one edge from A (source) to
B (target) with one of these relations:
{relations}
and a weight: your confidence in (0, 1]. Reply with JSON only, exactly
{{"edges": [{{"source": "<id>", "target": "<id>", "relation": "<relation>", "weight": <number>}}]}}
using only the ids given, never linking a passage to itself; {{"edges": []}} when nothing relates."""


def _llm_batches(
    documents: Sequence[Document], embeddings: npt.ArrayLike | None, config: LLMEdgeConfig
) -> list[list[int]]:
    """Rows of each request. ``sequential``: consecutive rows (a lone last row joins the row
    before it); ``neighbours``: each row followed by its nearest neighbours (cosine, ties by row)."""
    n_docs, size = len(documents), config.batch_size
    if n_docs < 2:
        return []
    if config.batching == "sequential":
        batches = [list(range(start, min(start + size, n_docs))) for start in range(0, n_docs, size)]
        if len(batches[-1]) == 1:
            batches[-1] = [n_docs - 2, n_docs - 1]
        return batches
    if embeddings is None:
        raise ValueError("edges.llm.batching=neighbours needs the store embeddings")
    matrix = np.asarray(embeddings, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != n_docs:
        raise ValueError(f"llm edges need one embedding row per document, got shape {matrix.shape}")
    k = min(size - 1, n_docs - 1)
    batches = []
    for start in range(0, n_docs, _SIMILARITY_BLOCK):
        block = matrix[start : start + _SIMILARITY_BLOCK] @ matrix.T
        local = np.arange(block.shape[0])
        block[local, start + local] = -np.inf  # never its own neighbour
        _, columns = top_k_rows(block, k)
        batches += [[start + i, *columns[i].tolist()] for i in local.tolist()]
    return batches


def _llm_answer(client: ChatClient, system: str, user: str) -> list[Any] | LLMError:
    """The raw edge list of one request, or the error that kept it from coming."""
    try:
        data = parse_json_content(client.complete(system, user))
    except LLMError as error:
        return error
    edges = data.get("edges") if isinstance(data, dict) else data
    if not isinstance(edges, list):
        return LLMError("format", f'answer has no "edges" list: {str(data)[:80]!r}')
    return edges


def _llm_edges(
    documents: Sequence[Document], embeddings: npt.ArrayLike | None, config: LLMEdgeConfig, links: _Links
) -> None:
    batches = _llm_batches(documents, embeddings, config)
    if not batches:
        return
    client = ChatClient(
        config.base_url,
        config.model,
        api_key_env=config.api_key_env,
        timeout_s=config.timeout_s,
        temperature=config.temperature,
    )
    system = _LLM_SYSTEM_PROMPT.format(
        relations="\n".join(f"- {name}: {LLM_RELATIONS[name]}" for name in config.relations)
    )

    def prompt(rows: list[int]) -> str:
        return "\n".join(
            f"[{documents[row].id}]: {' '.join(documents[row].full_text[: config.max_text_chars].split())}"
            for row in rows
        )

    with ThreadPoolExecutor(max_workers=config.workers) as pool:
        answers = list(pool.map(lambda rows: _llm_answer(client, system, prompt(rows)), batches))
    report = links.report
    found: dict[tuple[int, int, str], float] = {}
    failed: list[str] = []
    for number, (rows, answer) in enumerate(zip(batches, answers, strict=True)):
        if isinstance(answer, LLMError):
            failed.append(f"batch {number}: {answer}")
            report.drop("llm.failed_batch", 1, failed[-1])
            continue
        in_batch = {documents[row].id: row for row in rows}
        for item in answer:
            if not isinstance(item, dict):
                report.drop("llm.bad_edge", 1, f"batch {number}: {str(item)[:80]}")
                continue
            source, target = in_batch.get(str(item.get("source"))), in_batch.get(str(item.get("target")))
            relation, weight = item.get("relation"), item.get("weight")
            where = f"batch {number}: {item.get('source')!r} -> {item.get('target')!r}"
            if source is None or target is None:
                report.drop("llm.unknown_id", 1, where + " (not an id of the batch)")
            elif source == target:
                report.drop("llm.self_link", 1, where)
            elif relation not in config.relations:
                report.drop("llm.bad_relation", 1, f"{where}: {relation!r}")
            elif not is_number(weight) or not 0.0 < float(weight) <= 1.0:
                report.drop("llm.bad_weight", 1, f"{where}: {weight!r}")
            elif float(weight) < config.min_weight:
                report.drop("llm.below_min_weight", 1, f"{where}: {weight!r}")
            else:
                key = (source, target, str(relation))
                found[key] = max(found.get(key, 0.0), float(weight))
    if len(failed) > config.max_failed_fraction * len(batches):
        raise RuntimeError(
            f"LLM edge extraction failed for {len(failed)} of {len(batches)} batches, more than "
            f"edges.llm.max_failed_fraction={config.max_failed_fraction:g} (first: {failed[0]}); "
            "nothing was built. Check the endpoint, or raise max_failed_fraction to keep a partial graph"
        )
    kept = sorted(found.items(), key=lambda item: (item[0][0], -item[1], item[0][1], item[0][2]))
    if config.max_edges_per_doc:
        per_source: dict[int, int] = {}
        capped = []
        for key, weight in kept:  # each source's strongest first
            per_source[key[0]] = per_source.get(key[0], 0) + 1
            if per_source[key[0]] <= config.max_edges_per_doc:
                capped.append((key, weight))
        report.drop("llm.over_max_edges_per_doc", len(kept) - len(capped))
        kept = capped
    for relation in config.relations:
        chosen = [(key, weight) for key, weight in kept if key[2] == relation]
        if chosen:
            links.add(
                relation, [key[0] for key, _ in chosen], [key[1] for key, _ in chosen], [w for _, w in chosen]
            )


def build_edges(
    documents: Sequence[Document],
    embeddings: npt.ArrayLike | None,
    config: EdgeConfig,
    *,
    extra_edges: Iterable[Edge] = (),
) -> EdgeSet:
    """Run the configured builders over ``documents`` (store order: sorted by id; row i is
    ``documents[i]``, ``embeddings[i]`` its vector) and merge their edges, plus ``extra_edges``
    given by id (e.g. from an LLM), into one EdgeSet. Dropped links are counted in its report and
    logged."""
    if not documents:
        raise ValueError("cannot build edges over an empty corpus")
    row_of = {doc.id: row for row, doc in enumerate(documents)}
    if len(row_of) != len(documents):
        raise ValueError("documents must have distinct ids")
    links = _Links()
    known: dict[tuple[str, ...], RowGroups] = {}  # the rows' groups, kept for later changes
    if config.similar_to is not None:
        if embeddings is None:
            raise ValueError("similar_to edges need the store embeddings")
        _similarity_edges(documents, embeddings, config.similar_to, links, known)
    if config.sequence is not None:
        _sequence_edges(documents, config.sequence, links, known)
    if config.references is not None:
        _reference_edges(documents, row_of, config.references, links)
    if config.mentions is not None:
        _mention_edges(documents, config.mentions, links)
    if config.llm is not None:
        _llm_edges(documents, embeddings, config.llm, links)
    extra = EdgeSet.from_edges(extra_edges, row_of) if extra_edges else None

    names: list[str] = []
    for relation in [*links.relations, *(extra.relation_names if extra is not None else ())]:
        if relation not in names:
            names.append(relation)
    sources = [*links.sources]
    targets = [*links.targets]
    weights = [*links.weights]
    relation_ids = [
        np.full(src.shape, names.index(rel), dtype=np.int64)
        for src, rel in zip(links.sources, links.relations, strict=True)
    ]
    if extra is not None:
        sources.append(extra.src)
        targets.append(np.asarray(extra.dst, dtype=np.int64))
        weights.append(np.asarray(extra.weight, dtype=np.float64))
        mapping = np.asarray([names.index(name) for name in extra.relation_names], dtype=np.int64)
        relation_ids.append(mapping[np.asarray(extra.relation, dtype=np.int64)])
        extra_report = EdgeReport.of(extra.report)
        for key, count in extra_report.dropped.items():
            links.report.drop(key, count)
            links.report.examples.setdefault(key, []).extend(
                extra_report.examples.get(key, [])[:MAX_EXAMPLES]
            )

    def joined(parts: list[Any], dtype: type) -> Any:
        return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype=dtype)

    for src, relation in zip(links.sources, links.relations, strict=True):
        links.report.candidates[relation] = links.report.candidates.get(relation, 0) + int(src.size)
    if extra is not None:
        links.report.candidates["extra_edges"] = extra.n_edges
    edge_set = EdgeSet.from_arrays(
        len(documents),
        joined(sources, np.int64),
        joined(targets, np.int64),
        joined(weights, np.float64),
        joined(relation_ids, np.int64),
        names,
        report=links.report.as_dict(),
    )
    remember(edge_set, known)
    if edge_set.report["dropped"]:
        log.warning(
            "edges: %d kept (%s); dropped or skipped: %s",
            edge_set.n_edges,
            edge_set.report["by_relation"],
            edge_set.report["dropped"],
        )
    return edge_set
