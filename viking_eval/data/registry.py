"""``datasets/registry.yaml``: the public datasets that can be downloaded (``datasets:``), the
shared local ones (``local_datasets:``) and the converters' expected checksums
(``local_datasets.converters``, read by :mod:`viking_eval.data.convert`). Both the downloads
(:mod:`viking_eval.data.download`) and the converters read it through this module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from viking_eval.data.errors import DataError

__all__ = [
    "DEFAULT_REGISTRY",
    "NAME_RE",
    "ConvertedEntry",
    "RawRelease",
    "Registry",
    "RegistryEntry",
    "load_registry",
    "registry_path",
]

DEFAULT_REGISTRY = Path(__file__).resolve().parents[2] / "datasets" / "registry.yaml"
"""The repository's registry, read when no other is given."""

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A dataset name: a plain folder name."""

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_ENTRY_KEYS = frozenset({"url", "sha256", "license", "notes", "files"})
_TOP_KEYS = frozenset({"version", "datasets", "local_datasets"})


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
class RawRelease:
    """One published raw file a converted dataset is built from: its file name, where it is
    published and its sha256 (``local_datasets.converters.<dataset>.raw.<name>``)."""

    name: str
    url: str
    sha256: str


@dataclass(frozen=True)
class ConvertedEntry:
    """A dataset rebuilt from raw public releases (``local_datasets.converters.<name>``): the raw
    files to fetch and the sha256 of each converted file (``files``, relative path -> sha256)."""

    name: str
    raw: tuple[RawRelease, ...]
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Registry:
    """The parsed registry: downloadable entries, the names of local-only datasets and the
    datasets converted from raw public releases."""

    datasets: Mapping[str, RegistryEntry]
    local_names: tuple[str, ...] = ()
    local_note: str = ""
    converted: Mapping[str, ConvertedEntry] = field(default_factory=dict)


def registry_path(registry: Path | None = None) -> Path:
    """``registry`` when given, else :data:`DEFAULT_REGISTRY` (looked up at call time)."""
    return Path(registry) if registry is not None else DEFAULT_REGISTRY


# --------------------------------------------------------------------------- registry


def _optional_str(value: Any, where: str, path: Path) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise DataError(f"{path}: {where} must be a string or null, got {type(value).__name__}")
    return value


def _parse_entry(name: str, raw: Any, path: Path) -> RegistryEntry:
    where = f"datasets.{name}"
    if not NAME_RE.fullmatch(name):
        raise DataError(f"{path}: {where}: dataset names must match {NAME_RE.pattern} (a plain folder name)")
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
    path = registry_path(path)
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
    converters = local.get("converters") or {}
    if not isinstance(converters, dict):
        raise DataError(f"{path}: local_datasets.converters must be a mapping of dataset name -> raw, files")
    converted = {str(name): _parse_converted(str(name), entry, path) for name, entry in converters.items()}
    return Registry(datasets=entries, local_names=tuple(names), local_note=note, converted=converted)


def _parse_converted(name: str, raw: Any, path: Path) -> ConvertedEntry:
    """``local_datasets.converters.<name>``: its ``raw`` files (url, sha256 each) and ``files``."""
    where = f"local_datasets.converters.{name}"
    if not NAME_RE.fullmatch(name):
        raise DataError(f"{path}: {where}: dataset names must match {NAME_RE.pattern} (a plain folder name)")
    if not isinstance(raw, dict) or not isinstance(raw.get("raw"), dict) or not raw["raw"]:
        raise DataError(
            f"{path}: {where} must be a mapping with 'raw' (file name -> url, sha256) and 'files'"
        )
    releases = []
    for file_name, info in raw["raw"].items():
        at = f"{where}.raw.{file_name}"
        if not isinstance(file_name, str) or not NAME_RE.fullmatch(file_name) or not isinstance(info, dict):
            raise DataError(f"{path}: {at}: expected a plain file name mapped to url and sha256")
        url = _optional_str(info.get("url"), f"{at}.url", path)
        if url is None or not url.startswith(("https://", "http://")):
            raise DataError(f"{path}: {at}.url must be an http(s) URL, got {url!r}")
        sha = _optional_str(info.get("sha256"), f"{at}.sha256", path)
        if sha is None or not _SHA256_RE.fullmatch(sha):
            raise DataError(f"{path}: {at}.sha256 must be 64 lowercase hex digits, got {sha!r}")
        releases.append(RawRelease(name=file_name, url=url, sha256=sha))
    files_raw = raw.get("files") or {}
    if not isinstance(files_raw, dict) or not all(
        isinstance(rel, str) and isinstance(digest, str) and _SHA256_RE.fullmatch(digest)
        for rel, digest in files_raw.items()
    ):
        raise DataError(f"{path}: {where}.files must map relative paths to 64 lowercase hex digits")
    return ConvertedEntry(name=name, raw=tuple(releases), files=dict(files_raw))
