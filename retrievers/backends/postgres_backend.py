"""PostgreSQL with pgvector and full-text search, any server by URL (``postgresql://...``;
libpq's environment, e.g. ``PGPASSWORD``, gives what the URL leaves out).

Tables ``<backend_name>_docs(row int PRIMARY KEY, doc_id, body, digest, emb vector(dim), tsv
tsvector GENERATED from to_tsvector('english', body))`` with a GIN index on ``tsv``, and
``<backend_name>_meta`` holding the store's identity and store key; everything is written in one
transaction, so a table set without its identity never exists. A later version of the store
(:mod:`retrievers.backends.changes`: from the store's recorded changes when it has them, checked
against the held identity, else every row's digest compared) deletes and inserts only the rows
that differ and replaces the identity in one transaction (the GIN and vector indexes follow the rows; an IVFFlat index
keeps the lists it was built with).

Vector search orders by ``emb <#> q`` (pgvector's negative inner product), the scope as ``WHERE
row = ANY(rows)``, each returned row scored from its returned vector (``rescored_hit``): ``exact`` turns index scans off (a sequential scan, exact); ``hnsw`` (``m``,
``ef_construction``) takes ``ef_search``; ``ivfflat`` (``lists``) takes ``nprobe`` as
``ivfflat.probes``. Filtered index scans run pgvector's iterative scans, so a filtered top-k is
filled from the filtered rows. Keyword search: ``ts_rank_cd(tsv, q)`` where ``q`` is the query
parsed by ``plainto_tsquery('english', ...)`` (plain words: stemmed, stopwords dropped) with its
AND operators made OR (plainto_tsquery ANDs every word, which would leave most natural-language
queries with no match; BM25 and FTS5 take any word).
"""

from __future__ import annotations

from collections.abc import Sequence
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

__all__ = ["PostgresBackend"]

#: the query, parsed as plain words, its words OR-ed
TSQUERY = "replace(plainto_tsquery('english', %s)::text, ' & ', ' | ')::tsquery"


