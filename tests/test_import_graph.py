"""The harness in layers (issue 24): no import cycle, small modules.

Every module of ``viking_eval/`` and ``retrievers/`` is parsed (never imported) and every
``import`` / ``from ... import`` in it counts, wherever it stands: at the top, inside a function
or under ``if TYPE_CHECKING``. A lazy import that only hid a cycle would still be a cycle here.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module of the project, else to
``pkg``; relative imports are resolved; a submodule does not depend on its package's
``__init__`` unless it imports it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("viking_eval", "retrievers")

ACYCLIC = ("viking_eval.data", "retrievers")
"""Modules under these names must take part in no import cycle (among all the project's
modules). Other packages of viking_eval are being restructured; widen this to ``("viking_eval",
"retrievers")`` once they are done."""

KNOWN_ON_A_CYCLE: frozenset[str] = frozenset()
"""Modules allowed on a cycle (none: a cycle through any module fails)."""

MAX_LINES = 500
CHECKED_FOR_SIZE = ("viking_eval/data", "retrievers")
"""Folders whose modules must stay under :data:`MAX_LINES` lines (widen as for :data:`ACYCLIC`)."""

KNOWN_OVER: frozenset[str] = frozenset()
"""Known allowance: modules over :data:`MAX_LINES` lines (none left in the checked folders)."""


def project_modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(root, path)] = path
    return found


def module_name(root: Path, path: Path) -> str:
    """``a.b.c`` for ``root/a/b/c.py``, ``a.b`` for ``root/a/b/__init__.py``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(name: str, path: Path, modules: Iterable[str]) -> set[str]:
    """The project modules that module ``name`` (file ``path``) imports, anywhere in the file."""
    known = set(modules)
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    edges: set[str] = set()

    def nearest(target: str) -> str | None:
        """``target`` or its closest enclosing package that is a project module."""
        while target:
            if target in known:
                return target
            target = target.rpartition(".")[0]
        return None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                hit = nearest(alias.name)
                if hit is not None:
                    edges.add(hit)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                hit = f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else nearest(base)
                if hit is not None:
                    edges.add(hit)
    edges.discard(name)
    return edges


def import_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    modules = project_modules(root, packages)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(
    graph: dict[str, set[str]], among: Iterable[str], allowed: Iterable[str] = ()
) -> list[str] | None:
    """A shortest import cycle ``a -> b -> ... -> a`` through a module whose name is or starts
    with one of ``among`` and is not ``allowed`` (a module is on a cycle iff it can reach
    itself), or None."""
    prefixes, skip = tuple(among), set(allowed)
    for start in sorted(graph):
        if start in skip or not any(start == p or start.startswith(p + ".") for p in prefixes):
            continue
        came_from: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in came_from:
            following = []
            for node in frontier:
                for nxt in sorted(graph.get(node, ())):
                    if nxt not in came_from:
                        came_from[nxt] = node
                        following.append(nxt)
            frontier = following
        if start in came_from:
            cycle = [start]
            while len(cycle) == 1 or cycle[-1] != start:
                cycle.append(came_from[cycle[-1]])
            return cycle[::-1]
    return None


# --------------------------------------------------------------------------- the checker itself


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import f\n",
            "pkg/b.py": "def f():\n    from . import c\n",
            "pkg/c.py": "import pkg.a as a\n",
            "pkg/d.py": "from pkg import a, b\n",
        },
    )
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.b"] == {"pkg.c"}  # relative, inside a function, `from pkg import module`
    assert graph["pkg.d"] == {"pkg.a", "pkg.b"}
    assert graph["pkg"] == set()  # a submodule does not import its package's __init__
    assert find_cycle(graph, ["pkg"]) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert find_cycle(graph, ["other"]) is None
    assert find_cycle(graph, ["pkg"], allowed=["pkg.a", "pkg.b"]) == ["pkg.c", "pkg.a", "pkg.b", "pkg.c"]
    assert find_cycle(graph, ["pkg"], allowed=["pkg.a", "pkg.b", "pkg.c"]) is None


def test_the_checker_passes_a_layered_package(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.top import run\n",  # re-exports the top
            "pkg/top.py": "from pkg.low import x\nfrom pkg.errors import E\n",
            "pkg/low.py": "from pkg.errors import E\nfrom ..pkg import errors\n",
            "pkg/errors.py": "class E(Exception): ...\n",
        },
    )
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg"] == {"pkg.top"}
    assert find_cycle(graph, ["pkg"]) is None


# --------------------------------------------------------------------------- the project


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert graph.get("viking_eval.data.resolve")  # the scan found the modules and their imports
    cycle = find_cycle(graph, ACYCLIC, KNOWN_ON_A_CYCLE)
    assert cycle is None, "import cycle (imports inside functions count): " + " -> ".join(cycle or [])
    stale = sorted(name for name in KNOWN_ON_A_CYCLE if find_cycle(graph, [name]) is None)
    assert not stale, f"no longer on an import cycle (remove from KNOWN_ON_A_CYCLE): {stale}"


def test_modules_stay_small() -> None:
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for folder in CHECKED_FOR_SIZE
        for path in sorted((ROOT / folder).rglob("*.py"))
    }
    assert "viking_eval/data/resolve.py" in sizes
    over = {rel: n for rel, n in sizes.items() if n > MAX_LINES and rel not in KNOWN_OVER}
    assert not over, f"modules over {MAX_LINES} lines (split them): {over}"
    stale = sorted(rel for rel in KNOWN_OVER if sizes.get(rel, 0) <= MAX_LINES)
    assert not stale, f"no longer over {MAX_LINES} lines (remove from KNOWN_OVER): {stale}"


def test_the_documented_commands_run_their_module_once() -> None:
    # importing the package loads none of its modules, so runpy does not warn that
    # viking_eval.data.download was imported before it ran as __main__
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for command in (["viking_eval.data.download", "--list"], ["viking_eval.data.convert", "--help"]):
        done = subprocess.run(
            [sys.executable, "-W", "error::RuntimeWarning", "-m", *command],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            check=False,
        )
        assert done.returncode == 0 and done.stderr == "", (command, done.stderr)
        assert done.stdout.strip()
