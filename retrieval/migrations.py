"""Numbered schema migrations, applied in order once each (simonw/llm style).

Several owners keep their tables in one SQLite file: retrieval (these: collections,
documents, pages, passages and their full-text index, vectors, the embedding cache,
evaluation runs, flags), then the app's ``auth`` and ``chat`` packages, each with its own
ordered :class:`Migrations` in its own ``migrations`` module, applied in that order
(later owners' tables refer to earlier ones'). All are recorded in one ``_migrations``
table, each under ``<owner>.<function name>``, so owners never collide.

Releases up to 2026-12-01 kept every owner's migrations in this module, in one list, and
recorded bare names (``m002_conversations``). Those migrations keep their numbers, and
each names its old record in ``was``: a database that recorded it never runs it again.
A migration that once created two owners' tables (``m008_accounts``) is now two, one per
owner, both with that old name. New migrations take the next number of their owner's list
and have no ``was``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import sqlite_utils

# A SQLite migration takes a sqlite_utils.Database; a PostgreSQL one a retrieval.sql.Session.
MigrationFn = Callable[[Any], None]


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer release than this one."""


@dataclass(frozen=True)
class Migration:
    """A schema change, recorded in ``_migrations`` as ``name`` once applied. ``was``: names
    it was recorded under by earlier releases; any of them recorded counts as applied."""

    name: str
    apply: MigrationFn
    was: tuple[str, ...] = ()

    def applied(self, recorded: set[str]) -> bool:
        return self.name in recorded or any(old in recorded for old in self.was)


class Migrations(list[Migration]):
    """One owner's migrations, in the order they apply; ``@MIGRATIONS.add()`` adds one."""

    def __init__(self, owner: str) -> None:
        super().__init__()
        self.owner = owner

    def add(self, *, was: str | None = None) -> Callable[[MigrationFn], MigrationFn]:
        def register(fn: MigrationFn) -> MigrationFn:
            name = f"{self.owner}.{fn.__name__}"
            assert all(m.name != name for m in self), f"two migrations named {name}"
            self.append(Migration(name, fn, (was,) if was else ()))
            return fn

        return register


MIGRATIONS = Migrations("retrieval")


def apply_migrations(
    db: sqlite_utils.Database, migrations: Iterable[Migration] = MIGRATIONS
) -> None:
    """Apply, in order, those of ``migrations`` not recorded yet (by name or an old name)."""
    db.table("_migrations").create(
        {"name": str, "applied_at": float}, pk="name", if_not_exists=True
    )
    recorded = {row["name"] for row in db.table("_migrations").rows}
    migrations = list(migrations)
    refuse_newer_schema(recorded, migrations)
    for migration in migrations:
        if not migration.applied(recorded):
            _apply_atomically(db, migration)
            recorded.add(migration.name)


def refuse_newer_schema(recorded: set[str], migrations: list[Migration]) -> None:
    """Refuse to run on a schema a newer release changed: migrations of these owners
    recorded there that this release does not know (a rolling upgrade must not let an old
    front write to tables it no longer understands)."""
    owners = {m.name.split(".", 1)[0] for m in migrations}
    known = {m.name for m in migrations}
    unknown = sorted(
        name
        for name in recorded
        if "." in name and name.split(".", 1)[0] in owners and name not in known
    )
    if unknown:
        raise SchemaTooNew(
            "the database was upgraded by a newer Ragdesk release (it has applied "
            f"{', '.join(unknown[:3])}{' …' if len(unknown) > 3 else ''}, unknown to this "
            "one): run the newer release, or restore a backup made by this one"
        )


