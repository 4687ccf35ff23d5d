"""Ingestion by several processes on one database: each document under one replica's lease
(retrieval/leases.py), taken over when that replica dies; and ``serve --role``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from app.config.originals import open_originals
from app.factory import create_app
from app.migrations import open_database
from retrieval.db import Database, SqliteDatabase
from retrieval.index import FaissIndex
from retrieval.ingest import IngestConfig, IngestWorker
from retrieval.leases import HANDOVER_FILE, Leases, replica_id
from retrieval.library import Library
from retrieval.store import DocumentStore
from retrieval.types import (
    Block,
    ChunkSpan,
    DocumentKind,
    DocumentStatus,
    ParsedDocument,
    ParsedPage,
)
from tests.conftest import add_key, add_user, fake_settings, logs_captured, wait_for
from tests.retrieval_kit import Kit, make_kit
from tests.server import ServerProcess

ROOT = Path(__file__).resolve().parent.parent


def queue_documents(kit: Kit, count: int, collection_id: int | None = None) -> list[int]:
    """Documents queued in the database as another process's upload would be: nothing
    told to any worker here (the library has none)."""
    return [
        kit.library.submit(
            data=f"Note {n}: rule {n} applies to room {n}.".encode(),
            filename=f"note-{n}.txt",
            collection_id=collection_id or kit.collection_id,
        )[0].id
        for n in range(count)
    ]


def queue_large_document(kit: Kit) -> int:
    """A document embedded in several slices (its work can stop between two)."""
    text = "\n\n".join(f"Paragraph {i} says something about topic {i}." for i in range(3000))
    document, _ = kit.library.submit(
        data=text.encode(), filename="large.txt", collection_id=kit.collection_id
    )
    return document.id


def claims(kit: Kit) -> dict[int, tuple[str | None, float | None]]:
    rows = kit.db.read().execute("SELECT id, claimed_by, claimed_until FROM documents")
    return {int(row[0]): (row[1], row[2]) for row in rows}


def status(kit: Kit, document_id: int) -> DocumentStatus:
    document = kit.store.get_document(document_id)
    assert document is not None
    return document.status


# --- the leases ------------------------------------------------------------------------------


def test_the_replica_id_names_host_and_process_and_is_made_once() -> None:
    replica = replica_id()
    host, pid, suffix = replica.rsplit(":", 2)
    assert host and int(pid) == os.getpid() and len(suffix) == 8
    assert replica_id() == replica


@pytest.fixture(params=["sqlite", "postgresql"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Database]]:
    """Opens a connection to one fresh database, as each process would: the same SQL on
    SQLite (a file) and PostgreSQL (pgserver, skipped where it cannot start)."""
    opened: list[Database] = []
    if request.param == "sqlite":
        path = tmp_path / "ragdesk.db"

        def connect() -> Database:
            opened.append(open_database(path))
            return opened[-1]

        yield connect
    else:
        pytest.importorskip("psycopg")
        pytest.importorskip("pgserver")
        from retrieval.pg import PostgresDatabase
        from tests.pg_kit import database_for_test

        with database_for_test(request.getfixturevalue("pg_server")) as url:

            def connect() -> Database:
                opened.append(PostgresDatabase(url))
                return opened[-1]

            yield connect
            for db in opened:
                db.close()
            opened.clear()
    for db in opened:
        db.close()


def add_documents(db: Database, count: int) -> list[int]:
    store = DocumentStore(db)
    collection_id = store.ensure_collection()
    return [
        store.add_document(
            collection_id=collection_id,
            content_hash=f"{n:064x}",
            filename=f"{n}.txt",
            stored_name=f"{n:064x}",
            kind=DocumentKind.TEXT,
            size=1,
        )[0].id
        for n in range(count)
    ]


def held_by(db: Database) -> dict[int, tuple[str | None, float | None]]:
    rows = db.read().execute("SELECT id, claimed_by, claimed_until FROM documents")
    return {int(row[0]): (row[1], row[2]) for row in rows}


def test_two_claimers_never_claim_the_same_document(connect: Callable[[], Database]) -> None:
    db = connect()
    ids = add_documents(db, 60)
    # Each claimer on its own connections, as two processes would be.
    claimers = [Leases(connect(), replica=name) for name in ("a", "b")]
    taken: dict[str, list[int]] = {"a": [], "b": []}
    start = threading.Barrier(2)

    def drain(leases: Leases) -> None:
        start.wait()
        while (document_id := leases.claim_next()) is not None:
            taken[leases.replica].append(document_id)

    threads = [threading.Thread(target=drain, args=(leases,)) for leases in claimers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not set(taken["a"]) & set(taken["b"])
    assert sorted(taken["a"] + taken["b"]) == ids
    held = held_by(db)
    assert all(held[i][0] == "a" for i in taken["a"])
    assert all(held[i][0] == "b" for i in taken["b"])

    # And claims of given ids (what a worker's parse slot does), raced on every id.
    claimers[0].release(ids)
    claimers[1].release(ids)
    won: Counter[int] = Counter()
    lock = threading.Lock()

    def race(leases: Leases) -> None:
        start.wait()
        for document_id in ids:
            if leases.claim(document_id):
                with lock:
                    won[document_id] += 1

    threads = [threading.Thread(target=race, args=(leases,)) for leases in claimers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert won == Counter(dict.fromkeys(ids, 1))


def test_an_expired_lease_is_taken_over_and_a_renewed_one_is_not(
    connect: Callable[[], Database],
) -> None:
    db = connect()
    expiring, renewed = add_documents(db, 2)
    a = Leases(db, lease_s=60, replica="a")
    b = Leases(connect(), lease_s=60, replica="b")
    t = time.time()
    assert a.claim(expiring, now=t) and a.claim(renewed, now=t)
    assert not b.claim(expiring, now=t + 59) and not b.claim(renewed, now=t + 59)
    assert a.renew([renewed], now=t + 40) == {renewed}  # held until t + 100
    assert b.claim(expiring, now=t + 61)  # a died: its lease ran out
    assert not b.claim(renewed, now=t + 61)
    assert held_by(db)[renewed][0] == "a"
    assert a.renew([expiring, renewed], now=t + 62) == {renewed}  # it knows it lost one
    assert b.claim(renewed, now=t + 163)  # a stopped renewing that one too


def test_storing_the_passages_renews_the_lease_as_it_commits(
    connect: Callable[[], Database],
) -> None:
    """A large document's passages can take longer to store than a lease lasts, and the
    holder's renewals wait behind that transaction's write lock, as another's claim does:
    the transaction renews the lease itself, so the claim that gets the lock next fails."""
    db = connect()
    (document_id,) = add_documents(db, 1)
    a = Leases(db, lease_s=60, replica="a")
    b = Leases(connect(), lease_s=60, replica="b")
    assert a.claim(document_id, now=time.time() - 100)  # ran out while the passages were stored
    page = "The meal allowance abroad is 45 euros a day."
    DocumentStore(db).replace_content(
        document_id,
        ParsedDocument("Travel", (ParsedPage(1, (Block(page),)),)),
        [ChunkSpan(1, 0, len(page), page, None)],
        holder="a",
        lease_s=a.lease_s,
    )
    assert not b.claim(document_id)
    assert held_by(db)[document_id][0] == "a"


def test_claim_next_takes_the_oldest_free_document_and_skips_finished_ones(
    connect: Callable[[], Database],
) -> None:
    db = connect()
    store = DocumentStore(db)
    first, second, third = add_documents(db, 3)
    store.set_status(first, DocumentStatus.INDEXED)
    store.set_status(third, DocumentStatus.EMBEDDING)  # resumed, as after a crash
    a, b = Leases(db, replica="a"), Leases(connect(), replica="b")
    ours = store.ensure_collection()
    assert a.claimable(per_owner=10) == [(second, ours), (third, ours)]
    assert a.claim_next() == second
    assert b.claim_next() == third
    assert a.claimable(per_owner=10) == []
    assert a.claim_next() is None and not a.claim(first)  # indexed: nothing to do
    a.release([second])
    assert held_by(db)[second] == (None, None)
    assert b.claim_next() == second  # released: free at once
    assert not a.claim(second)


def test_the_poll_brings_a_share_of_every_collections_backlog(
    connect: Callable[[], Database],
) -> None:
    db = connect()
    store = DocumentStore(db)
    backlog = add_documents(db, 10)
    theirs = store.ensure_collection("another team")
    upload, _ = store.add_document(
        collection_id=theirs,
        content_hash="f" * 64,
        filename="late.txt",
        stored_name="f" * 64,
        kind=DocumentKind.TEXT,
        size=1,
    )
    found = Leases(db).claimable(per_owner=3)
    ours = store.ensure_collection()
    assert found == [(d, ours) for d in backlog[:3]] + [(upload.id, theirs)]


def test_the_next_process_on_a_data_directory_takes_its_predecessors_leases_back(
    connect: Callable[[], Database], tmp_path: Path
) -> None:
    db = connect()
    mine, theirs = add_documents(db, 2)
    handover = tmp_path / "data" / HANDOVER_FILE
    crashed = Leases(db, replica="crashed", handover=handover)
    assert crashed.take_over() == 0
    assert crashed.claim(mine)
    elsewhere = Leases(db, replica="elsewhere", handover=tmp_path / "other" / HANDOVER_FILE)
    elsewhere.take_over()
    assert elsewhere.claim(theirs)
    # The process that held the data directory died; the next one there takes over its
    # leases at once, not those of a live process on another data directory.
    restarted = Leases(connect(), replica="restarted", handover=handover)
    assert restarted.take_over() == 1
    assert restarted.take_over() == 0  # once
    assert handover.read_text().strip() == "restarted"
    assert restarted.claim(mine) and not restarted.claim(theirs)


# --- the worker ------------------------------------------------------------------------------


def make_worker(
    kit: Kit, replica: str, index_dir: Path | None = None, **config: Any
) -> IngestWorker:
    """A worker on its own connections to the kit's database, as another process's would be."""
    db = SqliteDatabase(kit.root / "ragdesk.db")
    settings: dict[str, Any] = {"chunk_tokens": 40, "chunk_overlap_tokens": 5}
    settings |= {"checkpoint_seconds": 60.0, "poll_s": 0.05, **config}
    ingest_config = IngestConfig(**settings)
    embedder = kit.embedder
    return IngestWorker(
        DocumentStore(db),
        kit.library.files,
        embedder,
        FaissIndex(embedder.dimension, embedder.model_id),
        index_dir or kit.root / f"index-{replica}",
        ingest_config,
        leases=Leases(db, lease_s=ingest_config.lease_s, replica=replica),
    )


@contextmanager
def running(*workers: IngestWorker) -> Iterator[None]:
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        for worker in workers:
            assert worker.stop()


def test_the_poll_picks_up_a_document_another_process_queued(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    worker = make_worker(kit, "w")
    with running(worker):
        (document_id,) = queue_documents(kit, 1)  # not enqueued here: only in the database
        wait_for(lambda: status(kit, document_id) is DocumentStatus.INDEXED, timeout=10)
    assert claims(kit)[document_id] == (None, None)  # given back when done


def test_a_document_another_live_replica_holds_is_left_to_it(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    held, free = queue_documents(kit, 2)
    other = Leases(kit.db, replica="other")
    assert other.claim(held)
    worker = make_worker(kit, "w")
    with running(worker):
        worker.enqueue(held)  # even told directly, as its own upload would be
        wait_for(lambda: status(kit, free) is DocumentStatus.INDEXED, timeout=10)
        time.sleep(0.5)  # ten polls
        assert status(kit, held) is DocumentStatus.QUEUED
        assert claims(kit)[held][0] == "other"
        other.release([held])  # the other replica stopped: it gave its lease back
        wait_for(lambda: status(kit, held) is DocumentStatus.INDEXED, timeout=10)


def test_a_document_whose_replica_died_is_finished_by_another(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    (document_id,) = queue_documents(kit, 1)
    dead = Leases(kit.db, lease_s=60, replica="dead")
    assert dead.claim(document_id, now=time.time() - 61)  # its lease has just run out
    kit.store.set_status(document_id, DocumentStatus.EMBEDDING)  # it died mid-way
    worker = make_worker(kit, "w")
    with running(worker):
        wait_for(lambda: status(kit, document_id) is DocumentStatus.INDEXED, timeout=10)


def hold_embedding(
    kit: Kit, worker: IngestWorker
) -> tuple[threading.Event, threading.Event, Callable[..., Any]]:
    """Every slice of ``worker`` reaches the kit's embedder, which waits there until the
    second event is set (the first says a slice arrived); the embedder's own method, to
    put back."""
    in_slice, release = threading.Event(), threading.Event()
    embed = kit.embedder.embed_batch

    def held_embed(texts):  # type: ignore[no-untyped-def]
        in_slice.set()
        release.wait(30)
        return embed(texts)

    worker.cache = None  # every slice reaches the embedder
    kit.embedder.embed_batch = held_embed  # type: ignore[method-assign]
    return in_slice, release, embed


def test_a_worker_renews_its_leases_while_it_works_and_stops_when_one_is_lost(
    tmp_path: Path,
) -> None:
    kit = make_kit(tmp_path)
    document_id = queue_large_document(kit)
    worker = make_worker(kit, "w", lease_s=1.0)  # renewed every third of a second
    in_slice, release, embed = hold_embedding(kit, worker)
    with running(worker):
        assert in_slice.wait(10)
        first = claims(kit)[document_id]
        assert first[0] == "w"
        wait_for(lambda: (claims(kit)[document_id][1] or 0) > (first[1] or 0) + 0.5, timeout=5)
        # Past its deadline (a stalled host, say), another replica took it over.
        with kit.db.write() as conn:
            conn.execute(
                "UPDATE documents SET claimed_by = 'other', claimed_until = ? WHERE id = ?",
                [time.time() + 600, document_id],
            )
        time.sleep(1.0)  # the next renewal finds it lost
        release.set()
        time.sleep(0.5)
        assert status(kit, document_id) is not DocumentStatus.INDEXED  # left to the other
        assert claims(kit)[document_id][0] == "other"
    kit.embedder.embed_batch = embed  # type: ignore[method-assign]


def test_work_whose_lease_was_taken_over_since_the_last_renewal_is_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The final write checks the lease inside its own transaction: a takeover between two
    renewals (a host stalled past its deadline) leaves the document to the new holder."""
    kit = make_kit(tmp_path)
    (document_id,) = queue_documents(kit, 1)
    worker = make_worker(kit, "w", lease_s=600.0)  # no renewal comes before the write
    in_slice, release, embed = hold_embedding(kit, worker)
    with logs_captured(caplog, "retrieval.ingest"), running(worker):
        assert in_slice.wait(10)
        with kit.db.write() as conn:
            conn.execute(
                "UPDATE documents SET claimed_by = 'other', claimed_until = ? WHERE id = ?",
                [time.time() + 600, document_id],
            )
        release.set()
        wait_for(lambda: "another process took it over" in caplog.text, timeout=10)
    kit.embedder.embed_batch = embed  # type: ignore[method-assign]
    assert status(kit, document_id) is not DocumentStatus.INDEXED  # left to the other
    assert claims(kit)[document_id][0] == "other"
    vectors = kit.db.read().execute(
        "SELECT COUNT(*) FROM embeddings e JOIN chunks c ON c.id = e.chunk_id"
        " WHERE c.document_id = ?",
        [document_id],
    )
    assert vectors.fetchone()[0] == 0


