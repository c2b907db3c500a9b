"""Nothing a config names runs before it is checked: every ``_target_`` against the registry
(viking_eval/config/registry.py), before any import or call.

The probe is ``{_target_: logging.FileHandler, filename: F, mode: w}``: building it truncates F.
Through the command line, an experiment file (``--config-dir`` and ``hydra.searchpath``), a
Hydra callback and a baseline file's command, F must stay byte-identical, the exit status be 2
and stderr one line naming the key. A module outside the registry is never imported (a marker
its import would write must not exist).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_module

from retrievers import TunedFileError, load_tuned
from retrievers.baselines import BM25Retriever
from retrievers.rerank import EmbeddingReranker
from viking_eval.config import ConfigError, load_settings, registry
from viking_eval.config.compose import compose_config, hydra_session

REPO = Path(__file__).resolve().parents[1]
SMOKE = ["experiment=smoke"]
CONTENT = b"the probe's file: must stay byte-identical\n"


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_bytes(CONTENT)
    return path


@pytest.fixture
def evil_pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A package whose import (of the package or its module) writes a marker file; on sys.path."""
    folder = tmp_path / "elsewhere"
    marker = tmp_path / "imported.marker"
    package = folder / "evil_pkg"
    package.mkdir(parents=True)
    write = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    (package / "__init__.py").write_text(write, encoding="utf-8")
    (package / "mod.py").write_text(
        write
        + textwrap.dedent(
            f"""
            class Reranker:
                def __init__(self, **kwargs):
                    open({str(marker)!r}, 'a').write('called\\n')
                def rerank(self, query, candidates, texts):
                    return [1.0 for _ in candidates]

            class NotAnEmbedder:
                def __init__(self, **kwargs):
                    open({str(marker)!r}, 'a').write('called\\n')
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(registry, "_ALLOWED", [])
    monkeypatch.delenv(registry.ALLOW_ENV, raising=False)
    yield folder, marker
    for name in [name for name in sys.modules if name == "evil_pkg" or name.startswith("evil_pkg.")]:
        del sys.modules[name]


def _cli(tmp_path: Path, *args: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m viking_eval <args>`` with this worktree's code and no own modules allowed."""
    extra = {"PYTHONPATH": str(extra_path)} if extra_path else {}
    return run_module(
        "viking_eval",
        *args,
        f"hydra.run.dir={tmp_path / 'run'}",
        env=extra,
        drop=(registry.ALLOW_ENV,),
        timeout=300,
    )


def _one_error_line(result: subprocess.CompletedProcess[str], key: str, value: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr  # nothing printed before it (no Hydra "Error getting class")
    assert lines[0].startswith("error: "), lines
    assert key in lines[0] and repr(value) in lines[0], lines[0]
    return lines[0]


def _settings(*overrides: str) -> Any:
    with hydra_session():
        return load_settings(compose_config([*SMOKE, *overrides]))


def _file_handler(path: Path) -> str:
    return f"{{_target_:logging.FileHandler,filename:'{path}',mode:w}}"


# --------------------------------------------------------------------------- the FileHandler probe


def test_command_line_probe_leaves_the_file_alone(tmp_path: Path, probe: Path) -> None:
    result = _cli(tmp_path, *SMOKE, f"+retrievers.dense.reranker={_file_handler(probe)}")
    line = _one_error_line(result, "retrievers.dense.reranker._target_:", "logging.FileHandler")
    assert "retrievers.rerank.EmbeddingReranker" in line  # the allowed values
    assert "VIKING_EVAL_ALLOW_TARGETS" in line  # and how to allow an own class
    assert probe.read_bytes() == CONTENT


def test_hydra_callback_probe_is_refused_before_hydra_builds_it(tmp_path: Path, probe: Path) -> None:
    result = _cli(tmp_path, *SMOKE, f"+hydra.callbacks.probe={_file_handler(probe)}")
    _one_error_line(result, "hydra.callbacks.probe._target_:", "logging.FileHandler")
    assert probe.read_bytes() == CONTENT


def _experiment_dir(tmp_path: Path, probe: Path) -> Path:
    folder = tmp_path / "my_conf"
    (folder / "experiment").mkdir(parents=True)
    experiment = {
        "defaults": ["smoke"],
        "retrievers": {
            "dense": {"reranker": {"_target_": "logging.FileHandler", "filename": str(probe), "mode": "w"}}
        },
    }
    text = "# @package _global_\n" + yaml.safe_dump(experiment)
    (folder / "experiment" / "probe.yaml").write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize("how", ["--config-dir", "hydra.searchpath"])
def test_experiment_file_probe_leaves_the_file_alone(tmp_path: Path, probe: Path, how: str) -> None:
    folder = _experiment_dir(tmp_path, probe)
    where = (
        ["--config-dir", str(folder)] if how == "--config-dir" else [f"hydra.searchpath=[file://{folder}]"]
    )
    result = _cli(tmp_path, *where, "experiment=probe")
    _one_error_line(result, "retrievers.dense.reranker._target_:", "logging.FileHandler")
    assert probe.read_bytes() == CONTENT


def test_baseline_file_probe_leaves_the_file_alone(tmp_path: Path, probe: Path) -> None:
    source = yaml.safe_load((REPO / "experiments" / "baselines" / "ci_regression.yaml").read_text())
    first = source["checks"][0]
    first["command"] += f" '+retrievers.dense.reranker={_file_handler(probe)}'"
    copied = tmp_path / "ci_regression.yaml"
    copied.write_text(yaml.safe_dump(source), encoding="utf-8")
    result = _cli(tmp_path, "experiment=ci_regression", f"gate.baseline={copied}")
    line = _one_error_line(result, "retrievers.dense.reranker._target_:", "logging.FileHandler")
    assert str(copied) in line and f"check {first['dataset']!r}" in line
    assert probe.read_bytes() == CONTENT


# --------------------------------------------------------------------------- nothing outside is imported


@pytest.mark.parametrize(
    "override",
    [
        "+retrievers.x._target_=evil_pkg.mod.Retriever",
        "+retrievers.dense.reranker={_target_:evil_pkg.mod.Reranker}",
        "embedder._target_=evil_pkg.mod.NotAnEmbedder",
        "+retrievers.dense.extra={deep:[{_target_:evil_pkg.mod.Reranker}]}",  # nested in a list
    ],
)
def test_a_module_outside_the_registry_is_never_imported(evil_pkg: tuple[Path, Path], override: str) -> None:
    _, marker = evil_pkg
    with pytest.raises(
        ConfigError, match=r"'evil_pkg\.mod\.\w+' is not an? (\w+ )?class of the registry"
    ) as caught:
        _settings(override)
    assert caught.value.key.endswith("._target_")
    assert not marker.exists()
    assert "evil_pkg" not in sys.modules


def test_the_cli_imports_nothing_outside_the_registry(tmp_path: Path, evil_pkg: tuple[Path, Path]) -> None:
    folder, marker = evil_pkg
    result = _cli(
        tmp_path, *SMOKE, "+retrievers.dense.reranker={_target_:evil_pkg.mod.Reranker}", extra_path=folder
    )
    _one_error_line(result, "retrievers.dense.reranker._target_:", "evil_pkg.mod.Reranker")
    assert not marker.exists()


def test_an_allowed_module_is_imported_and_its_class_checked_before_it_is_called(
    evil_pkg: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, marker = evil_pkg
    monkeypatch.setenv(registry.ALLOW_ENV, "other_pkg, evil_pkg.mod")
    settings = _settings("+retrievers.dense.reranker={_target_:evil_pkg.mod.Reranker}")
    assert marker.read_text().splitlines() == ["evil_pkg", "evil_pkg.mod", "called"]  # built once, checked
    dense = next(spec for spec in settings.retrievers if spec.name == "dense")
    assert dense.params["reranker"] == {"_target_": "evil_pkg.mod.Reranker"}
    marker.unlink()
    # allowed, but the wrong kind: refused before its constructor runs
    with pytest.raises(ConfigError) as caught:
        _settings("embedder._target_=evil_pkg.mod.NotAnEmbedder")
    assert caught.value.line() == (
        "embedder._target_: 'evil_pkg.mod.NotAnEmbedder' is not an embedder: it has no encode() method "
        "(retrievers/types.py)"
    )
    assert not marker.exists()


def test_an_exact_class_entry_allows_only_that_class(evil_pkg: tuple[Path, Path]) -> None:
    registry.allow_targets("evil_pkg.mod.Reranker")
    assert registry.is_allowed("evil_pkg.mod.Reranker")
    assert not registry.is_allowed("evil_pkg.mod.NotAnEmbedder")
    assert not registry.is_allowed("evil_pkg.modx.Reranker")  # a prefix is a whole module name
    assert not registry.is_allowed("evil_pkg.mod.Reranker;os")
    with pytest.raises(ValueError, match="not a module or dotted class name"):
        registry.allow_targets("evil pkg")


# --------------------------------------------------------------------------- kinds, names, messages


def test_embedder_of_the_wrong_class_is_one_line_exit_2(tmp_path: Path) -> None:
    result = _cli(tmp_path, *SMOKE, "embedder._target_=retrievers.baselines.BM25Retriever")
    line = _one_error_line(result, "embedder._target_:", "retrievers.baselines.BM25Retriever")
    assert "is not an embedder class of the registry (it is a retriever)" in line
    assert "retrievers.embedders.TfidfEmbedder" in line


def test_a_bad_target_is_one_line_without_hydras_text(tmp_path: Path) -> None:
    result = _cli(tmp_path, *SMOKE, "+retrievers.x._target_=nope.mod.Cls")
    line = _one_error_line(result, "retrievers.x._target_:", "nope.mod.Cls")
    assert "Error loading" not in result.stderr and "ModuleNotFoundError" not in result.stderr
    assert "retrievers.baselines.BM25Retriever" in line


def test_project_classes_by_every_exported_name_and_nothing_else() -> None:
    assert registry.resolve("retrievers.BM25Retriever", "k", "retriever") is BM25Retriever
    assert registry.resolve("retrievers.baselines.BM25Retriever", "k", "retriever") is BM25Retriever
    assert (
        registry.resolve("retrievers.rerank.embedding.EmbeddingReranker", "k", "reranker")
        is EmbeddingReranker
    )
    for name in (
        "retrievers.store.ContextStore",
        "retrievers.tuned.load_tuned",
        "os.system",
        "builtins.eval",
    ):
        assert not registry.is_allowed(name)
        with pytest.raises(ConfigError):
            registry.resolve(name, "k")


def _targets(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        if "_target_" in value:
            yield path, value["_target_"]
        for key, item in value.items():
            yield from _targets(item, (*path, str(key)))
    elif isinstance(value, list):
        for item in value:
            yield from _targets(item, path)


def test_every_target_the_project_configs_name_is_registered_for_its_slot() -> None:
    """A class added to conf/ without its registry entry fails here, not in a user's run."""
    seen = 0
    for file in sorted((REPO / "conf").rglob("*.yaml")):
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        for path, target in _targets(data):
            # conf/hydra/ (hydra/launcher=ray) and hydra: nodes are Hydra's: check_hydra_targets' prefixes
            if target is None or (path and path[0] == "hydra") or file.parent.parent.name == "hydra":
                continue
            group = file.parent.name
            slot = path or ((group,) if group in ("embedder", "reranker") else ("retrievers", file.stem))
            kind = registry.kind_of_slot(slot)
            assert registry.resolve(target, f"{file}:{'.'.join(path)}", kind), (file, path, target)
            seen += 1
    assert seen >= 20


def test_an_own_retrievers_bad_parameter_in_the_projects_words(
    evil_pkg: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, _ = evil_pkg
    (folder / "own_retriever.py").write_text(
        textwrap.dedent(
            """
            class Mine:
                def __init__(self, store, embedder=None, depth: int = 1):
                    self.store = store
                def retrieve(self, query, top_k=10):
                    return []
                def retrieve_batch(self, queries, top_k=10):
                    return [[] for _ in queries]
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.setenv(registry.ALLOW_ENV, "own_retriever")
    with pytest.raises(ConfigError) as caught:
        _settings("+retrievers.mine._target_=own_retriever.Mine", "+retrievers.mine.depth=abc")
    assert caught.value.line() == "retrievers.mine.depth: must be an integer, got 'abc'"
    sys.modules.pop("own_retriever", None)


def test_a_tuned_file_with_a_target_is_refused_before_any_import(
    tmp_path: Path, evil_pkg: tuple[Path, Path]
) -> None:
    _, marker = evil_pkg
    document = {
        "format": 1,
        "retriever": {
            "class": "HybridRetriever",
            "params": {"keyword_leg": {"_target_": "evil_pkg.mod.Reranker"}},
        },
        "embedder": {"class": "TfidfEmbedder", "params": {"dim": 4}, "name": None},
        "store": {"bm25": {"k1": 0.9, "b": 0.4}},
    }
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(
        TunedFileError, match=r"retriever\.params\.keyword_leg\._target_ 'evil_pkg.mod.Reranker' is refused"
    ):
        load_tuned(path, documents=[{"_id": "a", "text": "red fox"}])
    assert not marker.exists()
    assert "evil_pkg" not in sys.modules
