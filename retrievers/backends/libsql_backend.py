"""libSQL (SQLite with native vectors): one file, embedded; or a libSQL/Turso server by URL.

Tables, all named ``<backend_name>_*``: ``docs(row INTEGER PRIMARY KEY, doc_id, body, digest,
emb F32_BLOB(dim))``, ``fts`` (FTS5 over ``body``, external content, ``porter unicode61``
tokenizer) and ``meta`` (the store's identity and store key, written last in the same
transaction: a file without them holds a write that did not finish, which the next open drops
and redoes). A later version of the store (:mod:`retrievers.backends.changes`) changes only the
rows that differ, their FTS5 entries (an external-content index forgets a row given the text it
indexed) and the identity, in one transaction: a failure or a killed process leaves the
previous version. Which rows differ comes from the store's recorded changes when it has them
(checked against the held identity and the rows' digests), without reading the table.

Vector search: ``exact`` scans with ``vector_distance_cos`` (float32), the scope as a ``WHERE
row IN (json_each(...))`` filter (for L2-normalised rows the cosine order is the inner-product
order); each returned row is scored from its returned vector (:func:`~retrievers.backends.base.rescored_hit`). ``vector_idx`` searches libSQL's DiskANN index through
``vector_top_k``, which takes no filter: a scoped search is refused (a filter it cannot express).
Keyword search: FTS5, the query's words OR-ed, scored ``-bm25(fts)`` (FTS5 gives lower = better).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from retrievers.backends.base import (
    BackendError,
    BackendLost,
    Float32Array,
    IntArray,
    SearchBackend,
    StoreIdentity,
    empty_hit,
    ordered_hit,
    rescored_hit,
)
from retrievers.backends.changes import RowChange, row_change, row_digests, store_key
from retrievers.index.vectors import Hits
from retrievers.store.row_digests import DigestArray

if TYPE_CHECKING:
    from retrievers.backends.config import BackendConfig
    from retrievers.store import ContextStore

__all__ = ["LibsqlBackend", "fts_query"]

_WORD = re.compile(r"\w+", re.UNICODE)
#: environment variable holding a libSQL/Turso server's auth token
TOKEN_ENV = "LIBSQL_AUTH_TOKEN"


def fts_query(text: str) -> str:
    """``text`` as an FTS5 query: its words, each quoted, OR-ed (any word may match, as BM25)."""
    return " OR ".join(f'"{word}"' for word in dict.fromkeys(_WORD.findall(text.lower())))


class LibsqlBackend(SearchBackend):
    kind = "libsql"
    KNOBS: ClassVar[dict[str, tuple[str, ...]]] = {"exact": (), "vector_idx": ()}

    def __init__(self, config: BackendConfig, identity: StoreIdentity, location: str) -> None:
        super().__init__(config, identity)
        import libsql

        self._error: type[Exception] = Exception
        self.location = location
        name = config.backend_name
        self.docs, self.fts, self.meta, self.vidx = (
            f"{name}_{part}" for part in ("docs", "fts", "meta", "vidx")
        )
        try:
            if location.startswith(("libsql://", "http://", "https://", "wss://")):
                self.db: Any = libsql.connect(location, auth_token=os.environ.get(TOKEN_ENV, ""))
            else:
                Path(location).parent.mkdir(parents=True, exist_ok=True)
                self.db = libsql.connect(location)
            self.db.execute("SELECT 1").fetchall()
        except Exception as error:  # the driver raises plain ValueError / RuntimeError
            raise BackendError(f"store.backend=libsql: cannot open {location}: {error}") from None

    def _run(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        try:
            rows: list[Any] = self.db.execute(sql, tuple(args)).fetchall()
        except Exception as error:
            raise BackendLost(
                f"store.backend=libsql ({self.location}): {sql.split()[0]} failed: {error}"
            ) from None
        return rows

    def _held(self) -> tuple[StoreIdentity | None, str | None]:
        """The identity and store key the file holds (None, None: nothing, or an unfinished write)."""
        tables = {row[0] for row in self._run("SELECT name FROM sqlite_master WHERE type IN ('table')")}
        if self.meta not in tables:
            return None, None
        found = dict(self._run(f"SELECT key, value FROM {self.meta} WHERE key IN ('identity', 'store_key')"))
        if "identity" not in found:
            return None, None
        return StoreIdentity.from_json(found["identity"]), found.get("store_key")

    def write(self, store: ContextStore) -> bool:
        where = f"{self.location} (tables {self.docs}, ...)"
        held, held_key = self._held()
        action = self.decide(store, held, held_key, where)
        if action == "write":
            self._write(store)
        elif action == "change":
            self._change(store, self.planned_change(store, held, held_key, where))
        if self.index == "vector_idx":
            self._run(
                f"CREATE INDEX IF NOT EXISTS {self.vidx} ON {self.docs}(libsql_vector_idx(emb, 'metric=cosine'))"
            )
            self.db.commit()
        return action != "reuse"

    def _write(self, store: ContextStore) -> None:
        for table in (self.fts, self.docs, self.meta):  # a write that never finished
            self._run(f"DROP TABLE IF EXISTS {table}")
        dim = self.identity.dim
        vector = f", emb F32_BLOB({dim})" if dim else ""
        self._run(
            f"CREATE TABLE {self.docs}(row INTEGER PRIMARY KEY, doc_id TEXT NOT NULL, body TEXT NOT NULL, "
            f"digest BLOB NOT NULL{vector})"
        )
        self._run(
            f"CREATE VIRTUAL TABLE {self.fts} USING fts5(body, content='{self.docs}', content_rowid='row', "
            "tokenize='porter unicode61')"
        )
        self._run(f"CREATE TABLE {self.meta}(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._insert(store, np.arange(len(store), dtype=np.int64), row_digests(store))
        self._run(f"INSERT INTO {self.fts}(rowid, body) SELECT row, body FROM {self.docs}")
        self._record(store)
        self.db.commit()  # one transaction: the identity is there only when everything is

    def _insert(self, store: ContextStore, rows: IntArray, digests: DigestArray) -> None:
        """Insert the store's ``rows`` (ascending) into the docs table (not the FTS index)."""
        dim = self.identity.dim
        columns = "row, doc_id, body, digest" + (", emb" if dim else "")
        values = "?, ?, ?, ?" + (", vector32(?)" if dim else "")
        step = 2000
        for start in range(0, len(rows), step):
            block = rows[start : start + step].tolist()
            docs = [store.documents[row] for row in block]
            args: list[tuple[Any, ...]] = [
                (row, doc.id, doc.full_text, digests[row].tobytes())
                for row, doc in zip(block, docs, strict=True)
            ]
            if dim:
                vectors = np.ascontiguousarray(store.embeddings[block], dtype=np.float32)
                args = [(*known, vectors[i].tobytes()) for i, known in enumerate(args)]
            self.db.executemany(f"INSERT INTO {self.docs}({columns}) VALUES ({values})", args)

    def _record(self, store: ContextStore) -> None:
        """The identity and the store key, in the transaction that wrote the rows."""
        self._run(
            f"INSERT OR REPLACE INTO {self.meta}(key, value) VALUES ('identity', ?), ('store_key', ?)",
            [self.identity.to_json(), store_key(store)],
        )

    def _change(self, store: ContextStore, planned: RowChange | None) -> None:
        """Only the rows that differ (:mod:`retrievers.backends.changes`: ``planned`` from the
        store's history, else every held row's digest compared), their FTS5 entries with them,
        and the new identity: one transaction (rolled back on any failure)."""
        digests = row_digests(store)
        change = planned
        if change is None:
            held = self._run(f"SELECT row, digest FROM {self.docs}")
            change = row_change([row for row, _ in held], [digest for _, digest in held], digests)
        self.last_change = change
        try:
            if change.drop.size:
                dropped = [json.dumps(change.drop.tolist())]
                where = "WHERE row IN (SELECT value FROM json_each(?))"
                # an external-content FTS5 index forgets a row given the text it indexed
                self._run(
                    f"INSERT INTO {self.fts}({self.fts}, rowid, body) SELECT 'delete', row, body "
                    f"FROM {self.docs} {where}",
                    dropped,
                )
                self._run(f"DELETE FROM {self.docs} {where}", dropped)
            if change.write.size:
                self._insert(store, change.write, digests)
                self._run(
                    f"INSERT INTO {self.fts}(rowid, body) SELECT row, body FROM {self.docs} "
                    "WHERE row IN (SELECT value FROM json_each(?))",
                    [json.dumps(change.write.tolist())],
                )
            self._record(store)
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise

    def check_scope(self, scoped: bool) -> None:
        if scoped and self.index == "vector_idx":
            raise BackendError(
                "store.backend=libsql with store.backend_index=vector_idx cannot filter inside its vector "
                "search (vector_top_k takes no WHERE, and a top-k filtered afterwards is not the filtered "
                "top-k); a scoped or filtered retriever needs store.backend_index=exact"
            )

    @staticmethod
    def _scope(rows: IntArray | None, column: str) -> tuple[str, list[Any]]:
        if rows is None:
            return "", []
        return f" WHERE {column} IN (SELECT value FROM json_each(?))", [json.dumps(rows.tolist())]

    def vector_search(
        self,
        queries: np.ndarray,
        k: int,
        rows: IntArray | None,
        *,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> Hits:
        matrix = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.identity.dim)
        results: Hits = []
        for query in matrix:
            norm = float(np.linalg.norm(query.astype(np.float64)))
            if norm == 0.0:
                results.append(empty_hit())
                continue
            if self.index == "vector_idx":
                self.check_scope(rows is not None)
                found = self._run(
                    f"SELECT d.row, d.emb FROM "
                    f"vector_top_k('{self.vidx}', vector32(?), ?) AS t JOIN {self.docs} AS d ON d.row = t.id",
                    [query.tobytes(), k],
                )
            else:
                where, args = self._scope(rows, "row")
                found = self._run(
                    f"SELECT row, emb FROM {self.docs}{where} "
                    "ORDER BY vector_distance_cos(emb, vector32(?)) ASC, row ASC LIMIT ?",
                    [*args, query.tobytes(), k],
                )
            vectors = [np.frombuffer(blob, dtype=np.float32) for _, blob in found]
            results.append(rescored_hit([row for row, _ in found], vectors, query, k))
        return results

    def keyword_search(self, queries: Sequence[str], k: int, rows: IntArray | None) -> Hits:
        results: Hits = []
        for text in queries:
            match = fts_query(text)
            if not match:
                results.append(empty_hit())
                continue
            scope = "" if rows is None else " AND rowid IN (SELECT value FROM json_each(?))"
            args: list[Any] = [match] + ([] if rows is None else [json.dumps(rows.tolist())])
            found = self._run(
                f"SELECT rowid, -bm25({self.fts}) AS s FROM {self.fts} WHERE {self.fts} MATCH ?{scope} "
                "ORDER BY s DESC, rowid ASC LIMIT ?",
                [*args, k],
            )
            results.append(ordered_hit(found, k))
        return results

    def keyword_scores(self, query: str) -> Float32Array:
        scores = np.zeros(self.identity.rows, dtype=np.float32)
        match = fts_query(query)
        if match:
            for row, score in self._run(
                f"SELECT rowid, -bm25({self.fts}) FROM {self.fts} WHERE {self.fts} MATCH ?", [match]
            ):
                scores[int(row)] = score
        return scores

    def close(self) -> None:
        self.db.close()
