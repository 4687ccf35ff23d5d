"""SQLite: WAL, one writer, numbered migrations applied once and atomically.

How several owners' migrations share the file, and upgrades: tests/test_migrations.py."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import sqlite_utils

from retrieval.db import SqliteDatabase
from retrieval.migrations import MIGRATIONS, Migration, apply_migrations


def test_schema_pragmas_and_migrations(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "r.db")
    reader = db.read()
    assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    applied = [row["name"] for row in reader.query("SELECT name FROM _migrations ORDER BY name")]
    assert applied == sorted(m.name for m in MIGRATIONS)
    db.close()
    SqliteDatabase(tmp_path / "r.db").close()  # reopening applies nothing twice


def test_a_failing_migration_leaves_no_trace(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "m.db")
    db = sqlite_utils.Database(conn)

    def m900_half_done(db: sqlite_utils.Database) -> None:
        db.execute("CREATE TABLE half (x INTEGER)")
        raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        apply_migrations(db, [Migration("test.m900_half_done", m900_half_done)])
    assert "half" not in db.table_names()
    assert [row["name"] for row in db.table("_migrations").rows] == []


def test_readers_use_their_own_connection_per_thread(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "r.db")
    seen = []
    thread = threading.Thread(target=lambda: seen.append(db.read()))
    thread.start()
    thread.join()
    assert seen[0] is not db.read()
    with db.write() as writer:
        writer.execute("INSERT INTO collections (name, created_at) VALUES ('x', 0)")
    assert seen[0].execute("SELECT COUNT(*) FROM collections").fetchone()[0] == 1


def test_a_write_block_is_one_transaction_whatever_its_first_statement(tmp_path: Path) -> None:
    """sqlite-utils commits by itself a write that opens an implicit transaction; the
    block's own BEGIN keeps every statement of it together: a failure undoes them all."""
    db = SqliteDatabase(tmp_path / "r.db")
    with pytest.raises(RuntimeError), db.write() as writer:
        writer.execute("INSERT INTO collections (name, created_at) VALUES ('first', 0)")
        writer.execute("INSERT INTO collections (name, created_at) VALUES ('second', 0)")
        raise RuntimeError("interrupted")
    assert db.read().execute("SELECT COUNT(*) FROM collections").fetchone()[0] == 0
    with db.write() as writer:
        writer.execute("INSERT INTO collections (name, created_at) VALUES ('kept', 0)")
    assert db.read().execute("SELECT name FROM collections").fetchall()[0][0] == "kept"
    db.close()