def test_a_stopped_worker_gives_its_leases_back(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    document_id = queue_large_document(kit)
    worker = make_worker(kit, "w")
    in_slice, release, embed = hold_embedding(kit, worker)
    worker.start()
    assert in_slice.wait(10)
    assert claims(kit)[document_id][0] == "w"
    stopping = threading.Thread(target=worker.stop)
    stopping.start()
    wait_for(worker._stopping.is_set)
    release.set()
    stopping.join(30)
    assert status(kit, document_id) is DocumentStatus.EMBEDDING  # resumed by whoever is next
    assert claims(kit)[document_id] == (None, None)  # at once, not a lease later
    kit.embedder.embed_batch = embed  # type: ignore[method-assign]


def test_two_workers_on_one_database_share_the_documents_and_index_each_once(
    tmp_path: Path,
) -> None:
    kit = make_kit(tmp_path)
    other = kit.store.ensure_collection("other team")
    indexed: dict[str, list[int]] = {"a": [], "b": []}
    workers = []
    for name in ("a", "b"):
        worker = make_worker(kit, name)
        slow = worker.parse

        def parse(data: bytes, kind: Any, filename: str, slow: Any = slow) -> Any:
            time.sleep(0.05)  # both get a share
            return slow(data, kind, filename)

        worker.parse = parse
        worker.progress = lambda d, stage, _, name=name: (
            indexed[name].append(d) if stage == "indexed" else None
        )
        workers.append(worker)
    with running(*workers):
        ids = queue_documents(kit, 12) + queue_documents(kit, 8, other)
        wait_for(lambda: all(status(kit, d) is DocumentStatus.INDEXED for d in ids), timeout=30)
    assert Counter(indexed["a"] + indexed["b"]) == Counter(dict.fromkeys(ids, 1))
    assert indexed["a"] and indexed["b"]
    assert all(held == (None, None) for held in claims(kit).values())


def test_deleting_a_document_a_worker_holds_stops_its_work(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    document_id = queue_large_document(kit)
    worker = make_worker(kit, "w")
    in_slice, release = threading.Event(), threading.Event()
    embed = kit.embedder.embed_batch
    calls: list[int] = []

    def held_embed(texts):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        in_slice.set()
        release.wait(30)
        return embed(texts)

    worker.cache = None
    kit.embedder.embed_batch = held_embed  # type: ignore[method-assign]
    with running(worker):
        assert in_slice.wait(10)
        kit.library.delete(document_id)  # on another server: the row goes
        release.set()
        time.sleep(0.3)
        assert kit.store.get_document(document_id) is None
        assert worker.pending == 0 and not worker._leased
    kit.embedder.embed_batch = embed  # type: ignore[method-assign]


# --- two real worker processes on one SQLite file -----------------------------------------------

WORKER = """
import sys, time
from pathlib import Path
from retrieval.db import SqliteDatabase
from retrieval.embedder import HashingEmbedder
from retrieval.index import FaissIndex
from retrieval.ingest import IngestConfig, IngestWorker
from retrieval.parsers import parse_document
from retrieval.store import DocumentStore
from retrieval.uploads import UploadFiles

db_path, uploads, index_dir, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = DocumentStore(SqliteDatabase(Path(db_path)))
embedder = HashingEmbedder()

def parse(data, kind, filename):
    time.sleep(0.1)  # slow enough that both processes get a share
    return parse_document(data, kind, filename)

def progress(document_id, stage, detail):
    if stage in ("parsed", "indexed"):
        print(stage, document_id, flush=True)

worker = IngestWorker(
    store, UploadFiles(Path(uploads)), embedder,
    FaissIndex(embedder.dimension, embedder.model_id), Path(index_dir),
    IngestConfig(chunk_tokens=40, chunk_overlap_tokens=5, poll_s=0.05),
    parse=parse, progress=progress,
)
worker.start()
print("ready", flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    finished = [d for d in store.list_documents() if d.status.is_terminal]
    if len(finished) >= total:
        break
    time.sleep(0.05)
assert worker.stop()
"""


def test_two_worker_processes_on_one_sqlite_file_index_each_document_once(
    tmp_path: Path,
) -> None:
    kit = make_kit(tmp_path)
    total = 20
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                str(kit.root / "ragdesk.db"),
                str(kit.root / "uploads"),
                str(tmp_path / f"index-{n}"),
                str(total),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        ids = queue_documents(kit, total)
        outputs = [process.communicate(timeout=90)[0] for process in processes]
    finally:
        for process in processes:
            process.kill()
    assert [process.returncode for process in processes] == [0, 0]
    events = [re.findall(r"^(parsed|indexed) (\d+)$", out, re.MULTILINE) for out in outputs]
    for stage in ("parsed", "indexed"):
        each = [[int(d) for s, d in found if s == stage] for found in events]
        assert all(each), f"each process {stage} a share: {each}"
        assert Counter(each[0] + each[1]) == Counter(dict.fromkeys(ids, 1)), stage
    assert {status(kit, d) for d in ids} == {DocumentStatus.INDEXED}
    assert all(held == (None, None) for held in claims(kit).values())


# --- serve --role ----------------------------------------------------------------------------


def shared_data_dir(main: Path, other: Path) -> Path:
    """``other``, a data directory on ``main``'s SQLite file: how two servers share one
    SQLite database in a test (a symlink; a deployment shares PostgreSQL, which the suite
    uses instead when RAGDESK_TEST_STORE=postgresql). The originals are shared the way a
    deployment shares them, in one directory (``blob_url``)."""
    main.mkdir(parents=True, exist_ok=True)
    other.mkdir(parents=True)
    (other / "ragdesk.db").symlink_to(main / "ragdesk.db")
    return other


def test_a_web_front_queues_uploads_and_ingests_nothing(tmp_path: Path) -> None:
    settings = fake_settings(tmp_path / "web", role="web", ingest_poll_s=0.05)
    with TestClient(create_app(settings)) as client:
        services = client.app.state.services
        assert services.wait_until_loaded(30)
        add_user(client, "tester", "admin")
        headers = {"Authorization": f"Bearer {add_key(client)}"}
        assert client.get("/health/ready").status_code == 200
        response = client.post(
            "/api/documents",
            files=[("file", ("a.txt", b"Parking costs 4 euros."))],
            headers=headers,
        )
        assert response.status_code in (200, 201), response.text
        document_id = response.json()["documents"][0]["id"]
        time.sleep(0.5)
        document = services.store.get_document(document_id)
        assert document.status is DocumentStatus.QUEUED
        assert services.retrieval.worker.pending == 0
        row = (
            services.db.read()
            .execute("SELECT claimed_by FROM documents WHERE id = ?", [document_id])
            .fetchone()
        )
        assert row[0] is None
        assert client.get("/health/ready").status_code == 200


def test_a_worker_ingests_a_web_fronts_uploads_and_serves_only_probes_and_metrics(
    tmp_path: Path,
) -> None:
    originals = str(tmp_path / "originals")
    web_settings = fake_settings(tmp_path / "web", role="web", blob_url=originals)
    worker_dir = shared_data_dir(tmp_path / "web", tmp_path / "worker")
    worker_settings = fake_settings(
        worker_dir, role="worker", ingest_poll_s=0.05, blob_url=originals
    )
    with TestClient(create_app(web_settings)) as web:
        assert web.app.state.services.wait_until_loaded(30)
        add_user(web, "tester", "admin")
        headers = {"Authorization": f"Bearer {add_key(web)}"}
        with TestClient(create_app(worker_settings)) as worker:
            services = worker.app.state.services
            assert services.wait_until_loaded(30)
            assert services.chat is None and services.models is None  # no chat model
            assert worker.get("/health/live").status_code == 200
            assert worker.get("/health/ready").status_code == 200
            assert worker.get("/api/documents", headers=headers).status_code == 404
            assert worker.get("/", headers=headers).status_code == 404
            metrics = worker.get("/metrics", headers=headers)
            assert metrics.status_code == 200 and "ragdesk_ingestion_queue" in metrics.text
            response = web.post(
                "/api/documents",
                files=[("file", ("a.txt", b"Parking costs 4 euros a day."))],
                headers=headers,
            )
            document_id = response.json()["documents"][0]["id"]

            def indexed() -> bool:
                document = web.get(f"/api/documents/{document_id}", headers=headers).json()
                return bool(document["status"] == "indexed")

            wait_for(indexed, timeout=15)
            assert services.retrieval.worker.alive


def test_serve_role_worker_processes_share_the_work(tmp_path: Path) -> None:
    """Two ``ragdesk serve`` processes in the worker role (RAGDESK_ROLE) on one database,
    each with a data directory of its own, share 20 documents: each indexed once."""
    originals = str(tmp_path / "originals")
    settings = fake_settings(tmp_path / "a", blob_url=originals)
    db = open_database(settings)  # SQLite in a/, or the suite's PostgreSQL
    store = DocumentStore(db)
    library = Library(store, open_originals(settings))  # no worker: only the database
    env = {"embedder_backend": "fake", "role": "worker", "ingest_poll_s": "0.05"}
    env["blob_url"] = originals
    servers = [
        ServerProcess(tmp_path / "a", tmp_path / "a.log", **env),
        ServerProcess(shared_data_dir(tmp_path / "a", tmp_path / "b"), tmp_path / "b.log", **env),
    ]
    try:
        for server in servers:
            server.start(ready_timeout=60)
        collection_id = store.ensure_collection()
        ids = [
            library.submit(
                data=f"Note {n}: rule {n} applies.".encode(),
                filename=f"{n}.txt",
                collection_id=collection_id,
            )[0].id
            for n in range(20)
        ]

        def done() -> bool:
            return all(
                (d := store.get_document(i)) is not None and d.status is DocumentStatus.INDEXED
                for i in ids
            )

        wait_for(done, timeout=60)
    finally:
        for server in servers:
            server.stop()
    logs = [server.log_path.read_text() for server in servers]
    each = [[int(d) for d in re.findall(r"indexed document (\d+):", log)] for log in logs]
    assert Counter(each[0] + each[1]) == Counter(dict.fromkeys(ids, 1))
    assert all(held == (None, None) for held in held_by(db).values())
    db.close()


@pytest.mark.parametrize("role", ["all", "web", "worker"])
def test_serve_takes_a_role(role: str) -> None:
    from app.cli import main

    seen: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("app.cli._serve", lambda **overrides: seen.update(overrides))
        main(["serve", "--role", role])
    assert seen["role"] == role
