"""The database on PostgreSQL (with pgvector), for several Ragdesk fronts at once.

Chosen by ``RAGDESK_DATABASE_URL=postgresql://…``. Same interface as the SQLite store
(retrieval/db.py): statements written once are translated (retrieval/pg_dialect.py) and
run on connections from a psycopg pool.

- Writes are serialized across every front: each write transaction first takes one
  transaction-scoped advisory lock, so the read-decide-write code that relies on SQLite's
  single writer stays correct with any number of replicas. Reads never wait for it.
- Rows answer ``row[0]`` and ``row["name"]`` like ``sqlite3.Row``; ``numeric`` results
  (``SUM`` of integers) come back as int or float, never Decimal; Python booleans are
  stored as 0/1 (the schema keeps SQLite's integer flags).
- The server unreachable, a timeout, or a read-only server raise :class:`StoreUnavailable`
  (the app answers 503 with Retry-After); the URL's password never appears in it.
- Every wait is bounded by ``timeout_s`` (``RAGDESK_DATABASE_TIMEOUT_S``): connecting,
  taking a pooled connection, each statement on the server, and a server that stops
  answering altogether (retrieval/pg_bounds.py); once one has, calls fail at once for a
  few seconds rather than each waiting out the bound.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from decimal import Decimal
from typing import Any

import psycopg
import psycopg.sql
from psycopg.adapt import Buffer, Dumper, Loader
from psycopg_pool import ConnectionPool, PoolTimeout

from retrieval.db import Database
from retrieval.migrations import Migration
from retrieval.pg_bounds import (
    ServerSilent,
    Silence,
    connect_timeout,
    connection_class,
    connection_parameters,
    patient,
)
from retrieval.pg_dialect import Translated, translate
from retrieval.sql import Dialect, IntegrityError, Params

log = logging.getLogger(__name__)
WRITE_LOCK = 0x52414744  # "RAGD": the one advisory lock every write transaction takes
_PASSWORD = re.compile(r"(//[^:/@]*:)[^@]*@")


class StoreUnavailable(RuntimeError):
    """The database cannot be reached, answers too slowly, or refuses writes."""


class ConstraintViolation(IntegrityError):
    """A unique, foreign key or check constraint refused a write: callers catch
    ``retrieval.sql.IntegrityError`` whichever store they run on."""


def redacted(url: str) -> str:
    """``url`` with its password replaced, for logs and errors."""
    return _PASSWORD.sub(r"\1***@", url)


class Row(tuple[Any, ...]):
    """A result row: by position, like a tuple, or by column name, like ``sqlite3.Row``."""

    _index: dict[str, int]

    def __new__(cls, values: Sequence[Any], index: dict[str, int]) -> Row:
        row = super().__new__(cls, values)
        row._index = index
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def _row_factory(cursor: psycopg.Cursor[Any]) -> Any:
    index = {column.name: i for i, column in enumerate(cursor.description or ())}
    return lambda values: Row(values, index)


class _Numeric(Loader):
    """``numeric`` as Python numbers the code can mix with floats."""

    def load(self, data: Buffer) -> int | float:
        number = Decimal(bytes(data).decode())
        return int(number) if number == number.to_integral_value() else float(number)


class _BoolAsInt(Dumper):
    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: bool) -> bytes:
        return b"1" if obj else b"0"


class Result:
    """A statement's outcome, read whole (the connection goes back to the pool at once)."""

    def __init__(self, rows: list[Any], rowcount: int, lastrowid: int | None):
        self._rows = rows
        self._next = 0
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    def fetchone(self) -> Any:
        if self._next >= len(self._rows):
            return None
        self._next += 1
        return self._rows[self._next - 1]

    def fetchall(self) -> list[Any]:
        rest, self._next = self._rows[self._next :], len(self._rows)
        return rest

    def fetchmany(self, size: int = 1) -> list[Any]:
        some = self._rows[self._next : self._next + size]
        self._next += len(some)
        return some

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class PgSession:
    """Statements on one connection (the writer's), or each on a pooled one (a reader)."""

    def __init__(
        self,
        database: PostgresDatabase,
        connection: psycopg.Connection[Any] | None,
        *,
        native: bool = False,
    ):
        self._database = database
        self._connection = connection
        self._native = native  # PostgreSQL's own SQL (migrations): run as written

    @property
    def conn(self) -> PgSession:
        return self

    def execute(self, sql: str, parameters: Params | None = None) -> Result:
        translated = Translated(sql) if self._native else translate(sql)
        with self._database.connection(self._connection) as conn:
            return _run(conn, self._database.returning_id(translated), parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]]) -> Result:
        translated = Translated(sql) if self._native else translate(sql)
        with self._database.connection(self._connection) as conn, conn.cursor() as cursor:
            cursor.executemany(translated.sql, [list(p) for p in seq_of_parameters])
            return Result([], cursor.rowcount, None)

    def query(self, sql: str, params: Params | None = None) -> list[dict[str, Any]]:
        return [dict(zip(row.keys(), row, strict=True)) for row in self.execute(sql, params)]


