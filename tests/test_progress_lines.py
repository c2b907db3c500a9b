"""A cold run that talks (issue 25, items 4 and 6): where stderr is not a terminal (CI, nohup,
``2> file``) every progress bar becomes plain lines at a steady interval, with a timer for stages
that count nothing for a while; Hugging Face's ``Loading weights`` bar is not shown on a model load."""

from __future__ import annotations

import io
import itertools
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import child_environment, run_python

from retrievers.index import BM25Index
from retrievers.types import EncodeKind
from viking_eval.progress import ProgressLines, library_progress, progress_bar, progress_interval
from viking_eval.run import cached_embedder as cache_module
from viking_eval.run.cache import ArtifactCache
from viking_eval.run.cached_embedder import CachedEmbedder

SPREAD_OVER_WORKERS = True  # tests/conftest.py: independent tests, each to the next free worker

ROOT = Path(__file__).resolve().parents[1]
# <stage>: <count>/<total> <unit> (<rate>/s, <elapsed>, ~<left> left)
COUNT_LINE = re.compile(
    r"^(?P<stage>.+): (?P<n>[\d,]+)/(?P<total>[\d,]+) \w+ \((?P<rate>[\d,.]+)/s, \d+:\d\d, ~"
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_come_at_least_every_interval_and_say_count_rate_and_time_left() -> None:
    clock, said = FakeClock(), []
    times: list[float] = []

    def write(line: str) -> None:
        said.append(line)
        times.append(clock.now)

    bar = ProgressLines(
        "embedding tiny (100 docs)", 100, "doc", interval=10, clock=clock, write=write, timer=False
    )
    with bar:
        # 2 docs every 3 s, a tick every second (the timer's job), then 40 s without a count
        for second in range(1, 121):
            clock.now = float(second)
            if second % 3 == 0 and second <= 75:
                bar.update(2)
            bar.tick()
    assert said[0] == "embedding tiny (100 docs): 2/100 doc (0.7/s, 0:03, ~2:27 left)"  # the first count
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert max(gaps) <= 10  # never quiet longer than the interval, counting or not
    assert len(said) == 13  # the first count at 3 s, one line per 10 s (13 s ... 113 s), the end
    assert "embedding tiny (100 docs): 50/100 doc" in said[-2]  # nothing counted after 75 s: still said
    assert said[-1] == "embedding tiny (100 docs): done, 50/100 doc in 2:00 (0.4/s)"
    assert all("\r" not in line for line in said)


def test_a_stage_without_count_says_running_then_done_and_a_failed_one_says_nothing_more() -> None:
    clock, said = FakeClock(), []
    with ProgressLines("loading model m", interval=5, clock=clock, write=said.append, timer=False) as bar:
        clock.now = 4.9
        bar.tick()
        assert said == []  # within the first interval: nothing yet
        clock.now = 12.0
        bar.tick()
    assert said == ["loading model m: running (0:12)", "loading model m: done in 0:12"]
    said.clear()
    with (
        pytest.raises(RuntimeError),
        ProgressLines("failing", 5, "q", clock=clock, write=said.append, timer=False),
    ):
        raise RuntimeError("boom")
    assert said == []  # the error is the one line


def test_the_interval_comes_from_the_environment_and_a_bad_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VIKING_EVAL_PROGRESS_INTERVAL", raising=False)
    assert progress_interval() == 10.0
    monkeypatch.setenv("VIKING_EVAL_PROGRESS_INTERVAL", "0.5")
    assert progress_interval() == 0.5
    for bad in ("0", "-3", "soon", "nan"):
        monkeypatch.setenv("VIKING_EVAL_PROGRESS_INTERVAL", bad)
        with pytest.raises(
            ValueError, match=f"VIKING_EVAL_PROGRESS_INTERVAL must be a number of seconds > 0.*{bad!r}"
        ):
            progress_interval()


class LengthEmbedder:
    name = "length"
    dim = 2

    def encode(self, texts: Sequence[str], *, kind: EncodeKind) -> np.ndarray:
        return np.array([[len(text), 1.0] for text in texts], dtype=np.float32)


def test_embedding_without_a_terminal_logs_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()  # not a terminal
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(cache_module, "ENCODE_CHUNK", 4)
    texts = [f"text {n}" for n in range(10)]
    CachedEmbedder(LengthEmbedder(), ArtifactCache(), label="tiny corpus", show_progress=None).encode(
        texts, kind="document"
    )
    lines = err.getvalue().splitlines()
    assert "\r" not in err.getvalue()
    first = COUNT_LINE.match(lines[0])
    assert first is not None and first["stage"] == "embedding tiny corpus (10 docs)", lines
    assert (first["n"], first["total"]) == ("4", "10")
    assert re.fullmatch(
        r"embedding tiny corpus \(10 docs\): done, 10/10 doc in 0:\d\d \([\d,.]+/s\)", lines[-1]
    )
    # show_progress=False: nothing; True: tqdm's bar, as before
    err.truncate(0)
    CachedEmbedder(LengthEmbedder(), ArtifactCache(), label="x", show_progress=False).encode(
        [f"other {n}" for n in range(10)], kind="document"
    )
    assert err.getvalue() == ""


def test_a_library_build_gets_lines_through_its_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    show = library_progress(None)
    assert callable(show)  # not a terminal: the harness's lines, not tqdm's bar
    BM25Index.build([f"word{n} common" for n in range(50)], show_progress=show)
    assert re.search(r"^bm25 index \(50 docs\): done, 50/50 doc in 0:\d\d", err.getvalue(), re.M), (
        err.getvalue()
    )
    assert "\r" not in err.getvalue()
    assert library_progress(False) is False and library_progress(True) is True
    assert isinstance(progress_bar(total=3, desc="d", unit="q", show=False), object)


def _environment(**extra: str) -> dict[str, str]:
    return child_environment(extra, drop=("HF_HUB_DISABLE_PROGRESS_BARS",))


@pytest.mark.needs_data
def test_a_run_with_stderr_to_a_file_shows_plain_progress_lines(
    shared_datasets: Path, tmp_path: Path
) -> None:
    err_file = tmp_path / "run.err"
    with err_file.open("w") as err:
        done = subprocess.run(
            [sys.executable, "-m", "viking_eval", "experiment=smoke", f"hydra.run.dir={tmp_path / 'run'}"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=_environment(
                VIKING_EVAL_DATA=str(shared_datasets),
                VIKING_EVAL_CACHE=str(tmp_path / "cache"),
                VIKING_EVAL_PROGRESS_INTERVAL="0.01",
            ),
            timeout=600,
            check=False,
        )
    text = err_file.read_text()
    assert done.returncode == 0, text[-2000:]
    assert "\r" not in text and "\x1b" not in text  # no bar garbage
    lines = text.splitlines()
    for stage in (
        "bm25 index (82 docs)",
        "retrieve bm25: 35 queries",
        "retrieve dense: 35 queries",
        "timing bm25",
    ):
        assert any(line.startswith(f"{stage}") and ": done, " in line for line in lines), (stage, lines)
    assert any(COUNT_LINE.match(line) for line in lines), lines  # stage, count, rate, time left
    log = (tmp_path / "run" / "cli.log").read_text()
    assert "retrieve bm25: 35 queries: done, 35/35 q in" in log  # Hydra's job log has them too


def test_loading_minilm_shows_no_loading_weights_bar(tmp_path: Path) -> None:
    program = (
        "from retrievers.embedders import SentenceTransformerEmbedder\n"
        "from viking_eval.run.cache import ArtifactCache\n"
        "from viking_eval.run.cached_embedder import CachedEmbedder\n"
        "embedder = CachedEmbedder(SentenceTransformerEmbedder('sentence-transformers/all-MiniLM-L6-v2'),\n"
        "                          ArtifactCache(), label='two', show_progress=None)\n"
        "print(embedder.encode(['a first text', 'a second one'], kind='query').shape)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=_environment(
            VIKING_EVAL_CACHE=str(tmp_path / "cache"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"
        ),
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(2, 384)"
    assert "Loading weights" not in done.stderr, done.stderr
    assert re.search(
        r"^loading model sentence-transformers/all-MiniLM-L6-v2: done in \d+:\d\d$", done.stderr, re.M
    )


def test_a_bad_interval_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    done = run_python(
        ["-m", "viking_eval", "experiment=smoke", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        env=_environment(VIKING_EVAL_PROGRESS_INTERVAL="soon", VIKING_EVAL_CACHE=str(tmp_path / "cache")),
        timeout=300,
    )
    assert done.returncode == 2
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        "error: VIKING_EVAL_PROGRESS_INTERVAL must be a number of seconds > 0 (such as 10 or 0.5), got 'soon'"
    ]
    assert not (tmp_path / "run").exists()
