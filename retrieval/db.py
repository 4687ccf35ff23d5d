"""The database: SQLite in the data directory (the default), or PostgreSQL (retrieval/pg.py).

SQLite connections: one writer behind a lock, one reader connection per thread. WAL mode
lets readers run while the writer commits; ``synchronous=FULL`` makes a committed
transaction survive power loss, not just a killed process.

Opening applies retrieval's own migrations; others who keep tables in the same database
apply theirs with ``migrate`` (the app: ``app.migrations.open_database``).
"""

from __future__ import annotations

import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from retrieval.migrations import MIGRATIONS, Migration, apply_migrations
from retrieval.sql import Dialect, Session


class Database(ABC):
    """Where every owner keeps its tables. Writes are serialized: one write transaction
    at a time (SQLite's single writer; in PostgreSQL an advisory lock every front takes),
    so code may read, decide and write inside ``write()`` without racing another writer."""

    dialect: Dialect

    @abstractmethod
    def write(self) -> AbstractContextManager[Session]:
        """A transaction; commits when the block ends, rolls back if it raises."""

    @abstractmethod
    def read(self) -> Session:
        """A connection for reads outside a transaction (each statement sees what is
        committed when it starts)."""

    @abstractmethod
    def migrate(self, migrations: Iterable[Migration]) -> None:
        """Apply those of ``migrations`` not applied yet, in order, each atomically."""

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def held(self, name: str, key: int) -> AbstractContextManager[bool]:
        """Hold the lock ``(name, key)`` for the block if no one (in any process sharing
        this database) holds it: True inside when held, False when someone else has it."""

    def vector_param(self, vector: Any) -> Any:
        """A stored embedding as this store takes it: float32 bytes in SQLite."""
        import numpy as np

        return np.asarray(vector, dtype=np.float32).tobytes()

    def vector_value(self, stored: Any) -> Any:
        """A stored embedding back as a float32 array."""
        import numpy as np

        return np.frombuffer(stored, dtype=np.float32)


class SqliteDatabase(Database):
    dialect: Dialect = "sqlite"

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write_lock = threading.Lock()
        self._writer = self._connect()
        self._writer_db = sqlite_utils.Database(self._writer)
        self._readers = threading.local()
        self.migrate(MIGRATIONS)

    def migrate(self, migrations: Iterable[Migration]) -> None:
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
    def _transaction(self) -> Iterator[sqlite_utils.Database]:
        with self._write_lock, self._writer:
            # Opened explicitly: sqlite-utils commits on its own a write that opens an
            # implicit transaction, which would split this one after its first statement.
            self._writer.execute("BEGIN IMMEDIATE")
            yield self._writer_db

    def write(self) -> AbstractContextManager[sqlite_utils.Database]:
        """A transaction on the single writer connection; commits on success."""
        return self._transaction()

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

    @contextmanager
    def _held(self, name: str, key: int) -> Iterator[bool]:
        # One process owns a SQLite data directory (retrieval.data_lock): a lock in memory.
        with _HELD_GUARD:
            lock = _HELD.setdefault((str(self.path), name, key), threading.Lock())
        if not lock.acquire(blocking=False):
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def held(self, name: str, key: int) -> AbstractContextManager[bool]:
        return self._held(name, key)


_HELD: dict[tuple[str, str, int], threading.Lock] = {}
_HELD_GUARD = threading.Lock()
