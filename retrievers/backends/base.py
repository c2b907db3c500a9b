"""The search backend interface: what the kernel and the families ask of a database.

Every family searches through three calls, whatever it does with the results:

* ``vector_search(queries, k, rows, ef_search=, nprobe=)``: the top ``k`` rows by inner product
  (the store's embeddings are L2-normalised: cosine) for each query vector;
* ``keyword_search(queries, k, rows)``: the top ``k`` rows by the database's own keyword score
  (FTS5 ``bm25()``, ``ts_rank_cd``, Qdrant's sparse BM25), rows holding no query word left out;
* ``keyword_scores(query)``: that score for every row (0 where no word matches), for families
  that score given rows (the hierarchical family's leaves).

``rows`` is the retriever's scope (``KernelRetriever.mask``: the store view, e.g. one LoCoMo
conversation, narrowed by ``filters``: doc ids, metadata, time range) as the sorted row numbers
allowed, or None for all. A backend applies it *inside* its search, as its own filter (a SQL
``WHERE``, a Qdrant payload filter), so a filtered top-k is the top-k of the filtered set; a
backend that cannot (libSQL's vector index: ``vector_top_k`` takes no filter) refuses the search
with :class:`BackendError`, never filtering a top-k afterwards. Child (parent-id) searches
are these searches on a chunked store's rows; the kernel resolves rows to parents as before.

Results follow the ranking order (score desc, row asc), one ``(scores float32, rows int64)``
pair per query, like the local indexes. The store's edges, context tree, times and the embedding
rows some families rescore with stay in the store files (memory-mapped): a backend serves searches.

A store is written into a backend once, under its identity (:class:`StoreIdentity`: content
key, corpus key, rows, dimension); opening a backend that holds another identity under the same
name is refused in one line naming what differs, before any query.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from retrievers.backends.changes import (
    RecordMismatch,
    RowChange,
    descends_from,
    origin_change,
    recorded_path,
    replay,
    rows_key,
)
from retrievers.index.vectors import Hits
from retrievers.store.row_digests import DIGEST_FILE, known_digests, mismatched_rows, row_digests, sample_rows

if TYPE_CHECKING:
    from retrievers.backends.config import BackendConfig
    from retrievers.store import ContextStore

__all__ = [
    "BackendError",
    "BackendLost",
    "SearchBackend",
    "StoreIdentity",
    "empty_hit",
    "identity_of",
    "legacy_identity",
    "ordered_hit",
    "rescored_hit",
]

IntArray = npt.NDArray[np.int64]
Float32Array = npt.NDArray[np.float32]

#: rows whose known digests are hashed again from the rows before a store's identity is made from them
SAMPLE = 64


class BackendError(ValueError):
    """Bad input about a backend (cannot connect at start, wrong password, a table of another
    store, a filter it cannot express): one line, the harness exits 2."""


class BackendLost(RuntimeError):
    """The backend answered at start and failed in the middle of a run (exit 1: resumable)."""


@dataclass(frozen=True)
class StoreIdentity:
    """What a backend's tables hold: refused unless equal to the store being served."""

    content_key: str
    corpus_key: str
    rows: int
    dim: int
    embedder_name: str
    #: how ``corpus_key`` (and ``content_key`` when the harness gives none) is hashed: 1, the
    #: JSON of every row in one pass (identities written before scheme 2; their JSON has no
    #: ``scheme``); 2, :func:`~retrievers.backends.changes.rows_key` of the row digests (ids,
    #: texts and vectors), computable from a changed store's parts
    scheme: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StoreIdentity:
        return cls(**json.loads(text))

    def same_rows(self, other: StoreIdentity) -> bool:
        """Whether ``other`` describes the same rows (all but the content key)."""
        return (self.corpus_key, self.rows, self.dim, self.embedder_name, self.scheme) == (
            other.corpus_key, other.rows, other.dim, other.embedder_name, other.scheme,
        )  # fmt: skip

    def check_holds(self, held: StoreIdentity | None, where: str) -> None:
        """BackendError (one line) unless ``held`` (what ``where`` holds) is this identity."""
        if held is None or held == self:
            return
        if held.rows != self.rows:
            what = f"another corpus ({held.rows} rows, corpus {held.corpus_key[:12]})"
        elif held.dim != self.dim:  # (scheme 2's corpus key covers the vectors: asked before it)
            what = f"vectors of another dimension ({held.dim}, this store's is {self.dim})"
        elif held.embedder_name != self.embedder_name:
            what = f"vectors of another embedder ({held.embedder_name!r}, this store's is {self.embedder_name!r})"
        elif held.corpus_key != self.corpus_key:
            what = f"another corpus ({held.rows} rows, corpus {held.corpus_key[:12]})"
        else:
            what = f"a stale store of this corpus (content key {held.content_key[:12]})"
        raise BackendError(
            f"{where} holds {what}, not this store (content key {self.content_key[:12]}, {self.rows} rows, "
            f"dim {self.dim}); refusing to query it: set store.backend_name to another name, or drop it"
        )