class PostgresBackend(SearchBackend):
    kind = "postgres"
    KNOBS: ClassVar[dict[str, tuple[str, ...]]] = {
        "exact": (),
        "hnsw": ("ef_search",),
        "ivfflat": ("nprobe",),
    }

    def default_knobs(self) -> dict[str, int]:
        return {"hnsw": {"ef_search": 40}, "ivfflat": {"nprobe": 1}}.get(self.index, {})  # pgvector's

    def __init__(self, config: BackendConfig, identity: StoreIdentity, url: str) -> None:
        super().__init__(config, identity)
        import psycopg
        from pgvector.psycopg import register_vector

        self.url = url
        self.docs, self.meta = f"{config.backend_name}_docs", f"{config.backend_name}_meta"
        shown = url.split("@")[-1]  # never print a password
        try:
            self.db: Any = psycopg.connect(url, autocommit=True, connect_timeout=10)
            self.db.execute("CREATE EXTENSION IF NOT EXISTS vector")
            register_vector(self.db)
        except psycopg.Error as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackendError(f"store.backend=postgres: cannot connect to {shown}: {first}") from None
        self._shown = shown
        self._settings: dict[str, str] = {}
        self._built: dict[str, int] = {}

    def _run(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        import psycopg

        try:
            cursor = self.db.execute(sql, tuple(args))
            return list(cursor.fetchall()) if cursor.description is not None else []
        except psycopg.Error as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackendLost(
                f"store.backend=postgres ({self._shown}): {sql.split()[0]} failed: {first}"
            ) from None

    def _held(self) -> tuple[StoreIdentity | None, str | None]:
        """The identity and store key the tables hold (None, None: nothing there)."""
        if not self._run("SELECT to_regclass(%s)", [self.meta])[0][0]:
            return None, None
        found = dict(self._run(f"SELECT key, value FROM {self.meta} WHERE key IN ('identity', 'store_key')"))
        if "identity" not in found:
            return None, None
        return StoreIdentity.from_json(found["identity"]), found.get("store_key")

    def write(self, store: ContextStore) -> bool:
        held, held_key = self._held()
        where = f"postgres {self._shown} (table {self.docs})"
        action = self.decide(store, held, held_key, where)
        if action == "write":
            self._write(store)
        elif action == "change":
            self._change(store, held, self.planned_change(store, held, held_key, where))
        self._index()
        return action != "reuse"

    def _write(self, store: ContextStore) -> None:
        dim = self.identity.dim
        with self.db.transaction():
            self._run(f"DROP TABLE IF EXISTS {self.docs}, {self.meta}")
            vector = f", emb vector({dim}) NOT NULL" if dim else ""
            self._run(
                f"CREATE TABLE {self.docs}(row integer PRIMARY KEY, doc_id text NOT NULL, body text NOT NULL, "
                f"digest bytea NOT NULL{vector}, tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) "
                "STORED)"
            )
            self._copy(store, np.arange(len(store), dtype=np.int64), row_digests(store))
            self._run(f"CREATE INDEX ON {self.docs} USING gin (tsv)")
            self._run(f"CREATE TABLE {self.meta}(key text PRIMARY KEY, value text NOT NULL)")
            self._record(store)
        self._run(f"ANALYZE {self.docs}")

    def _copy(self, store: ContextStore, rows: IntArray, digests: DigestArray) -> None:
        """The store's ``rows`` (ascending) into the docs table, by binary COPY."""
        dim = self.identity.dim
        columns = "row, doc_id, body, digest" + (", emb" if dim else "")
        with self.db.cursor().copy(f"COPY {self.docs} ({columns}) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "text", "text", "bytea", "vector"][: 5 if dim else 4])
            step = 4096
            for start in range(0, len(rows), step):
                block = rows[start : start + step].tolist()
                vectors = np.asarray(store.embeddings[block], dtype=np.float32) if dim else None
                for i, row in enumerate(block):
                    doc = store.documents[row]
                    values: list[Any] = [row, doc.id, doc.full_text, digests[row].tobytes()]
                    if vectors is not None:
                        values.append(vectors[i])
                    copy.write_row(values)

    def _record(self, store: ContextStore) -> None:
        """The identity and the store key (inside the transaction that wrote the rows)."""
        self._run(
            f"INSERT INTO {self.meta} VALUES ('identity', %s), ('store_key', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [self.identity.to_json(), store_key(store)],
        )

    def _change(
        self, store: ContextStore, held_identity: StoreIdentity | None, planned: RowChange | None = None
    ) -> None:
        """Only the rows that differ (:mod:`retrievers.backends.changes`) and the new identity,
        in one transaction: the GIN and vector indexes follow the rows; a failure rolls it all
        back. The identity row is locked first, so two processes changing the same tables one
        after the other: the second finds the identity it read gone and stops."""
        digests = row_digests(store)
        with self.db.transaction():
            locked = self._run(f"SELECT value FROM {self.meta} WHERE key = 'identity' FOR UPDATE")
            if not locked or held_identity is None or StoreIdentity.from_json(locked[0][0]) != held_identity:
                raise BackendError(
                    f"postgres {self._shown} (table {self.docs}) was changed by another process while "
                    "this one opened it; open it again"
                )
            change = planned  # from the store's recorded changes, checked against held_identity
            if change is None:
                held = self._run(f"SELECT row, digest FROM {self.docs}")
                change = row_change([row for row, _ in held], [digest for _, digest in held], digests)
            self.last_change = change
            if change.drop.size:
                self._run(
                    f"DELETE FROM {self.docs} WHERE row = ANY(%s)", [change.drop.astype(np.int32).tolist()]
                )
            if change.write.size:
                self._copy(store, change.write, digests)
            self._record(store)

    def _index(self) -> None:
        """The configured vector index (made once; an index adds nothing to what the table holds)."""
        config = self.config
        if self.index == "exact" or not self.identity.dim:
            self._set("enable_indexscan", "off")  # a sequential scan: exact, whatever indexes exist
            return
        name = f"{config.backend_name}_{self.index}"
        if self.index == "hnsw":
            options = f"(m = {config.backend_m}, ef_construction = {config.backend_ef_construction})"
            self._set("hnsw.iterative_scan", "strict_order")
        else:
            lists = config.backend_lists or max(1, self.identity.rows // 1000)
            options = f"(lists = {lists})"
            self._set("ivfflat.iterative_scan", "relaxed_order")  # rows re-ordered by score after
        method = "hnsw" if self.index == "hnsw" else "ivfflat"
        others = self._run(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef ~ 'USING (hnsw|ivfflat)' "
            "AND indexname <> %s",
            [self.docs, name],
        )
        if others:  # the planner could search with that index instead of this one
            raise BackendError(
                f"postgres {self._shown}: table {self.docs} already has the vector index {others[0][0]}; "
                f"a store.backend_index={self.index} search could use it instead: give this index its own "
                "store.backend_name"
            )
        self._run(
            f"CREATE INDEX IF NOT EXISTS {name} ON {self.docs} USING {method} (emb vector_ip_ops) WITH {options}"
        )
        # what the index was built with (an index made before a change keeps its lists)
        found = self._run("SELECT reloptions FROM pg_class WHERE relname = %s", [name])
        options_held: list[str] = (found[0][0] or []) if found else []
        pairs = [option.partition("=") for option in options_held]
        self._built = {key: int(value) for key, _, value in pairs if key in ("m", "ef_construction", "lists")}

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described["settings"].update(self._built)
        return described

    def _set(self, name: str, value: str) -> None:
        if self._settings.get(name) != value:
            self._run("SELECT set_config(%s, %s, false)", [name, value])
            self._settings[name] = value

    def vector_search(
        self,
        queries: np.ndarray,
        k: int,
        rows: IntArray | None,
        *,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> Hits:
        if self.index == "hnsw":
            self._set("hnsw.ef_search", str(ef_search or 40))  # pgvector's default is 40
        elif self.index == "ivfflat":
            self._set("ivfflat.probes", str(nprobe or 1))  # pgvector's default is 1
        matrix = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.identity.dim)
        where = "" if rows is None else " WHERE row = ANY(%s)"
        scope: list[Any] = [] if rows is None else [rows.astype(np.int32).tolist()]
        results: Hits = []
        for query in matrix:
            found = self._run(
                f"SELECT row, emb FROM {self.docs}{where} ORDER BY emb <#> %s, row LIMIT %s",
                [*scope, query, k],
            )
            vectors = [emb.to_numpy() if hasattr(emb, "to_numpy") else emb for _, emb in found]
            results.append(rescored_hit([row for row, _ in found], vectors, query, k))
        return results

    def keyword_search(self, queries: Sequence[str], k: int, rows: IntArray | None) -> Hits:
        scope = "" if rows is None else " AND row = ANY(%s)"
        extra: list[Any] = [] if rows is None else [rows.astype(np.int32).tolist()]
        results: Hits = []
        for text in queries:
            found = self._run(
                f"SELECT row, ts_rank_cd(tsv, q) AS s FROM {self.docs}, (SELECT {TSQUERY} AS q) AS parsed "
                f"WHERE tsv @@ q{scope} ORDER BY s DESC, row LIMIT %s",
                [text, *extra, k],
            )
            results.append(ordered_hit(found, k) if found else empty_hit())
        return results

    def keyword_scores(self, query: str) -> Float32Array:
        scores = np.zeros(self.identity.rows, dtype=np.float32)
        for row, score in self._run(
            f"SELECT row, ts_rank_cd(tsv, q) FROM {self.docs}, (SELECT {TSQUERY} AS q) AS parsed WHERE tsv @@ q",
            [query],
        ):
            scores[int(row)] = score
        return scores

    def close(self) -> None:
        self.db.close()
