"""Writing ``.npy`` files so that readers which memory-map them never see a half-written file.

* :func:`save_npy` — ``np.save`` into a temporary file renamed over the target.
* :class:`NpyAppender` — a 1-D ``.npy`` file written front to back as the values come (the
  header is rewritten with the final length at the end), renamed over the target when done.
* :func:`load_npy` — a ``.npy`` file read or memory-mapped, as a plain ndarray.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

__all__ = ["NpyAppender", "load_npy", "save_array", "save_npy"]


def load_npy(path: Path, *, mmap: bool) -> npt.NDArray[Any]:
    """The array of the ``.npy`` file ``path`` (no pickle), memory-mapped read-only when ``mmap``.

    A memory map comes back as a plain ndarray view of the same pages: indexing an ``np.memmap``
    one element at a time goes through its Python-level ``__getitem__`` and ``__array_finalize__``
    (about 2 us an element against 0.1 us), which the per-node and per-result lookups of the
    retrievers do millions of times a run. (Only a store's embeddings stay an ``np.memmap``:
    :func:`save_array` uses the mapped file's name to copy it instead of rewriting it.)"""
    array: npt.NDArray[Any] = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    return array.view(np.ndarray) if isinstance(array, np.memmap) else array


def save_npy(path: Path, array: npt.ArrayLike) -> None:
    """``np.save`` into a temporary file renamed over ``path``: a process that memory-maps the
    old file keeps reading it (overwriting a mapped file in place kills its readers with
    SIGBUS)."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as handle:
        np.save(handle, np.asarray(array), allow_pickle=False)
    os.replace(temporary, path)


class NpyAppender:
    """A 1-D ``.npy`` file written front to back: a header for a huge placeholder length first,
    rewritten with the real length (same size: numpy pads headers to 128 bytes) when done."""

    def __init__(self, path: Path, dtype: np.dtype[Any]) -> None:
        self.path = path
        self.dtype = dtype
        self.count = 0
        # written beside, renamed over ``path`` when done (see save_npy)
        self._temporary = path.with_name(path.name + ".tmp")
        self._handle: BinaryIO = open(self._temporary, "wb")  # noqa: SIM115 (closed in close())
        self._header_size = self._write_header(2**62)

    def _write_header(self, count: int) -> int:
        start = self._handle.tell()
        header = {
            "descr": np.lib.format.dtype_to_descr(self.dtype),
            "fortran_order": False,
            "shape": (count,),
        }
        np.lib.format.write_array_header_1_0(self._handle, header)
        return self._handle.tell() - start

    def write_bytes(self, data: bytes) -> None:
        self._handle.write(data)
        self.count += len(data) // self.dtype.itemsize

    def write_array(self, array: npt.NDArray[Any]) -> None:
        self._handle.write(np.ascontiguousarray(array, dtype=self.dtype).tobytes())
        self.count += int(array.size)

    def close(self, *, finish: bool = True) -> None:
        if finish:
            self._handle.seek(0)
            if self._write_header(self.count) != self._header_size:  # never: numpy pads to 128 bytes
                raise RuntimeError(f"{self.path}: the .npy header changed size; cannot finish the file")
        self._handle.close()
        if finish:
            os.replace(self._temporary, self.path)
        else:
            os.unlink(self._temporary)


def save_array(path: Path, array: np.ndarray) -> None:
    """``np.save`` of ``array``, unless it is the memory-map of that very file (a store built
    into its folder: nothing to write) or of another whole ``.npy`` file (copied by the kernel,
    without reading it into this process)."""
    if isinstance(array, np.memmap) and array.filename is not None:
        source = Path(array.filename)
        if _same_file(source, path):
            array.flush()
            return
        header = _npy_header(source)
        if (
            header is not None
            and header == (array.shape, array.dtype, array.offset)
            and array.flags.c_contiguous
        ):
            shutil.copyfile(source, path)
            return
    save_npy(path, np.ascontiguousarray(array))


def _npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype[Any], int] | None:
    """(shape, dtype, data offset) of a C-ordered ``.npy`` file, or None."""
    try:
        with open(path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                return None
            return None if fortran else (tuple(shape), dtype, handle.tell())
    except (OSError, ValueError):
        return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
