"""Where the time goes, end to end on ADI (TF-IDF, a k-means tree and similarity edges): one run
of every family (BM25, dense, hybrid, graph, hierarchical, multi-strategy); its latency.json
stages, spans/<retriever>.csv, the stacked bar and the stage table of report.html (parsed, and
rendered in headless Chromium), report.md's table; ``run.latency.otel.exporter`` checked."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from conftest import compose_settings, shared_data_env
from matplotlib.colors import to_rgb
from test_report_html import CHROMIUM, PageParser, console_messages, decode_png, run_chromium

from viking_eval.config import ConfigError
from viking_eval.report.stages import STAGE_COLORS
from viking_eval.results.model import RunSummary
from viking_eval.run.experiment import run_experiment

FAMILIES = ("hybrid", "graph", "hierarchical", "multi_strategy")
OVERRIDES = (
    "dataset=adi",
    "embedder=tfidf",
    "store=kmeans_tree",
    "+store.edges.similar_to.k=3",
    "+store.edges.similar_to.min_sim=0.1",
    *(f"+retriever@retrievers.{name}={name if name != 'hybrid' else 'hybrid_rrf'}" for name in FAMILIES),
    "run.latency.n_queries=6",
    "run.latency.warmup=1",
    "run.significance.permutations=100",
    "run.significance.bootstrap=100",
)


@pytest.fixture(scope="module")
def families(shared_datasets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunSummary]:
    from viking_eval.run.cache import clear_memo

    with shared_data_env(shared_datasets), pytest.MonkeyPatch.context() as patch:
        patch.setenv("VIKING_EVAL_CACHE", str(tmp_path_factory.mktemp("cache")))
        clear_memo()
        summary = run_experiment(compose_settings(*OVERRIDES), tmp_path_factory.mktemp("families") / "run")
        clear_memo()
    yield summary


@pytest.mark.needs_data
def test_every_retriever_has_stages_that_sum_to_its_mean_and_a_spans_file(families: RunSummary) -> None:
    assert [result.name for result in families.results] == ["bm25", "dense", *FAMILIES]
    folder = families.output_dir
    assert folder is not None
    expected = {
        "hybrid": {"encode", "legs", "legs/bm25", "legs/vector", "fusion"},
        "graph": {"encode", "vector", "traverse", "traverse/hop"},
        "hierarchical": {"encode", "traverse", "traverse/global", "traverse/round"},
        "multi_strategy": {"encode", "analysis", "strategies", "fusion"},
    }
    for result in families.results:
        latency = result.latency or {}
        stages = {stage["path"]: stage for stage in latency["stages"]}
        assert expected.get(result.name, set()) <= set(stages), result.name
        top = [stage for stage in stages.values() if stage["depth"] == 0]
        assert sum(stage["mean_ms"] for stage in top) == pytest.approx(latency["mean_ms"], abs=1e-4)
        assert latency["index_bytes"]["total"] > 0 and latency["rss_growth_mb"] >= 0.0
        with (folder / "spans" / f"{result.name}.csv").open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert {int(row["query"]) for row in rows} == set(range(6))  # every timed query
        for path, stage in stages.items():
            if path != "other":  # the file's spans give the summary's counts
                assert sum(row["path"] == path for row in rows) / 6 == pytest.approx(stage["count_mean"])
    metrics = json.loads((folder / "metrics.json").read_text())["retrievers"]
    latency_file = json.loads((folder / "latency.json").read_text())["retrievers"]
    for name in FAMILIES:  # the stages live in latency.json; metrics.json keeps the scalars
        assert "stages" not in metrics[name]["latency"] and metrics[name]["latency"]["index_bytes"]
        assert (
            latency_file[name]["stages"]
            == next(r.latency for r in families.results if r.name == name)["stages"]
        )
    graph = {stage["path"]: stage for stage in families.results[3].latency["stages"]}  # type: ignore[index]
    stats = families.results[3].stats
    assert graph["traverse/hop"]["count_mean"] <= stats["hops"] + 1  # hops that scanned edges
    parts = families.results[2].latency["index_bytes"]  # type: ignore[index]
    assert set(parts) == {"vectors", "bm25", "own", "total"}  # the hybrid reads both indexes


@pytest.mark.needs_data
def test_report_has_a_stacked_bar_and_a_stage_table_for_every_family(families: RunSummary) -> None:
    folder = families.output_dir
    assert folder is not None
    page = PageParser()
    page.feed((folder / "report.html").read_text(encoding="utf-8"))
    table = page.tables["stages"]
    named = {row[0][2] for row in table[1:]}
    assert named == {"bm25", "dense", *FAMILIES}
    assert {row[0][2] for row in page.tables["memory"][1:]} == named
    bar = decode_png(page.images[-1])  # the stacked bar is the page's last figure
    assert bar.shape[0] > 200 and bar.shape[1] > 600
    pixels = bar[..., :3].reshape(-1, 3)
    for stage in ("encode", "bm25", "legs", "traverse", "strategies", "other"):
        colour = np.asarray(to_rgb(STAGE_COLORS[stage]))
        assert (np.abs(pixels - colour).max(axis=1) < 0.02).sum() > 50, stage  # its segments drawn
    markdown = (folder / "report.md").read_text(encoding="utf-8")
    assert "## Where the time goes" in markdown
    for name in FAMILIES:
        assert f"| {name} | other |" in markdown


@pytest.mark.needs_data
@pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install -y chromium)"
)
def test_the_stage_breakdown_renders_in_headless_chromium(families: RunSummary, tmp_path: Path) -> None:
    assert families.output_dir is not None
    report = families.output_dir / "report.html"
    dom = run_chromium(report, tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0 and console_messages(dom.stderr) == []
    rendered = PageParser()
    rendered.feed(dom.stdout)
    assert 'id="where-the-time-goes"' in dom.stdout
    rows = rendered.tables["stages"][1:]
    for name in FAMILIES:
        stages = [row[1][2].replace("\xa0", "") for row in rows if row[0][2] == name]
        assert stages[-1] == "other" and len(stages) >= 3, (name, stages)
    assert rendered.images[-1].startswith("data:image/png;base64,")
    shot = tmp_path / "report.png"
    done = run_chromium(report, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,6000")
    assert done.returncode == 0 and console_messages(done.stderr) == []
    pixels = matplotlib.image.imread(shot)[..., :3].reshape(-1, 3)
    colour = np.asarray(to_rgb(STAGE_COLORS["traverse"]))  # only the stacked bar uses it
    assert (np.abs(pixels - colour).max(axis=1) < 0.03).sum() > 50  # the bar is on screen


def test_the_otel_exporter_is_checked_before_the_run() -> None:
    with pytest.raises(ConfigError, match=r"run\.latency\.otel\.exporter.*'none', 'console', 'otlp'"):
        compose_settings("experiment=smoke", "run.latency.otel.exporter=jaeger")
    settings = compose_settings("experiment=smoke", "run.latency.otel.exporter=console")
    assert settings.run.latency.otel.exporter == "console"
