"""Finding and loading a dataset by name: the top of the data layer, where BEIR folders
(:mod:`viking_eval.data.beir`), ir_datasets ids (``irds:<id>``, :mod:`viking_eval.data.irds`) and
downloads (:mod:`viking_eval.data.download`) meet.

Datasets are found by name through ``VIKING_EVAL_DATA`` (a ``:``-separated list of folders), then
the repository's ``datasets/`` folder, then the data folder
(:func:`~viking_eval.data.locations.data_home`); a directory path is used as is. A dataset name
that is not found is a :class:`~viking_eval.data.errors.DatasetNotFound`: the name, the folders
searched and how to get that dataset (download, converter or ``VIKING_EVAL_DATA``), on one line
(:func:`how_to_get`). :func:`find_or_download` fetches a missing dataset the registry can
download, when downloads are allowed.
"""

from __future__ import annotations

from pathlib import Path

from viking_eval.data.beir import load_beir
from viking_eval.data.convert import CONVERTERS
from viking_eval.data.dataset import BeirDataset
from viking_eval.data.download import (
    DOWNLOAD_ENV,
    DownloadError,
    download_dataset,
    downloads_allowed,
    mirrored,
)
from viking_eval.data.errors import DataError, DatasetNotFound
from viking_eval.data.fetch import converted_entry, fetch_converted, offline_advice
from viking_eval.data.irds import irds_folder, is_irds_name, load_irds
from viking_eval.data.locations import DATA_ENV, data_home, data_search_path, dataset_names, is_dir, quietly
from viking_eval.data.registry import ConvertedEntry, load_registry

__all__ = ["find_or_download", "how_to_get", "load_dataset", "resolve_dataset"]


def resolve_dataset(name_or_path: str, repo_datasets: Path | None = None) -> Path:
    """The folder of a dataset: ``name_or_path`` itself if it is an existing directory, else the
    first ``<folder>/<name>`` directory along :func:`~viking_eval.data.locations.data_search_path`
    (an ``irds:<id>``: the folder ir_datasets keeps it in)."""
    if not name_or_path or not name_or_path.strip():
        raise DataError("dataset name is empty; give a dataset name (e.g. 'scifact') or a folder path")
    if is_irds_name(name_or_path):
        return irds_folder(name_or_path)
    as_path = Path(name_or_path).expanduser()
    if quietly(is_dir, as_path):
        return as_path
    folders = data_search_path(repo_datasets)
    for folder in folders:
        candidate = folder / name_or_path
        if quietly(is_dir, candidate):
            return candidate
    raise _not_found(name_or_path, folders)


def _not_found(name: str, folders: list[Path]) -> DatasetNotFound:
    """The one line for a name found in no folder: the folders, the datasets they hold and how
    to get this one."""
    where = ", ".join(
        f"{folder}{'' if quietly(is_dir, folder) else ' (does not exist)'}" for folder in folders
    )
    found = sorted({found for folder in folders for found in dataset_names(folder)})
    return DatasetNotFound.searched(
        name,
        folders,
        f"{name}: dataset not found in {len(folders)} folder(s) searched: {where} (datasets there: "
        f"{', '.join(found) if found else 'none'}); {how_to_get(name)}",
    )


def load_dataset(
    name_or_path: str,
    split: str = "test",
    *,
    strict: bool = False,
    repo_datasets: Path | None = None,
) -> BeirDataset:
    """Resolve ``name_or_path`` (see :func:`resolve_dataset`) and load ``split`` of it."""
    if is_irds_name(name_or_path):
        return load_irds(name_or_path, split, strict=strict)
    folder = resolve_dataset(name_or_path, repo_datasets)
    return load_beir(folder, split, strict=strict)


def how_to_get(name: str, registry: Path | None = None) -> str:
    """One clause saying how to get dataset ``name``: its download command when the registry has
    a URL for it, its converter command when it is rebuilt from a raw release, else a folder."""
    folder_advice = f"set {DATA_ENV} to a folder holding {name}/"
    try:
        entry = load_registry(registry).datasets.get(name)
    except DataError:  # a broken registry is reported where it is used, not here
        entry = None
    if entry is not None and entry.url is not None:
        return (
            f"download it with python -m viking_eval.data.download {name} (needs internet) or {folder_advice}"
        )
    spec = CONVERTERS.get(name)
    if spec is not None and _quiet_converted(name, registry):
        raw = " ".join(raw_file.name for raw_file in spec.raw)
        return (
            f"download it with python -m viking_eval.data.download {name} (needs internet: it fetches {raw} "
            f"from its public release and converts it) or {folder_advice}"
        )
    if spec is not None:
        raw = " ".join(raw_file.name for raw_file in spec.raw)
        return (
            f"build it from its public release with python -m viking_eval.data.convert {name} {raw} "
            f"(python -m viking_eval.data.convert --help says where to get {raw}) or {folder_advice}"
        )
    return (
        f"{folder_advice}, or give its folder (dataset.path=...); python -m viking_eval.data.download --list "
        "lists the datasets that can be downloaded"
    )


def _quiet_converted(name: str, registry: Path | None) -> bool:
    """Whether the registry lists how to fetch ``name``'s raw release (a broken registry: no)."""
    try:
        return converted_entry(name, registry) is not None
    except DataError:
        return False


def find_or_download(
    name_or_path: str,
    *,
    download: str = "never",
    registry: Path | None = None,
    dest: Path | None = None,
) -> Path:
    """The folder of a dataset (:func:`resolve_dataset`). When it is not found,
    the registry can download it and :func:`~viking_eval.data.download.downloads_allowed` (``download="auto"``), it is
    downloaded into ``dest`` (default: the data folder, last on the search path) first, with a
    progress bar and the registry's checksums. Offline, a failed download is one
    :class:`DataError` line saying how to get the dataset; nothing half-written stays behind."""
    try:
        return resolve_dataset(name_or_path)
    except DatasetNotFound as missing:
        if not downloads_allowed(download):
            raise
        name = missing.name
        target = Path(dest) if dest is not None else data_home()
        entry = load_registry(registry).datasets.get(name)
        if entry is None or entry.url is None:
            converted = converted_entry(name, registry)
            if converted is None:
                raise
            return _fetch_converted(converted, target, registry)
        announce = (
            f"{name}: not found locally; downloading it from {mirrored(entry.url)} into {target / name} "
            f"(dataset.download=never or {DOWNLOAD_ENV}=never turns this off)"
        )
        try:
            return download_dataset(name, target, registry=registry, announce=announce)
        except DownloadError as error:
            raise DataError(
                f"{name}: dataset not found, and downloading it failed ({error}); download it with "
                f"python -m viking_eval.data.download {name} (needs internet) or set {DATA_ENV} to a folder "
                f"holding {name}/",
                path=Path(name),
            ) from error


def _fetch_converted(entry: ConvertedEntry, target: Path, registry: Path | None) -> Path:
    """:func:`find_or_download` for a dataset rebuilt from its raw public release(s)."""
    name = entry.name
    urls = ", ".join(mirrored(raw.url) for raw in entry.raw)
    announce = (
        f"{name}: not found locally; downloading its public release ({urls}) and converting it into "
        f"{target / name} (dataset.download=never or {DOWNLOAD_ENV}=never turns this off)"
    )
    try:
        return fetch_converted(name, target, registry=registry, announce=announce)
    except DownloadError as error:
        raise DataError(
            f"{name}: dataset not found, and downloading its public release failed ({error}); "
            f"{offline_advice(name, entry, target)}",
            path=Path(name),
        ) from error
