"""Significance in a run (run.baseline, significance.csv, markers) and the self-contained
report.html / sweep.html, opened in a real browser (headless Chromium) when it is installed."""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import matplotlib.image
import numpy as np
import pytest
from conftest import shared_data_env, smoke_settings
from scipy import stats

from viking_eval.config import ConfigError, Settings
from viking_eval.measures.corrections import holm
from viking_eval.report import summary_table
from viking_eval.results.model import RunSummary
from viking_eval.run.experiment import run_experiment

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def smoke(
    shared_datasets: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunSummary, Settings]]:
    """A smoke run whose markers use the Wilcoxon test: dense's R@100 gain over BM25 (10 wins,
    25 ties, no loss on ADI) is then significant after Holm, the t-test's is not."""
    from viking_eval.run.cache import clear_memo

    with shared_data_env(shared_datasets), pytest.MonkeyPatch.context() as patch:
        patch.setenv("VIKING_EVAL_CACHE", str(tmp_path_factory.mktemp("cache")))
        clear_memo()
        settings = smoke_settings("run.significance.test=wilcoxon", "run.latency.n_queries=20")
        summary = run_experiment(settings, tmp_path_factory.mktemp("smoke") / "run")
        clear_memo()
    yield summary, settings


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.needs_data
def test_significance_csv_matches_scipy_and_holm(smoke: tuple[RunSummary, Settings]) -> None:
    summary, _ = smoke
    rows = _rows(summary.output_dir / "significance.csv")
    assert len(rows) == 5 * 3  # dense vs the baseline bm25 (the first retriever), 5 metrics, 3 tests
    assert {(row["retriever"], row["baseline"]) for row in rows} == {("dense", "bm25")}
    per_query = _rows(summary.output_dir / "per_query.csv")
    t_rows = [row for row in rows if row["test"] == "t-test"]
    for row in t_rows:
        metric = row["metric"]
        dense = [float(r[metric]) for r in per_query if r["retriever"] == "dense"]
        bm25 = [float(r[metric]) for r in per_query if r["retriever"] == "bm25"]
        assert float(row["p_value"]) == pytest.approx(stats.ttest_rel(dense, bm25).pvalue, rel=1e-9)
        assert float(row["mean_difference"]) == pytest.approx(np.mean(dense) - np.mean(bm25), abs=1e-12)
        assert int(row["wins"]) + int(row["ties"]) + int(row["losses"]) == 35
    adjusted = holm([float(row["p_value"]) for row in t_rows])
    assert [float(row["p_adjusted"]) for row in t_rows] == pytest.approx(adjusted)
    r100 = next(row for row in rows if row["metric"] == "R@100" and row["test"] == "wilcoxon")
    assert (r100["wins"], r100["ties"], r100["losses"], r100["significant"]) == ("10", "25", "0", "True")


@pytest.mark.needs_data
def test_markers_follow_the_primary_test(smoke: tuple[RunSummary, Settings]) -> None:
    summary, settings = smoke
    significance = summary.significance
    assert significance is not None
    significant = {
        (c.retriever, c.metric) for c in significance.comparisons if c.test == "wilcoxon" and c.significant
    }
    assert significant == {("dense", "R@100")}
    table = summary_table(summary, settings)
    dense_row = next(line for line in table.splitlines() if line.startswith("| dense"))
    assert "1.0000▲" in dense_row and dense_row.count("▲") == 1 and "▼" not in table
    report_md = (summary.output_dir / "report.md").read_text()
    assert (
        "▲/▼: significantly better/worse than bm25 (Wilcoxon signed-rank test, holm correction over 5"
        in report_md
    )


@pytest.mark.needs_data
def test_latency_samples_stay_in_latency_json(smoke: tuple[RunSummary, Settings]) -> None:
    summary, _ = smoke
    latency = json.loads((summary.output_dir / "latency.json").read_text())["retrievers"]["bm25"]
    assert len(latency["samples_ms"]) == 20
    assert np.percentile(latency["samples_ms"], 50) == pytest.approx(latency["p50_ms"], rel=1e-4)
    metrics = json.loads((summary.output_dir / "metrics.json").read_text())
    assert "samples_ms" not in metrics["retrievers"]["bm25"]["latency"]


