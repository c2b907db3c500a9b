"""Unpacking an untrusted zip archive (:func:`safe_extract_zip`), and what an unpacked archive
holds (a BEIR dataset at its top, or one per sub-folder).

**Archives are untrusted input.** A member that could land outside the target folder (absolute
path, drive letter, ``..``, symlink, device) makes the whole archive refused before anything is
written; so does an archive with more members than ``ExtractLimits.max_members``, or one that
would unpack to more than ``max_bytes`` or more than ``max_ratio`` times its own size (zip bombs).
A member that yields more bytes than it declares stops the unpacking.
"""

from __future__ import annotations

import re
import stat
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from viking_eval.data.errors import DataError

__all__ = ["ExtractLimits", "content_root", "has_corpus", "holds_dataset", "safe_extract_zip"]

_CHUNK = 1 << 20
_IGNORED_TOP = frozenset({"__MACOSX"})  # resource forks some zip tools add; never data


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


def has_corpus(folder: Path) -> bool:
    return (folder / "corpus.jsonl").is_file() or (folder / "corpus.jsonl.gz").is_file()


def holds_dataset(folder: Path) -> bool:
    """A corpus at the top, or in sub-folders (CQADupStack ships one BEIR folder per forum)."""
    if not folder.is_dir():
        return False
    return has_corpus(folder) or any(child.is_dir() and has_corpus(child) for child in folder.iterdir())


def content_root(extracted: Path) -> Path:
    """BEIR zips hold one top-level ``<name>/`` folder; flat zips hold the files directly."""
    children = list(extracted.iterdir())
    if len(children) == 1 and children[0].is_dir() and not has_corpus(extracted):
        return children[0]
    return extracted
