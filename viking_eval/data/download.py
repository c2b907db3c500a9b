"""Download a public BEIR dataset listed in ``datasets/registry.yaml``.

Usage: ``python -m viking_eval.data.download NAME [--dest DIR] [--registry PATH] [--url URL]``. The
default destination is the data folder (:func:`viking_eval.data.locations.data_home`,
``~/.local/share/viking_eval/datasets``), which is searched by name.

**Data by name.** :func:`viking_eval.data.resolve.find_or_download` is how a run finds its
dataset: by name along the search path, else -- when the registry can download it and
downloads are allowed (:func:`downloads_allowed`: ``dataset.download=auto``, the default, and
``VIKING_EVAL_DOWNLOAD`` is not ``never``) -- by downloading it here into the data folder first.

The archive is streamed to a temporary file inside the destination while its sha256 is
computed, checked against the registry (when the registry knows the checksum), unpacked into a
temporary folder inside the destination and only then renamed into place, so ``DEST/NAME``
either holds a complete dataset or does not exist.

- **One download per dataset at a time.** A file lock ``DEST/.NAME.lock`` is held from before the
  download until the folder is in place; a second download of the same dataset waits for the
  first (saying so) and then finds the dataset there. Partial files a killed download left
  (``DEST/.NAME.*.zip.part``, ``DEST/.NAME.*.unpack/``) are removed by the next download of that
  dataset, under its lock, and only if older than the lock acquisition.
- **Archives are untrusted input**: see :mod:`viking_eval.data.archive`.
- **Checksums.** The archive is checked against the registry's ``sha256`` and unpacked files
  against its ``files:`` where they are published. Either way the sha256 of every unpacked file
  is recorded in ``CHECKSUMS.json`` inside the dataset folder (trust on first use where nothing is
  published), and :func:`viking_eval.data.beir.load_beir` re-verifies them on every load.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from viking_eval.data.archive import ExtractLimits, content_root, has_corpus, holds_dataset, safe_extract_zip
from viking_eval.data.checksums import CHECKSUMS_FILE, record_checksums
from viking_eval.data.errors import DataError
from viking_eval.data.fetch import converted_entry, fetch_converted, offline_advice
from viking_eval.data.locations import DATA_ENV, data_home, data_search_path
from viking_eval.data.registry import NAME_RE, load_registry, registry_path
from viking_eval.data.transfer import (
    MIRROR_ENV,
    DownloadError,
    Unreachable,
    dataset_lock,
    holding,
    mirrored,
    remove_stale_partials,
    stream,
)
from viking_eval.files import sha256_file

__all__ = [
    "DOWNLOAD_ENV",
    "DOWNLOAD_MODES",
    "MIRROR_ENV",
    "DownloadError",
    "Unreachable",
    "download_dataset",
    "downloads_allowed",
    "main",
    "mirrored",
]

DOWNLOAD_ENV = "VIKING_EVAL_DOWNLOAD"
"""Environment variable: ``never`` turns automatic downloads off whatever the config says."""
DOWNLOAD_MODES = ("auto", "never")
"""``dataset.download``: ``auto`` fetches a missing registry dataset into the data folder."""

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- download


def _check_files(root: Path, expected: Mapping[str, str], name: str) -> None:
    for rel, digest in expected.items():
        path = root / rel
        if not path.is_file():
            raise DataError(
                f"{name}/{rel}: listed in the registry (datasets.{name}.files) but not in the archive"
            )
        actual = sha256_file(path)
        if actual != digest:
            raise DataError(
                f"{name}/{rel}: sha256 mismatch: expected {digest} (registry datasets.{name}.files), got {actual}"
            )


def _existing(target: Path, name: str) -> Path:
    if holds_dataset(target):
        print(f"{target} already holds {name}; nothing to do.")
        return target
    raise DataError(f"{target}: exists but holds no corpus; remove it and run again")


def _record(root: Path, **info: Any) -> None:
    """``CHECKSUMS.json`` in the dataset folder, and in each sub-folder that is a dataset of its
    own (CQADupStack's forums), since :func:`viking_eval.data.beir.load_beir` reads the one beside
    the corpus it loads."""
    record_checksums(root, **info)
    if not has_corpus(root):
        for child in sorted(root.iterdir()):
            if child.is_dir() and has_corpus(child):
                record_checksums(child, **info, part_of=info.get("dataset"))


def download_dataset(
    name: str,
    dest: Path,
    *,
    registry: Path | None = None,
    url: str | None = None,
    limits: ExtractLimits | None = None,
    lock_timeout: float | None = None,
    announce: str | None = None,
) -> Path:
    """Download dataset ``name`` into ``dest/name`` and return that folder.

    ``url`` overrides the registry URL (a mirror); the registry checksum still applies. A name
    not in the registry can be downloaded only with an explicit ``url`` (no checksum then).
    If ``dest/name`` already holds a corpus nothing is downloaded. ``limits`` caps unpacking
    (:class:`ExtractLimits`); ``lock_timeout`` bounds the wait for another download of the same
    dataset (``None``: wait until it ends). ``announce`` is printed to stderr when the transfer
    starts.
    """
    if not NAME_RE.fullmatch(name):
        raise DataError(f"dataset name {name!r} must be a plain folder name matching {NAME_RE.pattern}")
    reg = load_registry(registry)
    entry = reg.datasets.get(name)
    if entry is None and url is None:
        if name in reg.local_names:
            raise DataError(
                f"{registry_path(registry)}: {name!r} is a shared local dataset, not a download: point {DATA_ENV} at the folder "
                f"that holds {name}/ (e.g. export {DATA_ENV}=../shared/datasets)"
            )
        raise DataError(
            f"{registry_path(registry)}: {name!r} is not in the registry; "
            f"known: {', '.join(sorted(reg.datasets))}"
        )
    source = url if url is not None else entry.url if entry is not None else None
    if source is not None and url is None:
        source = mirrored(source)  # a mirror of the registry's URL; --url is taken as given
    if source is None:
        notes = entry.notes if entry is not None else ""
        raise DataError(
            f"{registry_path(registry)}: {name!r} has no public download URL "
            f"(datasets.{name}.url is null). {notes}".rstrip()
        )
    expected_sha = entry.sha256 if entry is not None else None
    expected_files = dict(entry.files) if entry is not None else {}

    dest = Path(dest)
    target = dest / name
    if target.exists():
        return _existing(target, name)
    try:
        dest.mkdir(parents=True, exist_ok=True)
        lock = dataset_lock(dest, name)
    except OSError as exc:
        raise DownloadError(
            f"{dest}: cannot write the destination folder ({exc.strerror or exc}); pass --dest a writable folder"
        ) from exc
    with holding(lock, name, lock_timeout, log):
        if target.exists():  # the download we waited for put it there
            return _existing(target, name)
        remove_stale_partials(dest, name, before=time.time(), log=log)
        _fetch_and_unpack(name, source, target, expected_sha, expected_files, limits, announce)
    return target


def _fetch_and_unpack(
    name: str,
    source: str,
    target: Path,
    expected_sha: str | None,
    expected_files: Mapping[str, str],
    limits: ExtractLimits | None,
    announce: str | None = None,
) -> None:
    """Download, verify and unpack into a temporary folder beside ``target``, then rename it
    into place: ``target`` never holds a partial dataset. The caller holds the dataset's lock."""
    dest = target.parent
    fd, part_name = tempfile.mkstemp(dir=dest, prefix=f".{name}.", suffix=".zip.part")
    os.close(fd)
    archive = Path(part_name)
    unpack_dir: Path | None = None
    try:
        unpack_dir = Path(tempfile.mkdtemp(dir=dest, prefix=f".{name}.", suffix=".unpack"))
        actual_sha = stream(source, archive, desc=f"download {name}", announce=announce)
        if expected_sha is not None and actual_sha != expected_sha:
            raise DataError(
                f"{source}: sha256 mismatch: expected {expected_sha} (registry datasets.{name}.sha256), "
                f"got {actual_sha}; the download is damaged or the file changed upstream"
            )
        content = unpack_dir / "content"  # mkdtemp makes 0700 folders; this one gets the umask's mode
        content.mkdir()
        safe_extract_zip(archive, content, limits=limits, label=source)
        root = content_root(content)
        if not holds_dataset(root):
            raise DataError(f"{source}: the archive holds no corpus.jsonl[.gz]; not a BEIR dataset")
        if expected_files:
            _check_files(root, expected_files, name)
        _record(
            root,
            dataset=name,
            source=source,
            archive_sha256=actual_sha,
            archive_checked_against=f"registry datasets.{name}.sha256" if expected_sha else None,
            files_checked_against_registry=sorted(expected_files),
        )
        if expected_sha is None:
            print(
                f"note: no sha256 for {name} in the registry; downloaded archive sha256 = {actual_sha} "
                f"(file checksums recorded in {target / CHECKSUMS_FILE})"
            )
        root.rename(target)
    finally:
        archive.unlink(missing_ok=True)
        if unpack_dir is not None:
            shutil.rmtree(unpack_dir, ignore_errors=True)


# --------------------------------------------------------------------------- data by name


def downloads_allowed(mode: str) -> bool:
    """Whether a missing dataset may be fetched: ``mode`` (``dataset.download``) is ``auto`` and
    ``VIKING_EVAL_DOWNLOAD`` does not say ``never`` (the tests and CI set it)."""
    if mode not in DOWNLOAD_MODES:
        raise ValueError(f"dataset.download must be one of {list(DOWNLOAD_MODES)}, got {mode!r}")
    env = os.environ.get(DOWNLOAD_ENV, "").strip().lower()
    if env and env not in DOWNLOAD_MODES:
        raise DataError(f"{DOWNLOAD_ENV}={env!r}: must be one of {list(DOWNLOAD_MODES)} (or unset)")
    return mode == "auto" and env != "never"


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry; returns the process exit code: 0 ok, 2 bad input (registry, archive,
    checksum) or no server reachable (offline: as a run exits), 1 a failed transfer (an HTTP
    error, a cut-short body) or an unwritable destination. Errors are one line on stderr."""
    parser = argparse.ArgumentParser(
        prog="python -m viking_eval.data.download",
        description=(
            "Download a dataset of datasets/registry.yaml by name: a public BEIR zip, or a converted "
            "dataset's raw public release(s), converted with python -m viking_eval.data.convert."
        ),
        epilog=f"{MIRROR_ENV}=http://host:port[/path] replaces the scheme and host of every registry URL.",
    )
    parser.add_argument("name", nargs="?", help="dataset name, e.g. scifact or adi")
    parser.add_argument(
        "--dest",
        type=Path,
        default=None,
        help=f"parent folder (default: the data folder, {data_home()}, searched by name)",
    )
    parser.add_argument(
        "--registry", type=Path, default=None, help=f"registry YAML (default: {registry_path()})"
    )
    parser.add_argument("--url", default=None, help="download a BEIR zip from this URL instead (a mirror)")
    parser.add_argument("--list", action="store_true", help="list the registry and exit")
    defaults = ExtractLimits()
    parser.add_argument(
        "--max-unpacked-gb",
        type=float,
        default=defaults.max_bytes / 1024**3,
        help=f"refuse archives that unpack to more (default: {defaults.max_bytes / 1024**3:g})",
    )
    parser.add_argument(
        "--max-members",
        type=int,
        default=defaults.max_members,
        help=f"refuse archives with more members (default: {defaults.max_members})",
    )
    args = parser.parse_args(argv)
    dest = args.dest if args.dest is not None else data_home()
    try:
        if args.list:
            reg = load_registry(args.registry)
            for entry in reg.datasets.values():
                status = "download" if entry.url else "not public"
                print(f"{entry.name:20s} {status:10s} {entry.license}")
            for rebuilt in reg.converted.values():
                if rebuilt.name not in reg.datasets:
                    print(
                        f"{rebuilt.name:20s} {'convert':10s} raw release: {', '.join(r.url for r in rebuilt.raw)}"
                    )
            if reg.local_names:
                print(f"local ({DATA_ENV}): {', '.join(reg.local_names)}")
            return 0
        if not args.name:
            parser.error("NAME is required (or use --list)")
        try:
            limits = ExtractLimits(
                max_bytes=int(args.max_unpacked_gb * 1024**3), max_members=args.max_members
            )
        except ValueError as exc:
            parser.error(str(exc))
        in_registry = args.name in load_registry(args.registry).datasets
        converted = (
            None
            if in_registry or not NAME_RE.fullmatch(args.name)
            else converted_entry(args.name, args.registry)
        )
        if converted is not None and args.url is not None:
            raise DataError(
                f"--url: {args.name} is built from its raw release(s), not downloaded as one zip; "
                f"use {MIRROR_ENV}=http://host:port to fetch them from a mirror"
            )
        if converted is not None:
            try:
                folder = fetch_converted(args.name, dest, registry=args.registry, log=print)
            except Unreachable as exc:
                raise DataError(f"{args.name}: {exc}; {offline_advice(args.name, converted, dest)}") from exc
        else:
            try:
                folder = download_dataset(
                    args.name, dest, registry=args.registry, url=args.url, limits=limits
                )
            except Unreachable as exc:
                raise DataError(
                    f"{args.name}: {exc}; fetch that zip on a machine with internet and unzip it in {dest} "
                    f"(it holds {args.name}/), or set {DATA_ENV} to a folder holding {args.name}/"
                ) from exc
    except DataError as exc:  # bad input, and offline (as in a run)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # DownloadError, and anything else the file system says
        print(f"error: {exc}", file=sys.stderr)
        return 1
    parent = folder.resolve().parent
    print(f"{args.name} is in {folder.resolve()}")
    if parent in {searched.resolve() for searched in data_search_path()}:
        print(f"That folder is searched by name: load it as {args.name!r} (dataset={args.name}).")
    else:
        print(f"To load it by name, add its parent folder to {DATA_ENV}, e.g.:")
        print(f'  export {DATA_ENV}="{parent}${{{DATA_ENV}:+:${DATA_ENV}}}"')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
