"""Numbered schema migrations, applied in order once each (simonw/llm style)."""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlite_utils

Migration = Callable[[sqlite_utils.Database], None]
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    MIGRATIONS.append(fn)
    return fn


def apply_migrations(db: sqlite_utils.Database, migrations: list[Migration] | None = None) -> None:
    db.table("_migrations").create(
        {"name": str, "applied_at": float}, pk="name", if_not_exists=True
    )
    applied = {row["name"] for row in db.table("_migrations").rows}
    for fn in migrations or MIGRATIONS:
        if fn.__name__ not in applied:
            _apply_atomically(db, fn)


def _apply_atomically(db: sqlite_utils.Database, fn: Migration) -> None:
    """The schema change and its record commit together: a crash leaves neither."""
    conn = db.conn
    conn.execute("BEGIN")
    try:
        fn(db)
        conn.execute(
            "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", [fn.__name__, time.time()]
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@migration
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


@migration
def m002_conversations(db: sqlite_utils.Database) -> None:
    db.table("conversations").create(
        {"id": int, "title": str, "created_at": float, "updated_at": float}, pk="id"
    )
    db.execute(
        """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            content TEXT NOT NULL,
            citations TEXT NOT NULL DEFAULT '[]',
            created_at REAL NOT NULL
        )
        """
    )
    db.table("messages").create_index(["conversation_id"])


@migration
def m003_flags(db: sqlite_utils.Database) -> None:
    """One-off facts about this deployment, such as 'the samples were loaded once'."""
    db.table("flags").create({"name": str, "set_at": float}, pk="name")


@migration
def m004_message_replies(db: sqlite_utils.Database) -> None:
    """An answer names the question it answers, so a late or repeated stream finds its own."""
    db.execute("ALTER TABLE messages ADD COLUMN reply_to INTEGER REFERENCES messages(id)")
    # Earlier answers: each belongs to the nearest unanswered question before it.
    pending: dict[int, int] = {}  # conversation -> its latest unanswered question
    for message_id, conversation_id, role in db.execute(
        "SELECT id, conversation_id, role FROM messages ORDER BY id"
    ).fetchall():
        if role == "user":
            pending[conversation_id] = message_id
        elif (question := pending.pop(conversation_id, None)) is not None:
            db.execute("UPDATE messages SET reply_to = ? WHERE id = ?", [question, message_id])
    db.execute(
        "CREATE UNIQUE INDEX messages_reply_to ON messages(reply_to) WHERE reply_to IS NOT NULL"
    )


@migration
def m005_message_context(db: sqlite_utils.Database) -> None:
    """What the model was shown and said for an answer: the sources listed with that turn
    (JSON) and its exact generated text, so the next turn's prompt repeats them verbatim
    and its KV-cache prefix matches."""
    db.execute("ALTER TABLE messages ADD COLUMN context TEXT")


@migration
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


@migration
def m007_ui_conversation_pins(db: sqlite_utils.Database) -> None:
    """Conversations pinned to the top of the sidebar (a table, so rows read as before)."""
    db.execute(
        """
        CREATE TABLE conversation_pins (
            conversation_id INTEGER PRIMARY KEY
                REFERENCES conversations(id) ON DELETE CASCADE,
            pinned_at REAL NOT NULL
        )
        """
    )


@migration
def m008_accounts(db: sqlite_utils.Database) -> None:
    """Users, browser sessions, API keys, collection membership and the answer audit.

    Secrets are never stored: sessions and keys by their SHA-256, passwords as argon2
    hashes. Conversations get an owner (their own table, so ``conversations`` rows keep their
    shape); those from before accounts have none and are admins' only.
    """
    db.execute(
        """CREATE TABLE users (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL UNIQUE COLLATE NOCASE,
            role TEXT NOT NULL CHECK (role IN ('admin', 'staff')),
            password_hash TEXT NOT NULL,
            disabled INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE sessions (
            token_hash TEXT PRIMARY KEY,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            csrf_token TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL
        )"""
    )
    db.table("sessions").create_index(["user_id"])
    db.execute(
        """CREATE TABLE api_keys (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            prefix TEXT NOT NULL UNIQUE,
            key_hash TEXT NOT NULL,
            read_only INTEGER NOT NULL DEFAULT 0,
            scoped INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            last_used_at REAL,
            revoked_at REAL
        )"""
    )
    db.execute(
        """CREATE TABLE api_key_collections (
            key_id INTEGER NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
            collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
            PRIMARY KEY (key_id, collection_id)
        )"""
    )
    db.execute(
        """CREATE TABLE collection_members (
            collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
            can_write INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (collection_id, user_id)
        )"""
    )
    db.execute(
        # No foreign keys: the audit outlives the messages, users and keys it names.
        """CREATE TABLE answer_sources (
            message_id INTEGER NOT NULL,
            chunk_id INTEGER NOT NULL,
            document_id INTEGER NOT NULL,
            user_id INTEGER,
            key_id INTEGER,
            shown_at REAL NOT NULL,
            PRIMARY KEY (message_id, chunk_id)
        )"""
    )
    db.execute(
        """CREATE TABLE conversation_owners (
            conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE
        )"""
    )
    db.table("conversation_owners").create_index(["user_id"])


@migration
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


@migration
def m010_api_answer_sources(db: sqlite_utils.Database) -> None:
    """The answer audit for grounded ``/v1`` answers, which are not stored as messages:
    the passages shown per request id (``chatcmpl-…``), and to whom."""
    db.execute(
        """CREATE TABLE api_answer_sources (
            request_id TEXT NOT NULL,
            chunk_id INTEGER NOT NULL,
            document_id INTEGER NOT NULL,
            user_id INTEGER,
            key_id INTEGER,
            shown_at REAL NOT NULL,
            PRIMARY KEY (request_id, chunk_id)
        )"""
    )


@migration
def m011_session_last_seen(db: sqlite_utils.Database) -> None:
    """When each browser session was last used, for the idle timeout. Sessions from before
    count as used at the upgrade, so the upgrade itself signs nobody out mid-work (their
    absolute lifetime still ends them)."""
    db.execute("ALTER TABLE sessions ADD COLUMN last_seen_at REAL NOT NULL DEFAULT 0")
    db.execute("UPDATE sessions SET last_seen_at = ?", [time.time()])


@migration
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
