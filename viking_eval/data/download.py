"""Download a public BEIR dataset listed in ``datasets/registry.yaml``.

Usage: ``python -m viking_eval.download NAME [--dest DIR] [--registry PATH] [--url URL]``. The
default destination is the data folder (:func:`viking_eval.data.data_home`,
``~/.local/share/viking_eval/datasets``), which is searched by name.

**Data by name.** :func:`find_or_download` is how a run finds its dataset: by name along the
search path, else -- when the registry can download it and downloads are allowed
(``dataset.download=auto``, the default, and ``VIKING_EVAL_DOWNLOAD`` is not ``never``) -- by
downloading it into the data folder first. Offline, or with downloads off, the error is one line
saying how to get the dataset (:func:`how_to_get`).

The archive is streamed to a temporary file inside the destination while its sha256 is
computed, checked against the registry (when the registry knows the checksum), unpacked into a
temporary folder inside the destination and only then renamed into place, so ``DEST/NAME``
either holds a complete dataset or does not exist.

- **One download per dataset at a time.** A file lock ``DEST/.NAME.lock`` is held from before the
  download until the folder is in place; a second download of the same dataset waits for the
  first (saying so) and then finds the dataset there. Partial files a killed download left
  (``DEST/.NAME.*.zip.part``, ``DEST/.NAME.*.unpack/``) are removed by the next download of that
  dataset, under its lock, and only if older than the lock acquisition.
- **Archives are untrusted input.** A member that could land outside the target folder (absolute
  path, drive letter, ``..``, symlink, device) makes the whole archive refused before anything is
  written; so does an archive with more members than ``ExtractLimits.max_members``, or one that
  would unpack to more than ``max_bytes`` or more than ``max_ratio`` times its own size (zip bombs).
  A member that yields more bytes than it declares stops the unpacking.
- **Checksums.** The archive is checked against the registry's ``sha256`` and unpacked files
  against its ``files:`` where they are published. Either way the sha256 of every unpacked file
  is recorded in ``CHECKSUMS.json`` inside the dataset folder (trust on first use where nothing is
  published), and :func:`viking_eval.data.load_beir` re-verifies them on every load.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock, Timeout
from tqdm import tqdm

from viking_eval.data import (
    CHECKSUMS_FILE,
    DATA_ENV,
    DataError,
    DatasetNotFound,
    data_home,
    data_search_path,
    record_checksums,
    resolve_dataset,
)
from viking_eval.io import sha256_file

__all__ = [
    "DEFAULT_REGISTRY",
    "DOWNLOAD_ENV",
    "DOWNLOAD_MODES",
    "DownloadError",
    "ExtractLimits",
    "Registry",
    "RegistryEntry",
    "download_dataset",
    "downloads_allowed",
    "find_or_download",
    "how_to_get",
    "load_registry",
    "main",
    "safe_extract_zip",
]

_REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REGISTRY = _REPO_ROOT / "datasets" / "registry.yaml"
DOWNLOAD_ENV = "VIKING_EVAL_DOWNLOAD"
"""Environment variable: ``never`` turns automatic downloads off whatever the config says."""
DOWNLOAD_MODES = ("auto", "never")
"""``dataset.download``: ``auto`` fetches a missing registry dataset into the data folder."""

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_ENTRY_KEYS = frozenset({"url", "sha256", "license", "notes", "files"})
_TOP_KEYS = frozenset({"version", "datasets", "local_datasets"})
_CHUNK = 1 << 20
_IGNORED_TOP = frozenset({"__MACOSX"})  # resource forks some zip tools add; never data

log = logging.getLogger(__name__)


class DownloadError(OSError):
    """The network transfer failed (HTTP error, connection error, truncated body), the
    destination cannot be written, or another download of the dataset holds its lock too long."""


@dataclass(frozen=True)
class ExtractLimits:
    """Caps on what an archive may unpack to, against zip bombs. The defaults leave room for
    every BEIR dataset (the largest unpack to a few GB at ratios below 10) and stop an archive
    that would fill a disk."""

    max_bytes: int = 64 * 1024**3
    max_members: int = 10_000
    max_ratio: float = 100.0  # unpacked bytes per archive byte

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_members", "max_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 1:
                raise ValueError(f"ExtractLimits.{name} must be a number >= 1, got {value!r}")


@dataclass(frozen=True)
class RegistryEntry:
    """One dataset of the registry. ``url`` is ``None`` for datasets that are not publicly
    downloadable; ``sha256`` is ``None`` when the archive's checksum is not known; ``files``
    maps paths inside the unpacked dataset to known sha256 values, checked after unpacking."""

    name: str
    url: str | None
    sha256: str | None
    license: str
    notes: str = ""
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Registry:
    """The parsed registry: downloadable entries and the names of local-only datasets."""

    datasets: Mapping[str, RegistryEntry]
    local_names: tuple[str, ...] = ()
    local_note: str = ""


# --------------------------------------------------------------------------- registry


def _optional_str(value: Any, where: str, path: Path) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise DataError(f"{path}: {where} must be a string or null, got {type(value).__name__}")
    return value


def _parse_entry(name: str, raw: Any, path: Path) -> RegistryEntry:
    where = f"datasets.{name}"
    if not _NAME_RE.fullmatch(name):
        raise DataError(f"{path}: {where}: dataset names must match {_NAME_RE.pattern} (a plain folder name)")
    if not isinstance(raw, dict):
        raise DataError(f"{path}: {where} must be a mapping with url, sha256, license, notes")
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        raise DataError(f"{path}: {where}: unknown key(s) {unknown}; allowed: {sorted(_ENTRY_KEYS)}")
    url = _optional_str(raw.get("url"), f"{where}.url", path)
    if url is not None and not url.startswith(("https://", "http://")):
        raise DataError(f"{path}: {where}.url must be an http(s) URL or null, got {url!r}")
    sha = _optional_str(raw.get("sha256"), f"{where}.sha256", path)
    if sha is not None and not _SHA256_RE.fullmatch(sha):
        raise DataError(f"{path}: {where}.sha256 must be 64 lowercase hex digits or null, got {sha!r}")
    license_ = _optional_str(raw.get("license"), f"{where}.license", path)
    if not license_:
        raise DataError(f"{path}: {where}.license is required (write 'unknown' if it is)")
    notes = _optional_str(raw.get("notes"), f"{where}.notes", path) or ""
    files_raw = raw.get("files") or {}
    if not isinstance(files_raw, dict):
        raise DataError(f"{path}: {where}.files must be a mapping of relative path -> sha256")
    files: dict[str, str] = {}
    for rel, digest in files_raw.items():
        if not isinstance(rel, str) or not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest):
            raise DataError(f"{path}: {where}.files.{rel}: expected a relative path mapped to 64 hex digits")
        if rel.startswith("/") or ".." in rel.split("/"):
            raise DataError(
                f"{path}: {where}.files.{rel}: paths must be relative and stay inside the dataset"
            )
        files[rel] = digest
    return RegistryEntry(name=name, url=url, sha256=sha, license=license_, notes=notes, files=files)


def load_registry(path: Path | None = None) -> Registry:
    """Read and validate the registry YAML (``datasets/registry.yaml`` by default)."""
    path = Path(path) if path is not None else DEFAULT_REGISTRY
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: registry file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read registry: {exc}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: malformed YAML: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("datasets"), dict):
        raise DataError(
            f"{path}: expected a mapping with a 'datasets' mapping (name -> url, sha256, license, notes)"
        )
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise DataError(f"{path}: unknown top-level key(s) {unknown}; allowed: {sorted(_TOP_KEYS)}")
    entries = {str(name): _parse_entry(str(name), entry, path) for name, entry in raw["datasets"].items()}
    local = raw.get("local_datasets") or {}
    if not isinstance(local, dict):
        raise DataError(f"{path}: local_datasets must be a mapping with 'names' and 'note'")
    names = local.get("names") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{path}: local_datasets.names must be a list of dataset names")
    note = _optional_str(local.get("note"), "local_datasets.note", path) or ""
    return Registry(datasets=entries, local_names=tuple(names), local_note=note)


# --------------------------------------------------------------------------- safe unzip


def _member_parts(info: zipfile.ZipInfo, archive: str) -> list[str]:
    """The path components of a member, or :class:`DataError` if it could escape the target."""
    name = info.filename
    where = f"{archive}: member {name!r}"
    if "\x00" in name or "\\" in name:
        raise DataError(f"{where}: NUL or backslash in the name; refusing the archive")
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        raise DataError(f"{where}: absolute path or drive letter; refusing the archive")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise DataError(f"{where}: '..' component would escape the target folder; refusing the archive")
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if stat.S_ISLNK(mode):
        raise DataError(f"{where}: symbolic link; refusing the archive")
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise DataError(f"{where}: not a regular file or folder (mode {oct(mode)}); refusing the archive")
    if info.flag_bits & 0x1:
        raise DataError(f"{where}: encrypted members are not supported")
    return parts


def _check_size(
    archive: Path, plan: Sequence[tuple[zipfile.ZipInfo, list[str]]], limits: ExtractLimits, where: str
) -> None:
    """Refuse an archive whose members declare more bytes than the limits allow."""
    declared = sum(info.file_size for info, _ in plan)
    if declared > limits.max_bytes:
        raise DataError(
            f"{where}: would unpack to {declared:,} bytes, more than the limit of {limits.max_bytes:,} "
            "(ExtractLimits.max_bytes, --max-unpacked-gb); refusing the archive (a zip bomb?)"
        )
    packed = max(archive.stat().st_size, 1)
    if declared > limits.max_ratio * packed:
        raise DataError(
            f"{where}: would unpack {packed:,} bytes to {declared:,} (ratio {declared / packed:,.0f}), more "
            f"than the limit of {limits.max_ratio:g} (ExtractLimits.max_ratio); refusing the archive (a zip bomb?)"
        )


def _copy_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, destination: Path, where: str) -> None:
    """Write one member, never more bytes than it declares (the size checks rest on that)."""
    written = 0
    with zf.open(info) as source, open(destination, "xb") as sink:
        for block in iter(lambda: source.read(_CHUNK), b""):
            written += len(block)
            if written > info.file_size:
                raise DataError(
                    f"{where}: member {info.filename!r} unpacks to more than the {info.file_size:,} bytes "
                    "it declares; refusing the archive"
                )
            sink.write(block)


def safe_extract_zip(
    archive: Path, target: Path, *, limits: ExtractLimits | None = None, label: str | None = None
) -> None:
    """Unpack ``archive`` into the existing, empty folder ``target``.

    Every member is checked before anything is written, and so are the member count and the
    declared total size (``limits``); files are written by this function (not
    ``ZipFile.extract``) with default permissions, never past their declared size, and each
    resolved path is checked to lie inside ``target`` as a second line of defence. Errors name
    ``label`` (e.g. the URL the archive came from) or else the archive's path.
    """
    limits = limits if limits is not None else ExtractLimits()
    where = label if label is not None else str(archive)
    target_resolved = target.resolve()
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if len(members) > limits.max_members:
                raise DataError(
                    f"{where}: {len(members):,} members, more than the limit of {limits.max_members:,} "
                    "(ExtractLimits.max_members, --max-members); refusing the archive"
                )
            plan: list[tuple[zipfile.ZipInfo, list[str]]] = []
            for info in members:
                parts = _member_parts(info, where)
                if not parts or parts[0] in _IGNORED_TOP:
                    continue
                destination = target_resolved.joinpath(*parts).resolve()
                if not destination.is_relative_to(target_resolved):
                    raise DataError(f"{where}: member {info.filename!r} resolves outside {target}")
                plan.append((info, parts))
            _check_size(archive, plan, limits, where)
            for info, parts in plan:
                destination = target.joinpath(*parts)
                if info.is_dir():
                    destination.mkdir(parents=True, exist_ok=True)
                    continue
                destination.parent.mkdir(parents=True, exist_ok=True)
                _copy_member(zf, info, destination, where)
    except zipfile.BadZipFile as exc:
        raise DataError(f"{where}: not a valid zip archive: {exc}") from exc
    except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
        raise DataError(
            f"{where}: members collide ({exc.filename} is listed twice, or as both file and folder); "
            "refusing the archive"
        ) from exc
    except (NotImplementedError, RuntimeError) as exc:
        raise DataError(f"{where}: cannot unpack: {exc}") from exc


def _has_corpus(folder: Path) -> bool:
    return (folder / "corpus.jsonl").is_file() or (folder / "corpus.jsonl.gz").is_file()


def _holds_dataset(folder: Path) -> bool:
    """A corpus at the top, or in sub-folders (CQADupStack ships one BEIR folder per forum)."""
    if not folder.is_dir():
        return False
    return _has_corpus(folder) or any(child.is_dir() and _has_corpus(child) for child in folder.iterdir())


def _content_root(extracted: Path) -> Path:
    """BEIR zips hold one top-level ``<name>/`` folder; flat zips hold the files directly."""
    children = list(extracted.iterdir())
    if len(children) == 1 and children[0].is_dir() and not _has_corpus(extracted):
        return children[0]
    return extracted


# --------------------------------------------------------------------------- download


def _stream(url: str, sink: Path, desc: str, announce: str | None = None) -> str:
    """Write the body of ``url`` to ``sink``; return its sha256. ``announce`` is printed to
    stderr once the server answers (so that an offline machine sees only the error)."""
    digest = hashlib.sha256()
    received = 0
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(sink, "wb") as out:
            if announce:
                print(announce, file=sys.stderr, flush=True)
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            with tqdm(
                total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, disable=None
            ) as bar:
                for block in iter(lambda: response.read(_CHUNK), b""):
                    out.write(block)
                    digest.update(block)
                    received += len(block)
                    bar.update(len(block))
    except urllib.error.HTTPError as exc:
        raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets, short reads
        raise DownloadError(f"{url}: download failed: {exc}") from exc
    if total is not None and received != total:
        raise DownloadError(f"{url}: truncated download ({received} of {total} bytes)")
    return digest.hexdigest()


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


def _partial_pattern(name: str) -> re.Pattern[str]:
    """Names of this dataset's temporary files and folders (``tempfile`` adds 8 characters of
    ``[a-z0-9_]``); anchored so that ``nq`` never matches ``nq.x``'s."""
    return re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.(?:zip\.part|unpack)")


