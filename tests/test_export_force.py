"""``python -m viking_eval.sweep.export`` never replaces an existing tuned file unless ``--force`` is given
(issue 23, item 3): without it, one line naming the file and what it holds, exit 2, the file
byte-identical; with it, the file is replaced whole. A partial file never sits under the final
name. The run folders are small hand-written ones (no data needed)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import run_module

from viking_eval.sweep import export as export_module
from viking_eval.sweep.export import ExportError, export, main

REPO = Path(__file__).resolve().parents[1]
TRACKED_PRESET = REPO / "experiments" / "tuned" / "hybrid-scifact.yaml"


def _run_folder(folder: Path, *, k1: float, ndcg: float, dataset: str = "adi") -> Path:
    """A finished run folder as the runner writes it, reduced to what export reads."""
    folder.mkdir(parents=True)
    config = {
        "dataset": {"name": dataset, "split": "test"},
        "embedder": {"_target_": "retrievers.embedders.TfidfEmbedder", "dim": 256, "seed": 0},
        "store": {"bm25": {"k1": k1, "b": 0.4}},
        "retrievers": {"bm25": {"_target_": "retrievers.baselines.BM25Retriever"}},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    metrics = {
        "dataset": dataset,
        "split": "test",
        "retrievers": {"bm25": {"metrics": {"nDCG@10": ndcg}}},
    }
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "environment.json").write_text(json.dumps({"git": "abc123", "embedder": "tfidf-svd:x"}))
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))}


def test_an_existing_file_is_refused_naming_what_it_holds_and_kept(tmp_path: Path) -> None:
    first = _run_folder(tmp_path / "first", k1=0.9, ndcg=0.41)
    second = _run_folder(tmp_path / "second", k1=0.3, ndcg=0.52, dataset="cisi")
    out = tmp_path / "tuned"
    path = export(first, "bm25-adi", out_dir=out)
    before = path.read_bytes()
    exported = yaml.safe_load(before)["provenance"]["exported"]

    with pytest.raises(ExportError) as refused:
        export(second, "bm25-adi", out_dir=out)
    assert str(refused.value) == (
        f"{path} exists and holds a tuned BM25Retriever, tuned on adi (test split), exported {exported}, "
        f"from {first}; --force replaces it (or give another --name)"
    )
    assert path.read_bytes() == before
    assert sorted(os.listdir(out)) == ["bm25-adi.yaml"]  # no temporary file left beside it

    # --force replaces it with the new document, whole
    assert export(second, "bm25-adi", out_dir=out, force=True) == path
    replaced = yaml.safe_load(path.read_text())
    assert replaced["provenance"]["dataset"] == "cisi" and replaced["store"]["bm25"]["k1"] == 0.3
    assert sorted(os.listdir(out)) == ["bm25-adi.yaml"]


def test_the_command_line_refuses_in_one_line_and_force_says_what_it_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run_folder(tmp_path / "run", k1=0.9, ndcg=0.41)
    out = tmp_path / "tuned"
    (out).mkdir()
    target = out / "mine.yaml"
    target.write_text("not: a tuned file\n")
    before = target.read_bytes()

    assert main([str(run), "--name", "mine", "--out-dir", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"error: {target} exists and holds a file that is not a tuned file of this format; --force "
        "replaces it (or give another --name)\n"
    )
    assert target.read_bytes() == before

    assert main([str(run), "--name", "mine", "--out-dir", str(out), "--force"]) == 0
    captured = capsys.readouterr()
    assert captured.out == (
        f"tuned retriever written to {target} (replaced a file that is not a tuned file of this format)\n"
    )
    assert yaml.safe_load(target.read_text())["provenance"]["source"] == str(run)


def test_the_documented_command_keeps_the_tracked_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/production.md's example, ``--name hybrid-scifact`` without --out-dir, from a run tuned
    on another dataset: the tracked preset (a copy of it, in a copy of the repository layout) is
    left byte-identical."""
    repo = tmp_path / "repo"
    (repo / "experiments" / "tuned").mkdir(parents=True)
    preset = repo / "experiments" / "tuned" / "hybrid-scifact.yaml"
    shutil.copyfile(TRACKED_PRESET, preset)
    before = preset.read_bytes()
    monkeypatch.setattr(export_module, "REPO_ROOT", repo)
    run = _run_folder(tmp_path / "adi_run", k1=0.9, ndcg=0.41)

    assert main([str(run), "--name", "hybrid-scifact"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {preset} exists and holds a tuned HybridRetriever, tuned on scifact")
    assert error.endswith("; --force replaces it (or give another --name)\n") and error.count("\n") == 1
    assert preset.read_bytes() == before


def test_a_file_created_while_exporting_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process puts the file there after the first look: the final link refuses it."""
    run = _run_folder(tmp_path / "run", k1=0.9, ndcg=0.41)
    out = tmp_path / "tuned"
    target = out / "racy.yaml"
    choose = export_module.choose

    def choose_while_another_writes(*args: object, **kwargs: object) -> object:
        out.mkdir(exist_ok=True)
        target.write_text("written meanwhile\n")
        return choose(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(export_module, "choose", choose_while_another_writes)
    with pytest.raises(ExportError, match=r"racy\.yaml exists and holds a file that is not a tuned file"):
        export(run, "racy", out_dir=out)
    assert target.read_text() == "written meanwhile\n"
    assert sorted(os.listdir(out)) == ["racy.yaml"]


@pytest.mark.parametrize("force", [False, True])
def test_a_failed_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, force: bool
) -> None:
    run = _run_folder(tmp_path / "run", k1=0.9, ndcg=0.41)
    out = tmp_path / "tuned"
    out.mkdir()
    target = out / "half.yaml"
    if force:
        target.write_text("the old file\n")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        export(run, "half", out_dir=out, force=force)
    assert sorted(os.listdir(out)) == (["half.yaml"] if force else [])
    if force:
        assert target.read_text() == "the old file\n"


@pytest.mark.parametrize("name", ["../escape", "sub/name", ".hidden", "preset.yaml", ""])
def test_a_name_that_is_not_a_plain_file_name_is_refused(tmp_path: Path, name: str) -> None:
    run = _run_folder(tmp_path / "run", k1=0.9, ndcg=0.41)
    with pytest.raises(ExportError, match="give a plain file name without folder or suffix"):
        export(run, name, out_dir=tmp_path / "tuned")
    assert not (tmp_path / "tuned").exists() and not (tmp_path / "escape.yaml").exists()


def test_the_module_refuses_in_a_fresh_process(tmp_path: Path) -> None:
    """The command as documented: exit 2, one line on stderr, no traceback, the file kept."""
    run = _run_folder(tmp_path / "run", k1=0.9, ndcg=0.41)
    out = tmp_path / "tuned"
    export(run, "kept", out_dir=out)
    before = (out / "kept.yaml").read_bytes()
    done = run_module(
        "viking_eval.sweep.export", str(run), "--name", "kept", "--out-dir", str(out), timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {out / 'kept.yaml'} exists")
    assert "Traceback" not in done.stderr
    assert (out / "kept.yaml").read_bytes() == before