@pytest.mark.needs_data
def test_run_baseline_chooses_the_baseline_and_is_validated(data_env: Path, tmp_path: Path) -> None:
    summary = run_experiment(
        smoke_settings("run.baseline=dense", "run.latency.n_queries=0"), tmp_path / "run"
    )
    rows = _rows(tmp_path / "run" / "significance.csv")
    assert {(row["retriever"], row["baseline"]) for row in rows} == {("bm25", "dense")}
    assert summary.significance is not None and summary.significance.baseline == "dense"
    with pytest.raises(
        ConfigError,
        match=r"run.baseline: 'hybrid' is not a configured retriever; configured: \['bm25', 'dense'\]",
    ):
        smoke_settings("run.baseline=hybrid")
    with pytest.raises(
        ConfigError,
        match=r"run.significance: significance.correction must be one of \['holm', 'bh', 'none'\], got 'bonferroni'",
    ):
        smoke_settings("run.significance.correction=bonferroni")
    with pytest.raises(ConfigError, match=r"run.significance: unknown key\(s\) \['tests'\]"):
        smoke_settings("+run.significance.tests=3")


# --------------------------------------------------------------------------- report.html


class PageParser(HTMLParser):
    """Tables (id -> rows of (tag, attributes, text) cells), images and every URL attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[tuple[str, str, str]]]] = {}
        self.images: list[str] = []
        self.urls: list[str] = []
        self._table: str | None = None
        self._cell: list[Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {key: value or "" for key, value in attrs}
        self.urls += [values[key] for key in ("src", "href") if key in values]
        if tag == "img":
            self.images.append(values.get("src", ""))
        if tag == "table":
            self._table = values.get("id", f"table{len(self.tables)}")
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = [tag, values.get("class", ""), ""]

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append((self._cell[0], self._cell[1], self._cell[2].strip()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[2] += data


def _parse(path: Path) -> PageParser:
    parser = PageParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def decode_png(uri: str) -> np.ndarray:
    assert uri.startswith("data:image/png;base64,")
    data = base64.b64decode(uri.split(",", 1)[1], validate=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(io.BytesIO(data), format="png")


@pytest.mark.needs_data
def test_report_html_is_self_contained_with_best_in_bold_and_markers(
    smoke: tuple[RunSummary, Settings],
) -> None:
    summary, settings = smoke
    page = _parse(summary.output_dir / "report.html")
    assert all(url.startswith("data:") for url in page.urls), [
        u[:40] for u in page.urls if not u.startswith("data:")
    ]
    text = (summary.output_dir / "report.html").read_text()
    assert "http://" not in text and "https://" not in text and "<script" not in text
    header, *rows = page.tables["metrics"]
    names = [cell[2] for cell in header]
    assert names[:6] == ["retriever", "nDCG@10", "R@10", "R@100", "RR@10", "AP@100"]
    by_retriever = {row[0][2].replace("baseline", "").strip(): row for row in rows}
    assert set(by_retriever) == {"bm25", "dense"}
    for column, metric in enumerate(names[1:6], start=1):
        values = {name: summary.results[i].metrics[metric] for i, name in enumerate(("bm25", "dense"))}
        best = max(values.values())
        for name, row in by_retriever.items():
            assert ("best" in row[column][1]) == (values[name] == best), (metric, name)
            assert row[column][2].startswith(f"{values[name]:.4f}")
    assert by_retriever["dense"][3][2] == "1.0000▲"  # R@100, Wilcoxon-significant gain
    assert [cell[2] for cell in by_retriever["dense"]].count("1.0000▲") == 1
    comparisons = page.tables["comparisons"][1:]
    assert [row[1][2] for row in comparisons] == [m.name for m in settings.metrics]
    r100 = next(row for row in comparisons if row[1][2] == "R@100")
    assert r100[4][2] == "10 / 25 / 0"
    assert len(page.images) == 4  # wins/ties/losses, per-query differences, latency, stages
    for uri in page.images:
        pixels = decode_png(uri)
        assert pixels.shape[0] > 200 and pixels.shape[1] > 600 and pixels.std() > 0.05


@pytest.mark.needs_data
def test_report_html_without_latency_or_comparison(data_env: Path, tmp_path: Path) -> None:
    run_experiment(smoke_settings("~retrievers.dense", "run.latency.n_queries=0"), tmp_path / "run")
    text = (tmp_path / "run" / "report.html").read_text()
    assert "One retriever: nothing to compare." in text
    assert "No per-query latency samples" in text
    assert _parse(tmp_path / "run" / "report.html").images == []
    assert _rows(tmp_path / "run" / "significance.csv") == []


def test_sweep_html_embeds_the_sweep_plots(tmp_path: Path) -> None:
    from viking_eval.sweep.summary import write_sweep_summary

    sweep = tmp_path / "sweep"
    for job, (k1, ndcg) in enumerate([(0.6, 0.41), (0.9, 0.48), (1.2, 0.45)]):
        folder = sweep / str(job)
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "overrides.yaml").write_text(f"- store.bm25.k1={k1}\n")
        retrievers = {
            "bm25": {
                "metrics": {"nDCG@10": ndcg},
                "latency": {"p50_ms": 1.0 + job, "p95_ms": 2.0 + job, "qps": 100.0},
            }
        }
        (folder / "metrics.json").write_text(json.dumps({"retrievers": retrievers}))
        (folder / "config.yaml").write_text("{}\n")  # a finished run: metrics.json and config.yaml
    write_sweep_summary(sweep)
    page = _parse(sweep / "sweep.html")
    header, *rows = page.tables["sweep"]
    assert [cell[2] for cell in header][:4] == ["job", "store.bm25.k1", "retriever", "nDCG@10"]
    bold = [row[3][2] for row in rows if "best" in row[3][1]]
    assert bold == ["0.4800"]
    plots = sorted(path.name for path in sweep.glob("*.png"))
    assert plots and len(page.images) == len(plots)
    for uri in page.images:
        assert decode_png(uri).std() > 0.01


# --------------------------------------------------------------------------- in a real browser


def run_chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
        page.resolve().as_uri(),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]? ?(.*)")


def console_messages(stderr: str) -> list[str]:
    """The page's console messages (errors, warnings, logs) Chromium writes to stderr."""
    return [found.group(1) for line in stderr.splitlines() if (found := CONSOLE.search(line))]


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)",
)


