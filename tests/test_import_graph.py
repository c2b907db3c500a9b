"""The harness in layers (issue 24): no import cycle, modules in layers, small modules.

Every module of ``viking_eval/``, ``retrievers/`` and ``hydra_plugins/`` is parsed (never imported) and every
``import`` / ``from ... import`` in it counts, wherever it stands: at the top, inside a function
or under ``if TYPE_CHECKING``. A lazy import that only hid a cycle would still be a cycle here.
``from pkg import name`` is an edge to ``pkg.name`` when that is a module of the project, else to
``pkg``; relative imports are resolved; a submodule does not depend on its package's
``__init__`` unless it imports it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("viking_eval", "retrievers", "hydra_plugins")

ACYCLIC = PACKAGES
"""Modules under these names must take part in no import cycle (among all the project's
modules)."""

LAYERS: tuple[tuple[str, ...], ...] = (
    ("retrievers",),  # the production library knows nothing of the harness
    ("viking_eval.files", "viking_eval.progress", "viking_eval.exits"),
    ("viking_eval.measures", "viking_eval.answers.settings"),  # answers.* and llm.* (read by config)
    ("viking_eval.config",),
    ("viking_eval.data",),
    # values: a run's results, a benchmark's table, the ANN quality measure (what reports show)
    ("viking_eval.results.model", "viking_eval.results.environment", "viking_eval.results.layout"),
    ("viking_eval.benchmark.table", "viking_eval.run.ann_quality", "viking_eval.answers"),
    ("viking_eval.report",),
    ("viking_eval.results",),  # the run folder: reads and writes its files, renders the reports
    ("viking_eval.run",),  # the one experiment loop
    ("viking_eval.gate", "viking_eval.sweep", "viking_eval.benchmark", "viking_eval.clean"),  # the programs
    ("viking_eval.fuse",),  # fusing run files (a program: reads run files, never runs retrievers)
    (
        "viking_eval.growth",
    ),  # quality as the memory grows (a program: stores per step, the loop's evaluation)
    ("hydra_plugins",),  # the Optuna sweeper (checks its job folders with viking_eval.sweep)
    ("viking_eval.api",),
    ("viking_eval.cli",),  # maps the command line onto the programs
)
"""The layers, lowest first: a module imports only modules of its own layer or a lower one (the
cycle test keeps a layer acyclic). A module belongs to the layer of the longest name prefix that
matches it. Entries (:data:`ENTRIES`) stand above all layers and may import anything."""

ENTRIES = ("viking_eval",)
"""Modules above every layer: the package (re-exports :func:`viking_eval.evaluate`) and every
``__main__`` (``python -m ...``)."""

HANDED_THE_LOOP = ("viking_eval.gate", "viking_eval.report", "viking_eval.results")
"""Never import the experiment loop (issue 13): the gate is handed ``run_experiment`` by its
callers (viking_eval/cli.py, ``python -m viking_eval.gate``); reports and the run folder read
results."""

NO_FILES = ("viking_eval.results.model", "viking_eval.report.markdown", "viking_eval.report.page")
"""The run folder writes; the result model and the reports never touch files themselves."""

KNOWN_ON_A_CYCLE: frozenset[str] = frozenset()
"""Modules allowed on a cycle (none: a cycle through any module fails)."""

MAX_LINES = 500
CHECKED_FOR_SIZE = ("viking_eval", "retrievers", "hydra_plugins")
"""Folders whose modules must stay under :data:`MAX_LINES` lines."""

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


def is_entry(name: str, entries: Iterable[str] = ENTRIES) -> bool:
    return name in set(entries) or name.rpartition(".")[2] == "__main__"


def layer_of(name: str, layers: Sequence[Sequence[str]] = LAYERS) -> int | None:
    """Index in ``layers`` of the longest prefix naming ``name`` (None: in no layer)."""
    best: tuple[int, int] | None = None
    for index, prefixes in enumerate(layers):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def layer_breaches(
    graph: dict[str, set[str]], layers: Sequence[Sequence[str]] = LAYERS, entries: Iterable[str] = ENTRIES
) -> list[str]:
    """``a -> b`` for every import of a module ``a`` from a higher layer ``b``, and every
    module (not an entry) in no layer."""
    entries = tuple(entries)
    breaches = []
    for name in sorted(graph):
        if is_entry(name, entries):
            continue
        own = layer_of(name, layers)
        if own is None:
            breaches.append(f"{name} is in no layer")
            continue
        for target in sorted(graph[name]):
            if is_entry(target, entries):
                breaches.append(f"{name} -> {target} (an entry)")
                continue
            theirs = layer_of(target, layers)
            if theirs is None or theirs > own:
                breaches.append(f"{name} -> {target}")
    return breaches


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


def test_the_layer_check_finds_an_import_from_above(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.top import run\n",
            "pkg/__main__.py": "from pkg.top import run\n",  # an entry: anything
            "pkg/low.py": "def f():\n    from pkg.top import run\n",  # up, inside a function
            "pkg/mid/__init__.py": "",
            "pkg/mid/a.py": "from pkg import low\nfrom pkg.mid import b\n",  # down, and its own layer
            "pkg/mid/b.py": "import pkg\n",  # the package's __init__ is an entry: never imported
            "pkg/mid/up.py": "import pkg.top\n",  # a longer prefix puts it in the top layer
            "pkg/top.py": "from pkg.mid import a, up\n",
            "pkg/stray.py": "",
        },
    )
    graph = import_graph(tmp_path, ["pkg"])
    layers = [("pkg.low",), ("pkg.mid",), ("pkg.top", "pkg.mid.up")]
    assert layer_of("pkg.mid.up", layers) == 2 and layer_of("pkg.mid.a", layers) == 1
    assert layer_breaches(graph, layers, ["pkg"]) == [
        "pkg.low -> pkg.top",
        "pkg.mid.b -> pkg (an entry)",
        "pkg.stray is in no layer",
    ]
    assert layer_breaches(graph, [("pkg.low", "pkg.mid", "pkg.top", "pkg.stray")], ["pkg"]) == [
        "pkg.mid.b -> pkg (an entry)"
    ]


def test_modules_in_layers() -> None:
    graph = import_graph()
    assert graph.get("viking_eval.cli") and graph.get("hydra_plugins.viking_optuna_sweeper._study")
    breaches = layer_breaches(graph)
    assert not breaches, "imports against the layer order (LAYERS): " + "; ".join(breaches)
    for name, targets in graph.items():
        if any(name == p or name.startswith(p + ".") for p in HANDED_THE_LOOP) and not is_entry(name):
            assert "viking_eval.run.experiment" not in targets, f"{name} imports the experiment loop"
    for name in NO_FILES:
        assert graph[name] and "viking_eval.files" not in graph[name], name


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
