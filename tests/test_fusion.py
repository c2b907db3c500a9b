"""Fusion functions with every expected value worked out by hand (ranx's test style): weighted RRF,
normalisation, convex combination, CombSUM, CombMNZ, and the tie-breaking order."""

from __future__ import annotations

import math

import numpy as np
import pytest

from retrievers.fusion import (
    comb_mnz,
    comb_sum,
    context_fusion,
    convex_combination,
    edge_neighbours,
    max_consensus_fuse,
    neighbour_graph,
    normalize_scores,
    ranked,
    reciprocal_rank_fusion,
    weighted_average_fusion,
)


def test_weighted_rrf_by_hand() -> None:
    vector = ["a", "b", "c"]
    keyword = ["c", "a", "d"]
    fused = reciprocal_rank_fusion([vector, keyword], [0.7, 0.3], k=60)
    assert fused == pytest.approx(
        {
            "a": 0.7 / 61 + 0.3 / 62,  # vector rank 0, keyword rank 1
            "b": 0.7 / 62,  # vector only, rank 1
            "c": 0.7 / 63 + 0.3 / 61,  # vector rank 2, keyword rank 0
            "d": 0.3 / 63,  # keyword only, rank 2
        },
        rel=1e-15,
    )
    assert [item for item, _ in ranked(fused)] == ["a", "c", "b", "d"]


def test_unweighted_rrf_is_cormacks_formula() -> None:
    fused = reciprocal_rank_fusion([["x", "y"], ["y", "x"], ["y"]], k=60)
    assert fused["x"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["y"] == pytest.approx(1 / 62 + 1 / 61 + 1 / 61)


def test_normalized_rrf_scores_one_for_a_document_first_in_both_legs() -> None:
    fused = reciprocal_rank_fusion([["a", "b"], ["a", "c"]], [0.7, 0.3], k=60, normalize=True)
    assert fused["a"] == pytest.approx(1.0)
    assert fused["b"] == pytest.approx(0.7 * 61 / 62)
    assert fused["c"] == pytest.approx(0.3 * 61 / 62)


def test_rrf_k_changes_the_balance_between_top_and_depth() -> None:
    # "a" is first in the heavy leg only, "b" second in both legs
    legs, weights = [["a", "b"], ["c", "b"]], [0.8, 0.2]
    small = reciprocal_rank_fusion(legs, weights, k=1)
    assert small["a"] == pytest.approx(0.8 / 2) and small["b"] == pytest.approx(0.8 / 3 + 0.2 / 3)
    assert small["a"] > small["b"]  # 0.4 > 0.333: a small k rewards the single top rank
    large = reciprocal_rank_fusion(legs, weights, k=100)
    assert large["a"] == pytest.approx(0.8 / 101) and large["b"] == pytest.approx(0.8 / 102 + 0.2 / 102)
    assert large["b"] > large["a"]  # 0.0098 > 0.0079: a large k rewards agreement


def test_rrf_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="k must be a finite number > 0"):
        reciprocal_rank_fusion([["a"]], k=0)
    with pytest.raises(ValueError, match="k must be a finite number > 0"):
        reciprocal_rank_fusion([["a"]], k=-5)
    with pytest.raises(ValueError, match=r"lists 'a' twice"):
        reciprocal_rank_fusion([["a", "a"]])
    with pytest.raises(ValueError, match="got 1 weights for 2 legs"):
        reciprocal_rank_fusion([["a"], ["b"]], [1.0])
    with pytest.raises(ValueError, match=r"weights\[1\] must be >= 0"):
        reciprocal_rank_fusion([["a"], ["b"]], [1.0, -0.1])


def test_minmax_and_zscore_by_hand() -> None:
    assert normalize_scores([2.0, 4.0, 10.0], "minmax").tolist() == [0.0, 0.25, 1.0]  # (s - 2) / 8
    # mean 4, population std sqrt(((2-4)^2 + 0 + (6-4)^2) / 3) = sqrt(8/3)
    std = math.sqrt(8 / 3)
    assert normalize_scores([2.0, 4.0, 6.0], "zscore").tolist() == pytest.approx([-2 / std, 0.0, 2 / std])
    assert normalize_scores([3.0, 3.0], "minmax").tolist() == [1.0, 1.0]
    assert normalize_scores([3.0, 3.0], "zscore").tolist() == [0.0, 0.0]
    assert normalize_scores([], "minmax").tolist() == []
    with pytest.raises(ValueError, match="finite"):
        normalize_scores([1.0, math.nan])
    with pytest.raises(ValueError, match="normalization must be one of"):
        normalize_scores([1.0], "median")  # type: ignore[arg-type]
    # max: max(s, 0) / max; no positive score gives all ones
    assert normalize_scores([-1.0, 2.0, 4.0], "max").tolist() == [0.0, 0.5, 1.0]
    assert normalize_scores([-1.0, 0.0], "max").tolist() == [1.0, 1.0]


