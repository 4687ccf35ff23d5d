"""Each package owns its migrations: retrieval's, auth's and chat's share one SQLite file and
one ``_migrations`` table; a database from the release before owners upgrades in place.

``fixtures/release-2026-12-01.db`` was written by that release's own code (commit 5ba166a,
``fixtures/make_release_db.py``): accounts, keys, a document, an answered conversation.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from litestar.testing import TestClient

from app.auth.migrations import MIGRATIONS as AUTH
from app.chat.migrations import MIGRATIONS as CHAT
from app.config.settings import Settings
from app.factory import create_app
from app.migrations import OWNERS, open_database
from app.sources.migrations import MIGRATIONS as SOURCES
from app.usage.migrations import MIGRATIONS as USAGE
from retrieval.db import SqliteDatabase
from retrieval.migrations import MIGRATIONS as RETRIEVAL
from retrieval.migrations import Migrations, apply_migrations
from tests.conftest import FIXTURES, fake_settings, login, sse_events
from tests.pg_kit import store_under_test

RELEASE = FIXTURES / "release-2026-12-01.db"
# The keys make_release_db.py printed: the admin tester's, and staffer's (read-only, scoped
# to the collection "handbook").
KEY = "rdk_ffefbe1cee97_cz2bCDhnrcDe7C_StwBlLfIYN3S9xy3F4pXB2WPl5Tw"
SCOPED_KEY = "rdk_0f61c776527a_nizbEWTwFmAlDELFVvFEtCAkCBXV2kCYfd46T7yMfHc"
QUESTION = "What is the meal allowance abroad?"
OLD_NAMES = [
    "m001_documents",
    "m002_conversations",
    "m003_flags",
    "m004_message_replies",
    "m005_message_context",
    "m006_chunks_fts",
    "m007_ui_conversation_pins",
    "m008_accounts",
    "m009_eval_runs_and_embedding_cache",
    "m010_api_answer_sources",
    "m011_session_last_seen",
    "m012_embedding_cache_pruning",
]

FTS = {f"chunks_fts{part}" for part in ("", "_data", "_idx", "_content", "_docsize", "_config")}
RETRIEVAL_TABLES = {
    "_migrations",
    "sqlite_sequence",
    "collections",
    "documents",
    "pages",
    "chunks",
    "embeddings",
    "flags",
    "eval_runs",
    "embedding_cache",
    "chunk_text_keys",
    "collection_ids_deleted",
    *FTS,
}
AUTH_TABLES = {
    "users",
    "sessions",
    "api_keys",
    "api_key_collections",
    "collection_members",
    "answer_sources",
    "api_answer_sources",
    "groups",
    "group_members",
    "group_collections",
    "user_identities",
    "sso_logins",
    "collection_audit",
}
CHAT_TABLES = {
    "conversations",
    "messages",
    "conversation_pins",
    "conversation_owners",
    "answer_eval_runs",
    "local_models",
    "chat_model_offers",
    "answer_feedback",
    "issued_ids",
    "conversation_shares",
    "conversation_share_events",
    "shared_answer_sources",
    "v1_answer_citations",
}
SOURCES_TABLES = {"sources", "source_files", "sync_claims", "sync_runs"}
USAGE_TABLES = {
    "usage_events", "usage_daily", "usage_monthly", "usage_question_vectors",
    "usage_question_views",
}  # fmt: skip
# The migrations added since that release, in the order a release database runs them.
SINCE_RELEASE = [m.name for owner in OWNERS for m in owner if not m.applied(set(OLD_NAMES))]


def tables(db: sqlite_utils.Database) -> set[str]:
    rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {row[0] for row in rows}


def schema(path: Path) -> set[tuple[str, str, str, str | None]]:
    """Every table, index and trigger with its SQL, whitespace normalised."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    conn.close()
    return {
        (kind, name, table, " ".join(sql.split()) if sql else None)
        for kind, name, table, sql in rows
    }


