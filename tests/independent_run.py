"""An independent BM25 run, written and scored without viking_eval or retrievers.

Reads a BEIR folder with ``json`` and ``csv`` only, ranks every document for each judged query of
a split with rank-bm25's ``BM25Okapi`` (lowercased ``\\w+`` tokens, no stemming or stopwords),
writes the top ``depth`` per query as a TREC run, and scores it with pytrec_eval (trec_eval's C
code). tests/test_run_file.py checks that the harness, reading this file through the run-file
retriever, gets the identical nDCG@10; on SciFact::

    python tests/independent_run.py /path/to/datasets/scifact /tmp/scifact_bm25.trec
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytrec_eval
from rank_bm25 import BM25Okapi

TOKEN = re.compile(r"\w+")


def _lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line for line in handle if line.strip()]


def _jsonl(folder: Path, stem: str) -> list[dict[str, str]]:
    path = folder / f"{stem}.jsonl"
    return [json.loads(line) for line in _lines(path if path.is_file() else path.with_suffix(".jsonl.gz"))]


def load(folder: Path, split: str) -> tuple[list[dict[str, str]], dict[str, str], dict[str, dict[str, int]]]:
    corpus = _jsonl(folder, "corpus")
    queries = {record["_id"]: record["text"] for record in _jsonl(folder, "queries")}
    qrels: dict[str, dict[str, int]] = {}
    with open(folder / "qrels" / f"{split}.tsv", encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t")
        next(rows)  # header
        for query_id, doc_id, score in rows:
            qrels.setdefault(query_id, {})[doc_id] = int(score)
    return corpus, queries, qrels


def write_run(
    folder: Path, out: Path, *, split: str = "test", depth: int = 100
) -> dict[str, dict[str, float]]:
    """Rank, write ``out`` (TREC), return the run as {qid: {docid: score}}."""
    corpus, queries, qrels = load(folder, split)
    doc_ids = [doc["_id"] for doc in corpus]
    texts = [f"{doc.get('title', '')} {doc['text']}".lower() for doc in corpus]
    bm25 = BM25Okapi([TOKEN.findall(text) for text in texts])
    run: dict[str, dict[str, float]] = {}
    lines = []
    for query_id in sorted(qrels):
        if query_id not in queries:
            continue
        scores = bm25.get_scores(TOKEN.findall(queries[query_id].lower()))
        top = np.argsort(-scores, kind="stable")[:depth]
        run[query_id] = {doc_ids[i]: float(scores[i]) for i in top}
        lines += [
            f"{query_id} Q0 {doc_ids[i]} {rank} {float(scores[i])!r} rank_bm25"
            for rank, i in enumerate(top, 1)
        ]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run


def ndcg_at_10(folder: Path, run: dict[str, dict[str, float]], *, split: str = "test") -> float:
    """pytrec_eval's nDCG@10 (``ndcg_cut_10``) averaged over the judged queries (a judged query the
    run lacks counts 0, as the harness counts it)."""
    values = per_query_ndcg_at_10(folder, run, split=split)
    return math.fsum(values.values()) / len(values)


def per_query_ndcg_at_10(
    folder: Path, run: dict[str, dict[str, float]], *, split: str = "test"
) -> dict[str, float]:
    """pytrec_eval's ``ndcg_cut_10`` of every judged query (0 for one the run lacks)."""
    _, queries, qrels = load(folder, split)
    judged = {qid: docs for qid, docs in qrels.items() if qid in queries}
    evaluator = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10"})
    per_query = evaluator.evaluate({qid: docs for qid, docs in run.items() if qid in judged and docs})
    return {qid: per_query.get(qid, {}).get("ndcg_cut_10", 0.0) for qid in judged}


if __name__ == "__main__":
    dataset, out_file = Path(sys.argv[1]), Path(sys.argv[2])
    out_file.parent.mkdir(parents=True, exist_ok=True)
    written = write_run(dataset, out_file)
    print(
        f"{out_file}: {sum(map(len, written.values()))} lines; pytrec_eval nDCG@10 = {ndcg_at_10(dataset, written):.6f}"
    )
