"""faiss search parameters for one search of :class:`retrievers.index.ann.FaissVectorIndex`: the
knob of its kind and the selector of the rows a mask allows."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["search_parameters"]


def search_parameters(
    faiss: Any,
    kind: str,
    n_rows: int,
    allowed: npt.NDArray[np.bool_] | None,
    ef_search: int | None,
    nprobe: int | None,
) -> Any:
    """faiss ``SearchParameters`` of ``kind`` (HNSW: ``efSearch``; IVF: ``nprobe``; both resolved
    by the caller) with an ``IDSelectorBitmap`` of the ``allowed`` rows (of ``n_rows``) when given."""
    selector = None
    if allowed is not None:
        bits = np.packbits(allowed, bitorder="little")  # faiss: bit i & 7 of byte i >> 3
        selector = faiss.IDSelectorBitmap(n_rows, faiss.swig_ptr(bits))
        selector.referenced_bits = bits  # keep the buffer alive as long as the selector
    if kind == "hnsw":
        parameters = faiss.SearchParametersHNSW(efSearch=ef_search)
    elif kind in ("ivf_flat", "ivf_pq"):
        parameters = faiss.SearchParametersIVF(nprobe=nprobe)
    else:
        parameters = faiss.SearchParameters()
    if selector is not None:
        parameters.sel = selector
        parameters.referenced_selector = selector
    return parameters
