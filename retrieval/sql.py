"""What the stores' connections look like to the code that queries them.

Both stores (SQLite through sqlite-utils, PostgreSQL through psycopg) hand out a
:class:`Session`: ``execute`` and ``query`` take SQL written once, in the portable subset
both engines share (``?`` placeholders, ``ON CONFLICT … DO …``, ``RETURNING``); the
PostgreSQL session translates the few spellings that differ (retrieval/pg_dialect.py).
Where the engines really differ (full text, vectors, date buckets) code asks
``Database.dialect``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol

Dialect = Literal["sqlite", "postgresql"]
Params = Sequence[Any] | dict[str, Any]  # ``?`` placeholders, or ``:name`` ones

# A constraint refused a write: SQLite raises this; the PostgreSQL store raises a subclass.
IntegrityError = sqlite3.IntegrityError


class Cursor(Protocol):
    """The part of a DB-API cursor the code uses (rows support ``row[0]`` and ``row["name"]``)."""

    @property
    def rowcount(self) -> int: ...

    @property
    def lastrowid(self) -> int | None: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ...) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class RawConnection(Protocol):
    def execute(self, sql: str, parameters: Params = ..., /) -> Cursor: ...

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> Cursor: ...


class Session(Protocol):
    """A connection to run statements on: a reader, or the writer inside ``Database.write``."""

    @property
    def conn(self) -> RawConnection: ...

    def execute(self, sql: str, parameters: Params | None = ...) -> Cursor: ...

    def query(self, sql: str, params: Params | None = ...) -> Iterable[dict[str, Any]]: ...


def insert_row(session: Session, table: str, row: Mapping[str, Any]) -> int:
    """Insert ``row`` (column names are the code's, never a user's) and return its ``id``."""
    columns = ", ".join(f'"{name}"' for name in row)
    marks = ", ".join("?" for _ in row)
    cursor = session.execute(
        f'INSERT INTO "{table}" ({columns}) VALUES ({marks}) RETURNING id',  # noqa: S608
        list(row.values()),
    )
    return int(cursor.fetchone()[0])
