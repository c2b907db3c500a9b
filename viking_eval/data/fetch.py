"""Fetch a converted dataset by name: download its raw public release(s), convert, install.

The datasets of ``local_datasets.converters`` in ``datasets/registry.yaml`` (ADI, CISI,
Cranfield, Medline, CoSQA, LoCoMo) are not published in BEIR's layout; the project rebuilds them
from their raw releases (:mod:`viking_eval.data.convert`). :func:`fetch_converted` does what a user
would do by hand, under the dataset's lock (``DEST/.NAME.lock``, shared with
:mod:`viking_eval.data.download`):

1. each raw file is streamed from its registry URL (through ``VIKING_EVAL_MIRROR`` when set,
   :func:`~viking_eval.data.transfer.mirrored`) with a progress bar into a temporary folder
   ``DEST/.NAME.<random>.unpack`` and checked against the registry's sha256 -- a mismatch is
   refused and nothing is installed;
2. the project's converter rebuilds the dataset there and checks every converted file against
   the registry's ``files`` (refused on a mismatch);
3. ``CHECKSUMS.json`` records the files (re-verified on every load) and the folder is renamed to
   ``DEST/NAME``: a partial dataset never sits where a finished one belongs.

Offline (no server answers) is :class:`~viking_eval.data.transfer.Unreachable`;
:func:`offline_advice` is the clause saying what to fetch by hand and where to put it.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from viking_eval.data.archive import holds_dataset
from viking_eval.data.checksums import record_checksums
from viking_eval.data.convert import CONVERTERS, convert
from viking_eval.data.errors import DataError
from viking_eval.data.locations import DATA_ENV, data_home
from viking_eval.data.registry import NAME_RE, ConvertedEntry, load_registry, registry_path
from viking_eval.data.transfer import (
    DownloadError,
    dataset_lock,
    holding,
    mirrored,
    remove_stale_partials,
    stream,
)

__all__ = ["converted_entry", "fetch_converted", "offline_advice"]

Log = Callable[[str], None]

logger = logging.getLogger(__name__)


def converted_entry(name: str, registry: Path | None = None) -> ConvertedEntry | None:
    """The registry's ``local_datasets.converters.<name>`` when the project has its converter."""
    entry = load_registry(registry).converted.get(name)
    return entry if entry is not None and name in CONVERTERS else None


def offline_advice(name: str, entry: ConvertedEntry, dest: Path | None = None) -> str:
    """What to do without a connection, as one clause: the URL(s) to fetch, the command that
    converts them and where the dataset then is."""
    urls = " and ".join(raw.url for raw in entry.raw)
    files = " ".join(raw.name for raw in entry.raw)
    where = Path(dest) if dest is not None else data_home()
    return (
        f"fetch {urls} on a machine with internet, put {'them' if len(entry.raw) > 1 else 'it'} in one "
        f"folder and run python -m viking_eval.data.convert {name} {files} there (it installs "
        f"{where / name}), or set {DATA_ENV} to a folder holding {name}/"
    )


def fetch_converted(
    name: str,
    dest: Path | None = None,
    *,
    registry: Path | None = None,
    announce: str | None = None,
    lock_timeout: float | None = None,
    log: Log | None = None,
) -> Path:
    """Fetch, convert and install dataset ``name`` into ``dest/name`` (default: the data folder)
    and return that folder; an existing dataset there is returned as is. Bad bytes (a raw file
    or a converted file whose sha256 differs from the registry) are a :class:`DataError`; a
    failed transfer a :class:`~viking_eval.data.transfer.DownloadError`. Either way nothing is
    installed. ``announce`` goes to stderr once the first server answers; ``log`` receives the
    converter's per-file lines."""
    if not NAME_RE.fullmatch(name):
        raise DataError(f"dataset name {name!r} must be a plain folder name matching {NAME_RE.pattern}")
    entry = converted_entry(name, registry)
    if entry is None:
        raise DataError(
            f"{registry_path(registry)}: {name!r} is not a converted dataset "
            f"(local_datasets.converters); converters: {', '.join(sorted(CONVERTERS))}"
        )
    dest = Path(dest) if dest is not None else data_home()
    target = dest / name
    if holds_dataset(target):
        return target
    try:
        dest.mkdir(parents=True, exist_ok=True)
        lock = dataset_lock(dest, name)
    except OSError as exc:
        raise DownloadError(
            f"{dest}: cannot write the destination folder ({exc.strerror or exc}); pass --dest a writable folder"
        ) from exc
    with holding(lock, name, lock_timeout, logger):
        if holds_dataset(target):  # the fetch we waited for put it there
            return target
        if target.exists():
            raise DataError(f"{target}: exists but holds no corpus; remove it and run again")
        remove_stale_partials(dest, name, before=time.time(), log=logger)
        _fetch_convert_install(entry, target, registry, announce, log)
    return target


def _fetch_convert_install(
    entry: ConvertedEntry, target: Path, registry: Path | None, announce: str | None, log: Log | None
) -> None:
    """Everything happens in ``.NAME.<random>.unpack`` beside ``target`` (the name a later
    download's clean-up recognises); only the checked dataset is renamed to ``target``."""
    name = entry.name
    work = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}.", suffix=".unpack"))
    try:
        raw_folder = work / "raw"
        raw_folder.mkdir()
        for number, raw in enumerate(entry.raw):
            url = mirrored(raw.url)
            part = raw_folder / f"{raw.name}.part"
            actual = stream(
                url, part, desc=f"download {raw.name}", announce=announce if number == 0 else None
            )
            if actual != raw.sha256:
                raise DataError(
                    f"{url}: sha256 mismatch: expected {raw.sha256} (registry local_datasets.converters."
                    f"{name}.raw.{raw.name}.sha256), got {actual}; the download is damaged or the file "
                    "changed upstream; nothing was installed"
                )
            part.rename(raw_folder / raw.name)
        folder = convert(name, [raw_folder], work / "converted", registry=registry, log=log)
        record_checksums(
            folder,
            dataset=name,
            source=[raw.url for raw in entry.raw],
            raw_sha256={raw.name: raw.sha256 for raw in entry.raw},
            converted_with=f"python -m viking_eval.data.convert {name}",
            files_checked_against_registry=sorted(entry.files),
        )
        folder.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{name}: converted from its public release, every file checked against the registry; in {target}",
        file=sys.stderr,
        flush=True,
    )
