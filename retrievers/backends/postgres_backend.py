"""PostgreSQL with pgvector and full-text search, any server by URL (``postgresql://...``;
libpq's environment, e.g. ``PGPASSWORD``, gives what the URL leaves out).

Tables ``<backend_name>_docs(row int PRIMARY KEY, doc_id, body, emb vector(dim), tsv tsvector
GENERATED from to_tsvector('english', body))`` with a GIN index on ``tsv``, and
``<backend_name>_meta`` holding the store's identity; everything is written in one transaction,
so a table set without its identity never exists.

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
from retrievers.index.vectors import Hits

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

    def _held(self) -> StoreIdentity | None:
        if not self._run("SELECT to_regclass(%s)", [self.meta])[0][0]:
            return None
        found = self._run(f"SELECT value FROM {self.meta} WHERE key = 'identity'")
        return StoreIdentity.from_json(found[0][0]) if found else None

    def write(self, store: ContextStore) -> bool:
        held = self._held()
        self.identity.check_holds(held, f"postgres {self._shown} (table {self.docs})")
        if held is None:
            self._write(store)
        self._index()
        return held is None

    def _write(self, store: ContextStore) -> None:
        dim = self.identity.dim
        with self.db.transaction():
            self._run(f"DROP TABLE IF EXISTS {self.docs}, {self.meta}")
            vector = f", emb vector({dim}) NOT NULL" if dim else ""
            self._run(
                f"CREATE TABLE {self.docs}(row integer PRIMARY KEY, doc_id text NOT NULL, body text NOT NULL"
                f"{vector}, tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) STORED)"
            )
            columns = "row, doc_id, body" + (", emb" if dim else "")
            with self.db.cursor().copy(
                f"COPY {self.docs} ({columns}) FROM STDIN WITH (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int4", "text", "text", "vector"][: 4 if dim else 3])
                step = 4096
                for start in range(0, len(store), step):
                    stop = min(start + step, len(store))
                    block = np.asarray(store.embeddings[start:stop], dtype=np.float32) if dim else None
                    for row in range(start, stop):
                        doc = store.documents[row]
                        values: list[Any] = [row, doc.id, doc.full_text]
                        if block is not None:
                            values.append(block[row - start])
                        copy.write_row(values)
            self._run(f"CREATE INDEX ON {self.docs} USING gin (tsv)")
            self._run(f"CREATE TABLE {self.meta}(key text PRIMARY KEY, value text NOT NULL)")
            self._run(f"INSERT INTO {self.meta} VALUES ('identity', %s)", [self.identity.to_json()])
        self._run(f"ANALYZE {self.docs}")

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
