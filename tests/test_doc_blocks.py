"""Every shell and Python block of README.md and docs/*.md runs as written (issue 25 item 3).

Each ```bash/```sh/```console and ```python block is one test, named ``file:line``. A block runs
in a temporary folder that mirrors the repository (its top-level entries linked, except the
folders runs write: ``reports``, ``runs``, ``stores``), with ``VIKING_EVAL_DATA`` set to the
shared datasets. Before it, the earlier blocks of the same page that make files are replayed: a
Python block whose first line is a comment naming a ``.py`` path (``# my_pkg/overlap.py, ...``)
is written there (the folder is on ``PYTHONPATH``), and the page's ``python SCRIPT`` commands run;
a Python file of another page is written too when the block names its module.

Shell commands, one per line (``\\`` continues a line, ``#`` starts a comment):

- ``python -m viking_eval ARGS``: the CLI's pre-flight in this process (``viking_eval.cli.habits``
  then ``viking_eval.cli.preflight``): the config of every job is composed and validated as the
  app does, nothing is read or run (the runs take minutes to hours). It must pass, unless the
  page marks the block ``<!-- doc-test: fails N -->`` (then it must exit N). A ``VIKING_EVAL_DATA=``
  prefix names the reader's data folder: the shared datasets stand in for it.
- ``python -m viking_eval.MODULE ARGS``: ``--help`` exits 0 and lists every ``--option`` the
  command gives.
- ``python -m pytest ARGS``: every path it names exists.
- ``python SCRIPT ARGS``: run (scripts in docs are small and local), exit 0.
- ``pip install ...``: the README's set-up line, which CI runs.

Python blocks run in a fresh interpreter (exit 0). Blocks that cannot run here, or that another
test runs more strictly, are in ``SKIPPED`` by file and first line, with the reason, and get no
test; an entry that matches no block fails.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from viking_eval import cli

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = ("bash", "sh", "console")
WRITTEN_BY_RUNS = {"reports", "runs", "stores", "outputs", "multirun", ".git"}
SPREAD_OVER_WORKERS = True  # tests/conftest.py: each block is independent; the file is the longest

SKIPPED: dict[tuple[str, str], str] = {
    ("README.md", "from retrievers import load_tuned"): (
        "the production example: tests/test_readme.py runs it as written in a stricter setting (no "
        "VIKING_EVAL_DATA, an empty HOME) and checks what it prints"
    ),
    ("docs/datasets-irds.md", "from viking_eval.data.irds import load_irds"): (
        "downloads BEIR SciFact through ir_datasets (network)"
    ),
    (
        "docs/fusion.md",
        "python -m viking_eval experiment=quickstart dataset=scifact hydra.run.dir=/tmp/fusion_table/legs_scifact run.latency.n_queries=0",
    ): ("the fusion table's commands: MiniLM runs of SciFact and LoCoMo, then every method (minutes)"),
    (
        "docs/stores.md",
        "python benchmarks/test_bench_backends.py quality --dataset cisi --embedder tfidf      # 2 min at load ~2",
    ): ("the backends' quality and latency tables: every family on every database (about 50 minutes)"),
    (
        "docs/tuning.md",
        "python -m viking_eval -m hydra/launcher=slurm hydra.launcher.partition=cpu experiment=smoke \\",
    ): (
        "needs a SLURM cluster: without sbatch and srun on the PATH its pre-flight refuses in one line, "
        "exit 2 (tests/test_slurm_launcher.py checks that line and renders the job array it would submit)"
    ),
}
"""(page, first line of the block) -> why the block is not run here."""


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence
    language: str
    text: str
    fails: int | None  # the exit status the page says the block ends with

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0].strip() if self.text.strip() else ""

    @property
    def written_to(self) -> str | None:
        """The path a Python block says it is the file of (its first line ``# path.py, ...``)."""
        found = re.fullmatch(r"#\s*([\w./-]+\.py)\b.*", self.first_line)
        return found.group(1) if self.language == "python" and found else None


def _blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    number = 0
    while number < len(lines):
        opening = re.fullmatch(r"(\s*)```(\w*)\s*", lines[number])
        if opening is None:
            number += 1
            continue
        end = number + 1
        while not re.fullmatch(r"\s*```\s*", lines[end]):
            end += 1
        language = opening.group(2)
        if language in (*SHELL, "python"):
            marker = re.fullmatch(r"<!-- doc-test: fails (\d+) -->", lines[number - 1].strip())
            indent = len(opening.group(1))
            blocks.append(
                Block(
                    page=page.relative_to(REPO).as_posix(),
                    line=number + 1,
                    language=language,
                    text="\n".join(line[indent:] for line in lines[number + 1 : end]) + "\n",
                    fails=int(marker.group(1)) if marker else None,
                )
            )
        number = end + 1
    return blocks


BLOCKS = [block for page in PAGES for block in _blocks(page)]
RUN = [block for block in BLOCKS if (block.page, block.first_line) not in SKIPPED]
"""The blocks tested: SKIPPED ones get no test at all (CI's VIKING_EVAL_NO_SKIP=1 fails any skip)."""


def _commands(text: str) -> list[list[str]]:
    """The block's command lines as words (continuations joined, comments dropped, ``$VAR`` expanded)."""
    joined = re.sub(r"\\\n", " ", text)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands.append([os.path.expandvars(word) for word in words])
    return commands


def _split_env(words: list[str]) -> tuple[dict[str, str], list[str]]:
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words[0].partition("=")
        env[name] = value
        words = words[1:]
    return env, words


def _mirror(folder: Path) -> None:
    for entry in REPO.iterdir():
        if entry.name not in WRITTEN_BY_RUNS:
            (folder / entry.name).symlink_to(entry)


@cache
def _module_help(module: str, *subcommand: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, *subcommand, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert done.returncode == 0, (
        f"python -m {module} {' '.join(subcommand)} --help: exit {done.returncode}\n{done.stderr[-2000:]}"
    )
    return done.stdout


def _python_env(folder: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


def _run_script(words: list[str], env: dict[str, str], folder: Path) -> None:
    done = subprocess.run(
        [sys.executable, *words[1:]],
        cwd=folder,
        capture_output=True,
        text=True,
        env={**_python_env(folder), **env},
        check=False,
    )
    assert done.returncode == 0, f"{shlex.join(words)}: exit {done.returncode}\n{done.stderr[-2000:]}"


def _prepare(block: Block, folder: Path, datasets: Path) -> None:
    """The files the page's earlier blocks make: written Python files, scripts run; and a Python
    file another page writes when the block names its module (docs/configs.md names
    ``my_pkg.overlap``, which docs/api.md writes): each test may run in another worker process,
    so nothing an earlier page's test imported is there."""
    for earlier in BLOCKS:
        named_elsewhere = (
            earlier.page != block.page
            and earlier.written_to is not None
            and earlier.written_to.removesuffix(".py").replace("/", ".") in block.text
        )
        if not named_elsewhere and (earlier.page != block.page or earlier.line >= block.line):
            continue
        if earlier.written_to is not None:
            target = folder / earlier.written_to
            target.parent.mkdir(parents=True, exist_ok=True)
            (target.parent / "__init__.py").touch()
            target.write_text(earlier.text, encoding="utf-8")
        elif earlier.language in SHELL and _skip_reason(earlier) is None:
            for words in _commands(earlier.text):
                env, words = _split_env(words)
                if words[:1] == ["python"] and words[1:2] != ["-m"]:
                    _run_script(words, {**env, "VIKING_EVAL_DATA": str(datasets)}, folder)


def _skip_reason(block: Block) -> str | None:
    return SKIPPED.get((block.page, block.first_line))


def _preflight(arguments: list[str]) -> int:
    try:
        cli.preflight(cli.habits(arguments))
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0


def _check_command(words: list[str], block: Block, monkeypatch: pytest.MonkeyPatch, datasets: Path) -> None:
    env, words = _split_env(words)
    for name, value in env.items():
        monkeypatch.setenv(name, str(datasets) if name == "VIKING_EVAL_DATA" else value)
    shown = shlex.join(words)
    if words[:3] == ["python", "-m", "viking_eval"]:
        status = _preflight(words[3:])
        assert status == (block.fails or 0), f"{shown}: pre-flight exit {status}"
    elif words[:2] == ["python", "-m"] and words[2].startswith("viking_eval."):
        text = _module_help(words[2])
        subcommands = re.search(r"\{([\w,-]+)\}", text)
        if subcommands and len(words) > 3 and words[3] in subcommands.group(1).split(","):
            text = _module_help(words[2], words[3])  # a subcommand's options
        for option in (word.split("=", 1)[0] for word in words[3:] if word.startswith("--")):
            assert re.search(rf"{re.escape(option)}\b", text), f"{shown}: --help lists no {option}"
    elif words[:3] == ["python", "-m", "pytest"]:
        for word in words[3:]:
            if not word.startswith("-") and ("/" in word or word.endswith(".py")):
                assert (REPO / word).exists(), f"{shown}: {word} does not exist"
    elif words[:1] == ["python"]:
        _run_script(words, {"VIKING_EVAL_DATA": str(datasets)}, Path.cwd())
    elif words[:2] == ["pip", "install"]:
        assert shown in (REPO / ".ci" / "run").read_text(encoding="utf-8"), f"{shown}: CI does not run it"
    else:
        pytest.fail(f"{block.page}:{block.line}: no rule checks {shown!r}; add one or skip the block")


@pytest.mark.needs_data
@pytest.mark.parametrize("block", RUN, ids=[f"{block.page}:{block.line}" for block in RUN])
def test_block_runs_as_written(
    block: Block, shared_datasets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.written_to is not None:
        compile(block.text, block.written_to, "exec")  # written out and imported by later blocks
        return
    _mirror(tmp_path)
    _prepare(block, tmp_path, shared_datasets)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VIKING_EVAL_DATA", str(shared_datasets))
    monkeypatch.syspath_prepend(str(tmp_path))
    if block.language == "python":
        done = subprocess.run(
            [sys.executable, "-c", block.text],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=_python_env(tmp_path),
            check=False,
        )
        assert done.returncode == (block.fails or 0), done.stderr[-3000:]
        return
    commands = _commands(block.text)
    assert commands, f"{block.page}:{block.line}: an empty block"
    for words in commands:
        _check_command(words, block, monkeypatch, shared_datasets)


def test_every_skip_names_a_block() -> None:
    present = {(block.page, block.first_line) for block in BLOCKS}
    stale = sorted(set(SKIPPED) - present)
    assert not stale, f"SKIPPED names blocks no page has (moved or edited?): {stale}"


def test_blocks_are_found() -> None:
    kinds = {language: sum(block.language == language for block in BLOCKS) for language in (*SHELL, "python")}
    assert kinds["bash"] >= 30 and kinds["python"] >= 8, kinds
