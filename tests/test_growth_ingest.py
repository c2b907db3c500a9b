"""How growth steps put documents into the memory (``growth.ingest``, viking_eval/growth/ingest.py).

- ``add`` (the default) and ``rebuild`` give the same per-query values for BM25 and dense (an
  added-to store's BM25 and exact search are a rebuild's), and each step's record names the
  path that made its store (kind, the store's versions);
- a store ``add`` cannot change (chunked) is built again, and the record says why;
- ``growth.ingest`` takes only its two values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import compose_settings
from incremental_cases import HashEmbedder, make_doc
from test_growth_protocol import write_dataset

from retrievers import StoreConfig
from viking_eval.config import ConfigError
from viking_eval.growth import program
from viking_eval.growth.ingest import StoreRecipe, ingest

OVERRIDES = [
    "growth.by=metadata",
    "growth.order_key=session",
    "growth.steps=null",
    "dataset.scope_key=conversation",
]


def _per_query(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {name: entry["metrics"] for name, entry in record["retrievers"].items()}
        for record in document["steps"]
    ]


def test_added_and_rebuilt_memories_rank_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIKING_EVAL_CACHE", str(tmp_path / "cache"))
    folder = write_dataset(tmp_path / "conv")
    runs = {}
    for how in ("add", "rebuild"):
        settings = compose_settings(
            "experiment=growth_smoke", f"dataset.name={folder}", *OVERRIDES, f"growth.ingest={how}"
        )
        runs[how] = program.run_growth(settings, tmp_path / how)
    added, rebuilt = runs["add"], runs["rebuild"]
    assert [r["ingest"]["kind"] for r in added["steps"]] == ["build", "add", "add"]
    assert [r["ingest"]["kind"] for r in rebuilt["steps"]] == ["build", "rebuild", "rebuild"]
    assert [[v["version"] for v in r["ingest"]["history"]] for r in added["steps"]] == [[], [1, 2], [1, 2, 3]]
    assert [[v["added"] for v in r["ingest"]["history"]] for r in added["steps"]][-1] == [0, 6, 3]
    assert all(r["ingest"]["history"] == [] for r in rebuilt["steps"])
    assert added["ingest_kind"] == "add" and rebuilt["ingest_kind"] == "rebuild"
    assert _per_query(added) == _per_query(rebuilt)  # bm25 and dense: the same values, every step
    assert "ContextStore.add" in (tmp_path / "add" / "growth.md").read_text()


def test_a_store_add_cannot_change_is_built_again() -> None:
    rng = np.random.default_rng(0)
    docs = [make_doc(rng, n) for n in range(12)]
    chunked = StoreConfig.from_dict({"chunking": {"size": 4, "overlap": 0}})
    recipe = StoreRecipe(chunked, HashEmbedder())
    first = ingest(None, docs[:8], recipe)
    second = ingest(first.store, docs[8:], recipe)
    assert (first.kind, second.kind) == ("build", "rebuild")
    assert second.reason is not None and "chunk" in second.reason
    assert sorted(doc.id for doc in second.store.parent_documents) == sorted(doc.id for doc in docs)
    plain = StoreRecipe(StoreConfig(), HashEmbedder())
    grown = ingest(ingest(None, docs[:8], plain).store, docs[8:], plain)
    assert grown.kind == "add" and grown.reason is None and len(grown.store.history) == 2
    assert grown.record()["history"][-1]["added"] == 4


def test_growth_ingest_takes_add_or_rebuild() -> None:
    with pytest.raises(ConfigError, match=r"growth\.ingest"):
        compose_settings("experiment=growth_smoke", "growth.ingest=append")
