"""Every fusion method and normalisation of retrievers.fusion (runs.py, methods.py, norms.py,
supervised.py) against ranx.fuse, the independent reference, on real runs: BM25 and TF-IDF dense
from the project's own retrievers on ADI, CISI and MedLine (every query, depth 100). Ties: ranx orders a
leg's tied scores its own way and we by doc id, so each leg's scores are first made distinct by
subtracting 1e-12 x its position in our order (the same input for both); then the fused scores
must be equal document by document. Condorcet, whose ranx result depends on the order of a Python
set where the majority leaves pairs unordered, is checked on a case the majority orders fully.
Plus hand-computed values and the refusals.

ranx's functions are numba-compiled; compiling them takes minutes of CPU the first time, longer
than running them as plain Python on these small runs (about 20 s). So the tests run with numba's
JIT off (``NUMBA_DISABLE_JIT=1``, set in conftest.py before anything imports numba, which reads
it at import and again later): ranx's own code, interpreted, is the reference. Set ``NUMBA_DISABLE_JIT=0`` to
check the compiled functions (their cache goes under the system's temporary folder, never beside
the installed package)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(tempfile.gettempdir()) / "viking_eval_numba_cache"))

from retrievers.fusion import METHODS, SUPERVISED, fuse_legs, fuse_runs, train

Run = dict[str, dict[str, float]]


def _read_trec(path: Path) -> Run:
    run: Run = {}
    for line in path.read_text().splitlines():
        query_id, _, doc_id, _, score, _ = line.split()
        run.setdefault(query_id, {})[doc_id] = float(score)
    return run


def _distinct(run: Run) -> Run:
    """Each query's scores made distinct, keeping our order (score desc, doc id asc)."""
    out: Run = {}
    for query_id, docs in run.items():
        order = sorted(docs.items(), key=lambda pair: (-pair[1], pair[0]))
        out[query_id] = {doc: score - 1e-12 * position for position, (doc, score) in enumerate(order)}
    return out


def _qrels(folder: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query_id, doc_id, grade = line.split("\t")
        qrels.setdefault(query_id, {})[doc_id] = int(grade)
    return qrels


@pytest.fixture(scope="module", params=["adi", "cisi", "medline"])
def legs(
    request: pytest.FixtureRequest, shared_datasets: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[Run], dict[str, dict[str, int]]]:
    """BM25 and TF-IDF dense runs of one collection (the project's retrievers, via the harness)."""
    from viking_eval import evaluate

    name = str(request.param)
    folder = tmp_path_factory.mktemp(f"runs_{name}")
    evaluate(
        {
            "bm25": {"_target_": "retrievers.BM25Retriever"},
            "tfidf": {"_target_": "retrievers.baselines.DenseRetriever"},
        },
        shared_datasets / name,
        embedder="tfidf",
        metrics=["nDCG@10"],
        latency_queries=0,
        output_dir=folder,
        cache_dir=tmp_path_factory.mktemp(f"cache_{name}"),
    )
    runs = [_distinct(_read_trec(folder / "runs" / f"{leg}.trec")) for leg in ("bm25", "tfidf")]
    judged = _qrels(shared_datasets / name)
    # every query judged and answered by both legs (ranx pairs training runs with qrels by position)
    kept = sorted(q for q in judged if all(q in run for run in runs))
    return [{q: run[q] for q in kept} for run in runs], {q: judged[q] for q in kept}


def _ranx(runs: list[Run], method: str, norm: str, params: dict[str, Any]) -> Run:
    import ranx

    fused = ranx.fuse([ranx.Run(run) for run in runs], norm=norm, method=method, params=params)
    return {query_id: dict(docs) for query_id, docs in fused.to_dict().items()}


def _assert_same(ours: Run, theirs: Run, label: str) -> None:
    assert set(ours) == set(theirs), label
    for query_id, docs in theirs.items():
        assert set(ours[query_id]) == set(docs), f"{label}: query {query_id} documents"
        for doc, value in docs.items():
            assert ours[query_id][doc] == pytest.approx(value, rel=1e-9, abs=1e-9), (
                f"{label}: {query_id} {doc}"
            )


UNSUPERVISED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    # (method, our options, ranx params)
    ("sum", {}, {}),
    ("wsum", {"weights": [0.7, 0.3]}, {"weights": [0.7, 0.3]}),
    ("mnz", {}, {}),
    ("wmnz", {"weights": [0.6, 0.4]}, {"weights": [0.6, 0.4]}),
    ("gmnz", {"params": {"gamma": 0.5}}, {"gamma": 0.5}),
    ("anz", {}, {}),
    ("min", {}, {}),
    ("max", {}, {}),
    ("med", {}, {}),
    ("mixed", {"weights": [0.6, 0.4]}, {"weights": [0.6, 0.4]}),
    ("rrf", {"params": {"k": 20}}, {"k": 20}),
    ("rbc", {"params": {"phi": 0.7}}, {"phi": 0.7}),
    ("isr", {}, {}),
    ("log_isr", {}, {}),
    ("logn_isr", {"params": {"sigma": 0.2}}, {"sigma": 0.2}),
    ("bordafuse", {}, {}),
    ("w_bordafuse", {"weights": [0.3, 0.7]}, {"weights": [0.3, 0.7]}),
]


