"""The settings of the store's vector index (``store.vector_index``) and whether they fit the vectors.

:class:`VectorIndexConfig` names the kind (``exact`` or a faiss index of
:mod:`retrievers.index.ann`) and its build settings. Settings that cannot fit the vectors (more
IVF lists than rows, ``pq_m`` not dividing the dimension, fewer training rows than ``2^pq_bits``)
are refused by :func:`check_vector_settings` with the key to change; the harness calls it before
it embeds anything, and :meth:`FaissVectorIndex.build <retrievers.index.ann.FaissVectorIndex.build>`
builds with the values it resolves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from retrievers.params import Params, param

__all__ = [
    "VECTOR_INDEX_KINDS",
    "VectorIndexConfig",
    "check_vector_settings",
    "default_nlist",
    "default_pq_m",
]

#: vector index kinds (retrievers/index/ann.py for the faiss ones): exact numpy search, or a faiss index
VECTOR_INDEX_KINDS = ("exact", "flat", "hnsw", "ivf_flat", "ivf_pq")


@dataclass(frozen=True)
class VectorIndexConfig(Params):
    """The index every vector search of the store goes through (:mod:`retrievers.index.ann`).

    ``exact`` is :class:`~retrievers.index.ExactVectorIndex` (numpy, no extra file). The other
    kinds are faiss indexes over the same embeddings, inner-product metric, built once with the
    store and saved beside it: ``flat`` (``IndexFlatIP``, brute force in faiss), ``hnsw``
    (``IndexHNSWFlat``: ``hnsw_m`` links per node, ``ef_construction``), ``ivf_flat`` and
    ``ivf_pq`` (``nlist`` k-means lists trained on ``train_size`` rows sampled with ``seed``;
    IVF-PQ stores ``pq_m`` codes of ``pq_bits`` bits per vector). Query-time knobs (HNSW
    ``efSearch``, IVF ``nprobe``, IVF-PQ's candidates rescored per result) are retriever
    parameters (``ef_search``, ``nprobe``, ``refine_factor``): changing them never rebuilds the
    store."""

    SECTION = "store.vector_index"

    kind: Literal["exact", "flat", "hnsw", "ivf_flat", "ivf_pq"] = param("exact")
    hnsw_m: int = param(32, low=2, high=256, doc="HNSW: links per node (M)")
    ef_construction: int = param(100, low=1, high=4096, doc="HNSW: candidate list size while inserting")
    nlist: int | None = param(
        None, low=1, high=1 << 20, doc="IVF: k-means lists; null = min(4 sqrt(rows), rows / 39)"
    )
    pq_m: int | None = param(
        None, low=1, high=4096, doc="IVF-PQ: sub-quantizers, must divide the dimension; null = dim / 8"
    )
    pq_bits: int = param(8, low=1, high=16, doc="IVF-PQ: bits per sub-quantizer code")
    train_size: int | None = param(
        None,
        low=1,
        high=100_000_000,
        doc="IVF: rows sampled to train k-means (and PQ); null = min(rows, 64 x max(nlist, 2^pq_bits))",
    )
    seed: int = param(0, low=0, high=2**31 - 1, doc="training sample, k-means and HNSW levels")

    def check(self) -> None:
        unused = {
            "hnsw_m": self.kind == "hnsw",
            "ef_construction": self.kind == "hnsw",
            "nlist": self.kind in ("ivf_flat", "ivf_pq"),
            "pq_m": self.kind == "ivf_pq",
            "train_size": self.kind in ("ivf_flat", "ivf_pq"),
        }
        defaults = VectorIndexConfig.__dataclass_fields__
        for name, used in unused.items():
            if not used and getattr(self, name) != defaults[name].default:
                raise self.fail(name, f"does not apply to kind {self.kind!r}; remove it or change the kind")

    def check_against(self, n_rows: int, dim: int) -> None:
        """ParamError naming the key when these settings cannot index ``n_rows`` vectors of width
        ``dim`` (IVF lists, PQ sub-quantizers, training rows: :func:`check_vector_settings`); nothing
        to check for ``exact``, ``flat`` and ``hnsw``."""
        check_vector_settings(self, n_rows, dim)


def default_nlist(n_rows: int) -> int:
    """IVF lists when ``nlist`` is null: ``4 sqrt(n)`` (faiss's guideline is 4-16 sqrt(n)), at
    most ``n / 39`` so that k-means sees the 39 points per centroid faiss asks for."""
    return max(1, min(round(4 * math.sqrt(n_rows)), n_rows // 39))


def default_pq_m(dim: int) -> int:
    """IVF-PQ sub-quantizers when ``pq_m`` is null: the largest divisor of ``dim`` that is at most
    ``dim / 8`` (8 dimensions per byte code: 48 for 384-d vectors), at least 1."""
    return max([m for m in range(1, max(1, dim // 8) + 1) if dim % m == 0])


def _train_rows(n_rows: int, nlist: int, config: VectorIndexConfig) -> int:
    if config.train_size is not None:
        return min(n_rows, config.train_size)
    centroids = max(nlist, 2**config.pq_bits if config.kind == "ivf_pq" else 0)
    return min(n_rows, 64 * centroids)


def check_vector_settings(config: VectorIndexConfig, n_rows: int, dim: int) -> dict[str, int]:
    """The IVF settings ``config`` resolves to over ``n_rows`` vectors of width ``dim``
    (``nlist``, ``train_size``, and ``pq_m`` for IVF-PQ; empty for the other kinds), or a
    ParamError naming the ``store.vector_index`` key that cannot fit them and what would: more
    lists than rows, ``pq_m`` not dividing the dimension, fewer training rows than the k-means
    of the coarse lists or of a PQ sub-quantizer (``2^pq_bits`` centroids) needs. The harness
    calls it before anything is embedded or built (``VectorIndexConfig.check_against``)."""
    if config.kind not in ("ivf_flat", "ivf_pq"):
        return {}
    if n_rows < 1 or dim < 1:
        raise config.fail("kind", f"{config.kind} needs vectors to index, got {n_rows} rows of width {dim}")
    nlist = config.nlist if config.nlist is not None else default_nlist(n_rows)
    if nlist > n_rows:
        raise config.fail(
            "nlist",
            f"{nlist} exceeds the {n_rows} rows to index (documents, or chunks with store.chunking): "
            f"give at most {n_rows}, or null (= {default_nlist(n_rows)} lists for {n_rows} rows)",
        )
    resolved = {"nlist": nlist}
    if config.kind == "ivf_pq":
        pq_m = config.pq_m if config.pq_m is not None else default_pq_m(dim)
        if dim % pq_m:
            divisors = [m for m in range(1, dim + 1) if dim % m == 0]
            shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
            raise config.fail(
                "pq_m",
                f"{pq_m} must divide the embedding dimension {dim}: one of {shown}, or null "
                f"(= {default_pq_m(dim)})",
            )
        resolved["pq_m"] = pq_m
    n_train = _train_rows(n_rows, nlist, config)
    resolved["train_size"] = n_train
    codes = 2**config.pq_bits if config.kind == "ivf_pq" else 0
    if n_train < max(nlist, codes):
        limited = config.train_size is not None and config.train_size < n_rows
        limit = f", train_size {config.train_size}" if limited else ""
        if codes > nlist:
            fits = n_train.bit_length() - 1  # the largest b with 2^b <= n_train
            raise config.fail(
                "pq_bits",
                f"{config.pq_bits} means {codes} centroids per PQ sub-quantizer: ivf_pq needs at least "
                f"{codes} training rows, got {n_train} ({n_rows} rows{limit}): give pq_bits at most "
                f"{fits}, or use kind ivf_flat or hnsw",
            )
        raise config.fail(
            "train_size" if limited else "nlist",
            f"{config.train_size if limited else nlist}: {config.kind} with nlist {nlist} needs at "
            f"least {nlist} training rows, got {n_train} ({n_rows} rows{limit}): raise train_size or "
            "lower nlist",
        )
    return resolved