#: identities already computed, per store object (stores are never changed once made): opening
#: a backend and attaching the store to it hash the rows once
_IDENTITIES: weakref.WeakKeyDictionary[Any, dict[str | None, StoreIdentity]] = weakref.WeakKeyDictionary()


def identity_of(store: ContextStore, content_key: str | None = None) -> StoreIdentity:
    """The store's identity (scheme 2): ``content_key`` as given (the harness's store key), else
    a hash of what the searches read (the rows key: rows' ids, texts and embeddings; embedder,
    store settings)."""
    known = _IDENTITIES.setdefault(store, {})
    if content_key not in known:
        known[content_key] = _identity(store, content_key)
    return known[content_key]


def _identity(store: ContextStore, content_key: str | None) -> StoreIdentity:
    """Scheme 2: the rows key hashed from the row digests (known for a store made by a change
    from one whose digests were known, or read with a store version: no pass over the rows)."""
    known = known_digests(store)
    if known is not None:  # not hashed from the rows now: a sample of them must agree
        wrong = mismatched_rows(store, known, sample_rows(len(store), SAMPLE))
        if wrong.size:
            raise BackendError(
                f"the store's row digests (merged by a change or read from its version folder's "
                f"{DIGEST_FILE}) do not match its rows (row {int(wrong[0])} and {wrong.size - 1} more of "
                f"{SAMPLE} sampled); refusing to serve it (without that file every row is hashed again)"
            )
    corpus_key = rows_key(row_digests(store))
    dim = store.dim if store.has_vectors else 0
    if content_key is None:
        content = hashlib.sha256(b"viking_eval.backend.identity.v2\n" + corpus_key.encode())
        content.update(json.dumps([store.embedder_name, store.config.to_dict()], sort_keys=True).encode())
        content_key = content.hexdigest()
    return StoreIdentity(content_key, corpus_key, len(store), dim, store.embedder_name, scheme=2)


def legacy_identity(store: ContextStore, content_key: str | None = None) -> StoreIdentity:
    """The identity of scheme 1 (what backends written before scheme 2 hold): ``corpus_key`` is
    sha256 of ``json.dumps([id, full_text], ensure_ascii=False)`` of every row, in order."""
    # read from the columns (no metadata decoded) and hashed in blocks: the same bytes, so the same key
    quote = json.encoder.encode_basestring  # what dumps quotes strings with (ensure_ascii=False)
    columns = store.documents
    corpus = hashlib.sha256()
    block: list[str] = []
    for doc_id, title, text in zip(columns.ids, columns.titles, columns.texts, strict=True):
        full = f"{title} {text}".strip() if title else text  # Document.full_text
        block.append(f"[{quote(doc_id)}, {quote(full)}]")
        if len(block) == 4096:
            corpus.update("".join(block).encode())
            block = []
    corpus.update("".join(block).encode())
    corpus_key = corpus.hexdigest()
    dim = store.dim if store.has_vectors else 0
    if content_key is None:
        content = hashlib.sha256(corpus_key.encode())
        content.update(store.embedder_name.encode())
        content.update(json.dumps(store.config.to_dict(), sort_keys=True).encode())
        if store.has_vectors:
            content.update(np.ascontiguousarray(store.embeddings, dtype=np.float32).tobytes())
        content_key = content.hexdigest()
    return StoreIdentity(content_key, corpus_key, len(store), dim, store.embedder_name)