def test_convex_combination_by_hand() -> None:
    dense = {"a": 0.9, "b": 0.5, "c": 0.1}  # minmax: a 1, b 0.5, c 0
    bm25 = {"b": 12.0, "d": 4.0}  # minmax: b 1, d 0
    fused = convex_combination([dense, bm25], [0.7, 0.3])
    assert fused == pytest.approx(
        {
            "a": 0.7 * 1.0 + 0.3 * 0.0,  # not returned by BM25: its lowest normalised value, 0
            "b": 0.7 * 0.5 + 0.3 * 1.0,
            "c": 0.7 * 0.0 + 0.3 * 0.0,
            "d": 0.7 * 0.0 + 0.3 * 0.0,
        }
    )
    assert [item for item, _ in ranked(fused)] == ["a", "b", "c", "d"]  # c and d tie: by id
    with pytest.raises(ValueError, match="weights must sum to 1"):
        convex_combination([dense, bm25], [0.7, 0.7])


def test_zscore_convex_gives_missing_documents_the_legs_lowest_zscore() -> None:
    dense = {"a": 3.0, "b": 1.0}  # mean 2, std 1: a +1, b -1
    bm25 = {"a": 5.0, "c": 1.0, "d": 3.0}  # mean 3, std sqrt(8/3)
    std = math.sqrt(8 / 3)
    fused = convex_combination([dense, bm25], [0.5, 0.5], normalization="zscore")
    assert fused["a"] == pytest.approx(0.5 * 1 + 0.5 * 2 / std)
    assert fused["b"] == pytest.approx(0.5 * -1 + 0.5 * -2 / std)  # missing from BM25: lowest z
    assert fused["d"] == pytest.approx(0.5 * -1 + 0.5 * 0)  # missing from dense: lowest z, -1


def test_combsum_and_combmnz_by_hand() -> None:
    run_1 = {"a": 4.0, "b": 2.0, "c": 0.0}  # minmax: a 1, b 0.5, c 0
    run_2 = {"b": 9.0, "c": 3.0}  # minmax: b 1, c 0
    run_3 = {"c": 1.0, "a": 0.0}  # minmax: c 1, a 0
    assert comb_sum([run_1, run_2, run_3]) == pytest.approx({"a": 1.0 + 0 + 0, "b": 0.5 + 1, "c": 0 + 0 + 1})
    assert comb_mnz([run_1, run_2, run_3]) == pytest.approx(
        {"a": (1.0 + 0 + 0) * 2, "b": (0.5 + 1) * 2, "c": (0 + 0 + 1) * 3}
    )
    weighted = comb_sum([run_1, run_2], [0.25, 0.75])
    assert weighted == pytest.approx({"a": 0.25 * 1, "b": 0.25 * 0.5 + 0.75 * 1, "c": 0.0})
    assert weighted == pytest.approx(convex_combination([run_1, run_2], [0.25, 0.75]))


def test_ranked_breaks_ties_by_item_never_by_insertion_order() -> None:
    scores = {"d9": 0.5, "d10": 0.5, "a": 0.1, "z": 0.9}
    assert ranked(scores) == [("z", 0.9), ("d10", 0.5), ("d9", 0.5), ("a", 0.1)]
    assert ranked(dict(reversed(list(scores.items())))) == ranked(scores)
    assert ranked({3: 1.0, 1: 1.0, 2: 2.0}, limit=2) == [(2, 2.0), (1, 1.0)]
    with pytest.raises(ValueError, match="must be finite"):
        ranked({"a": math.inf})


def test_max_consensus_cannot_be_dragged_down_by_a_weak_list() -> None:
    assert max_consensus_fuse([0.85, 0.72, 0.68], 0.05) == pytest.approx(0.85 + 0.05 * 2)
    assert max_consensus_fuse([0.9, 0.1], 0.05) == pytest.approx(0.95)  # the mean would give 0.55
    assert max_consensus_fuse([0.9, 0.8], 0.2) == 1.0  # capped
    assert max_consensus_fuse([0.4], 0.3) == 0.4  # one list: no boost
    with pytest.raises(ValueError, match="at least one"):
        max_consensus_fuse([], 0.1)


