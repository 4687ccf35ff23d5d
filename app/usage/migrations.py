"""The usage owner's tables, applied after every other owner's (see ``retrieval.migrations``).

No foreign keys: like the answer audit, usage outlives the users, keys, collections and
messages it names (a deleted user's questions still count in last year's totals)."""

from __future__ import annotations

import sqlite_utils

from retrieval.migrations import Migrations

MIGRATIONS = Migrations("usage")
# Numbered on from the other owners' highest, as the sources owner does, with room left
# for the owners being written beside this one.


@MIGRATIONS.add()
def m024_usage_events(db: sqlite_utils.Database) -> None:
    """One row per finished answer, its daily rollups, the vectors of unanswered
    questions (embedded once, for grouping them), and the audit of who read question texts.

    ``groups`` and ``collections`` are comma-separated ids as they were when the question
    was asked (the asker's groups then; the collections its passages came from), so moving
    a user between groups does not rewrite history."""
    db.execute(
        """CREATE TABLE usage_events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at REAL NOT NULL,
            day TEXT NOT NULL,
            user_id INTEGER,
            key_id INTEGER,
            groups TEXT NOT NULL DEFAULT '',
            collections TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            channel TEXT NOT NULL,
            outcome TEXT NOT NULL CHECK (outcome IN
                ('answered', 'declined', 'withheld', 'failed', 'stopped')),
            ttft_ms INTEGER,
            total_ms INTEGER,
            prompt_tokens INTEGER NOT NULL DEFAULT 0,
            completion_tokens INTEGER NOT NULL DEFAULT 0,
            message_id INTEGER,
            question TEXT NOT NULL
        )"""
    )
    db.execute("CREATE INDEX usage_events_at ON usage_events(at)")
    db.execute("CREATE INDEX usage_events_message ON usage_events(message_id)")
    # The content gaps read only the unanswered, newest first.
    db.execute(
        "CREATE INDEX usage_events_gaps ON usage_events(at)"
        " WHERE outcome IN ('declined', 'withheld')"
    )
    # ``dim`` is all, user, key, group, collection, model or channel; ``value`` its id or
    # name ('' for all). Latency histograms are little-endian int32 counts (app.usage.rollups).
    # usage_monthly: the same per calendar month (``day`` is YYYY-MM), for the whole months
    # of a long period.
    for table in ("usage_daily", "usage_monthly"):
        db.execute(
            f"""CREATE TABLE {table} (
                dim TEXT NOT NULL,
                day TEXT NOT NULL,
                value TEXT NOT NULL,
                questions INTEGER NOT NULL DEFAULT 0,
                answered INTEGER NOT NULL DEFAULT 0,
                declined INTEGER NOT NULL DEFAULT 0,
                withheld INTEGER NOT NULL DEFAULT 0,
                failed INTEGER NOT NULL DEFAULT 0,
                stopped INTEGER NOT NULL DEFAULT 0,
                prompt_tokens INTEGER NOT NULL DEFAULT 0,
                completion_tokens INTEGER NOT NULL DEFAULT 0,
                ttft_hist BLOB NOT NULL DEFAULT x'',
                total_hist BLOB NOT NULL DEFAULT x'',
                PRIMARY KEY (dim, day, value)
            ) WITHOUT ROWID"""
        )
        db.execute(f"CREATE INDEX {table}_value ON {table}(dim, value, day)")
    db.execute(
        """CREATE TABLE usage_question_vectors (
            question_hash TEXT NOT NULL,
            model_id TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (question_hash, model_id)
        ) WITHOUT ROWID"""
    )
    db.execute(
        """CREATE TABLE usage_question_views (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            viewed_at REAL NOT NULL,
            user_id INTEGER,
            key_id INTEGER,
            what TEXT NOT NULL,
            period_from TEXT NOT NULL,
            period_to TEXT NOT NULL,
            questions INTEGER NOT NULL
        )"""
    )