def empty_hit() -> tuple[Float32Array, IntArray]:
    return np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64)


def ordered_hit(pairs: Sequence[tuple[Any, Any]], k: int) -> tuple[Float32Array, IntArray]:
    """``(row, score)`` pairs as a hit in the ranking order (score desc, row asc), cut to ``k``.
    Databases order by score already; this settles ties by row exactly as the local indexes do."""
    if not pairs:
        return empty_hit()
    rows = np.fromiter((int(row) for row, _ in pairs), dtype=np.int64, count=len(pairs))
    scores = np.fromiter((float(score) for _, score in pairs), dtype=np.float32, count=len(pairs))
    order = np.lexsort((rows, -scores))[:k]
    return scores[order], rows[order]


def rescored_hit(
    rows: Sequence[int], vectors: Sequence[Any], query: np.ndarray, k: int
) -> tuple[Float32Array, IntArray]:
    """The rows a database's vector search returned, each scored from the vector it returned
    (float32) with the local exact index's arithmetic (elementwise float32 products, numpy's
    pairwise sum per row), then in the ranking order: the database chooses the rows, the scores
    are the ones the local run gives, to the bit, whatever rounding the database's own distance
    had (libSQL's ``1 - cos`` loses digits; a family that rescales scores would magnify that)."""
    if not len(rows):
        return empty_hit()
    matrix = np.stack([np.asarray(vector, dtype=np.float32) for vector in vectors])
    matrix *= np.asarray(query, dtype=np.float32)
    scores = matrix.sum(axis=1)
    found = np.asarray(rows, dtype=np.int64)
    order = np.lexsort((found, -scores))[:k]
    return scores[order], found[order]