def test_weighted_average_fusion_is_memory_arcs_raw_fusion() -> None:
    semantic = {"a": 0.85, "b": 0.5}
    temporal = {"a": 0.6, "c": 0.9}
    fused = weighted_average_fusion([semantic, temporal], [1.0, 1.2], consensus_boost=0.1)
    assert fused == pytest.approx(
        {
            "a": (0.85 * 1.0 + 0.6 * 1.2) / 2 + 0.1,  # two lists: mean of weighted raw scores + boost
            "b": 0.5,  # one list: its weighted raw score
            "c": 0.9 * 1.2,  # 1.08: a single list's score is not capped (the seed's scale defect)
        }
    )
    three = weighted_average_fusion([{"x": 0.85}, {"x": 0.72}, {"x": 0.68}])  # the seed's example
    assert three == pytest.approx({"x": 0.95})
    assert weighted_average_fusion([{"x": 0.9}, {"x": 0.9}], [1.2, 1.2]) == {"x": 1.0}  # n >= 2: capped
    with pytest.raises(ValueError, match="finite"):
        weighted_average_fusion([{"x": math.nan}])


def test_neighbour_graph_joins_both_directions_with_the_largest_weight() -> None:
    # edges 0->1 (1.0), 1->0 (0.3), 1->2, 2->3 (0.5), 3->4, 2->2 (a self-loop, dropped)
    indptr, neighbours, weights = neighbour_graph(
        5, [0, 1, 1, 2, 3, 2], [1, 0, 2, 3, 4, 2], [1, 0.3, 1, 0.5, 1, 1]
    )
    assert indptr.tolist() == [0, 1, 3, 5, 7, 8]
    assert neighbours.tolist() == [1, 0, 2, 1, 3, 2, 4, 3]
    assert weights.tolist() == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 1.0, 1.0]
    with pytest.raises(ValueError, match="outside"):
        neighbour_graph(2, [0], [2], [1.0])


def test_context_fusion_adds_the_best_neighbours_share() -> None:
    graph = neighbour_graph(5, [0, 1, 2, 3], [1, 2, 3, 4], [1.0, 1.0, 0.5, 1.0])  # a chain 0-1-2-3-4
    fused, boosts = context_fusion({1: 0.5, 3: 0.2}, graph, weight=0.5)
    assert boosts == pytest.approx({1: 0.0, 3: 0.0, 0: 0.5, 2: 0.5, 4: 0.2})  # 2: max(0.5 * 1, 0.2 * 0.5)
    assert fused == pytest.approx({1: 0.5, 3: 0.2, 0: 0.5 * 0.5, 2: 0.5 * 0.5, 4: 0.5 * 0.2})
    both, _ = context_fusion({1: 0.5, 2: 0.4}, graph, weight=0.5)
    assert both[1] == pytest.approx(0.5 + 0.5 * 0.4) and both[2] == pytest.approx(0.4 + 0.5 * 0.5)
    assert both[3] == pytest.approx(0.5 * 0.4 * 0.5)  # through the 0.5 edge
    masked, _ = context_fusion({1: 0.5}, graph, weight=0.5, allowed=np.array([True, True, False, True, True]))
    assert set(masked) == {0, 1}  # row 2 is outside the mask: never a candidate
    negative, _ = context_fusion({1: -0.5, 2: 0.1}, graph, weight=1.0)
    assert negative[2] == pytest.approx(0.1)  # a negative neighbour adds nothing
    assert context_fusion({1: 0.5}, graph, weight=0) == ({1: 0.5}, {1: 0.0})
    with pytest.raises(ValueError, match="weight"):
        context_fusion({1: 0.5}, graph, weight=-1)


def test_edge_neighbours_keeps_the_named_relations() -> None:
    class Edges:  # the fields of an EdgeSet that edge_neighbours reads
        n_nodes = 3
        src = np.array([0, 1, 0])
        dst = np.array([1, 2, 2])
        weight = np.array([1.0, 1.0, 0.7])
        relation = np.array([0, 0, 1])
        relation_names = ("sequence", "similar_to")

    indptr, neighbours, _ = edge_neighbours(Edges(), ["sequence"])
    assert indptr.tolist() == [0, 1, 3, 4] and neighbours.tolist() == [1, 0, 2, 1]
    with pytest.raises(ValueError, match=r"no relation \['cites'\]; they have \['sequence', 'similar_to'\]"):
        edge_neighbours(Edges(), ["cites"])
