"""Cache entry folders follow the umask (their staging folder comes from mkdtemp, 0700), and the
temporary cache used when the cache folder cannot be written is removed when the process ends."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from viking_eval.run.cache import ArtifactCache, current_umask

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def umask_022() -> Iterator[None]:
    before = os.umask(0o022)
    yield
    os.umask(before)


def build(folder: Path) -> None:
    (folder / "part").mkdir()
    (folder / "part" / "data.txt").write_text("x", encoding="utf-8")


def test_entry_folders_follow_the_umask(tmp_path: Path, umask_022: None) -> None:
    assert current_umask() == 0o022
    entry = ArtifactCache(tmp_path / "cache").get_or_build("things", "c" * 64, build)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o755  # was 0o700 (mkdtemp)
    assert stat.S_IMODE((entry / "part").stat().st_mode) == 0o755
    os.umask(0o027)
    other = ArtifactCache(tmp_path / "cache").get_or_build("things", "d" * 64, build)
    assert stat.S_IMODE(other.stat().st_mode) == 0o750


def test_the_temporary_fallback_cache_is_removed_at_exit(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder", encoding="utf-8")
    program = textwrap.dedent(
        f"""
        from pathlib import Path
        from viking_eval.run.cache import ArtifactCache
        cache = ArtifactCache(Path({str(blocker / "cache")!r}))
        entry = cache.get_or_build("things", "e" * 64, lambda folder: (folder / "x").write_text("1"))
        assert cache.root != cache.requested_root and (entry / "x").is_file()
        print(cache.root)
        """
    )
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=environment, timeout=120
    )
    assert done.returncode == 0, done.stderr
    fallback = Path(done.stdout.strip().splitlines()[-1])
    assert fallback.name.startswith("viking_eval-cache-")
    assert not fallback.exists()