def _remove_stale_partials(dest: Path, name: str, *, before: float) -> list[Path]:
    """Remove what a killed download of ``name`` left in ``dest``: only this dataset's partial
    files and folders, and only those older than ``before`` (when the lock was taken)."""
    pattern = _partial_pattern(name)
    removed = []
    for child in sorted(dest.iterdir()):
        if not pattern.fullmatch(child.name):
            continue
        try:
            if child.lstat().st_mtime >= before:
                continue
        except FileNotFoundError:
            continue
        log.warning("removing %s, left by an interrupted download of %s", child, name)
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
        removed.append(child)
    return removed


def _dataset_lock(dest: Path, name: str) -> FileLock:
    """The lock of ``dest/name``, after checking that its file can be created (filelock retries
    some open errors, such as permission denied, until its timeout, which never comes)."""
    lock_path = dest / f".{name}.lock"
    os.close(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666))
    return FileLock(str(lock_path))


@contextmanager
def _holding(lock: FileLock, name: str, timeout: float | None) -> Iterator[None]:
    """Hold ``lock``; if another download holds it, say so once and wait (``timeout`` seconds,
    ``None``: as long as it takes; a killed holder releases it at once)."""
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning(
            "another download of %s is running (lock %s); waiting for it to finish", name, lock.lock_file
        )
        try:
            lock.acquire(timeout=-1 if timeout is None else timeout)
        except Timeout:
            raise DownloadError(
                f"{lock.lock_file}: another download of {name} still holds the lock after {timeout:g} s; "
                "wait for it to finish or stop it"
            ) from None
    try:
        yield
    finally:
        lock.release()


