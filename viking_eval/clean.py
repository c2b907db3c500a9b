"""``python -m viking_eval.clean [FOLDER] [--dry-run] [--yes] [--idle-minutes N]``: the run folders
that did not finish, listed (size, what went wrong) and removed only when asked.

FOLDER (default ``reports``) is searched recursively for run folders (a folder holding ``.hydra/``,
``config.yaml`` or ``status.json``). Listed:

- **failed**: ``status.json`` says ``failed`` (every run that failed writes it: ``results/run_folder.mark_failed``),
  or cannot be read; its error line is shown;
- **unfinished**: no ``status.json`` and not finished (no ``metrics.json``, ``fuse.json`` or
  ``growth.json``: killed, or refused before
  it started), with no file written in the last ``--idle-minutes`` (default 60); its log's last line
  is shown.

A run that may still be running is never listed for removal: an unfinished folder with a file
written in the last ``--idle-minutes``, and a failed folder with a file written after its
``status.json`` (run again in the same folder) while that write is recent, are shown as skipped.
A finished run, fuse or growth run (``run_folder.is_finished_output``: its ``metrics.json``,
``fuse.json`` or ``growth.json`` written) is never listed, nor a folder holding one (a sweep
or benchmark folder with finished jobs: its failed jobs are listed one by one); the removal itself
checks again (``run_folder.remove_run``, the only remover of run folders).

Nothing is removed without ``--yes`` or a ``y`` typed at the prompt (asked only when stdin is a
terminal); ``--dry-run`` lists only, whatever else is given. Exit status 0, 1 when a removal was
refused or failed, 2 for a FOLDER that does not exist.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from viking_eval.results import layout, run_folder

__all__ = ["Leftover", "find_leftovers", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
IDLE_MINUTES = 60.0
NOT_RUNS = frozenset({".hydra", layout.RUNS, layout.MARKERS})  # a run folder's own sub-folders


@dataclass(frozen=True)
class Leftover:
    """A run folder that did not finish: ``kind`` failed or unfinished; ``skipped`` says why it is
    not offered for removal (it may still be running), '' when it is."""

    folder: Path
    kind: str
    size_bytes: int
    detail: str
    idle_seconds: float
    skipped: str = ""


def _is_run_folder(folder: Path) -> bool:
    return (
        (folder / ".hydra").is_dir()
        or (folder / layout.STATUS).is_file()
        or (folder / layout.CONFIG).is_file()
    )


def _files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() and not path.is_symlink()]


def _holds_other_runs(folder: Path) -> bool:
    return any(
        path.is_dir() and path.name not in NOT_RUNS and _is_run_folder(path) for path in folder.rglob("*")
    )


def _last_log_line(folder: Path) -> str:
    for log in sorted(folder.glob("*.log")):
        lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
        lines = [line for line in lines if line]
        if lines:
            return f"{log.name}: {lines[-1][:200]}"
    return ""


def _run_folders(root: Path) -> Iterator[Path]:
    """Run folders under ``root`` (itself included) that are not finished and hold no other run
    folder (a sweep or benchmark folder is searched, not listed), sorted, depth first."""
    if run_folder.is_finished_output(root):
        return
    if _is_run_folder(root) and not _holds_other_runs(root):
        yield root
        return
    for child in sorted(path for path in root.iterdir() if path.is_dir() and not path.is_symlink()):
        if not (child.name in NOT_RUNS and _is_run_folder(root)):
            yield from _run_folders(child)


def _describe(folder: Path, now: float, idle_seconds: float) -> Leftover:
    found = _files(folder)
    newest = max((path.stat().st_mtime for path in found), default=folder.stat().st_mtime)
    idle = max(0.0, now - newest)
    size = sum(path.stat().st_size for path in found)
    recent = idle < idle_seconds
    status_path = folder / layout.STATUS
    try:
        status = run_folder.read_status(folder)
    except run_folder.RunFolderError as error:
        return Leftover(folder, "failed", size, str(error), idle)
    if status is not None:
        detail = run_folder.read_error(folder) or f"status {status}"
        written_after = newest > status_path.stat().st_mtime
        skipped = (
            "written again after it failed, recently: may be running" if written_after and recent else ""
        )
        return Leftover(folder, "failed", size, detail, idle, skipped)
    detail = f"no {layout.METRICS}" + (f"; {last}" if (last := _last_log_line(folder)) else "")
    skipped = f"written {_age(idle)} ago: may still be running" if recent else ""
    return Leftover(folder, "unfinished", size, detail, idle, skipped)


def find_leftovers(
    root: Path, idle_minutes: float = IDLE_MINUTES, now: float | None = None
) -> list[Leftover]:
    """Every run folder under ``root`` that failed or did not finish (see the module's docstring)."""
    moment = time.time() if now is None else now
    return [_describe(folder, moment, idle_minutes * 60) for folder in _run_folders(root)]


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def _age(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def _confirmed(count: int) -> bool:
    if not sys.stdin.isatty():
        return False
    answer = input(f"Remove these {count} folder(s)? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m viking_eval.clean",
        description="List the run folders that failed or never finished (size, error) and remove them "
        "when asked; never a finished run, nor a folder holding one.",
    )
    parser.add_argument("folder", nargs="?", type=Path, default=Path("reports"), help="default: reports")
    parser.add_argument("--dry-run", action="store_true", help="list only (even with --yes)")
    parser.add_argument("--yes", action="store_true", help="remove the listed folders without asking")
    parser.add_argument(
        "--idle-minutes",
        type=float,
        default=IDLE_MINUTES,
        help=f"an unfinished folder written to more recently may still be running (default {IDLE_MINUTES:g})",
    )
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"error: {args.folder}: not a folder", file=sys.stderr)
        return EXIT_INVALID
    if args.idle_minutes < 0:
        print(f"error: --idle-minutes: expected a number >= 0, got {args.idle_minutes:g}", file=sys.stderr)
        return EXIT_INVALID
    leftovers = find_leftovers(args.folder, args.idle_minutes)
    removable = [item for item in leftovers if not item.skipped]
    for item in leftovers:
        state = f"skipped ({item.skipped})" if item.skipped else item.kind
        print(f"{state:<10}  {_size(item.size_bytes):>9}  {item.folder}  {item.detail}")
    total = _size(sum(item.size_bytes for item in removable))
    if not removable:
        print(f"no failed or unfinished run folder to remove in {args.folder}")
        return EXIT_OK
    print(f"{len(removable)} folder(s), {total}")
    if args.dry_run or not (args.yes or _confirmed(len(removable))):
        print(f"nothing removed; to remove them: python -m viking_eval.clean {args.folder} --yes")
        return EXIT_OK
    status = EXIT_OK
    for item in removable:
        try:
            run_folder.remove_run(item.folder)
        except (OSError, run_folder.RunFolderError) as error:
            print(f"error: {item.folder}: not removed: {error}", file=sys.stderr)
            status = EXIT_FAILED
    print(f"removed {len(removable) if status == EXIT_OK else 'some'} folder(s), {total}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
