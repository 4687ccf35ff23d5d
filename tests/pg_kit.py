"""A real PostgreSQL with pgvector for the tests: pgserver (PostgreSQL 16 built into a
wheel) started once per test session, every owner's schema applied once to a template
database, and each test given a fresh copy of it (``CREATE DATABASE … TEMPLATE``, tens of
milliseconds).

``RAGDESK_TEST_STORE=postgresql pytest …`` runs tests on it: each test's environment
gets ``RAGDESK_DATABASE_URL`` pointing at its own database, so every ``Settings`` the test
builds, and every server process it starts, use PostgreSQL."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

TEMPLATE = "ragdesk_template"


def store_under_test() -> str:
    return os.environ.get("RAGDESK_TEST_STORE", "sqlite")


def with_database(uri: str, name: str) -> str:
    """``uri`` (pgserver's, over a Unix socket) naming database ``name`` instead."""
    parts = urlsplit(uri)
    return urlunsplit(parts._replace(path=f"/{name}"))


class PgServer:
    def __init__(self) -> None:
        import pgserver

        self._dir = tempfile.TemporaryDirectory(prefix="pg")  # short: its socket lives there
        self.server: Any = pgserver.get_server(self._dir.name, cleanup_mode="stop")
        self.uri: str = self.server.get_uri()
        self._template_ready = False

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.uri, autocommit=True)

    def _make_template(self) -> None:
        from app.migrations import PG_OWNERS
        from retrieval.pg import PostgresDatabase

        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}"')
            admin.execute(f'CREATE DATABASE "{TEMPLATE}"')
        db = PostgresDatabase(with_database(self.uri, TEMPLATE))
        try:
            for migrations in PG_OWNERS:
                db.migrate(migrations)
        finally:
            db.close()
        self._template_ready = True

    def fresh_database(self) -> str:
        """A new database holding every owner's tables, empty; its URL."""
        if not self._template_ready:
            self._make_template()
        name = f"t_{uuid.uuid4().hex[:12]}"
        with self._admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
        return with_database(self.uri, name)

    def empty_database(self) -> str:
        """A new database with no tables at all; its URL."""
        name = f"e_{uuid.uuid4().hex[:12]}"
        with self._admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return with_database(self.uri, name)

    def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        with self._admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        self.server.cleanup()
        self._dir.cleanup()


@contextmanager
def database_for_test(server: PgServer) -> Iterator[str]:
    url = server.fresh_database()
    try:
        yield url
    finally:
        server.drop(url)
