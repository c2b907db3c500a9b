"""The README's commands and its production example are true as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def _commands(block: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_the_first_lines_are_set_up_main_job_and_tests_and_ci_runs_them() -> None:
    first = README.split("```bash\n", 1)[1]
    assert README.index("```bash\n") < 40, "the three commands come first"
    set_up, main_job, tests = _commands(first.split("```", 1)[0])
    assert set_up == "pip install -c constraints-local.txt -e '.[dev]'"
    assert main_job == "python -m viking_eval"
    assert tests == "python -m pytest -q"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    ci_commands = _commands(ci)
    assert set_up in ci_commands
    assert any(line.endswith(tests) for line in ci_commands), "CI runs the README's test command"


def test_every_python_m_command_in_the_readme_names_a_module_that_exists() -> None:
    for block in _blocks("bash"):
        for command in _commands(block):
            module = re.match(r"python -m ([\w.]+)", command)
            if module is None:
                continue
            path = REPO / Path(*module.group(1).split("."))
            assert (
                path.with_suffix(".py").is_file()
                or (path / "__main__.py").is_file()
                or module.group(1) in ("pytest",)
            ), command


def test_the_production_example_runs_verbatim(tmp_path: Path) -> None:
    (example,) = _blocks("python")
    done = subprocess.run(
        [sys.executable, "-c", example],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        },
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "RetrievalResult(doc_id='b'" in done.stdout


def _named_in_concept_tables() -> set[str]:
    """The files the README's concept tables name: in each row's file column, a folder token
    (`retrievers/store/`) names its package (`__init__.py`) and prefixes the bare module names
    after it (`tree.py`); a token with a slash is a path from the repository root."""
    section = README.split("## Concepts, and the one file that holds each", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        folder = ""
        for token in re.findall(r"`([^`]+)`", line.rstrip(" |").rsplit("|", 1)[-1]):
            if token.endswith("/"):
                folder = token
                named.add(f"{token}__init__.py")
            elif token.endswith(".py"):
                named.add(token if "/" in token else f"{folder}{token}")
    return named


def test_the_concept_tables_name_every_module_of_the_packages() -> None:
    named = _named_in_concept_tables()
    modules = {
        path.relative_to(REPO).as_posix()
        for package in ("retrievers", "viking_eval", "hydra_plugins")
        for path in (REPO / package).rglob("*.py")
    }
    assert not modules - named, f"modules the README's concept tables do not name: {sorted(modules - named)}"
    assert not named - modules, f"files the concept tables name that do not exist: {sorted(named - modules)}"
