"""The growth protocol (viking_eval/growth/, docs/growth.md) on a hand-made conversation dataset:
two conversations, three and two sessions, questions whose evidence lies in known sessions, so
which question is asked at which step is known by hand.

- the schedule: each question's first step, computed by hand;
- a question is never asked before all its evidence is in memory (every step's per_query.csv);
- each step's numbers equal an independent evaluation (the normal experiment loop over a fresh
  store of the same documents and questions);
- ``grow`` over two calls holds what one build of the same documents holds (same BM25 scores);
- resuming skips finished steps and reruns one whose record is missing;
- the schedule by id and by time, and bad settings refused before anything runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import compose_settings

from retrievers.builders import build_store
from retrievers.store import StoreConfig
from viking_eval import cli
from viking_eval.answers.evaluate import gold_answers, recall_values
from viking_eval.config import ConfigError
from viking_eval.config.growth_settings import GrowthSettings
from viking_eval.data import DataError
from viking_eval.data.splits import load_for_phase
from viking_eval.growth import program
from viking_eval.growth.ingest import StoreRecipe, grow
from viking_eval.growth.report import rank_changes
from viking_eval.growth.schedule import plan_schedule
from viking_eval.growth.step import memory_dataset
from viking_eval.results.run_folder import read_per_query, read_rankings
from viking_eval.run.experiment import run_experiment

TURNS = {  # conversation -> session -> turns (speaker: text)
    "c1": {
        1: [
            "Ann: I adopted a grey cat named Pixel.",
            "Bob: Lovely, cats are great.",
            "Ann: Pixel sleeps all day.",
        ],
        2: ["Bob: I started learning the cello.", "Ann: How are the cello lessons?", "Bob: Hard but fun."],
        3: [
            "Ann: We moved to Lisbon in May.",
            "Bob: Lisbon has great food.",
            "Ann: Pixel loves the new balcony.",
        ],
    },
    "c2": {
        1: ["Cy: My sister runs marathons.", "Di: Impressive endurance.", "Cy: She ran Boston last year."],
        2: ["Di: I bought a red kayak.", "Cy: Where do you paddle the kayak?", "Di: On the river near home."],
    },
}
DATES = {1: "1:56 pm on 8 May, 2023", 2: "10:00 am on 20 May, 2023", 3: "4:04 pm on 2 June, 2023"}
QUESTIONS = [  # id, conversation, text, answer, evidence (session, turn), grade
    ("qa", "c1", "What is the name of Ann's cat?", "Pixel", [(1, 1)], 1),
    ("qb", "c1", "Which instrument is Bob learning?", "cello", [(2, 1)], 1),
    ("qc", "c1", "Where did Ann and Pixel move?", "Lisbon", [(1, 1), (3, 1)], 1),
    ("qd", "c2", "What colour is Di's kayak?", "red", [(2, 1)], 1),
    ("qe", "c2", "What does Cy's sister run?", "marathons", [(1, 1)], 1),
    ("qf", "c1", "Does Bob like food?", "yes", [(3, 2)], 0),  # judged, but nothing relevant
]
FIRST_STEP = {"qa": 1, "qb": 2, "qc": 3, "qd": 2, "qe": 1}  # by hand: the evidence's last session
ASKED = {1: ["qa", "qe"], 2: ["qa", "qb", "qd", "qe"], 3: ["qa", "qb", "qc", "qd", "qe"]}


def _doc_id(conversation: str, session: int, turn: int) -> str:
    return f"{conversation}_D{session}:{turn}"


def write_dataset(folder: Path) -> Path:
    folder.mkdir(parents=True)
    corpus, sessions = [], []
    for conversation, by_session in TURNS.items():
        for session, turns in by_session.items():
            ids = []
            for index, text in enumerate(turns):
                doc_id = _doc_id(conversation, session, index + 1)
                ids.append(doc_id)
                metadata = {
                    "conversation": conversation,
                    "session": session,
                    "session_date_time": DATES[session],
                    "turn_index": index,
                }
                corpus.append({"_id": doc_id, "title": "", "text": text, "metadata": metadata})
            sessions.append(
                {
                    "_id": f"{conversation}_session_{session}",
                    "conversation": conversation,
                    "session": session,
                    "session_date_time": DATES[session],
                    "session_summary_generated": " ".join(turns),
                    "turn_ids": ids,
                }
            )
    queries, qrels = [], ["query-id\tcorpus-id\tscore"]
    for qid, conversation, text, answer, evidence, grade in QUESTIONS:
        queries.append(
            {
                "_id": qid,
                "text": text,
                "metadata": {"conversation": conversation, "answer": answer, "category_name": "c"},
            }
        )
        qrels += [f"{qid}\t{_doc_id(conversation, s, t)}\t{grade}" for s, t in evidence]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(row) + "\n" for row in queries))
    (folder / "sessions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in sessions))
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return folder


@pytest.fixture(scope="module")
def dataset_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("growth") / "conv")


def _settings(folder: Path, *overrides: str) -> Any:
    # every family of locomo_growth, over the static model (no download), on every question
    return compose_settings(
        "experiment=locomo_growth",
        "embedder=static",
        f"dataset.name={folder}",
        "dataset.half=all",
        *overrides,
    )


def _load(folder: Path) -> Any:
    dataset, _ = load_for_phase(str(folder), "report", split="test", tune_split="auto", strict=False,
                                partition_key=None, partition_seed=0, download="never", half="all")  # fmt: skip
    return dataset


def test_schedule_by_session_matches_the_hand_count(dataset_folder: Path) -> None:
    dataset = _load(dataset_folder)
    schedule = plan_schedule(dataset, GrowthSettings(by="metadata", order_key="session"))
    assert [step.label for step in schedule.steps] == ["session 1", "session 2", "session 3"]
    assert [len(step.added) for step in schedule.steps] == [6, 6, 3]  # both conversations' session s
    assert dict(schedule.first_step) == FIRST_STEP
    assert schedule.never_asked == ("qf",)
    for number, expected in ASKED.items():
        assert schedule.asked(number, list(dataset.queries)) == expected
    # sessions cut into two steps: [1, 2] then [3]
    halves = plan_schedule(dataset, GrowthSettings(by="metadata", order_key="session", steps=2))
    assert [step.label for step in halves.steps] == ["session 1..2", "session 3"]
    assert halves.first_step["qb"] == 1 and halves.first_step["qc"] == 2


def test_schedule_by_id_and_by_time(dataset_folder: Path) -> None:
    dataset = _load(dataset_folder)
    by_id = plan_schedule(dataset, GrowthSettings(by="id", steps=3))
    assert [list(step.added) for step in by_id.steps] == [
        sorted(dataset.corpus)[0:5], sorted(dataset.corpus)[5:10], sorted(dataset.corpus)[10:15]
    ]  # fmt: skip
    by_time = plan_schedule(dataset, GrowthSettings(by="time", order_key="session_date_time", steps=3))
    # 8 May (6 turns), 20 May (6), 2 June (3): 15 turns cut in steps of 5, ties by id
    first_may = sorted(d for d in dataset.corpus if dataset.corpus[d].metadata["session"] == 1)
    assert list(by_time.steps[0].added) == first_may[:5]
    assert by_time.first_step["qc"] == 3 and by_time.first_step["qa"] == 1
    with pytest.raises(DataError, match=r"'speaker'.*growth\.order_key"):
        plan_schedule(dataset, GrowthSettings(by="metadata", order_key="speaker"))
    with pytest.raises(ConfigError, match=r"growth\.steps"):
        plan_schedule(dataset, GrowthSettings(by="id", steps=99))


def test_grow_twice_holds_what_one_build_holds(dataset_folder: Path) -> None:
    from retrievers.embedders import StaticEmbedder

    dataset = _load(dataset_folder)
    docs = [dataset.corpus[d] for d in sorted(dataset.corpus)]
    recipe = StoreRecipe(StoreConfig(), StaticEmbedder(), dataset_folder)
    grown = grow(grow(None, docs[:7], recipe), docs[7:], recipe)
    fresh = build_store(docs, recipe.embedder, recipe.config)
    assert list(grown.doc_ids) == list(fresh.doc_ids)
    assert [dict(d.metadata) for d in grown.documents] == [dict(d.metadata) for d in fresh.documents]
    for (a_scores, a_rows), (b_scores, b_rows) in zip(
        grown.bm25.search(["cello lessons", "Pixel cat Lisbon"], 15),
        fresh.bm25.search(["cello lessons", "Pixel cat Lisbon"], 15),
        strict=True,
    ):
        assert a_rows.tolist() == b_rows.tolist() and a_scores.tolist() == b_scores.tolist() and len(a_rows)
    assert (grown.embeddings == fresh.embeddings).all()


@pytest.fixture(scope="module")
def grown_run(dataset_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("growth_run") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VIKING_EVAL_CACHE", str(tmp_path_factory.mktemp("growth_cache")))
        document = program.run_growth(_settings(dataset_folder, "growth.keep_runs=true"), out)
    return out, document


def test_questions_are_asked_only_once_their_evidence_is_in_memory(
    grown_run: tuple[Path, dict[str, Any]],
) -> None:
    out, document = grown_run
    assert [record["questions"] for record in document["steps"]] == [
        {"asked": 2, "new": 2}, {"asked": 4, "new": 2}, {"asked": 5, "new": 1}
    ]  # fmt: skip
    for number, expected in ASKED.items():
        per_query = read_per_query(out / "steps" / f"{number:03d}" / "per_query.csv")
        assert set(per_query) == set(document["retrievers"])  # every family, every step
        for values in per_query.values():
            assert sorted(values["R@10"]) == expected  # never a question whose evidence is not in memory
    assert document["steps"][0]["memory"] == {"documents": 6, "documents_per_scope": 3.0, "scopes": 2}
    assert document["steps"][2]["memory"] == {"documents": 15, "documents_per_scope": 7.5, "scopes": 2}
    # growth.ingest=add: step 1 builds the store, later steps add to it; each names its versions
    assert [record["ingest"]["kind"] for record in document["steps"]] == ["build", "add", "add"]
    assert [len(record["ingest"]["history"]) for record in document["steps"]] == [0, 2, 3]
    assert [record["ingest"]["history"][-1]["n_documents"] for record in document["steps"][1:]] == [12, 15]
    for name in (
        "growth.json",
        "growth.csv",
        "growth.md",
        "growth.html",
        "growth_R_10.png",
        "growth_cost.png",
    ):
        assert (out / name).is_file(), name
    families = {entry["family"] for entry in document["steps"][-1]["retrievers"].values()}
    assert families == {"bm25", "dense", "hierarchical", "hybrid", "graph", "multi-strategy"}


def test_each_step_equals_an_independent_evaluation(
    dataset_folder: Path,
    grown_run: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The normal experiment loop over a fresh store of each step's documents and questions gives
    the same per-query R@10 and nDCG@10; answer recall recomputed from the kept run files."""
    out, document = grown_run
    monkeypatch.setenv("VIKING_EVAL_CACHE", str(tmp_path / "cache"))
    settings = _settings(dataset_folder, "answers.enabled=false")
    dataset = _load(dataset_folder)
    schedule = plan_schedule(dataset, settings.growth)
    gold = gold_answers(dataset, "answer")
    for step in schedule.steps:
        memory = memory_dataset(dataset, schedule, step)
        summary = run_experiment(settings, None, dataset=memory)  # its own store, built from scratch
        folder = out / "steps" / f"{step.number:03d}"
        stored = read_per_query(folder / "per_query.csv")
        record = document["steps"][step.number - 1]
        for result in summary.results:
            for metric in ("R@10", "nDCG@10"):
                assert stored[result.name][metric] == result.per_query[metric], (
                    step.number,
                    result.name,
                    metric,
                )
                assert record["retrievers"][result.name]["metrics"][metric] == pytest.approx(
                    result.metrics[metric]
                )
            ranking = read_rankings(folder, result.name)
            asked = {qid: gold[qid] for qid in memory.queries}
            expected = recall_values(memory, asked, ranking, 10)["answer_recall@10"]
            assert stored[result.name]["answer_recall@10"] == expected