class SearchBackend(ABC):
    """A database holding one store's rows: vectors, texts and row numbers (see the module doc)."""

    #: ``store.backend`` value
    kind: ClassVar[str]
    #: query-time knobs of each vector index: {index: (knob names)}
    KNOBS: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, config: BackendConfig, identity: StoreIdentity) -> None:
        self.config = config
        self.identity = identity
        #: the rows the last change dropped and wrote (None: nothing changed since opening)
        self.last_change: RowChange | None = None

    @property
    def index(self) -> str:
        return self.config.backend_index

    def default_knobs(self) -> dict[str, int]:
        """The knobs of this backend's vector index and the values a search takes when the
        retriever leaves them null (for reports)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """This backend's vector index for ``environment.json`` (no URL: it may hold a password)."""
        config = self.config
        settings: dict[str, Any] = {"name": config.backend_name}
        if self.index == "hnsw":
            settings.update(m=config.backend_m, ef_construction=config.backend_ef_construction)
        elif self.index == "ivfflat":
            settings.update(lists=config.backend_lists or max(1, self.identity.rows // 1000))
        return {
            "engine": self.kind,
            "kind": self.index,
            "approximate": self.index != "exact",
            "settings": settings,
            "default_knobs": self.default_knobs(),
        }

    def check_knob(self, name: str, value: int) -> None:
        """ValueError unless this backend's vector index has the knob ``name``."""
        knobs = self.KNOBS.get(self.index, ())
        if name not in knobs:
            has = f"its knobs are {', '.join(knobs)}" if knobs else "it has no query-time knob"
            raise ValueError(
                f"{name}={value} does not apply to store.backend={self.kind} with "
                f"store.backend_index={self.index} ({has})"
            )

    def check_scope(self, scoped: bool) -> None:  # noqa: B027 - optional
        """BackendError when this backend's vector search cannot filter and ``scoped`` (default:
        every backend filters inside its search)."""

    def decide(
        self,
        store: ContextStore,
        held: StoreIdentity | None,
        held_key: str | None,
        where: str,
        *,
        pending: str | None = None,
    ) -> Literal["write", "reuse", "change"]:
        """What :meth:`write` does with what ``where`` holds: ``held`` (its identity), ``held_key``
        (the store content key recorded with it; None in tables written before keys were
        recorded) and ``pending`` (the key an unfinished change was heading to: Qdrant).

        * nothing held: ``write`` the store;
        * this identity, no change pending: ``reuse`` it;
        * a version this store was made from (its history names ``held_key``), or an unfinished
          change whose source or target this store is or comes from: ``change`` the rows that
          differ (:mod:`retrievers.backends.changes`);
        * anything else: :class:`BackendError`, one line naming what differs."""
        if held is None:
            return "write"
        if pending is None and held == self.identity:
            return "reuse"
        if held_key is not None and (
            descends_from(store, held_key) or (pending is not None and descends_from(store, pending))
        ):
            return "change"
        if held.scheme != self.identity.scheme and pending is None:
            # written before identities were hashed from row digests: this store's rows in the
            # first scheme's hash are followed (every row compared), anything else is refused
            legacy = legacy_identity(store)
            if held.same_rows(legacy) and held.content_key in (legacy.content_key, self.identity.content_key):
                return "change"
            replace(legacy, content_key=self.identity.content_key).check_holds(held, where)
        if pending is not None:
            raise BackendError(
                f"{where} holds an unfinished change from store {(held_key or '?')[:12]} to {pending[:12]}, "
                f"and this store (content key {self.identity.content_key[:12]}) comes from neither; refusing "
                "to query it: open it with either store to finish the change, or drop it"
            )
        self.identity.check_holds(held, where)
        raise BackendError(f"{where} holds {held.content_key[:12]}, not this store")  # check_holds raised

    def planned_change(
        self, store: ContextStore, held: StoreIdentity | None, held_key: str | None, where: str
    ) -> RowChange | None:
        """The change from the held version to ``store`` as the store's history records it
        (:func:`~retrievers.backends.changes.replay`), checked: the held version's digests
        rebuilt from the records hash to the rows key ``held`` names, and the rows to write
        and a sample of the kept rows, hashed again from ``store``'s rows, have the digests the
        store gives. None when there is no such record (the caller compares every row);
        :class:`BackendError` when a check fails."""
        if held is None or held_key is None or held.scheme != self.identity.scheme:
            return None
        path = recorded_path(store, held_key)
        if path is None:
            return None
        digests = row_digests(store)
        refuse = (
            f"{where} holds version {path[0].version} of this store (content key {held_key[:12]}), "
            "and the store's record of its changes since"
        )
        try:
            origin, rebuilt = replay(digests, *path)
        except RecordMismatch as error:
            raise BackendError(f"{refuse} does not fit its rows: {error}; refusing to follow it") from None
        if rebuilt.shape[0] != held.rows or rows_key(rebuilt) != held.corpus_key:
            raise BackendError(
                f"{refuse} does not lead from the rows it holds (their digests differ); refusing to follow it: "
                "open it with the store it holds, or drop it"
            )
        change = origin_change(origin, held.rows)
        wrong = mismatched_rows(store, digests, change.write)  # (a sample of all rows: identity_of)
        if wrong.size:
            raise BackendError(
                f"{where}: the store's row digests do not match its rows to write (row {int(wrong[0])} and "
                f"{wrong.size - 1} more of {change.write.size}); refusing to follow its change"
            )
        return change

    @abstractmethod
    def write(self, store: ContextStore) -> bool:
        """Bring the backend to ``store`` (:meth:`decide`): written when it holds nothing, only
        checked when it holds this store, the differing rows changed when it holds a version
        ``store`` was made from; True when anything was written now. Another store under this
        name: :class:`BackendError`."""

    @abstractmethod
    def vector_search(
        self,
        queries: np.ndarray,
        k: int,
        rows: IntArray | None,
        *,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> Hits: ...

    @abstractmethod
    def keyword_search(self, queries: Sequence[str], k: int, rows: IntArray | None) -> Hits: ...

    @abstractmethod
    def keyword_scores(self, query: str) -> Float32Array: ...

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections (default: nothing to release)."""
