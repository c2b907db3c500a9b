"""Every value of every seed preset (conf/retriever/openviking*.yaml, oasis_hybrid.yaml,
oasis_graph.yaml, memory_arc.yaml) pinned to the seed constant it reproduces, with where the seed
says it (/work/shared/seeds/<file>:<line>, or the seed system's code where its published page is
silent; docs/seeds.md has the full tables). A value that is not the seed's is marked DIFF with the
reason; a project knob the seed does not have is marked PROJECT. A preset that drifts (a value
changed, a key added or removed) fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
OV = "openviking-retrieval.md"  # alt = openviking-retrieval-alt.md

OPENVIKING_DESCENT: dict[str, Any] = {
    "_target_": "retrievers.hierarchical.HierarchicalRetriever",
    "alpha": 0.5,  # OV:127 SCORE_PROPAGATION_ALPHA 0.5; OV:110 final = 0.5 * emb + 0.5 * parent
    "global_search_levels": [0, 1],  # OV:82 "Global vector search to locate starting directories"
    "global_search_topk": 10,  # alt:84 GLOBAL_SEARCH_TOPK 10 (OV:129 and -zh give 3: docs/seeds.md)
    "child_limit": None,  # OpenViking code: max(2 * limit, 20) children per directory (null = that rule)
    "threshold": None,  # DIFF OV:112 "final_score > threshold": off, a threshold belongs to its scorer
    "threshold_inclusive": False,  # OV:112 strict ">"
    "max_convergence_rounds": 3,  # OV:128 MAX_CONVERGENCE_ROUNDS 3; OV:119 topk_unchanged_for_3_rounds
    "stagnation_exit": False,  # OV:102-120 the loop ends on convergence or an empty queue only
    "mode": "thinking",  # OV:134-148 THINKING mode (rerank when a rerank client is configured)
    "filters": None,  # PROJECT (no filters in the seed's find/search)
    "reranker": None,  # OV:139 rerank only with "Rerank AK/SK configured": none here
    "rerank_timeout": None,  # PROJECT
    "query_batch_size": 256,  # PROJECT (batching; no effect on results)
}
SEARCH_SESSION: dict[str, Any] = {
    "typed_scope": True,  # OV:80, OV:93-97 a typed query's context_type picks its root directories
    "session_source": "scope",  # PROJECT: the session is the question's conversation (OV:45-47 inputs)
    "session_order_keys": ["session", "turn_index"],  # PROJECT: how the conversation is ordered
    "session_messages": 5,  # OV:46 "Last 5 messages"
    "session_summary": True,  # OV:45 "Session compression summary"
}
LLM_ANALYZER: dict[str, Any] = {
    "_target_": "retrievers.hierarchical.LLMIntentAnalyzer",  # OV:41 IntentAnalyzer uses an LLM
    "base_url": "${oc.env:VIKING_EVAL_LLM_URL,http://127.0.0.1:8000/v1}",  # PROJECT
    "model": "${oc.env:VIKING_EVAL_LLM_MODEL,gpt-4o-mini}",  # PROJECT (the seed names no model)
    "api_key_env": "OPENAI_API_KEY",  # PROJECT
    "timeout": 30.0,  # PROJECT
    "max_recent_messages": 5,  # OV:46 "Last 5 messages"
}
SEARCH = "retrievers.hierarchical.HierarchicalSearchRetriever"

OASIS = "oasis-retrieval.md"
OASIS_HYBRID: dict[str, Any] = {
    "_target_": "retrievers.hybrid.HybridRetriever",
    "keyword_weight": 0.3,  # oasis:86, oasis:194 WithKeywordWeight default 0.3 (vector 1 - w)
    "fusion": "rrf",  # oasis:69, oasis:80-84 Reciprocal Rank Fusion
    "rrf_k": 60,  # oasis:86 k = 60
    "normalize": True,  # oasis code (rag/retriever.go): fused x (k + 1), needed for min_score 0.05
    "normalization": "minmax",  # PROJECT (score fusions only; unused by rrf)
    "overfetch_multiplier": 3,  # oasis:76, oasis:195 default multiplier 3
    "min_score": 0.05,  # oasis:59 WithMinRetrievalScore(0.05), the documented setting (default 0: oasis:193)
    "parallel": True,  # oasis:68 keyword results fetched in parallel
    "context_weight": 0.0,  # PROJECT (not in oasis)
    "filters": None,  # oasis:196 WithFilters: none
    "reranker": None,  # oasis:192 WithReranker default nil (oasis:58 shows ScoreReranker(0.1) as an example)
    "rerank_depth": None,  # DIFF oasis reranks the whole fused pool; here top_k (same with no reranker)
    "rerank_timeout": None,  # PROJECT
    "query_batch_size": 256,  # PROJECT
}
OASIS_GRAPH: dict[str, Any] = {
    "_target_": "retrievers.graph.GraphRetriever",
    "seed_top_k": 10,  # oasis:167 WithSeedTopK 10
    "seed_keyword_weight": 0.0,  # oasis:168 WithSeedKeywordWeight 0 (disabled)
    "rrf_k": 60,  # oasis:86 k = 60 (the seed fusion uses the same RRF)
    "max_hops": 2,  # oasis:160 WithMaxHops 2
    "bidirectional": False,  # oasis:164 WithBidirectional false
    "relation_filter": None,  # oasis:165 WithRelationFilter: all
    "min_traversal_score": 0.0,  # oasis:166 WithMinTraversalScore 0
    "vector_weight": 0.7,  # oasis:162 WithVectorWeight 0.7
    "graph_weight": 0.3,  # oasis:161 WithGraphWeight 0.3
    "hop_decay": [1.0, 0.7, 0.5],  # oasis:163 WithHopDecay {1.0, 0.7, 0.5}
    "scoring": "oasis",  # oasis:147 "Each hop applies a decay factor" (oasis's walk, first edge wins)
    "graph_top_k": 0,  # oasis code: WithGraphTopK default 0
    "max_frontier": 0,  # oasis code: WithMaxFrontierSize default 0 (unlimited)
    "rescore_reached": True,  # oasis:149 final = vectorWeight * vectorScore + graphWeight * hopDecay * edgeWeight
    "vector_fill": False,  # oasis:146-150 the results are the seeds and the graph-discovered chunks
    "filters": None,  # oasis:169 WithGraphFilters: none
    "reranker": None,  # oasis code: WithGraphReranker, none by default
    "rerank_depth": None,  # PROJECT
    "rerank_timeout": None,  # PROJECT
    "query_batch_size": 256,  # PROJECT
}

MA = "memory-arc-retrieval.md"  # MA code = Itachi-1824/Memory-Arc core/infinite/*.py
MEMORY_ARC: dict[str, Any] = {
    "_target_": "retrievers.multi_strategy.MultiStrategyRetriever",
    "weights": {
        "FACTUAL": {"semantic": 1.0, "fulltext": 0.9},  # MA:170
        "TEMPORAL": {"semantic": 1.0, "temporal": 1.2},  # MA:167
        "CODE": {"semantic": 0.9, "structural": 1.2},  # MA:168
        "PREFERENCE": {"semantic": 1.0},  # MA code _select_strategies (MA:169 adds fulltext 0.6)
        "MIXED": {"semantic": 1.0, "temporal": 0.8, "structural": 0.9, "fulltext": 0.6},  # MA:171 defaults
        "CONVERSATIONAL": {"semantic": 1.0, "fulltext": 0.6},  # MA code _select_strategies + defaults
    },
    "evidence_weights": {"temporal": 0.8, "structural": 0.9},  # MA code: a time expression / code pattern
    "strategies": ["semantic", "temporal", "structural", "fulltext"],  # MA:18-23 the four strategies
    "rules": None,  # DIFF the project's rule table (the seed's types "coding preferences" as CODE)
    "mixed_ratio": 0.75,  # DIFF MA code: MIXED when second / top > 0.7 (project table's ratio kept)
    "min_intent_score": 1.0,  # PROJECT
    "default_intent": "CONVERSATIONAL",  # MA code _classify_intent: no pattern -> CONVERSATIONAL
    "keyword_min_length": 3,  # MA code _extract_keywords: len(w) > 2
    "max_keywords": 10,  # MA code _extract_keywords: unique_keywords[:10]
    "fusion": "weighted_average",  # MA:173-179 average + consensus of raw weighted scores
    "normalization": "minmax",  # PROJECT (unused by weighted_average)
    "consensus_boost": 0.1,  # MA:178 add 0.1 per additional strategy
    "rrf_k": 60,  # PROJECT (unused)
    "candidate_k": 20,  # MA code: the orchestrator's max_results (10) x 2 (MA:55 limit=10)
    "temporal_scoring": "recency",  # MA:74-77 score = e^(-age_days / 30)
    "decay_days": 30.0,  # MA:76 / 30
    "temporal_window_days": 30.0,  # MA code: no time expression -> the last 30 days
    "reference_time": "latest",  # DIFF the seed's time.time(): the scope's latest document time
    "temporal_pool": 100,  # PROJECT (unused by recency)
    "structural_fields": ["func_name", "symbol", "path"],  # DIFF MA:104-106 file path / function / symbol
    "fulltext_scoring": "seed",  # MA:142 (matches / total_keywords) * 0.6 + (importance / 10) * 0.4
    "default_importance": 5.0,  # MA code models.py Memory.importance = 5
    "semantic_min_score": 0.5,  # MA:40 similarity threshold; MA code min_score default 0.5
    "context_weight": 0.0,  # PROJECT (not in the seed)
    "timeout_seconds": 10.0,  # DIFF the seed has no time limit (MA:292 asyncio.gather)
    "query_batch_size": 256,  # PROJECT
}

PRESETS: dict[str, dict[str, Any]] = {
    "openviking": OPENVIKING_DESCENT,
    "openviking_search": {**OPENVIKING_DESCENT, "_target_": SEARCH, "analyzer": None, **SEARCH_SESSION},
    "openviking_search_llm": {
        **OPENVIKING_DESCENT,
        "_target_": SEARCH,
        "analyzer": LLM_ANALYZER,
        **SEARCH_SESSION,
    },
    "oasis_hybrid": OASIS_HYBRID,
    "oasis_graph": OASIS_GRAPH,
    "memory_arc": MEMORY_ARC,
}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_values_are_the_seed_constants(name: str) -> None:
    loaded = yaml.safe_load((REPO / "conf" / "retriever" / f"{name}.yaml").read_text(encoding="utf-8"))
    expected = PRESETS[name]
    assert sorted(loaded) == sorted(expected), f"{name}.yaml: keys added or removed"
    for key, value in expected.items():
        assert loaded[key] == value, f"{name}.yaml: {key} is {loaded[key]!r}, the seed's is {value!r}"


@pytest.mark.needs_data
def test_the_seed_files_still_say_what_the_pins_quote(shared_datasets: Path) -> None:
    """The quoted seed lines, read back from the seed copies beside the shared datasets
    (``../shared/seeds``; CI has them, and there a missing folder fails instead of skipping)."""
    seeds = shared_datasets.parent / "seeds"
    assert seeds.is_dir(), f"{seeds}: the seed documents are not beside the shared datasets"
    ov = (seeds / OV).read_text(encoding="utf-8").splitlines()
    assert "`SCORE_PROPAGATION_ALPHA` | 0.5" in ov[126]
    assert "`MAX_CONVERGENCE_ROUNDS` | 3" in ov[127]
    assert "`GLOBAL_SEARCH_TOPK` | 3" in ov[128]
    alt = (seeds / "openviking-retrieval-alt.md").read_text(encoding="utf-8").splitlines()
    assert "GLOBAL_SEARCH_TOPK | 10" in alt[83]
    oasis = (seeds / OASIS).read_text(encoding="utf-8").splitlines()
    assert "`WithMaxHops(n)` | 2" in oasis[159] and "`WithSeedTopK(k)` | 10" in oasis[166]
    assert "vectorWeight * vectorScore + graphWeight * hopDecay * edgeWeight" in oasis[148]
    assert "`WithKeywordWeight(w)` | 0.3" in oasis[193] and "`WithOverfetchMultiplier(n)` | 3" in oasis[194]
    ma = (seeds / MA).read_text(encoding="utf-8").splitlines()
    assert "score = (matches / total_keywords) * 0.6 + (importance / 10) * 0.4" in ma[141]
    assert "{semantic: 1.0, fulltext: 0.9}" in ma[169] and "Add 0.1 for each additional strategy" in ma[177]