def _run(conn: psycopg.Connection[Any], sql: str, parameters: Params | None) -> Result:
    with conn.cursor() as cursor:
        # always parameters (even none), so a literal ``%%`` always reads as ``%``
        cursor.execute(sql, parameters if isinstance(parameters, dict) else list(parameters or ()))
        rows = cursor.fetchall() if cursor.description is not None else []
        lastrowid = None
        if rows and sql.endswith(" RETURNING id"):
            lastrowid = int(rows[-1][0])
        return Result(rows, cursor.rowcount, lastrowid)


class PostgresDatabase(Database):
    dialect: Dialect = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        timeout_s: float = 60.0,
    ):
        """``timeout_s``: the longest any one wait on the server may take (see above)."""
        self.url = url
        self.shown_url = redacted(url)
        self.timeout_s = timeout_s
        self._silence = Silence(timeout_s)
        self._write_lock = threading.Lock()  # one writer per process queues here, not in PG
        self._identity_tables: frozenset[str] = frozenset()
        self._connection_class = connection_class(timeout_s)
        self._pool = ConnectionPool(
            url,
            connection_class=self._connection_class,
            min_size=1,
            max_size=pool_size,
            kwargs=connection_parameters(timeout_s),
            configure=self._configure,
            timeout=timeout_s,  # how long a request waits for a connection, then 503
            open=False,
            name="ragdesk",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout(timeout_s) + 5.0)
        except PoolTimeout as exc:
            self._pool.close()
            raise StoreUnavailable(f"cannot reach the database at {self.shown_url}") from exc
        self._vector_ready = False
        self._after_schema_change()  # an existing schema: which tables number their rows

    # --- connections -------------------------------------------------------------------------
    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        conn.autocommit = True  # a write opens its transaction itself (conn.transaction())
        conn.row_factory = _row_factory
        conn.adapters.register_loader("numeric", _Numeric)
        conn.adapters.register_dumper(bool, _BoolAsInt)
        self._register_vector(conn)

    def _register_vector(self, conn: psycopg.Connection[Any]) -> None:
        from pgvector.psycopg.vector import register_vector_info
        from psycopg.types import TypeInfo

        info = TypeInfo.fetch(conn, "vector")
        if info is not None:
            register_vector_info(conn, info)

    @contextmanager
    def connection(
        self, held: psycopg.Connection[Any] | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """``held`` (a transaction's), or a pooled connection in autocommit for one read."""
        if held is not None:
            with self._failures():
                yield held
            return
        with self._failures(), self._pooled() as conn:
            yield conn

    @contextmanager
    def read_transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One pooled connection inside a read-only transaction, for statements in
        PostgreSQL's own SQL that belong together (``SET LOCAL`` settings, then the query
        they tune): ``%s`` placeholders, run as written, rows as ``read()`` gives them."""
        with self._failures(), self._pooled() as conn, conn.transaction():
            conn.execute("SET TRANSACTION READ ONLY")
            yield conn

    @contextmanager
    def _pooled(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection, unless the server was found silent a moment ago. None
        coming within ``timeout_s`` counts as silence too: every connection is stuck on
        the server, or a new one cannot be made."""
        if self._silence.holding:
            raise StoreUnavailable(self._silence.reason(f"the database at {self.shown_url}"))
        try:
            conn = self._pool.getconn()
        except PoolTimeout:
            self._silence.met()
            raise
        try:
            with conn:  # as the pool's own ``connection()``: commit, or roll back on error
                yield conn
        finally:
            self._pool.putconn(conn)

    def _failures(self) -> AbstractContextManager[None]:
        return _unavailable_on_failure(self.shown_url, self._silence)

    @contextmanager
    def _write_turn(self) -> Iterator[None]:
        """This process's turn to write, waited for ``timeout_s`` at most."""
        if not self._write_lock.acquire(timeout=self.timeout_s):
            raise StoreUnavailable(
                f"the database at {self.shown_url} is busy: a write waited"
                f" {self.timeout_s:g} s for this front's others"
            )
        try:
            yield
        finally:
            self._write_lock.release()

    def returning_id(self, translated: Translated) -> str:
        """An INSERT into a table keyed by an identity ``id`` returns it (``lastrowid``)."""
        if translated.insert_into in self._identity_tables and not translated.returns:
            return translated.sql + " RETURNING id"
        return translated.sql

    # --- Database ----------------------------------------------------------------------------
    @contextmanager
    def _transaction(self, *, native: bool = False) -> Iterator[PgSession]:
        with self._write_turn(), self._failures(), self._pooled() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", [WRITE_LOCK])
            yield PgSession(self, conn, native=native)

    def write(self) -> AbstractContextManager[PgSession]:
        return self._transaction()

    def read(self) -> PgSession:
        return PgSession(self, None)

    def migrate(self, migrations: Iterable[Migration]) -> None:
        from retrieval.pg_migrate import apply_pg_migrations

        with self._transaction(native=True) as session:
            apply_pg_migrations(session, migrations)
        self._after_schema_change()

    def _after_schema_change(self) -> None:
        rows = self.read().execute(
            "SELECT table_name FROM information_schema.columns"
            " WHERE column_name = 'id' AND is_identity = 'YES' AND table_schema = current_schema()"
        )
        self._identity_tables = frozenset(str(row[0]) for row in rows)
        if (
            not self._vector_ready
            and self.read().execute("SELECT 1 FROM pg_type WHERE typname = 'vector'").fetchone()
        ):
            # Connections opened before the extension existed cannot read vectors: new ones.
            self._vector_ready = True
            self._pool.drain()

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _held(self, name: str, key: int) -> Iterator[bool]:
        """A session advisory lock on a connection of the pool, kept for the block; if this
        front dies, PostgreSQL drops the connection and the lock with it."""
        space = zlib.crc32(name.encode()) & 0x7FFFFFFF
        with self.connection() as conn:
            got = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", [space, key]).fetchone()
            if not got or not got[0]:
                yield False
                return
            try:
                yield True
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s, %s)", [space, key])

    def held(self, name: str, key: int) -> AbstractContextManager[bool]:
        return self._held(name, key)

    def ping(self) -> float:
        """Seconds one round trip takes; raises StoreUnavailable. Asks the server even
        while it is taken as silent: an answer ends that at once."""
        start = time.perf_counter()
        with self._failures(), self._pool.connection() as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        self._silence.heard()
        if row is not None and row[0]:
            raise StoreUnavailable(f"the database at {self.shown_url} is read-only (a standby)")
        return time.perf_counter() - start

    def silent(self) -> str | None:
        """Why calls fail at once just now (the server was found silent), or None."""
        if not self._silence.holding:
            return None
        return self._silence.reason(f"the database at {self.shown_url}")

    # --- messages between fronts -------------------------------------------------------------
    def notify(self, channel: str, payload: str) -> None:
        """Tell every front listening on ``channel`` (delivered when this commits: at once)."""
        self.read().execute("SELECT pg_notify(?, ?)", [channel, payload])

    def listen(self, channel: str, deliver: Callable[[str], None]) -> Callable[[], None]:
        """Call ``deliver(payload)`` for each notification on ``channel``, from a thread of
        its own with a connection of its own (reconnecting when it drops); the returned
        function stops it."""
        stopping = threading.Event()

        def run() -> None:
            while not stopping.is_set():
                try:
                    with self._connection_class.connect(
                        self.url, autocommit=True, **connection_parameters(self.timeout_s)
                    ) as conn:
                        conn.execute(
                            psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel))
                        )
                        with patient(conn):  # quiet between notifications: each wait is 1 s
                            while not stopping.is_set():
                                for note in conn.notifies(timeout=1.0):
                                    deliver(note.payload)
                except psycopg.OperationalError:
                    log.warning(
                        "listening on %s: the database at %s dropped", channel, self.shown_url
                    )
                    stopping.wait(1.0)

        thread = threading.Thread(target=run, name=f"ragdesk-listen-{channel}", daemon=True)
        thread.start()

        def stop() -> None:
            stopping.set()
            thread.join(timeout=5.0)

        return stop

    def vector_param(self, vector: Any) -> Any:
        import numpy as np

        return np.asarray(vector, dtype=np.float32).reshape(-1)

    def vector_value(self, stored: Any) -> Any:
        import numpy as np

        return np.asarray(stored.to_numpy(), dtype=np.float32)


@contextmanager
def _unavailable_on_failure(shown_url: str, silence: Silence) -> Iterator[None]:
    try:
        yield
    except psycopg.IntegrityError as exc:
        raise ConstraintViolation(str(exc).splitlines()[0]) from None
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        raise StoreUnavailable(f"the database at {shown_url} is read-only") from exc
    except psycopg.errors.QueryCanceled as exc:
        raise StoreUnavailable(f"the database at {shown_url} answered too slowly") from exc
    except ServerSilent as exc:
        silence.met()
        raise StoreUnavailable(silence.reason(f"the database at {shown_url}")) from exc
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise StoreUnavailable(f"cannot reach the database at {shown_url}") from exc
