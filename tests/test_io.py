"""viking_eval.files: atomic writes that leave either the old file or the new one, never a temporary
file, and create files with the user's umask (issue 12: report files were all 0600)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from viking_eval import files


@pytest.fixture
def umask() -> Iterator[None]:
    """Restore the process umask after a test that sets it."""
    previous = os.umask(0o022)
    os.umask(previous)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_are_created_with_the_umask(tmp_path: Path, umask: None, mask: int, expected: int) -> None:
    os.umask(mask)
    files.write_text(tmp_path / "report.md", "# report\n")
    files.write_json(tmp_path / "deep" / "metrics.json", {"a": 1})
    assert _mode(tmp_path / "report.md") == expected
    assert _mode(tmp_path / "deep" / "metrics.json") == expected
    # replacing an existing file gives the new file the umask's mode too, not the old file's
    (tmp_path / "old.txt").write_text("old")
    (tmp_path / "old.txt").chmod(0o600)
    files.write_text(tmp_path / "old.txt", "new")
    assert _mode(tmp_path / "old.txt") == expected


def test_write_replaces_whole_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "metrics.json"
    files.write_json(path, {"nDCG@10": 0.5, "name": "ä"})
    files.write_json(path, {"nDCG@10": 0.25})
    assert json.loads(path.read_text(encoding="utf-8")) == {"nDCG@10": 0.25}
    assert path.read_text(encoding="utf-8").endswith("}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "per_query.csv"
    files.write_text(path, "old\n")
    with pytest.raises(RuntimeError, match="interrupted"), files.atomic_path(path) as temp:
        temp.write_text("half of the new")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["per_query.csv"]


def test_temporary_names_never_collide(tmp_path: Path) -> None:
    with files.atomic_path(tmp_path / "a.txt") as first, files.atomic_path(tmp_path / "a.txt") as second:
        assert first != second and first.parent == second.parent == tmp_path
        assert first.name.startswith(".a.txt.") and first.name.endswith(".tmp")
        first.write_text("first")
        second.write_text("second")
    # the inner block finished first; the outer one, finishing last, wins with its whole content
    assert (tmp_path / "a.txt").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
