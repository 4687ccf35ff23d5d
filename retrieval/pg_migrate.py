"""Migrations on PostgreSQL: the same ``_migrations`` record as SQLite keeps, one
transaction for them all (PostgreSQL's DDL is transactional), taken under the write lock
so fronts starting together apply each migration once."""

from __future__ import annotations

import time
from collections.abc import Iterable

from retrieval.migrations import Migration, refuse_newer_schema
from retrieval.sql import Session


def apply_pg_migrations(session: Session, migrations: Iterable[Migration]) -> None:
    session.execute(
        "CREATE TABLE IF NOT EXISTS _migrations"
        " (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION)"
    )
    recorded = {str(row[0]) for row in session.execute("SELECT name FROM _migrations")}
    migrations = list(migrations)
    refuse_newer_schema(recorded, migrations)
    for migration in migrations:
        if not migration.applied(recorded):
            migration.apply(session)
            session.execute(
                "INSERT INTO _migrations (name, applied_at) VALUES (%s, %s)",  # PostgreSQL's own
                [migration.name, time.time()],
            )
            recorded.add(migration.name)