def _existing(target: Path, name: str) -> Path:
    if _holds_dataset(target):
        print(f"{target} already holds {name}; nothing to do.")
        return target
    raise DataError(f"{target}: exists but holds no corpus; remove it and run again")


def _record(root: Path, **info: Any) -> None:
    """``CHECKSUMS.json`` in the dataset folder, and in each sub-folder that is a dataset of its
    own (CQADupStack's forums), since :func:`viking_eval.data.load_beir` reads the one beside
    the corpus it loads."""
    record_checksums(root, **info)
    if not _has_corpus(root):
        for child in sorted(root.iterdir()):
            if child.is_dir() and _has_corpus(child):
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
    if not _NAME_RE.fullmatch(name):
        raise DataError(f"dataset name {name!r} must be a plain folder name matching {_NAME_RE.pattern}")
    reg = load_registry(registry)
    entry = reg.datasets.get(name)
    if entry is None and url is None:
        if name in reg.local_names:
            raise DataError(
                f"{registry or DEFAULT_REGISTRY}: {name!r} is a shared local dataset, not a download: point {DATA_ENV} at the folder "
                f"that holds {name}/ (e.g. export {DATA_ENV}=../shared/datasets)"
            )
        raise DataError(
            f"{registry or DEFAULT_REGISTRY}: {name!r} is not in the registry; "
            f"known: {', '.join(sorted(reg.datasets))}"
        )
    source = url if url is not None else entry.url if entry is not None else None
    if source is None:
        notes = entry.notes if entry is not None else ""
        raise DataError(
            f"{registry or DEFAULT_REGISTRY}: {name!r} has no public download URL "
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
        lock = _dataset_lock(dest, name)
    except OSError as exc:
        raise DownloadError(
            f"{dest}: cannot write the destination folder ({exc.strerror or exc}); pass --dest a writable folder"
        ) from exc
    with _holding(lock, name, lock_timeout):
        if target.exists():  # the download we waited for put it there
            return _existing(target, name)
        _remove_stale_partials(dest, name, before=time.time())
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
        actual_sha = _stream(source, archive, desc=f"download {name}", announce=announce)
        if expected_sha is not None and actual_sha != expected_sha:
            raise DataError(
                f"{source}: sha256 mismatch: expected {expected_sha} (registry datasets.{name}.sha256), "
                f"got {actual_sha}; the download is damaged or the file changed upstream"
            )
        content = unpack_dir / "content"  # mkdtemp makes 0700 folders; this one gets the umask's mode
        content.mkdir()
        safe_extract_zip(archive, content, limits=limits, label=source)
        root = _content_root(content)
        if not _holds_dataset(root):
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


def how_to_get(name: str, registry: Path | None = None) -> str:
    """One clause saying how to get dataset ``name``: its download command when the registry has
    a URL for it, its converter command when it is rebuilt from a raw release, else a folder."""
    folder_advice = f"set {DATA_ENV} to a folder holding {name}/"
    try:
        entry = load_registry(registry).datasets.get(name)
    except DataError:  # a broken registry is reported where it is used, not here
        entry = None
    if entry is not None and entry.url is not None:
        return f"download it with python -m viking_eval.download {name} (needs internet) or {folder_advice}"
    from viking_eval.convert import CONVERTERS  # imports this module: not at the top

    spec = CONVERTERS.get(name)
    if spec is not None:
        raw = " ".join(raw_file.name for raw_file in spec.raw)
        return (
            f"build it from its public release with python -m viking_eval.convert {name} {raw} "
            f"(python -m viking_eval.convert --help says where to get {raw}) or {folder_advice}"
        )
    return (
        f"{folder_advice}, or give its folder (dataset.path=...); python -m viking_eval.download --list "
        "lists the datasets that can be downloaded"
    )


def find_or_download(
    name_or_path: str,
    *,
    download: str = "never",
    registry: Path | None = None,
    dest: Path | None = None,
) -> Path:
    """The folder of a dataset (:func:`viking_eval.data.resolve_dataset`). When it is not found,
    the registry can download it and :func:`downloads_allowed` (``download="auto"``), it is
    downloaded into ``dest`` (default: the data folder, last on the search path) first, with a
    progress bar and the registry's checksums. Offline, a failed download is one
    :class:`DataError` line saying how to get the dataset; nothing half-written stays behind."""
    try:
        return resolve_dataset(name_or_path)
    except DatasetNotFound as missing:
        if not downloads_allowed(download):
            raise
        entry = load_registry(registry).datasets.get(missing.name)
        if entry is None or entry.url is None:
            raise
        name = missing.name
        target = Path(dest) if dest is not None else data_home()
        announce = (
            f"{name}: not found locally; downloading it from {entry.url} into {target / name} "
            f"(dataset.download=never or {DOWNLOAD_ENV}=never turns this off)"
        )
        try:
            return download_dataset(name, target, registry=registry, announce=announce)
        except DownloadError as error:
            raise DataError(
                f"{name}: dataset not found, and downloading it failed ({error}); download it with "
                f"python -m viking_eval.download {name} (needs internet) or set {DATA_ENV} to a folder "
                f"holding {name}/",
                path=Path(name),
            ) from error


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry; returns the process exit code: 0 ok, 2 bad input (registry, archive,
    checksum), 1 a failed transfer or an unwritable destination. Errors are one line on stderr."""
    parser = argparse.ArgumentParser(
        prog="python -m viking_eval.download",
        description="Download a public BEIR dataset listed in datasets/registry.yaml.",
    )
    parser.add_argument("name", nargs="?", help="dataset name, e.g. scifact")
    parser.add_argument(
        "--dest",
        type=Path,
        default=None,
        help=f"parent folder (default: the data folder, {data_home()}, searched by name)",
    )
    parser.add_argument(
        "--registry", type=Path, default=None, help=f"registry YAML (default: {DEFAULT_REGISTRY})"
    )
    parser.add_argument("--url", default=None, help="download from this URL instead (a mirror)")
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
    try:
        if args.list:
            reg = load_registry(args.registry)
            for entry in reg.datasets.values():
                status = "download" if entry.url else "not public"
                print(f"{entry.name:20s} {status:10s} {entry.license}")
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
        dest = args.dest if args.dest is not None else data_home()
        folder = download_dataset(args.name, dest, registry=args.registry, url=args.url, limits=limits)
    except DataError as exc:
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