@needs_chromium
def test_console_detection_catches_a_broken_page(tmp_path: Path) -> None:
    """Control: the check below would see a console error if the report produced one."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><body><script>console.error("boom"); missing();</script></body></html>'
    )
    done = run_chromium(bad, tmp_path / "profile", "--dump-dom")
    messages = console_messages(done.stderr)
    assert any("boom" in message for message in messages), done.stderr[-2000:]
    assert any("missing is not defined" in message for message in messages)


@pytest.mark.needs_data
@needs_chromium
def test_report_html_in_headless_chromium(smoke: tuple[RunSummary, Settings], tmp_path: Path) -> None:
    summary, _ = smoke
    report = summary.output_dir / "report.html"
    dom = run_chromium(report, tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []
    rendered = PageParser()
    rendered.feed(dom.stdout)
    assert {"metrics", "comparisons", "latency"} <= set(rendered.tables)
    assert len(rendered.tables["metrics"]) == 3  # header, bm25, dense
    assert len(rendered.images) == 4 and all(
        src.startswith("data:image/png;base64,") for src in rendered.images
    )
    screenshot = tmp_path / "report.png"
    shot = run_chromium(report, tmp_path / "profile", f"--screenshot={screenshot}", "--window-size=1280,2000")
    assert shot.returncode == 0 and console_messages(shot.stderr) == []
    pixels = matplotlib.image.imread(screenshot)
    assert pixels.shape[:2] == (2000, 1280)
    # the page is drawn: dark text and coloured plots on the light background, not a blank frame
    assert pixels[..., :3].std() > 0.1
