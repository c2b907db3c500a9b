"""Approximate inner-product search with faiss, under the exact index's contract.

:class:`FaissVectorIndex` wraps a faiss index built over a store's embeddings (inner-product
metric; the kinds are ``store.vector_index.kind``, :class:`retrievers.store.config.VectorIndexConfig`):

========== =================== ============================================ ==================
kind       faiss class         what a search reads                          query-time knob
========== =================== ============================================ ==================
flat       ``IndexFlatIP``     every vector (brute force, faiss's kernels)  none
hnsw       ``IndexHNSWFlat``   a graph walk (Malkov & Yashunin, 2018)       ``ef_search``
ivf_flat   ``IndexIVFFlat``    the ``nprobe`` nearest k-means lists         ``nprobe``
ivf_pq     ``IndexIVFPQ``      those lists' product-quantised codes         ``nprobe``,
                                                                                 ``refine_factor``
========== =================== ============================================ ==================

:meth:`FaissVectorIndex.search` keeps :meth:`ExactVectorIndex.search`'s contract:

* **Scores and order.** faiss only chooses candidates: ``max(k, efSearch)`` from HNSW (its walk
  keeps ``efSearch`` whatever k), ``2k`` from IVF-Flat and flat, ``refine_factor x k`` from IVF-PQ
  (:data:`DEFAULT_REFINE_FACTOR` unless the search says otherwise). Those whose float32 score is
  within the exact index's rounding band of the k-th best are scored again exactly as the exact
  index scores them (float32 products, numpy's pairwise sum per row: the same value in any batch;
  the others cannot enter the top k), and the top ``k`` are returned by (score desc, row asc), the
  whole batch at once (:func:`~retrievers.index.rescore.band_top`). HNSW gives its best ``2k``
  first (the same walk, the top of the same list) and IVF-Flat its best ``k + 3`` (a smaller
  heap); a query whose candidates all lie within the band asks again for the contract's: the
  same results (every candidate that can reach the top k is within the band, so among the first
  asked unless all of them are). IVF-PQ's quantised distances have no such bound: faiss's float32
  dot products over the exact index's matrix pick the best ``2k`` of a batch's candidates
  (``IndexRefineFlat``'s step in C++, no copy: ``refined_top``), cut as above; if all ``2k`` lie
  within the band, every candidate is. The codes only choose, so recall follows how many it asks
  for more than ``nprobe`` (docs/scale.md). One unmasked query: a plan kept per ``k`` and knobs,
  one compiled call for the cut, the scores (IVF-PQ: of all) and the top (:mod:`.ann_one`).
* **Batch == single, bit for bit.** HNSW walks each query on its own, so a batch goes to faiss
  at once. So does flat's, though faiss rounds a batch differently from one query: its ``2k``
  candidates only choose, and a query whose last candidate is still within the band of the
  k-th best (more than ``2k`` near-ties at the cut) is answered by the exact index instead, so
  flat's results are always the exact index's. IVF's coarse quantizer (an ``IndexFlatIP``) gave
  other last bits for a query in any batch of 2+ than alone (faiss 1.15), which can probe another
  list at a near tie and cannot be checked afterwards: IVF gives faiss one query per call.
* **Threads.** A faiss call runs on :attr:`FaissVectorIndex.threads` OpenMP threads (None: the
  process's, which the harness limits with threadpoolctl while it times queries) but never more
  than its queries (one query on two threads only spins the second core).
* **Masks** (scope, filters) go to faiss as an ``IDSelectorBitmap``: excluded rows are never
  returned. A search allowed at most ``k`` rows, or under 2% of the index
  (:data:`EXACT_FRACTION`), scores those rows exactly instead: a graph walk or a few lists would
  find few of them, and scoring them all costs less than the walk.
* **k larger than the index** returns every allowed row (HNSW would return what its walk reached).
* :attr:`approximate` is True: the results may miss items of the exact top ``k`` (the harness
  reports ``ann_recall@10``, viking_eval/run/ann_quality.py); ``flat`` too, though it never does.

Files: ``index.faiss`` (faiss's format) and ``index.json`` (kind, rows, dim, settings, faiss
version). Loading memory-maps the file for every kind with ``IO_FLAG_MMAP_IFC`` (faiss >= 1.11:
flat codes, HNSW storage and neighbour lists, IVF inverted lists; HNSW's per-node levels and
offsets, ~12 bytes a row, and IVF's centroids are read into memory). With an older faiss,
``IO_FLAG_MMAP`` maps IVF's inverted lists only, and flat/HNSW are read into memory. A file that
is truncated, unreadable or stale (another row count, dimension or kind than the store's, or
built over other embeddings of the same shape: ``index.json`` keeps ``vectors_sha256``, a
fingerprint of the matrix, :mod:`~retrievers.index.fingerprint`) is refused with one line that says to
rebuild. A file saved before the fingerprint existed is checked by row count, dimension and kind.

Settings that cannot fit the vectors are refused by ``check_vector_settings``
(:mod:`retrievers.store.vector_index_config`) with the key to change, before the harness embeds
anything. Candidates are cut and scored by :mod:`retrievers.index.rescore`.

faiss is imported when an index is built or loaded, never by ``import retrievers``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from retrievers.index.ann_one import OneQueryPlan, is_one_vector, one_plan, one_query, plain_knobs
from retrievers.index.faiss_calls import (
    candidate_counts,
    faiss_threads,
    optional_faiss,
    search_blocks,
    search_one,
    search_parameters,
)
from retrievers.index.fingerprint import vectors_fingerprint
from retrievers.index.rescore import band_top, float32_scores, refined_top, rescore
from retrievers.index.vectors import ExactVectorIndex, Hits
from retrievers.ranking import check_mask, check_positive_int

if TYPE_CHECKING:
    from retrievers.store.vector_index_config import VectorIndexConfig

__all__ = [
    "ANN_KINDS",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_NPROBE",
    "DEFAULT_REFINE_FACTOR",
    "EXACT_FRACTION",
    "KNOB_KINDS",
    "FaissVectorIndex",
    "VectorIndexError",
    "code_default_knobs",
]

Float32Array = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
PlanKey = tuple[int, int | None, int | None, int | None]  # k, ef_search, nprobe, refine_factor

#: the faiss kinds of ``store.vector_index.kind`` (``exact`` is ExactVectorIndex)
ANN_KINDS = ("flat", "hnsw", "ivf_flat", "ivf_pq")
#: efSearch an HNSW index is saved with (faiss's own default, 16, misses a lot at k = 10)
DEFAULT_EF_SEARCH = 64
#: nprobe an IVF index is saved with (at most its nlist)
DEFAULT_NPROBE = 16
#: IVF-PQ candidates rescored exactly per result wanted (``refine_factor``), unless a search says
DEFAULT_REFINE_FACTOR = 10
#: a masked search allowed fewer than this fraction of the rows scores them all exactly
EXACT_FRACTION = 0.02
#: rows added to faiss per call while building (bounded memory over a memory-mapped matrix)
_ADD_ROWS = 65536
#: the faiss class of each kind (what a loaded file must be)
_CLASSES = {
    "flat": "IndexFlatIP",
    "hnsw": "IndexHNSWFlat",
    "ivf_flat": "IndexIVFFlat",
    "ivf_pq": "IndexIVFPQ",
}
#: the query-time knobs of each kind
_KNOBS = {"hnsw": ("ef_search",), "ivf_flat": ("nprobe",), "ivf_pq": ("nprobe", "refine_factor")}
_KNOB_NAMES = ("ef_search", "nprobe", "refine_factor")
#: the kinds each knob applies to (for error messages)
KNOB_KINDS = {"ef_search": "hnsw", "nprobe": "ivf_flat or ivf_pq", "refine_factor": "ivf_pq"}

INDEX_FILE = "index.faiss"
META_FILE = "index.json"


class VectorIndexError(ValueError):
    """A saved vector index that cannot be used (missing, truncated, stale); one line naming
    the file and saying to rebuild the store."""


def _faiss() -> Any:
    faiss = optional_faiss()  # imported once, its loader's INFO lines silenced
    if faiss is None:  # pragma: no cover - faiss-cpu is a dependency
        raise ImportError("store.vector_index needs faiss (pip install faiss-cpu); kind 'exact' does not")
    return faiss


def code_default_knobs(kind: str) -> dict[str, int]:
    """The default knobs of ``kind`` that are set by this code, not saved in the index (IVF-PQ's
    ``refine_factor``): a result's identity must name them (``runner.resume_key``), since changing
    one changes results without changing the store."""
    return {"refine_factor": DEFAULT_REFINE_FACTOR} if kind == "ivf_pq" else {}


class FaissVectorIndex:
    """A faiss index over a store's embeddings with :class:`ExactVectorIndex`'s search contract
    (see the module docstring). ``exact`` is the exact index over the same embeddings: it
    rescores candidates and answers :meth:`scores`."""

    approximate: ClassVar[bool] = True

    def __init__(self, index: Any, kind: str, exact: ExactVectorIndex, *, settings: dict[str, Any]) -> None:
        if kind not in ANN_KINDS:
            raise ValueError(f"kind must be one of {list(ANN_KINDS)}, got {kind!r}")
        self._index = index
        self.kind = kind
        self.exact = exact
        self.size = exact.size
        self.dim = exact.dim
        #: what the index was built with (the store's vector_index settings, resolved), for reports
        self.settings = dict(settings)
        self.mmapped = False
        self.threads: int | None = None  #: faiss's OpenMP threads (None: the process's; omp_threads)
        self._parameter_cache: dict[tuple[int | None, int | None], Any] = {}
        self._plans: dict[PlanKey, OneQueryPlan] = {}  #: one unmasked query's plans (ann_one)
        self._hnsw = index.hnsw if kind == "hnsw" else None  #: its efSearch (read each call)
        if int(index.ntotal) != exact.size or int(index.d) != exact.dim:
            raise ValueError(
                f"faiss index holds {index.ntotal} vectors of dimension {index.d}; the embeddings are "
                f"{exact.size} x {exact.dim}"
            )

    # -- what it is ------------------------------------------------------------------------------

    @property
    def knobs(self) -> tuple[str, ...]:
        """The query-time knobs of this kind: ``ef_search`` (HNSW), ``nprobe`` (IVF) and
        ``refine_factor`` (IVF-PQ); none for flat."""
        return _KNOBS.get(self.kind, ())

    @property
    def nlist(self) -> int | None:
        return int(self._index.nlist) if self.kind in ("ivf_flat", "ivf_pq") else None

    def default_knobs(self) -> dict[str, int]:
        """The knob values a search uses when a retriever gives none (saved in the index, or
        :func:`code_default_knobs`)."""
        values = self._knob_values(None, None, None)
        return {name: v for name, v in zip(_KNOB_NAMES, values, strict=True) if v is not None}

    def check_knobs(
        self, *, ef_search: int | None = None, nprobe: int | None = None, refine_factor: int | None = None
    ) -> None:
        """ValueError naming the knob unless every given knob applies to this kind and fits it."""
        if ef_search is None and nprobe is None and refine_factor is None:
            return
        for name, value in (("ef_search", ef_search), ("nprobe", nprobe), ("refine_factor", refine_factor)):
            if value is None:
                continue
            if name not in self.knobs:
                its = f"its knobs: {', '.join(self.knobs)}" if self.knobs else "it has no query-time knob"
                raise ValueError(
                    f"{name}={value} applies to a store.vector_index.kind of {KNOB_KINDS[name]}; this "
                    f"store's vector index is {self.kind} ({its})"
                )
            check_positive_int(value, name)
            if name == "nprobe" and self.nlist is not None and value > self.nlist:
                raise ValueError(f"nprobe={value} exceeds the index's {self.nlist} IVF lists (nlist)")

    def describe(self) -> dict[str, Any]:
        """Kind, size, build settings, default knobs and whether the file is memory-mapped."""
        return {
            "kind": self.kind,
            "approximate": self.approximate,
            "rows": self.size,
            "dim": self.dim,
            "settings": self.settings,
            "default_knobs": self.default_knobs(),
            "mmap": self.mmapped,
        }

    # -- search ----------------------------------------------------------------------------------

    def scores(self, query: npt.ArrayLike) -> Float32Array:
        """Every item's score for one query: not a search, so the exact index answers it."""
        return self.exact.scores(query)

    def search(
        self,
        queries: npt.ArrayLike,
        k: int,
        *,
        mask: npt.ArrayLike | None = None,
        ef_search: int | None = None,
        nprobe: int | None = None,
        refine_factor: int | None = None,
    ) -> Hits:
        """Top ``k`` items per query by (score desc, row asc) among faiss's candidates, scored as
        :meth:`ExactVectorIndex.search` scores them; ``mask`` restricts results to rows marked
        True; ``ef_search`` / ``nprobe`` / ``refine_factor`` override the index's defaults for this
        call (a knob of another kind is refused). One ``(scores float32, rows int64)`` pair per
        query, of length at most ``min(k, allowed rows)``."""
        ef_search, nprobe, refine_factor = self._knob_values(ef_search, nprobe, refine_factor)
        plain = plain_knobs(k, ef_search, nprobe, refine_factor)  # ints: a plan may be kept for them
        if mask is None and plain and is_one_vector(queries, self.dim):  # the latency path
            found = self._one_query(queries, (k, ef_search, nprobe, refine_factor))
            if found is not None:
                return [found]
        k = check_positive_int(k, "k")
        self.check_knobs(ef_search=ef_search, nprobe=nprobe, refine_factor=refine_factor)
        query_matrix, bands = self.exact.checked_queries(queries)
        n_queries = query_matrix.shape[0]
        allowed = None if mask is None else check_mask(mask, self.size)
        n_allowed = self.size if allowed is None else int(np.count_nonzero(allowed))
        length = min(k, n_allowed)
        if length == 0:
            empty = (np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64))
            return [empty for _ in range(n_queries)]
        if n_allowed <= k or (allowed is not None and n_allowed < EXACT_FRACTION * self.size):
            rows = np.arange(self.size, dtype=np.int64) if allowed is None else np.flatnonzero(allowed)
            return rescore(self.exact.vectors, query_matrix, [rows] * n_queries, length)
        fetch, asked, complete = candidate_counts(self.kind, k, n_allowed, ef_search, refine_factor)
        parameters = self._parameters(allowed, ef_search, nprobe)
        scores, labels = self._faiss_search(query_matrix, asked, parameters)
        vectors = self.exact.vectors
        missing: list[int] = []
        if self.kind == "ivf_pq":  # quantised scores only choose: the best 2k by float32 scores
            candidates = labels
            faiss = _faiss()  # faiss splits more than 100 queries among its threads
            with faiss_threads(faiss, self.omp_threads(n_queries, int(faiss.omp_get_max_threads()))):
                scores, labels, missing = refined_top(
                    faiss, vectors, query_matrix, candidates, min(fetch, 2 * k)
                )
            asked = labels.shape[1]
        results, again = band_top(
            vectors, query_matrix, labels, scores, bands, length, check_gap=asked < complete, ranked=True
        )
        if missing:
            again = sorted(set(again).union(missing))
        if not again:
            return results
        if self.kind == "flat":  # every row searched: the exact index's answer is the contract's
            repeated = self.exact.search(query_matrix[again], length, mask=allowed)
        elif self.kind == "ivf_pq":  # near-ties past the 2k: every candidate scored in float32
            chosen = candidates[again]  # a copy: one query's faiss arrays are reused by the next
            scores = float32_scores(_faiss(), vectors, query_matrix[again], chosen)
            repeated, _ = band_top(
                vectors, query_matrix[again], chosen, scores, bands[again], length, check_gap=False
            )
        else:  # near-ties past the 2k: the contract's fetch, as if asked at first
            scores, labels = self._faiss_search(query_matrix[again], fetch, parameters)
            repeated, _ = band_top(
                vectors, query_matrix[again], labels, scores, bands[again], length, check_gap=False
            )
        for i, hits in zip(again, repeated, strict=True):
            results[i] = hits
        return results

    def _one_query(self, query: Float32Array, key: PlanKey) -> tuple[Float32Array, IndexArray] | None:
        """The latency path (:mod:`~retrievers.index.ann_one`), its plan kept per ``key`` (k and
        knobs; checked when it is made). None: the general path answers (k >= size, NaN, ties)."""
        k, ef_search, nprobe, refine_factor = key
        plan = self._plans.get(key)
        if plan is None:
            self.check_knobs(ef_search=ef_search, nprobe=nprobe, refine_factor=refine_factor)
            if check_positive_int(k, "k") >= self.size or not isinstance(self._index, _faiss().Index):
                return None
            counts = candidate_counts(self.kind, k, self.size, ef_search, refine_factor)
            plan = one_plan(self._index, self.kind, k, counts, self._parameters(None, ef_search, nprobe))
            if len(self._plans) < 256:
                self._plans[key] = plan
        return one_query(_faiss(), plan, self.exact, query)

    def _knob_values(
        self, ef_search: int | None, nprobe: int | None, refine_factor: int | None
    ) -> tuple[int | None, int | None, int | None]:
        """This call's knobs, those of this kind not given filled in: the faiss index's efSearch
        or nprobe (read each call) and IVF-PQ's :data:`DEFAULT_REFINE_FACTOR`."""
        if self._hnsw is not None:
            return int(self._hnsw.efSearch) if ef_search is None else ef_search, nprobe, refine_factor
        if self.kind in ("ivf_flat", "ivf_pq") and nprobe is None:
            nprobe = int(self._index.nprobe)
        pq_default = self.kind == "ivf_pq" and refine_factor is None
        return ef_search, nprobe, DEFAULT_REFINE_FACTOR if pq_default else refine_factor

    def _faiss_search(
        self, query_matrix: Float32Array, fetch: int, parameters: Any
    ) -> tuple[Float32Array, npt.NDArray[np.int64]]:
        """faiss's scores and rows, ``(n_queries, fetch)`` each: the batch in one call (HNSW,
        flat) or one query a call (IVF), on :meth:`omp_threads` threads."""
        faiss = _faiss()
        n_queries = query_matrix.shape[0]
        block = n_queries if self.kind in ("flat", "hnsw") else 1
        with faiss_threads(faiss, self.omp_threads(block, int(faiss.omp_get_max_threads()))):
            if n_queries == 1 and isinstance(self._index, faiss.Index):
                return search_one(faiss, self._index, query_matrix, fetch, parameters)
            return search_blocks(faiss, self._index, query_matrix, fetch, parameters, block)

    def omp_threads(self, n_queries: int, available: int) -> int:
        """:attr:`threads` (None: ``available``) but no more than ``n_queries`` (module docstring)."""
        return max(1, min(available if self.threads is None else self.threads, n_queries))

    def _parameters(self, allowed: BoolArray | None, ef_search: int | None, nprobe: int | None) -> Any:
        """faiss SearchParameters: the selector of allowed rows and this call's knob (given:
        :meth:`_knob_values`)."""
        if allowed is None:
            cached = self._parameter_cache.get((ef_search, nprobe))
            if cached is None:
                cached = search_parameters(_faiss(), self.kind, self.size, None, ef_search, nprobe)
                self._parameter_cache[(ef_search, nprobe)] = cached
            return cached
        return search_parameters(_faiss(), self.kind, self.size, allowed, ef_search, nprobe)

    # -- build, save, load ----------------------------------------------------------------------

    @classmethod
    def build(cls, exact: ExactVectorIndex, config: VectorIndexConfig) -> FaissVectorIndex:
        """A faiss index of ``config.kind`` over ``exact``'s vectors (inner product). IVF kinds
        train on ``train_size`` rows sampled with ``config.seed``; HNSW levels are drawn with it.
        Settings that cannot fit these vectors (``pq_m`` not dividing the dimension, more lists
        than rows) are refused with the key to change."""
        faiss = _faiss()
        if config.kind not in ANN_KINDS:
            raise ValueError(f"store.vector_index.kind {config.kind!r} is not a faiss kind {list(ANN_KINDS)}")
        vectors = exact.vectors
        n_rows, dim = exact.size, exact.dim
        metric = faiss.METRIC_INNER_PRODUCT
        settings: dict[str, Any] = {"kind": config.kind, "seed": config.seed}
        if config.kind == "flat":
            index = faiss.IndexFlatIP(dim)
        elif config.kind == "hnsw":
            index = faiss.IndexHNSWFlat(dim, config.hnsw_m, metric)
            index.hnsw.efConstruction = config.ef_construction
            index.hnsw.efSearch = DEFAULT_EF_SEARCH
            index.hnsw.rng = faiss.RandomGenerator(config.seed)  # the levels of the nodes
            settings.update(hnsw_m=config.hnsw_m, ef_construction=config.ef_construction)
        else:
            # imported here: importing retrievers.store (its package) at the top would import this
            # module's own package, retrievers.index, half-way through
            from retrievers.store.vector_index_config import check_vector_settings

            fit = check_vector_settings(config, n_rows, dim)
            nlist, n_train = fit["nlist"], fit["train_size"]
            quantizer = faiss.IndexFlatIP(dim)
            if config.kind == "ivf_flat":
                index = faiss.IndexIVFFlat(quantizer, dim, nlist, metric)
            else:
                pq_m = fit["pq_m"]
                index = faiss.IndexIVFPQ(quantizer, dim, nlist, pq_m, config.pq_bits, metric)
                index.pq.cp.seed = config.seed
                index.pq.cp.min_points_per_centroid = 1  # faiss prints a warning per sub-quantizer
                settings.update(pq_m=pq_m, pq_bits=config.pq_bits)
            index.cp.seed = config.seed
            index.cp.min_points_per_centroid = 1  # too few rows per list: one Python warning below
            wanted = 39 * max(nlist, 2**config.pq_bits if config.kind == "ivf_pq" else 1)
            if n_train < wanted:  # faiss's own threshold for a sound k-means
                warnings.warn(
                    f"store.vector_index: training {config.kind} on {n_train} rows, fewer than the "
                    f"{wanted} faiss recommends (39 per centroid); recall may suffer",
                    stacklevel=2,
                )
            rng = np.random.default_rng(config.seed)
            sample = np.sort(rng.choice(n_rows, size=n_train, replace=False))
            index.train(np.ascontiguousarray(vectors[sample], dtype=np.float32))
            index.nprobe = min(DEFAULT_NPROBE, nlist)
            settings.update(nlist=nlist, train_size=n_train)
        for start in range(0, n_rows, _ADD_ROWS):
            index.add(np.ascontiguousarray(vectors[start : start + _ADD_ROWS], dtype=np.float32))
        return cls(index, config.kind, exact, settings=settings)

    def save(self, folder: Path) -> None:
        """``index.faiss`` and ``index.json`` in ``folder`` (created if needed)."""
        faiss = _faiss()
        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self._index, str(folder / INDEX_FILE))
        meta = {
            "kind": self.kind,
            "rows": self.size,
            "dim": self.dim,
            "vectors_sha256": vectors_fingerprint(self.exact.vectors),
            "settings": self.settings,
            "faiss_version": faiss.__version__,
        }
        (folder / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, exact: ExactVectorIndex, kind: str, *, mmap: bool = True) -> FaissVectorIndex:
        """The index saved in ``folder`` over ``exact``'s vectors, memory-mapped when ``mmap``
        (see the module docstring). VectorIndexError, one line, when the files are missing,
        unreadable or truncated, or were built for other embeddings (rows, dimension) or
        another kind."""
        faiss = _faiss()
        path = folder / INDEX_FILE
        meta_path = folder / META_FILE
        rebuild = "rebuild the store"
        if not path.is_file() or not meta_path.is_file():
            raise VectorIndexError(
                f"{folder}: the store's {kind} vector index ({INDEX_FILE}, {META_FILE}) is missing; {rebuild}"
            )
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            settings = dict(meta["settings"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise VectorIndexError(f"{meta_path}: unreadable ({error}); {rebuild}") from None
        if meta.get("kind") != kind:
            raise VectorIndexError(
                f"{meta_path}: a {meta.get('kind')} index, the store's settings say {kind}; {rebuild}"
            )
        flags = 0
        if mmap:
            if hasattr(faiss, "IO_FLAG_MMAP_IFC"):
                flags = faiss.IO_FLAG_MMAP_IFC
            elif kind in ("ivf_flat", "ivf_pq"):
                flags = faiss.IO_FLAG_MMAP
        try:
            index = faiss.read_index(str(path), flags)
        except RuntimeError as error:  # faiss's C++ exceptions; the first line says what failed
            reason = next((line.strip() for line in str(error).splitlines() if line.strip()), "unknown error")
            raise VectorIndexError(
                f"{path}: not a readable faiss index (truncated or damaged: {reason[:200]}); {rebuild}"
            ) from None
        found = type(index).__name__
        if found != _CLASSES[kind]:
            raise VectorIndexError(
                f"{path}: a faiss {found}, expected {_CLASSES[kind]} for kind {kind}; {rebuild}"
            )
        if int(index.ntotal) != exact.size or int(index.d) != exact.dim:
            raise VectorIndexError(
                f"{path}: stale: it holds {index.ntotal} vectors of dimension {index.d}, the store's "
                f"embeddings are {exact.size} x {exact.dim}; {rebuild}"
            )
        built_over = meta.get("vectors_sha256")
        if built_over is not None and built_over != vectors_fingerprint(exact.vectors):
            raise VectorIndexError(
                f"{path}: stale: built over other embeddings of the same shape ({exact.size} x "
                f"{exact.dim}; another corpus or embedder), {META_FILE}'s vectors_sha256 does not match "
                f"the store's; {rebuild}"
            )
        if index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise VectorIndexError(f"{path}: not an inner-product index; {rebuild}")
        loaded = cls(index, kind, exact, settings=settings)
        loaded.mmapped = bool(flags)
        return loaded
