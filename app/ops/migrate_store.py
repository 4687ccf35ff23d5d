"""``ragdesk migrate-store``: an installation's SQLite database copied into PostgreSQL.

Every owner's tables, row for row, vectors included (no passage is embedded again), read
from one snapshot of the SQLite file, so the server may keep running while it is read
(what it writes afterwards is not copied: stop uploads, or run the command again on a
fresh database). The copy is one PostgreSQL transaction: it lands whole or not at all.
The lexical index (``chunk_terms``) is filled by the target's own triggers as passages
arrive. Then the rows of every table are counted on both sides.

The target must be a database that holds no library yet (its schema is created here).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from app.migrations import migrate_all, open_database
from retrieval.db import Database
from retrieval.sql import Session

SQLITE_ONLY = ("sqlite_", "chunks_fts", "_migrations")
# Rows that say a library is already there: the target must not hold any.
LIBRARY_TABLES = ("collections", "documents", "users", "conversations", "sources")
BATCH = 1000


class TargetNotEmpty(RuntimeError):
    """The target database already holds a library."""


def migrate_store(data_dir: Path, url: str, say: Callable[[str], None] = print) -> int:
    """Copy ``data_dir``'s database into the PostgreSQL database at ``url``; 0 when every
    table's rows were counted equal on both sides, 1 otherwise."""
    from retrieval.pg import PostgresDatabase, redacted

    path = data_dir / "ragdesk.db"
    if not path.is_file():
        say(f"error: no database at {path}")
        return 2
    open_database(path).close()  # the current schema (a start of this release would too)
    target = PostgresDatabase(url)
    try:
        migrate_all(target)
        say(f"copying {path} into {redacted(url)}")
        with closing(_snapshot(path)) as source:
            tables = _tables(source)
            copied = _copy(source, target, tables, say)
            counted = {name: _count(source, name) for name in tables}
        return _compare(target, counted, copied, say)
    finally:
        target.close()


def _snapshot(path: Path) -> sqlite3.Connection:
    """A read-only connection holding one snapshot until it closes (WAL: writers go on)."""
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    source.execute("BEGIN")
    source.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # the snapshot starts
    return source


def _tables(source: sqlite3.Connection) -> list[str]:
    """Tables in the order they were created, which is the order their references need."""
    rows = source.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
    return [str(name) for (name,) in rows if not str(name).startswith(SQLITE_ONLY)]


def _copy(
    source: sqlite3.Connection, target: Database, tables: list[str], say: Callable[[str], None]
) -> dict[str, int]:
    copied: dict[str, int] = {}
    with target.write() as db:
        for name in LIBRARY_TABLES:
            if db.execute(f"SELECT 1 FROM {name} LIMIT 1").fetchone() is not None:  # noqa: S608
                raise TargetNotEmpty(
                    f"the target database already holds {name}: migrate into an empty one"
                )
        present = {str(row[0]) for row in db.execute(_TARGET_TABLES)}
        for name in reversed(tables):  # rows the schema seeds (issued_ids) give way
            if name in present:
                db.execute(f'DELETE FROM "{name}"')  # noqa: S608 - names from the schema
        for name in tables:
            if name not in present:
                say(f"  {name}: not in the PostgreSQL schema, skipped")
                continue
            copied[name] = _copy_table(source, target, db, name)
            say(f"  {name}: {copied[name]} rows")
        for name in tables:
            if name in present:
                _advance_identity(db, name)
    return copied


_TARGET_TABLES = (
    "SELECT table_name FROM information_schema.tables"
    " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
)


def _copy_table(source: sqlite3.Connection, target: Database, db: Session, name: str) -> int:
    wanted = [
        str(row[0])
        for row in db.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ? ORDER BY ordinal_position",
            [name],
        )
    ]
    have = {str(row[1]) for row in source.execute(f'PRAGMA table_info("{name}")')}
    columns = [c for c in wanted if c in have]
    quoted = ", ".join(f'"{c}"' for c in columns)
    marks = ", ".join("?" for _ in columns)
    insert = f'INSERT INTO "{name}" ({quoted}) VALUES ({marks})'  # noqa: S608
    convert = _converter(target, name, columns)
    total = 0
    for rows in _batches(source, f'SELECT {quoted} FROM "{name}" ORDER BY 1'):  # noqa: S608
        db.conn.executemany(insert, [convert(row) for row in rows])
        total += len(rows)
    return total


def _converter(target: Database, table: str, columns: list[str]) -> Callable[[Any], list[Any]]:
    """Stored vectors as the target takes them; every other value as it is."""
    if table != "embeddings" or "vector" not in columns:
        return list
    at = columns.index("vector")

    def convert(row: Any) -> list[Any]:
        values = list(row)
        values[at] = target.vector_param(np.frombuffer(values[at], dtype=np.float32))
        return values

    return convert


def _batches(source: sqlite3.Connection, sql: str) -> Iterator[list[Any]]:
    cursor = source.execute(sql)
    while rows := cursor.fetchmany(BATCH):
        yield rows


def _advance_identity(db: Session, name: str) -> None:
    """An identity column continues past the ids copied into it."""
    found = db.execute(
        "SELECT pg_get_serial_sequence(?, 'id')"
        " FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ? AND column_name = 'id' AND is_identity = 'YES'",
        [f'"{name}"', name],
    ).fetchone()
    if found is None or found[0] is None:
        return
    db.execute(
        f'SELECT setval(?, COALESCE((SELECT MAX(id) FROM "{name}"), 0) + 1, false)',  # noqa: S608
        [found[0]],
    )


def _count(source: sqlite3.Connection, name: str) -> int:
    return int(source.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0])  # noqa: S608


def _compare(
    target: Database, counted: dict[str, int], copied: dict[str, int], say: Callable[[str], None]
) -> int:
    reader = target.read()
    wrong = []
    for name, expected in counted.items():
        if name not in copied:
            continue
        found = int(reader.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0])  # noqa: S608
        if found != expected:
            wrong.append(f"{name}: {expected} in SQLite, {found} in PostgreSQL")
    if wrong:
        say("counts differ:\n  " + "\n  ".join(wrong))
        return 1
    say(f"done: {sum(copied.values())} rows in {len(copied)} tables, every count equal")
    say(
        "the originals stay in the data directory's uploads/: copy them to RAGDESK_BLOB_URL"
        " (a shared directory: cp -a; a bucket: aws s3 sync) before the fronts start"
    )
    return 0
