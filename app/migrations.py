"""Every owner's tables in the one SQLite file, in the order their references need:
retrieval's (collections, documents, passages), then auth's (users, keys), then chat's
(conversations, owned by users), then the synced sources' (their files name documents),
then usage analytics' (events that name all of these, without references).
The app opens its database only through here."""

from __future__ import annotations

from pathlib import Path

from app.auth.migrations import MIGRATIONS as AUTH
from app.chat.migrations import MIGRATIONS as CHAT
from app.sources.migrations import MIGRATIONS as SOURCES
from app.usage.migrations import MIGRATIONS as USAGE
from retrieval.db import Database
from retrieval.migrations import MIGRATIONS as RETRIEVAL
from retrieval.migrations import Migrations

OWNERS: tuple[Migrations, ...] = (RETRIEVAL, AUTH, CHAT, SOURCES, USAGE)


def migrate_all(db: Database) -> None:
    """Apply what each owner has not applied yet, owner by owner."""
    for migrations in OWNERS:
        db.migrate(migrations)


def open_database(path: Path) -> Database:
    """The app's database, every owner's migrations applied."""
    db = Database(path)
    try:
        migrate_all(db)
    except BaseException:
        db.close()
        raise
    return db
