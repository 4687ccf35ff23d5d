"""SQLite connections: one writer behind a lock, one reader connection per thread.

WAL mode lets readers run while the writer commits; ``synchronous=FULL`` makes a
committed transaction survive power loss, not just a killed process.

Opening applies retrieval's own migrations; others who keep tables in the same file apply
theirs with ``migrate`` (the app: ``app.migrations.open_database``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlite_utils

from retrieval.migrations import MIGRATIONS, Migration, apply_migrations


class Database:
    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write_lock = threading.Lock()
        self._writer = self._connect()
        self._writer_db = sqlite_utils.Database(self._writer)
        self._readers = threading.local()
        self.migrate(MIGRATIONS)

    def migrate(self, migrations: Iterable[Migration]) -> None:
        """Apply those of ``migrations`` not applied yet, in order, each atomically."""
        with self._write_lock:
            apply_migrations(self._writer_db, migrations)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite_utils.Database]:
        """A transaction on the single writer connection; commits on success."""
        with self._write_lock, self._writer:
            yield self._writer_db

    def read(self) -> sqlite_utils.Database:
        """This thread's reader connection (SQLite connections are not shared across threads)."""
        db: sqlite_utils.Database | None = getattr(self._readers, "db", None)
        if db is None:
            db = sqlite_utils.Database(self._connect())
            self._readers.db = db
        return db

    def close(self) -> None:
        with self._write_lock:
            self._writer.close()
