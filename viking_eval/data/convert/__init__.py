"""Rebuild the shared datasets (BEIR layout) from their raw public releases, byte for byte.

``convert(name, raw_paths, dest)`` checks each raw file's sha256 against the published release
(:data:`CONVERTERS`), converts it into a staging folder ``<dest>/.<name>.partial-<pid>``, checks
every output file's sha256 against ``local_datasets.converters.<name>.files`` of
``datasets/registry.yaml`` and only then renames the staging folder to ``<dest>/<name>``, so a
half-written dataset never sits where a finished one belongs. Stale staging folders of killed
runs are removed. The CLI is ``python -m viking_eval.data.convert`` (see ``--help``).

Why converters at all: the shared folders are only useful if anyone can check that they are
what the public sources say, and rebuild them where the shared folder is absent.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from viking_eval.data.convert._staging import clean_stale, install, occupied
from viking_eval.data.convert.classic import convert_classic
from viking_eval.data.convert.cosqa import CODE_MAP, SPLIT_FILES, convert_cosqa
from viking_eval.data.convert.locomo import convert_locomo
from viking_eval.data.errors import DataError
from viking_eval.data.locations import data_home
from viking_eval.data.registry import DEFAULT_REGISTRY, registry_path
from viking_eval.files import sha256_file

__all__ = [
    "CONVERTERS",
    "DEFAULT_REGISTRY",
    "Converter",
    "FileCheck",
    "RawFile",
    "convert",
    "expected_files",
    "verify_folder",
]

_SHA256_RE = re.compile(r"[0-9a-f]{64}")

Log = Callable[[str], None]


@dataclass(frozen=True)
class RawFile:
    """One file of a raw public release, pinned to a repository commit and checksum."""

    name: str
    repo: str
    commit: str
    path: str
    sha256: str

    @property
    def url(self) -> str:
        """Where GitHub serves this exact file at this commit."""
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.path}"

    @property
    def source(self) -> str:
        """``<repository> @ <commit>, <path>``, as ``shared/raw/README.md`` cites it."""
        return f"{self.repo} @ {self.commit}, {self.path}"


@dataclass(frozen=True)
class Converter:
    """A dataset's raw files, license and conversion function ``run(raw_by_name, out_folder)``
    (returns the relative paths written)."""

    name: str
    raw: tuple[RawFile, ...]
    license: str
    run: Callable[[Mapping[str, Path], Path], list[str]]
    summary: str


_GLASGOW = ("lailaglez/belief-network-irs", "9094e4cde738bd93ed1747dc958b5acb0e0fa684")
_COCLR = ("Jun-jie-Huang/CoCLR", "14ebcacf9e9bc3e7109102632bc63047876f27d2")
_GLASGOW_LICENSE = "no license file; the Glasgow IR group presents it as freely available for IR research"


def _classic(name: str, tarball: str, folder: str, sha256: str, summary: str) -> Converter:
    raw = RawFile(tarball, *_GLASGOW, f"{folder}/{tarball}", sha256)
    return Converter(
        name, (raw,), _GLASGOW_LICENSE, lambda files, out: convert_classic(name, files[tarball], out), summary
    )


CONVERTERS: dict[str, Converter] = {
    "locomo": Converter(
        "locomo",
        (
            RawFile(
                "locomo10.json",
                "snap-research/LoCoMo",
                "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376",
                "data/locomo10.json",
                "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
            ),
        ),
        "CC BY-NC 4.0",
        lambda files, out: convert_locomo(files["locomo10.json"], out),
        "LoCoMo: dialog turns, QA queries, evidence qrels, sessions.jsonl",
    ),
    "cisi": _classic(
        "cisi",
        "cisi.tar.gz",
        "cisi",
        "bddb284e19369d153dad90770ae897e19221b0bc50e1329b5a702aa56f5e8483",
        "CISI (Glasgow SMART tarball), with .X cross-references",
    ),
    "cranfield": _classic(
        "cranfield",
        "cran.tar.gz",
        "cran",
        "8c48a8412e4a7e6e0dd5af99c959f8d75fdf88135602adc1a56aa22770652d64",
        "Cranfield 1400 (Glasgow SMART tarball), graded qrels",
    ),
    "medline": _classic(
        "medline",
        "med.tar.gz",
        "med",
        "07478afc5370ba3dfa66c8c1994ea56a2341cea8584af619a63eb51c31f26f1e",
        "Medline (Glasgow SMART tarball)",
    ),
    "adi": _classic(
        "adi",
        "adi.tar.gz",
        "adi",
        "68c1867824cbad9e28ce498fafa644d5ac1a7a8a41cde0bffaf402095bbc7aa6",
        "ADI (Glasgow SMART tarball), tiny",
    ),
    "cosqa": Converter(
        "cosqa",
        (
            RawFile(
                CODE_MAP,
                *_COCLR,
                f"data/search/{CODE_MAP}",
                "be8a910ca03cb9f1b38a0eba6dc8109eeb8040a40aaba1a467a7b8426d261f3f",
            ),
            RawFile(
                SPLIT_FILES["test"],
                *_COCLR,
                f"data/search/{SPLIT_FILES['test']}",
                "27d3552b2e7dd86cf9f9a0b3c135e6777d4faafa9c29fb1b9b01ece945974ad6",
            ),
            RawFile(
                SPLIT_FILES["dev"],
                *_COCLR,
                f"data/search/{SPLIT_FILES['dev']}",
                "ccdfffee7ae1f1cf1a0406566a61c984f4fbce678c8ea108eedd03d11bff9518",
            ),
        ),
        "CoCLR README: code MIT; datasets under the Computational Use of Data Agreement (C-UDA)",
        convert_cosqa,
        "CoSQA retrieval split of CoCLR: 6,267 functions, test and dev queries",
    ),
}
"""Converters by dataset name; the raw checksums are those of ``../shared/raw/README.md``."""


@dataclass(frozen=True)
class FileCheck:
    """One output file against the registry: ``status`` is ``OK``, ``mismatch``, ``missing``
    (expected, not written) or ``unchecked`` (no expected checksum)."""

    path: str
    status: str
    expected: str | None
    actual: str | None


# --------------------------------------------------------------------------- registry


def expected_files(name: str, registry: Path | None = None) -> dict[str, str]:
    """``local_datasets.converters.<name>.files`` of the registry: relative path -> sha256.
    An absent registry file or entry gives ``{}`` (nothing to check against)."""
    path = registry_path(registry)
    if registry is None and not path.is_file():
        return {}
    try:
        raw: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: registry file not found") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DataError(f"{path}: cannot read registry: {exc}") from None
    where = f"local_datasets.converters.{name}.files"
    entry = (((raw or {}).get("local_datasets") or {}).get("converters") or {}).get(name) or {}
    files = entry.get("files") if isinstance(entry, dict) else None
    if files is None:
        return {}
    if not isinstance(files, dict):
        raise DataError(f"{path}: {where} must be a mapping of relative path -> sha256")
    for rel, digest in files.items():
        if not isinstance(rel, str) or not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest):
            raise DataError(f"{path}: {where}.{rel}: expected a relative path mapped to 64 hex digits")
    return dict(files)


def verify_folder(
    name: str, folder: Path, written: Sequence[str], registry: Path | None = None
) -> list[FileCheck]:
    """Check the files ``written`` in ``folder`` against the registry's checksums for ``name``."""
    expected = expected_files(name, registry)
    checks: list[FileCheck] = []
    for rel in written:
        actual = sha256_file(folder / rel)
        want = expected.get(rel)
        status = "unchecked" if want is None else "OK" if actual == want else "mismatch"
        checks.append(FileCheck(rel, status, want, actual))
    checks.extend(
        FileCheck(rel, "missing", want, None) for rel, want in expected.items() if rel not in written
    )
    return checks


