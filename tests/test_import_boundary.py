"""The production library never imports the harness or its heavy dependencies."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

FORBIDDEN = {"hydra", "omegaconf", "pandas", "viking_eval"}
LIBRARY = Path(__file__).resolve().parents[1] / "retrievers"


def test_no_forbidden_imports_in_source() -> None:
    offenders = []
    for path in sorted(LIBRARY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.name}:{node.lineno} {name}" for name in names if name.split(".")[0] in FORBIDDEN
            ]
    assert offenders == []


def test_import_retrievers_stays_light() -> None:
    code = (
        "import sys, retrievers\n"
        "heavy = sorted(m for m in ('hydra', 'omegaconf', 'pandas', 'viking_eval', 'torch', 'sentence_transformers')"
        " if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_loading_a_store_and_a_tuned_file_imports_no_builder(tmp_path: Path) -> None:
    """Serving needs no build code (issue 24): importing retrievers, its store and load_tuned, and
    loading a saved store, leave every module of retrievers.builders out of sys.modules (the
    store used to import the builder inside ContextStore.build: a cycle hidden in a function)."""
    from retrievers import Document, StoreConfig
    from retrievers.builders import build_store

    build_store([Document("a", "one text"), Document("b", "another")], None, StoreConfig()).save(
        tmp_path / "s"
    )
    code = (
        "import sys, retrievers, retrievers.store\n"
        "from retrievers import load_tuned\n"
        "from retrievers.store import ContextStore\n"
        f"store = ContextStore.load(__import__('pathlib').Path({str(tmp_path / 's')!r}))\n"
        "assert len(store) == 2\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('retrievers.builders'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