@pytest.mark.slow
@pytest.mark.needs_data
def test_every_method_and_normalisation_equals_ranx(
    legs: tuple[list[Run], dict[str, dict[str, int]]],
) -> None:
    runs, qrels = legs
    for method, ours, theirs in UNSUPERVISED:
        _assert_same(fuse_runs(runs, method, **ours), _ranx(runs, method, "min-max", theirs), method)
    for norm in ("min-max", "max", "sum", "zmuv", "rank", "borda"):
        weights = {"weights": [0.5, 0.5]}
        _assert_same(fuse_runs(runs, "wsum", norm=norm, **weights), _ranx(runs, "wsum", norm, weights), norm)
    # supervised: learn on half the queries, fuse them all
    training_ids = sorted(qrels)[: len(qrels) // 2]
    training = [{q: run[q] for q in training_ids} for run in runs]
    training_qrels = {q: qrels[q] for q in training_ids}
    import ranx
    from ranx.fusion import (
        bayesfuse_train,
        mapfuse_train,
        posfuse_train,
        probfuse_train,
        segfuse_train,
        slidefuse_train,
    )

    ranx_runs = [ranx.Run(run) for run in training]
    ranx_qrels = ranx.Qrels(training_qrels)
    learned = {
        "posfuse": ("probs", posfuse_train(ranx_qrels, ranx_runs), {}),
        "slidefuse": ("probs", slidefuse_train(ranx_qrels, ranx_runs), {"w": 3}),
        "probfuse": ("probs", probfuse_train(ranx_qrels, ranx_runs, 5), {"n_segments": 5}),
        "segfuse": ("probs", segfuse_train(ranx_qrels, ranx_runs), {}),
        "mapfuse": ("map_scores", mapfuse_train(ranx_qrels, ranx_runs), {}),
        "bayesfuse": ("log_odds", bayesfuse_train(ranx_qrels, ranx_runs), {}),
    }
    assert set(learned) == set(SUPERVISED)
    for method, (key, stats, params) in learned.items():
        model = train(method, training, training_qrels, params=params)
        assert model is not None
        reference = (
            [[float(v)] for v in stats] if method == "mapfuse" else [list(map(float, s)) for s in stats]
        )
        for ours_leg, their_leg in zip(model, reference, strict=True):
            assert list(ours_leg) == pytest.approx(their_leg, rel=1e-9, abs=1e-12), method
        extra = {"w": 3} if method == "slidefuse" else {}
        fused = fuse_runs(runs, method, params=params, model=model)
        _assert_same(fused, _ranx(runs, method, "min-max", {key: stats, **extra}), method)


@pytest.mark.slow
def test_condorcet_equals_ranx_where_the_majority_orders_every_pair() -> None:
    base = [f"d{i}" for i in range(8)]
    swapped_12 = [base[0], base[2], base[1], *base[3:]]
    swapped_56 = [*base[:5], base[6], base[5], base[7]]
    runs = [{"q": {doc: 10.0 - i for i, doc in enumerate(order)}} for order in (base, swapped_12, swapped_56)]
    expected = {doc: float(8 - i) for i, doc in enumerate(base)}
    assert fuse_runs(runs, "condorcet") == {"q": expected}
    _assert_same(fuse_runs(runs, "condorcet"), _ranx(runs, "condorcet", "min-max", {}), "condorcet")
    weights = [0.2, 0.6, 0.2]  # leg 2 outweighs the other two: d2 before d1; d5 stays before d6
    ours = fuse_runs(runs, "w_condorcet", weights=weights)
    assert ours["q"]["d2"] > ours["q"]["d1"] and ours["q"]["d5"] > ours["q"]["d6"]
    _assert_same(ours, _ranx(runs, "w_condorcet", "min-max", {"weights": weights}), "w_condorcet")


def test_hand_computed_values() -> None:
    legs = [[("a", 3.0), ("b", 2.0), ("c", 1.0)], [("b", 3.0), ("d", 2.0)]]
    # min-max: leg 1 a=1, b=0.5, c=0; leg 2 b=1, d=0
    assert fuse_legs(legs, "sum") == {"a": 1.0, "b": 1.5, "c": 0.0, "d": 0.0}
    assert fuse_legs(legs, "mnz") == {"a": 1.0, "b": 3.0, "c": 0.0, "d": 0.0}
    assert fuse_legs(legs, "rrf", params={"k": 1}) == pytest.approx(
        {"a": 1 / 2, "b": 1 / 3 + 1 / 2, "c": 1 / 4, "d": 1 / 3}
    )
    # Borda: C = 4 candidates; leg 1 gives 4, 3, 2 and (4 - 3 + 1) / 2 = 1 to d; leg 2: 4, 3, and 1.5
    assert fuse_legs(legs, "bordafuse") == {"a": 5.5, "b": 7.0, "c": 3.5, "d": 4.0}
    assert fuse_legs(legs, "isr") == pytest.approx({"a": 1.0, "b": 2 * (1 / 4 + 1), "c": 1 / 9, "d": 1 / 4})
    # z-scores: a missing document is 0 (ranx: the leg's mean) or the leg's lowest z-score (floor)
    zero = fuse_legs(legs, "sum", norm="zmuv")
    floor = fuse_legs(legs, "sum", norm="zmuv", missing="floor")
    assert zero["d"] == pytest.approx(-1.0)  # leg 2's d: (2 - 2.5) / 0.5
    assert floor["d"] == pytest.approx(-1.0 - 1.224744871391589)  # plus leg 1's lowest z-score
    # ties in a leg are read by doc id: "x" and "y" tie, so x is first (rank 0)
    assert fuse_legs([[("y", 1.0), ("x", 1.0)]], "rrf", params={"k": 1}) == {"x": 0.5, "y": 1 / 3}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"method": "borda"}, r"fusion method must be one of sum, wsum, .*, got 'borda'"),
        (
            {"method": "sum", "norm": "l2"},
            r"normalisation must be one of min-max, max, sum, zmuv, rank, borda, none",
        ),
        ({"method": "wsum", "weights": [1.0]}, r"got 1 weights for 2 runs"),
        ({"method": "sum", "weights": [1.0, 1.0]}, r"sum takes no weights"),
        ({"method": "rrf", "params": {"phi": 0.5}}, r"rrf has no parameter 'phi' \(its parameters: k\)"),
        ({"method": "posfuse"}, r"posfuse is supervised: give the model train\(\) learned"),
        (
            {"method": "max", "missing": "floor"},
            r"missing='floor' applies to sum, wsum, mnz, wmnz, gmnz, not max",
        ),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    runs = [{"q": {"a": 1.0}}, {"q": {"b": 1.0}}]
    method = options.pop("method")
    with pytest.raises(ValueError, match=message):
        fuse_runs(runs, method, **options)


