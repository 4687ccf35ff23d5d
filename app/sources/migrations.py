"""The tables of synced sources: the sources, the files each sync saw (with the document
each became), which content a sync brought in (so hand uploads are never removed), and the
runs. Applied after chat's; see ``retrieval.migrations``."""

from __future__ import annotations

import sqlite_utils

from retrieval.migrations import Migrations

MIGRATIONS = Migrations("sources")
# Numbered on from the other owners' highest (m018) rather than from m001: tests replay a
# release from before m008 by applying every owner's migrations numbered below it.


@MIGRATIONS.add()
def m019_sources(db: sqlite_utils.Database) -> None:
    """Sources name their credentials (a key of RAGDESK_SOURCE_CREDENTIALS), never hold them."""
    db.execute(
        """CREATE TABLE sources (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL UNIQUE,
            collection_id INTEGER NOT NULL REFERENCES collections(id),
            kind TEXT NOT NULL CHECK (kind IN ('directory', 's3')),
            location TEXT NOT NULL,
            prefix TEXT NOT NULL DEFAULT '',
            endpoint_url TEXT,
            region TEXT,
            credentials TEXT,
            interval_s REAL NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        )"""
    )
    # One row per file a sync saw: where a document came from and when it was last seen.
    # ``version`` (mtime and size, or ETag and date) spots an unchanged file without reading it.
    db.execute(
        """CREATE TABLE source_files (
            source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
            path TEXT NOT NULL,
            document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            content_hash TEXT NOT NULL,
            size INTEGER NOT NULL,
            version TEXT NOT NULL,
            first_seen_at REAL NOT NULL,
            last_seen_at REAL NOT NULL,
            PRIMARY KEY (source_id, path)
        )"""
    )
    db.table("source_files").create_index(["document_id"])
    # Content a sync put into a collection, claimed before it is submitted: only such
    # documents are ever deleted by a sync (a hand upload of the same bytes came first and
    # is never claimed). Keyed like documents' own UNIQUE (collection_id, content_hash).
    db.execute(
        """CREATE TABLE sync_claims (
            collection_id INTEGER NOT NULL REFERENCES collections(id),
            content_hash TEXT NOT NULL,
            source_id INTEGER NOT NULL,
            claimed_at REAL NOT NULL,
            PRIMARY KEY (collection_id, content_hash)
        )"""
    )
    db.execute(
        """CREATE TABLE sync_runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
            trigger TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'interrupted')),
            started_at REAL NOT NULL,
            finished_at REAL,
            added INTEGER NOT NULL DEFAULT 0,
            changed INTEGER NOT NULL DEFAULT 0,
            removed INTEGER NOT NULL DEFAULT 0,
            unchanged INTEGER NOT NULL DEFAULT 0,
            failed INTEGER NOT NULL DEFAULT 0,
            skipped INTEGER NOT NULL DEFAULT 0,
            error TEXT,
            problems TEXT NOT NULL DEFAULT '[]'
        )"""
    )
    db.table("sync_runs").create_index(["source_id", "id"])