def _apply_atomically(db: sqlite_utils.Database, migration: Migration) -> None:
    """The schema change and its record commit together: a crash leaves neither."""
    conn = db.conn
    conn.execute("BEGIN")
    try:
        migration.apply(db)
        conn.execute(
            "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)",
            [migration.name, time.time()],
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@MIGRATIONS.add(was="m001_documents")
def m001_documents(db: sqlite_utils.Database) -> None:
    db.table("collections").create(
        {"id": int, "name": str, "created_at": float}, pk="id", not_null={"name"}
    )
    db.table("collections").create_index(["name"], unique=True)
    # AUTOINCREMENT: ids are never reused, so a stale FAISS id can never name a new chunk.
    db.execute(
        """
        CREATE TABLE documents (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            collection_id INTEGER NOT NULL REFERENCES collections(id),
            content_hash TEXT NOT NULL,
            filename TEXT NOT NULL,
            stored_name TEXT NOT NULL,
            kind TEXT NOT NULL,
            size INTEGER NOT NULL,
            title TEXT,
            status TEXT NOT NULL,
            error TEXT,
            page_count INTEGER NOT NULL DEFAULT 0,
            chunk_count INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (collection_id, content_hash)
        )
        """
    )
    db.table("documents").create_index(["status"])
    db.execute(
        """
        CREATE TABLE pages (
            document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            number INTEGER NOT NULL,
            text TEXT NOT NULL,
            PRIMARY KEY (document_id, number)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE chunks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            page INTEGER NOT NULL,
            start INTEGER NOT NULL,
            "end" INTEGER NOT NULL,
            heading TEXT,
            text TEXT NOT NULL
        )
        """
    )
    db.table("chunks").create_index(["document_id"])
    db.execute(
        """
        CREATE TABLE embeddings (
            chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
            model_id TEXT NOT NULL,
            vector BLOB NOT NULL
        )
        """
    )
    db.table("embeddings").create_index(["model_id"])


@MIGRATIONS.add(was="m003_flags")
def m003_flags(db: sqlite_utils.Database) -> None:
    """One-off facts about this deployment, such as 'the samples were loaded once'."""
    db.table("flags").create({"name": str, "set_at": float}, pk="name")


@MIGRATIONS.add(was="m006_chunks_fts")
def m006_chunks_fts(db: sqlite_utils.Database) -> None:
    """Full-text index of passages for BM25 (FTS5): document title, heading and text.

    Its own copy of the text (not external content), so a title change or a delete can
    never leave stale tokens behind. Triggers keep it level with ``chunks``: inserts,
    deletes (a document's cascade included) and edits, and with a document's title.
    """
    db.execute(
        "CREATE VIRTUAL TABLE chunks_fts USING fts5("
        "title, heading, text, tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    db.execute(
        """CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
            INSERT INTO chunks_fts (rowid, title, heading, text)
            SELECT new.id, COALESCE(d.title, d.filename), new.heading, new.text FROM documents d
            WHERE d.id = new.document_id;
        END"""
    )
    db.execute(
        """CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
            DELETE FROM chunks_fts WHERE rowid = old.id;
        END"""
    )
    db.execute(
        """CREATE TRIGGER chunks_fts_update AFTER UPDATE OF heading, text ON chunks BEGIN
            UPDATE chunks_fts SET heading = new.heading, text = new.text WHERE rowid = new.id;
        END"""
    )
    db.execute(
        """CREATE TRIGGER chunks_fts_title AFTER UPDATE OF title, filename ON documents
           WHEN new.title IS NOT old.title OR new.filename IS NOT old.filename BEGIN
            UPDATE chunks_fts SET title = COALESCE(new.title, new.filename)
            WHERE rowid IN (SELECT id FROM chunks WHERE document_id = new.id);
        END"""
    )
    db.execute(  # passages stored before this migration
        """INSERT INTO chunks_fts (rowid, title, heading, text)
            SELECT c.id, COALESCE(d.title, d.filename), c.heading, c.text
            FROM chunks c JOIN documents d ON d.id = c.document_id"""
    )


@MIGRATIONS.add(was="m009_eval_runs_and_embedding_cache")
def m009_eval_runs_and_embedding_cache(db: sqlite_utils.Database) -> None:
    """Retrieval evaluation runs (``ragdesk eval``), and vectors by the text they embed.

    The cache is keyed by SHA-256 of the exact embedded text and the model id, so identical
    chunks (a re-upload, a near-duplicate document) are never embedded twice.
    """
    db.execute(
        """CREATE TABLE eval_runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            created_at REAL NOT NULL,
            golden TEXT NOT NULL,
            golden_sha256 TEXT NOT NULL,
            collection TEXT,
            k INTEGER NOT NULL,
            mode TEXT NOT NULL,
            model_id TEXT NOT NULL,
            questions INTEGER NOT NULL,
            recall REAL NOT NULL,
            mrr REAL NOT NULL,
            answer_containment REAL,
            latency_p50_ms REAL NOT NULL,
            latency_p95_ms REAL NOT NULL,
            details TEXT NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE embedding_cache (
            text_sha256 TEXT NOT NULL,
            model_id TEXT NOT NULL,
            vector BLOB NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (text_sha256, model_id)
        ) WITHOUT ROWID"""
    )


@MIGRATIONS.add(was="m012_embedding_cache_pruning")
def m012_embedding_cache_pruning(db: sqlite_utils.Database) -> None:
    """What the embedding cache needs to be pruned: when each vector was last used, and
    which cached text each passage embeds.

    ``chunk_text_keys`` is derived data, filled in by the cache before it prunes (so rows
    from before this migration are covered too) and dropped with its passage. An edit of
    a passage, or of its document's title, drops its key: the cache works it out again.
    """
    db.execute("ALTER TABLE embedding_cache ADD COLUMN last_used REAL NOT NULL DEFAULT 0")
    db.execute("UPDATE embedding_cache SET last_used = created_at")
    db.execute(
        """CREATE TABLE chunk_text_keys (
            chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
            text_sha256 TEXT NOT NULL
        )"""
    )
    db.table("chunk_text_keys").create_index(["text_sha256"])
    db.execute(
        """CREATE TRIGGER chunk_text_keys_edit AFTER UPDATE OF heading, text ON chunks BEGIN
            DELETE FROM chunk_text_keys WHERE chunk_id = new.id;
        END"""
    )
    db.execute(
        """CREATE TRIGGER chunk_text_keys_title AFTER UPDATE OF title, filename ON documents
           WHEN new.title IS NOT old.title OR new.filename IS NOT old.filename BEGIN
            DELETE FROM chunk_text_keys
            WHERE chunk_id IN (SELECT id FROM chunks WHERE document_id = new.id);
        END"""
    )


@MIGRATIONS.add()
def m020_chunk_boxes(db: sqlite_utils.Database) -> None:
    """Where each passage of a PDF stands on its page (JSON list of [x0, y0, x1, y1],
    fractions of the page; NULL: not a PDF, not found, or ingested before)."""
    db.execute("ALTER TABLE chunks ADD COLUMN boxes TEXT")


@MIGRATIONS.add()
def m021_collection_settings(db: sqlite_utils.Database) -> None:
    """A collection as a workspace: what it holds (``description``), what the model is told
    when answering from it (``instructions``), whether its scanned PDFs are read by OCR
    (``ocr``: 1 on, 0 off, NULL the deployment's RAGDESK_OCR) and the chat model its
    conversations default to (``default_model``: NULL the deployment's)."""
    db.execute("ALTER TABLE collections ADD COLUMN description TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE collections ADD COLUMN instructions TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE collections ADD COLUMN ocr INTEGER CHECK (ocr IN (0, 1))")
    db.execute("ALTER TABLE collections ADD COLUMN default_model TEXT")
    db.execute("ALTER TABLE collections ADD COLUMN updated_at REAL")
    db.execute("UPDATE collections SET updated_at = created_at")


@MIGRATIONS.add()
def m022_collection_ids_never_reused(db: sqlite_utils.Database) -> None:
    """Collections can be deleted now, and SQLite gives a new row the largest id in the
    table plus one: a new collection took a deleted one's id, and with it that one's usage
    history and audit rows. A trigger keeps the highest id ever deleted; new collections
    are numbered past it (``retrieval.store.NEXT_COLLECTION_ID``)."""
    db.execute(
        "CREATE TABLE collection_ids_deleted"
        " (only INTEGER PRIMARY KEY CHECK (only = 1), last INTEGER NOT NULL)"
    )
    db.execute(
        """CREATE TRIGGER collection_deleted AFTER DELETE ON collections BEGIN
            INSERT INTO collection_ids_deleted (only, last) VALUES (1, OLD.id)
            ON CONFLICT (only) DO UPDATE SET last = MAX(last, excluded.last);
        END"""
    )


@MIGRATIONS.add()
def m023_document_leases(db: sqlite_utils.Database) -> None:
    """Which replica works on a queued document, and until when (``retrieval.leases``):
    several processes on one database each take a document under a lease, renewed while
    they work on it; one whose replica died is taken over when its lease has run out.
    NULL: nobody holds it."""
    db.execute("ALTER TABLE documents ADD COLUMN claimed_by TEXT")
    db.execute("ALTER TABLE documents ADD COLUMN claimed_until REAL")


@MIGRATIONS.add()
def m024_tables_and_page_labels(db: sqlite_utils.Database) -> None:
    """Tables that stay tables, and parts of a document that are not pages.

    ``chunks.table_context``: for a passage of table rows, the table's caption and header
    (Markdown), embedded and shown with it (``retrieval/parsers/tables.py``); NULL for
    prose. ``pages.label``: what people call the part ("Slide 3", "Sheet Prices",
    "Message 2: Re: budget"); empty means "Page n"."""
    db.execute("ALTER TABLE chunks ADD COLUMN table_context TEXT")
    db.execute("ALTER TABLE pages ADD COLUMN label TEXT NOT NULL DEFAULT ''")


@MIGRATIONS.add()
def m025_table_headers_searched(db: sqlite_utils.Database) -> None:
    """The full-text index reads a table passage's caption and header with its heading: the
    rows alone do not say "Label colour", and a lookup by column name must find them by
    words too, not only by meaning (the embedding has always had the header)."""
    db.execute("DROP TRIGGER chunks_fts_insert")
    db.execute("DROP TRIGGER chunks_fts_update")
    db.execute(
        """CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
            INSERT INTO chunks_fts (rowid, title, heading, text)
            SELECT new.id, COALESCE(d.title, d.filename),
                   TRIM(COALESCE(new.heading, '') || ' ' || COALESCE(new.table_context, '')),
                   new.text
            FROM documents d WHERE d.id = new.document_id;
        END"""
    )
    db.execute(
        """CREATE TRIGGER chunks_fts_update AFTER UPDATE OF heading, text, table_context
            ON chunks BEGIN
            UPDATE chunks_fts
            SET heading = TRIM(COALESCE(new.heading, '') || ' ' || COALESCE(new.table_context, '')),
                text = new.text
            WHERE rowid = new.id;
        END"""
    )
    db.execute(
        """UPDATE chunks_fts SET heading = (
               SELECT TRIM(COALESCE(c.heading, '') || ' ' || c.table_context) FROM chunks c
               WHERE c.id = chunks_fts.rowid)
           WHERE rowid IN (SELECT id FROM chunks WHERE table_context IS NOT NULL)"""
    )
