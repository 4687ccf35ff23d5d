"""Every owner's tables in the one database, in the order their references need:
retrieval's (collections, documents, passages), then auth's (users, keys), then chat's
(conversations, owned by users), then the synced sources' (their files name documents),
then usage analytics' (events that name all of these, without references).

SQLite (the default) replays each owner's migrations since the first release;
PostgreSQL starts from each owner's baseline (``pg_schema`` modules) and takes the
migrations written after it. The app opens its database only through here."""

from __future__ import annotations

from pathlib import Path

from app.auth.migrations import MIGRATIONS as AUTH
from app.auth.pg_schema import PG_MIGRATIONS as PG_AUTH
from app.chat.migrations import MIGRATIONS as CHAT
from app.chat.pg_schema import PG_MIGRATIONS as PG_CHAT
from app.config.settings import Settings
from app.sources.migrations import MIGRATIONS as SOURCES
from app.sources.pg_schema import PG_MIGRATIONS as PG_SOURCES
from app.usage.migrations import MIGRATIONS as USAGE
from app.usage.pg_schema import PG_MIGRATIONS as PG_USAGE
from retrieval.db import Database, SqliteDatabase
from retrieval.migrations import MIGRATIONS as RETRIEVAL
from retrieval.migrations import Migrations
from retrieval.pg_schema import PG_MIGRATIONS as PG_RETRIEVAL

OWNERS: tuple[Migrations, ...] = (RETRIEVAL, AUTH, CHAT, SOURCES, USAGE)
PG_OWNERS: tuple[Migrations, ...] = (PG_RETRIEVAL, PG_AUTH, PG_CHAT, PG_SOURCES, PG_USAGE)


def migrate_all(db: Database) -> None:
    """Apply what each owner has not applied yet, owner by owner."""
    for migrations in PG_OWNERS if db.dialect == "postgresql" else OWNERS:
        db.migrate(migrations)


def open_database(where: Path | Settings) -> Database:
    """The app's database, every owner's migrations applied: a SQLite file, or the
    settings' database (``database_url`` when set, else the data directory's SQLite)."""
    db: Database
    if isinstance(where, Path):
        db = SqliteDatabase(where)
    elif where.server.database_url is not None:
        from retrieval.pg import PostgresDatabase  # psycopg: imported only when used

        db = PostgresDatabase(
            where.server.database_url.get_secret_value(),
            pool_size=where.server.database_pool_size,
            timeout_s=where.server.database_timeout_s,
        )
    else:
        db = SqliteDatabase(where.db_path)
    try:
        migrate_all(db)
    except BaseException:
        db.close()
        raise
    return db