# --------------------------------------------------------------------------- raw files


def _match_raw(spec: Converter, raw_paths: Sequence[Path | str]) -> dict[str, Path]:
    """Map each raw file the converter needs to a given path, by file name. A folder stands for
    the files of that name inside it."""
    wanted = {raw.name: raw for raw in spec.raw}
    hint = "; ".join(f"{raw.name} from {raw.source}" for raw in spec.raw)
    found: dict[str, Path] = {}
    for given in raw_paths:
        path = Path(given).expanduser()
        if path.is_dir():
            for raw_name in wanted:
                if (path / raw_name).is_file() and raw_name not in found:
                    found[raw_name] = path / raw_name
            continue
        if path.name not in wanted:
            raise DataError(f"{path}: not a raw file of {spec.name}; it needs {hint}")
        if path.name in found:
            raise DataError(f"{path}: {path.name} given twice ({found[path.name]})")
        if not path.is_file():
            raise DataError(f"{path}: file not found (download {wanted[path.name].url})")
        found[path.name] = path
    missing = [raw for raw_name, raw in wanted.items() if raw_name not in found]
    if missing:
        raise DataError(
            f"{spec.name} needs {missing[0].name}, not given (download {missing[0].url}); it needs {hint}"
        )
    return found


def _check_raw(spec: Converter, files: Mapping[str, Path], log: Log) -> None:
    for raw in spec.raw:
        actual = sha256_file(files[raw.name])
        if actual != raw.sha256:
            raise DataError(
                f"{files[raw.name]}: sha256 {actual} is not that of the published {raw.name} "
                f"({raw.sha256}, {raw.source}); pass --no-verify to convert it anyway"
            )
        log(f"raw {raw.name}: sha256 OK")


def convert(
    name: str,
    raw_paths: Sequence[Path | str],
    dest: Path | str | None = None,
    *,
    force: bool = False,
    verify: bool = True,
    registry: Path | None = None,
    log: Log | None = None,
) -> Path:
    """Convert dataset ``name`` from its raw release into ``<dest>/<name>`` and return that folder.

    ``dest`` defaults to :func:`viking_eval.data.locations.data_home`. With ``verify`` (the default) a raw
    file whose sha256 differs from the published release is refused, and so is an output whose
    sha256 differs from the registry; without it, output mismatches are only reported. ``log``
    receives progress lines (one per checked file); ``None`` is silent.
    """
    say: Log = log if log is not None else (lambda _line: None)
    spec = CONVERTERS.get(name)
    if spec is None:
        raise DataError(f"unknown dataset {name!r}; converters: {', '.join(sorted(CONVERTERS))}")
    files = _match_raw(spec, raw_paths)
    dest = Path(dest).expanduser() if dest is not None else data_home()
    target = dest / name
    if occupied(target) and not force:
        raise DataError(f"{target} already exists and is not empty; pass --force to replace it")
    if verify:
        _check_raw(spec, files, say)
    dest.mkdir(parents=True, exist_ok=True)
    clean_stale(dest, name, say)
    staging = dest / f".{name}.partial-{os.getpid()}"
    staging.mkdir()
    try:
        written = spec.run(files, staging)
        checks = verify_folder(name, staging, written, registry)
        for check in checks:
            detail = f" (expected {check.expected}, got {check.actual})" if check.status == "mismatch" else ""
            say(f"  {check.status:9s} {check.path}{detail}")
        bad = [check.path for check in checks if check.status in ("mismatch", "missing")]
        if bad and verify:
            raise DataError(
                f"{name}: {len(bad)} converted file(s) differ from the registry checksums "
                f"({', '.join(bad)}); nothing was installed"
            )
        install(staging, target, force)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