def test_every_method_is_listed_with_a_function() -> None:
    runs = [{"q": {"a": 2.0, "b": 1.0}}, {"q": {"b": 2.0, "c": 1.0}}]
    qrels = {"q": {"b": 1}}
    for name, spec in METHODS.items():
        model = train(name, runs, qrels) if spec.supervised else None
        weights = [0.5, 0.5] if spec.weighted else None
        fused = fuse_runs(runs, name, weights=weights, model=model)
        assert set(fused["q"]) == {"a", "b", "c"}, name


@pytest.mark.needs_data
def test_the_hybrid_fuses_with_a_named_method(shared_datasets: Path) -> None:
    from retrievers import HybridRetriever, StoreConfig, TfidfEmbedder
    from retrievers.builders import build_store
    from viking_eval.data import load_dataset

    dataset = load_dataset(str(shared_datasets / "adi"), "test")
    embedder = TfidfEmbedder(dim=64, seed=0).fit([doc.full_text for doc in dataset.corpus.values()])
    store = build_store(list(dataset.corpus.values()), embedder, StoreConfig())
    queries = [query.text for query in dataset.queries.values()]
    default = HybridRetriever(store, embedder).retrieve_batch(queries, 10)
    # the named rrf with the legs' weights is today's weighted RRF, bit for bit
    named = HybridRetriever(store, embedder, fusion_method="rrf").retrieve_batch(queries, 10)
    assert [[(r.doc_id, r.score) for r in rs] for rs in named] == [
        [(r.doc_id, r.score) for r in rs] for rs in default
    ]
    isr = HybridRetriever(store, embedder, fusion_method="isr", overfetch_multiplier=1).retrieve_batch(
        queries, 10
    )
    assert isr[0][0].provenance["fusion"] == "isr"
    assert [[r.doc_id for r in rs] for rs in isr] != [[r.doc_id for r in rs] for rs in default]
    # isr from the legs each result records (rank of each leg), by hand
    for results in isr:
        for result in results:
            legs = result.provenance["legs"]
            total = sum(1 / (leg["rank"] + 1) ** 2 for leg in legs.values())
            assert result.score == pytest.approx(total * len(legs))