def test_resume_skips_finished_steps(
    dataset_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VIKING_EVAL_CACHE", str(tmp_path / "cache"))
    overrides = [f"dataset.name={dataset_folder}", "growth.by=metadata", "growth.order_key=session",
                 "growth.steps=null", "dataset.scope_key=conversation"]  # fmt: skip
    settings = compose_settings("experiment=growth_smoke", *overrides)  # BM25 and dense: quick
    evaluated: list[int] = []
    real = program.evaluate_step

    def counting(settings: Any, memory: Any, *args: Any) -> Any:
        evaluated.append(len(memory.corpus))
        return real(settings, memory, *args)

    monkeypatch.setattr(program, "evaluate_step", counting)
    first = program.run_growth(settings, tmp_path / "run")
    assert evaluated == [6, 12, 15]
    (tmp_path / "run" / "steps" / "002" / "step.json").unlink()  # as if killed during step 2
    evaluated.clear()
    again = program.run_growth(settings, tmp_path / "run")
    assert evaluated == [12]  # only step 2 (12 documents in memory) ran again
    assert again["catch_up_seconds"] > 0  # its memory rebuilt from step 1's documents first

    def numbers(doc: dict[str, Any]) -> list[Any]:
        return [{name: e["metrics"] for name, e in r["retrievers"].items()} for r in doc["steps"]]

    assert numbers(again) == numbers(first)
    evaluated.clear()
    other = compose_settings("experiment=growth_smoke", *overrides, "run.metrics=[R@10]")
    program.run_growth(other, tmp_path / "run")  # another setting: every step again
    assert evaluated == [6, 12, 15]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["experiment=growth_smoke", "growth.by=bogus"],
            "error: growth.by: must be one of ['metadata', 'id', 'time'] or null, got 'bogus'",
        ),
        (
            ["experiment=growth_smoke", "growth.steps=null"],
            "error: growth.steps: growth.by=id needs the number of steps",
        ),
        (
            ["experiment=growth_smoke", "embedder=tfidf"],
            "error: embedder: TfidfEmbedder is fitted on the corpus",
        ),
        (
            ["experiment=growth_smoke", "fuse.runs=[a.trec,b.trec]"],
            "error: fuse.runs: makes the command a fusion",
        ),
        (["-m", "experiment=growth_smoke"], "error: growth.by: a growth run evaluates every step itself"),
    ],
)
def test_bad_growth_settings_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.preflight(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(line), err


def test_growth_csv_has_one_row_per_step_retriever_group_and_metric(
    grown_run: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = grown_run
    lines = (out / "growth.csv").read_text().splitlines()
    # 3 steps x 10 retrievers x 3 groups ((all), (new), category "c") x 4 metrics
    assert len(lines) == 1 + 3 * 10 * 3 * 4
    first = dict(zip(lines[0].split(","), lines[1].split(","), strict=True))
    assert (first["step"], first["retriever"], first["group"], first["metric"]) == (
        "1",
        "bm25",
        "(all)",
        "R@10",
    )
    assert first["ingest_kind"] == "build"  # step 1 builds the store; later steps add to it


def _record(step: int, values: dict[str, float]) -> dict[str, Any]:
    families = {"a1": "alpha", "a2": "alpha", "b": "beta", "c": "gamma"}
    return {
        "step": step,
        "label": f"s{step}",
        "memory": {"documents": 10 * step},
        "retrievers": {
            name: {"family": families[name], "metrics": {"R@10": v}} for name, v in values.items()
        },
    }


def test_rank_changes_name_who_passes_whom() -> None:
    document = {
        "steps": [
            _record(1, {"a1": 0.9, "a2": 0.2, "b": 0.5, "c": 0.1}),
            _record(2, {"a1": 0.3, "a2": 0.4, "b": 0.5, "c": 0.1}),  # beta passes alpha (best now a2)
            _record(3, {"a1": 0.3, "a2": 0.4, "b": 0.5, "c": 0.1}),  # no change
            _record(4, {"a1": 0.3, "a2": 0.2, "b": 0.25, "c": 0.6}),  # gamma passes both, alpha beta
        ]
    }
    assert rank_changes(document, "R@10") == [
        "step 2 (s2): beta (b, 0.500) passes alpha (a2, 0.400)",
        "step 4 (s4): gamma (c, 0.600) passes alpha (a1, 0.300); gamma (c, 0.600) passes beta (b, 0.250); "
        "alpha (a1, 0.300) passes beta (b, 0.250)",
    ]
    by_retriever = rank_changes(document, "R@10", "retriever")
    assert by_retriever[0] == (
        "step 2 (s2): b (beta, 0.500) passes a1 (alpha, 0.300); a2 (alpha, 0.400) passes a1 (alpha, 0.300)"
    )