def contents(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table (the full-text index's own tables included)."""
    with sqlite3.connect(path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        found = {
            name: sorted(conn.execute(f'SELECT * FROM "{name}"').fetchall(), key=repr)
            for name in names
        }
    conn.close()
    return found


def migration_rows(path: Path) -> list[tuple[str, float]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name, applied_at FROM _migrations ORDER BY rowid").fetchall()
    conn.close()
    return rows


def fresh(tmp_path: Path) -> Path:
    path = tmp_path / "fresh" / "ragdesk.db"
    open_database(path).close()
    return path


@pytest.fixture
def release(tmp_path: Path) -> Settings:
    """A data directory holding the release's database."""
    settings = fake_settings(tmp_path / "data")
    settings.server.data_dir.mkdir(parents=True)
    shutil.copyfile(RELEASE, settings.db_path)
    return settings


# --- owners ----------------------------------------------------------------------------------
def test_retrieval_alone_creates_only_its_own_tables(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "r.db")
    assert tables(db.read()) == RETRIEVAL_TABLES
    names = [row[0] for row in db.read().execute("SELECT name FROM _migrations ORDER BY rowid")]
    assert names == [m.name for m in RETRIEVAL]
    assert all(name.startswith("retrieval.") for name in names)
    db.close()


def test_each_owner_adds_its_own_tables_in_order(tmp_path: Path) -> None:
    assert OWNERS == (RETRIEVAL, AUTH, CHAT, SOURCES, USAGE)
    db = sqlite_utils.Database(sqlite3.connect(tmp_path / "r.db"))
    expected: set[str] = set()
    for migrations, owned in (
        (RETRIEVAL, RETRIEVAL_TABLES),
        (AUTH, AUTH_TABLES),
        (CHAT, CHAT_TABLES),
        (SOURCES, SOURCES_TABLES),
        (USAGE, USAGE_TABLES),
    ):
        apply_migrations(db, migrations)
        expected |= owned
        assert tables(db) == expected, migrations.owner
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []


def test_a_fresh_database_gets_every_owners_migrations_once(tmp_path: Path) -> None:
    path = fresh(tmp_path)
    with sqlite3.connect(path) as conn:
        assert tables(sqlite_utils.Database(conn)) == (
            RETRIEVAL_TABLES | AUTH_TABLES | CHAT_TABLES | SOURCES_TABLES | USAGE_TABLES
        )
    conn.close()
    applied = migration_rows(path)
    assert [name for name, _ in applied] == [m.name for owner in OWNERS for m in owner]
    assert {name.split(".")[0] for name, _ in applied} == {
        "retrieval",
        "auth",
        "chat",
        "sources",
        "usage",
    }
    open_database(path).close()  # reopening applies nothing
    assert migration_rows(path) == applied


def test_an_old_name_counts_as_applied_for_both_halves_of_a_split(tmp_path: Path) -> None:
    first, second, ran = Migrations("first"), Migrations("second"), []

    @first.add(was="m001_both")
    def m001_half(db: sqlite_utils.Database) -> None:
        ran.append("first half")

    @second.add(was="m001_both")
    def m001_other_half(db: sqlite_utils.Database) -> None:
        ran.append("other half")

    @second.add()
    def m002_new(db: sqlite_utils.Database) -> None:
        ran.append("new")

    db = sqlite_utils.Database(sqlite3.connect(tmp_path / "m.db"))
    apply_migrations(db, [])
    db.execute("INSERT INTO _migrations (name, applied_at) VALUES ('m001_both', 1.0)")
    db.conn.commit()
    for _ in range(2):
        apply_migrations(db, first)
        apply_migrations(db, second)
    assert ran == ["new"]
    assert [r["name"] for r in db.table("_migrations").rows] == ["m001_both", "second.m002_new"]
    with pytest.raises(AssertionError, match=r"two migrations named second\.m002_new"):
        second.add()(m002_new)


def test_every_migration_of_the_release_is_known_by_its_old_name() -> None:
    old = [name for owner in OWNERS for m in owner for name in m.was]
    assert sorted(set(old)) == OLD_NAMES
    split = [m.name for owner in OWNERS for m in owner if m.was == ("m008_accounts",)]
    assert split == ["auth.m008_accounts", "chat.m008_conversation_owners"]


def test_m004_links_existing_answers_to_their_questions(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db")
    db = sqlite_utils.Database(conn)
    apply_migrations(db, RETRIEVAL)
    apply_migrations(db, [m for m in CHAT if m.name < "chat.m004"])
    conn.execute(
        "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (1, 't', 0, 0)"
    )
    rows = [(1, "user"), (2, "assistant"), (3, "user"), (4, "user"), (5, "assistant")]
    conn.executemany(
        "INSERT INTO messages (id, conversation_id, role, content, created_at)"
        " VALUES (?, 1, ?, '', 0)",
        rows,
    )
    conn.commit()
    for owner in OWNERS:
        apply_migrations(db, owner)
    links = dict(conn.execute("SELECT id, reply_to FROM messages ORDER BY id").fetchall())
    assert links == {1: None, 2: 1, 3: None, 4: None, 5: 4}


def test_a_database_from_before_accounts_gets_the_rest(tmp_path: Path) -> None:
    """Recorded under bare names up to m007 (a release before accounts): the rest runs,
    owner by owner, and the schema ends as a fresh one's."""
    path = tmp_path / "old" / "ragdesk.db"
    path.parent.mkdir()
    db = sqlite_utils.Database(sqlite3.connect(path))
    for owner in OWNERS:
        apply_migrations(db, [m for m in owner if m.name.split(".")[1] < "m008"])
    db.execute("UPDATE _migrations SET name = substr(name, instr(name, '.') + 1)")
    db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('t', 0, 0)")
    db.conn.commit()
    old = migration_rows(path)
    assert sorted(name for name, _ in old) == [n for n in OLD_NAMES if n < "m008"]
    db.conn.close()
    open_database(path).close()
    applied = migration_rows(path)
    assert applied[: len(old)] == old
    assert [name for name, _ in applied[len(old) :]] == [
        "retrieval.m009_eval_runs_and_embedding_cache",
        "retrieval.m012_embedding_cache_pruning",
        *[name for name in SINCE_RELEASE if name.startswith("retrieval.")],  # owner by owner
        "auth.m008_accounts",
        "auth.m010_api_answer_sources",
        "auth.m011_session_last_seen",
        *[name for name in SINCE_RELEASE if name.startswith("auth.")],
        "chat.m008_conversation_owners",
        *[name for name in SINCE_RELEASE if not name.startswith(("auth.", "retrieval."))],
    ]
    assert schema(path) == schema(fresh(tmp_path))
    assert [row[:4] for row in contents(path)["conversations"]] == [(1, "t", 0.0, 0.0)]


# --- the release's data directory ------------------------------------------------------------
def test_the_release_database_has_the_schema_of_the_releases_migrations(tmp_path: Path) -> None:
    path = tmp_path / "release-schema.db"
    db = sqlite_utils.Database(sqlite3.connect(path))
    for owner in OWNERS:
        apply_migrations(db, [m for m in owner if m.applied(set(OLD_NAMES))])
    db.conn.close()
    assert schema(RELEASE) == schema(path)
    assert [name for name, _ in migration_rows(RELEASE)] == OLD_NAMES


def test_opening_the_release_database_runs_only_later_migrations_and_keeps_every_row(
    release: Settings, tmp_path: Path
) -> None:
    before = contents(release.db_path)
    open_database(release.db_path).close()
    after = contents(release.db_path)
    applied = migration_rows(release.db_path)
    assert applied[: len(OLD_NAMES)] == migration_rows(RELEASE)
    assert [name for name, _ in applied[len(OLD_NAMES) :]] == SINCE_RELEASE
    for table, rows in before.items():
        if table != "_migrations" and rows:  # added columns come after the old ones
            assert sorted(row[: len(rows[0])] for row in after[table]) == sorted(rows), table
    assert schema(release.db_path) == schema(fresh(tmp_path))
    open_database(release.db_path).close()
    assert contents(release.db_path) == after  # once upgraded, opening changes nothing


@pytest.mark.skipif(
    store_under_test() == "postgresql", reason="upgrades a released SQLite data directory"
)
def test_a_release_data_directory_opens_upgrades_and_answers(
    release: Settings, tmp_path: Path
) -> None:
    recorded = migration_rows(release.db_path)
    with TestClient(create_app(release)) as client:
        services = client.app.state.services
        services.wait_until_loaded(30)
        # The API keys authenticate, with their scope: staffer's sees only "handbook".
        bearer = {"Authorization": f"Bearer {KEY}"}
        listed = client.get("/api/conversations", headers=bearer).json()["conversations"]
        assert [(c["id"], c["title"]) for c in listed] == [(1, QUESTION)]
        documents = client.get("/api/documents", headers=bearer).json()["documents"]
        assert [(d["filename"], d["status"]) for d in documents] == [("handbook.md", "indexed")]
        scoped = {"Authorization": f"Bearer {SCOPED_KEY}"}
        collections = client.get("/api/collections", headers=scoped).json()["collections"]
        assert [c["name"] for c in collections] == ["handbook"]
        assert client.get("/api/documents", headers=scoped).json()["documents"] == []
        assert (
            client.get("/api/conversations", headers={"Authorization": "Bearer rdk_x"}).status_code
            == 401
        )

        # The user signs in; the conversation is there, answered, and goes on.
        login(client)  # tester, the tests' password
        conversation = client.get("/api/conversations/1").json()
        assert [m["role"] for m in conversation["messages"]] == ["user", "assistant"]
        assert conversation["messages"][1]["citations"][0]["document_id"] == 1
        assert services.conversations.is_pinned(1)
        follow_up = {"message": "And the meal allowance?", "conversation_id": 1}
        done = json.loads(sse_events(client.post("/api/chat", json=follow_up).text)[-1][1])
        assert done["conversation_id"] == 1
        assert [c["document_id"] for c in done["citations"]] == [1]
        assert "45 euros" in done["citations"][0]["snippet"]
    upgraded = migration_rows(release.db_path)
    assert upgraded[: len(recorded)] == recorded  # nothing re-ran
    assert [name for name, _ in upgraded[len(recorded) :]] == SINCE_RELEASE
    assert schema(release.db_path) == schema(fresh(tmp_path))


def test_a_release_refuses_a_database_a_newer_release_migrated(tmp_path: Path) -> None:
    """A rolling upgrade must not let an old front write to tables it no longer knows:
    a migration recorded that this release lacks is refused, with a clear message, on
    whichever store is under test."""
    from app.config.settings import Settings
    from retrieval.migrations import SchemaTooNew

    settings = Settings(data_dir=tmp_path / "data")
    db = open_database(settings)
    with db.write() as writer:
        writer.execute(
            "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)", ["chat.m999_future", 0.0]
        )
    db.close()
    with pytest.raises(SchemaTooNew, match="newer Ragdesk release"):
        open_database(settings)
