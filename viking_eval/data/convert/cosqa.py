"""Converter for CoSQA's code-search retrieval split as shipped by CoCLR.

CoSQA (Huang et al., ACL 2021) pairs real web queries with Python functions. CoCLR's
``data/search`` holds the retrieval set-up: ``code_idx_map.txt`` (a JSON object mapping each
function's source to its integer index, the 6,267-function code base) and two JSON lists of 500
query items each (``cosqa-retrieval-test-500.json``, ``cosqa-retrieval-dev-500.json``), every
item naming its one relevant function by ``retrieval_idx``. The BEIR view: one document per
function (``_id`` = its index, text = the code unchanged, ``metadata.func_name`` parsed from the
``def`` line), one query per item (``_id`` = the item's CoSQA ``idx``, test items first), and a
judgment of 1 per item in ``qrels/<split>.tsv``. Each item's ``code`` must map to its
``retrieval_idx`` and its ``label`` must be 1, so a mismatched code base is caught.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from viking_eval.data.convert._common import JsonSource, write_jsonl, write_qrels
from viking_eval.data.errors import DataError

__all__ = ["CODE_MAP", "SPLIT_FILES", "convert_cosqa"]

CODE_MAP = "code_idx_map.txt"
SPLIT_FILES = {"test": "cosqa-retrieval-test-500.json", "dev": "cosqa-retrieval-dev-500.json"}
"""Query files by split, in the order their queries are written to ``queries.jsonl``."""

_FUNC_RE = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)")
_ITEM_KEYS = ("idx", "doc", "code", "label", "retrieval_idx")


def _load(path: Path) -> JsonSource:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc}") from None
    return JsonSource(str(path), data)


def _code_base(source: JsonSource) -> dict[int, str]:
    """``{index: code}`` from the code map, ordered by index; indexes must be 0..n-1 once each."""
    mapping = source.value
    if not isinstance(mapping, dict) or not mapping:
        raise source.error((), "expected a JSON object mapping code -> integer index (code_idx_map.txt)")
    by_index: dict[int, str] = {}
    for code, index in mapping.items():
        if isinstance(index, bool) or not isinstance(index, int):
            raise source.error((code,), f"index must be an integer, got {type(index).__name__}")
        if index in by_index:
            raise source.error((code,), f"index {index} is given to two functions")
        by_index[index] = code
    if sorted(by_index) != list(range(len(by_index))):
        missing = min(set(range(len(by_index))) - set(by_index))
        raise source.error((), f"indexes must run 0..{len(by_index) - 1}; {missing} is missing")
    return {index: by_index[index] for index in range(len(by_index))}


def _documents(source: JsonSource, code_base: Mapping[int, str]) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for index, code in code_base.items():
        match = _FUNC_RE.match(code)
        if match is None:
            raise source.error((code,), f"function {index} has no 'def <name>' line")
        metadata = {"language": "python", "func_name": match.group(1)}
        documents.append({"_id": str(index), "title": "", "text": code, "metadata": metadata})
    return documents


def _split(
    source: JsonSource, split: str, code_index: Mapping[str, int], seen: dict[str, str]
) -> tuple[list[dict[str, Any]], list[tuple[str, str, int]]]:
    """Query records and judgments of one split file."""
    items = source.value
    if not isinstance(items, list) or not items:
        raise source.error((), f"expected a non-empty JSON list of query items ({SPLIT_FILES[split]})")
    queries: list[dict[str, Any]] = []
    qrels: list[tuple[str, str, int]] = []
    for position, item in enumerate(items):
        path = (position,)
        if not isinstance(item, dict):
            raise source.error(path, f"query item must be a JSON object, got {type(item).__name__}")
        for key in _ITEM_KEYS:
            if key not in item:
                raise source.error(path, f"query item is missing key {key!r}")
        query_id, text, target = item["idx"], item["doc"], item["retrieval_idx"]
        if not isinstance(query_id, str) or not query_id or not isinstance(text, str):
            raise source.error(path, "query item 'idx' and 'doc' must be non-empty strings")
        if query_id in seen:
            raise source.error((*path, "idx"), f"duplicate query id {query_id!r} (also in {seen[query_id]})")
        seen[query_id] = split
        if item["label"] != 1:
            raise source.error((*path, "label"), f"label must be 1 (relevant), got {item['label']!r}")
        if code_index.get(item["code"]) != target or isinstance(target, bool):
            raise source.error(
                (*path, "retrieval_idx"),
                f"retrieval_idx {target!r} does not match the index of the item's code in {CODE_MAP} "
                f"({code_index.get(item['code'], 'code not found')})",
            )
        queries.append({"_id": query_id, "text": text, "metadata": {"split": split}})
        qrels.append((query_id, str(target), 1))
    return queries, qrels


def convert_cosqa(raw: Mapping[str, Path], out: Path) -> list[str]:
    """Convert CoCLR's three files (``raw`` maps each expected file name to its path) into
    ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv`` and ``qrels/dev.tsv`` in ``out``;
    return the relative paths written."""
    code_source = _load(raw[CODE_MAP])
    code_base = _code_base(code_source)
    code_index = {code: index for index, code in code_base.items()}
    documents = _documents(code_source, code_base)
    queries: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    written = ["corpus.jsonl", "queries.jsonl"]
    qrels_by_split: dict[str, list[tuple[str, str, int]]] = {}
    for split, file_name in SPLIT_FILES.items():
        split_queries, qrels_by_split[split] = _split(_load(raw[file_name]), split, code_index, seen)
        queries.extend(split_queries)
    write_jsonl(out / "corpus.jsonl", documents)
    write_jsonl(out / "queries.jsonl", queries)
    for split, rows in qrels_by_split.items():
        write_qrels(out / f"qrels/{split}.tsv", rows)
        written.append(f"qrels/{split}.tsv")
    return written
