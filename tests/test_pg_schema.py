"""The PostgreSQL baseline (each owner's ``pg_schema``) against the SQLite schema the
migrations leave: the same tables with the same columns in the same order, types, NOT
NULLs, defaults, keys, indexes, foreign keys, checks and triggers; and the triggers,
the case-insensitive names and the vectors at work. On a real PostgreSQL 16 with
pgvector: pgserver, PostgreSQL built into a wheel, one server for the module."""

from __future__ import annotations

import re
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.auth.pg_schema import PG_MIGRATIONS as AUTH
from app.chat.pg_schema import PG_MIGRATIONS as CHAT
from app.migrations import OWNERS, open_database
from app.sources.pg_schema import PG_MIGRATIONS as SOURCES
from app.usage.pg_schema import PG_MIGRATIONS as USAGE
from retrieval import pg_schema
from retrieval.migrations import Migrations

pgserver = pytest.importorskip("pgserver", reason="pgserver (PostgreSQL in a wheel) not installed")
psycopg = pytest.importorskip("psycopg", reason="psycopg not installed")

PG_OWNERS: tuple[Migrations, ...] = (pg_schema.PG_MIGRATIONS, AUTH, CHAT, SOURCES, USAGE)
FTS = {f"chunks_fts{part}" for part in ("", "_data", "_idx", "_content", "_docsize", "_config")}
SQLITE_ONLY = {"_migrations", "sqlite_sequence", *FTS}
# PostgreSQL only: the lexical index that stands in for FTS5, and the rate limits fronts
# share (SQLite has one front, which keeps them in memory).
PG_ONLY = {
    "chunk_terms",
    "chunk_lengths",
    "chunk_terms_stats",
    "rate_buckets",
    "rate_failures",
}
SQLITE_TO_PG_TYPE = {"INTEGER": "int8", "REAL": "float8", "TEXT": "text", "BLOB": "bytea"}
PG_TYPE_EXCEPTIONS = {("embeddings", "vector"): "vector"}
ON_DELETE = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}


@pytest.fixture(scope="module")
def server(pg_server: Any) -> Any:
    """The session's PostgreSQL (tests/pg_kit.py; skipped with the reason when none starts)."""
    return pg_server.server


@pytest.fixture
def pg(server: Any) -> Iterator[Any]:
    """A fresh database with every owner's baseline applied, in the owners' order."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server.get_uri(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        with psycopg.connect(server.get_uri(name), autocommit=True) as conn:
            with conn.transaction():
                for owner in PG_OWNERS:
                    for migration in owner:
                        migration.apply(conn)
            yield conn
    finally:
        with psycopg.connect(server.get_uri(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def lite() -> Iterator[Any]:
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(Path(tmp) / "x.db")
        try:
            yield db.read()
        finally:
            db.close()


def sqlite_tables(lite: Any) -> list[str]:
    rows = lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return sorted(row[0] for row in rows if row[0] not in SQLITE_ONLY)


def pg_tables(pg: Any) -> set[str]:
    rows = pg.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {row[0] for row in rows}


def pg_default(default: str | None) -> str | None:
    """PostgreSQL's spelling of a default in SQLite's: no casts, bytes as x''."""
    if default is None:
        return None
    default = re.sub(r"::[a-z ]+$", "", default)
    return "x''" if default == "'\\x'" else default


def sqlite_indexes(lite: Any, table: str) -> list[tuple[tuple[str, ...], bool, bool]]:
    """Keys (NOCASE ones as lower(name), as PostgreSQL has them), unique, partial."""
    shapes = []
    for _, name, unique, origin, partial in lite.execute(f"PRAGMA index_list('{table}')"):
        if origin == "pk":
            continue  # compared as the primary key
        info = lite.execute(f"PRAGMA index_xinfo('{name}')").fetchall()
        keys = tuple(
            f"lower({column})" if collation == "NOCASE" else column
            for _, _, column, _, collation, key in info
            if key
        )
        shapes.append((keys, bool(unique), bool(partial)))
    return sorted(shapes)


def pg_indexes(pg: Any, table: str) -> list[tuple[tuple[str, ...], bool, bool]]:
    rows = pg.execute(
        "SELECT indexrelid, indisunique, indpred IS NOT NULL, indnkeyatts FROM pg_index"
        " WHERE indrelid = %s::regclass AND NOT indisprimary",
        [table],
    ).fetchall()
    shapes = []
    for index, unique, partial, count in rows:
        keys = tuple(
            pg.execute("SELECT pg_get_indexdef(%s, %s, true)", [index, k]).fetchone()[0]
            for k in range(1, count + 1)
        )
        shapes.append((keys, unique, partial))
    return sorted(shapes)


def sqlite_foreign_keys(lite: Any, table: str) -> list[tuple[Any, ...]]:
    keys: dict[int, tuple[list[str], str, list[str], str]] = {}
    for key, _, parent, column, parent_column, _, on_delete, _ in lite.execute(
        f"PRAGMA foreign_key_list('{table}')"
    ):
        columns, _, parent_columns, _ = keys.setdefault(key, ([], parent, [], on_delete))
        columns.append(column)
        parent_columns.append(parent_column)
    return sorted((tuple(c), p, tuple(pc), d) for c, p, pc, d in keys.values())


def pg_foreign_keys(pg: Any, table: str) -> list[tuple[Any, ...]]:
    rows = pg.execute(
        """SELECT
            ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
                  JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n
                  ORDER BY k.i),
            c.confrelid::regclass::text,
            ARRAY(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY k(n, i)
                  JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n
                  ORDER BY k.i),
            c.confdeltype
        FROM pg_constraint c WHERE c.contype = 'f' AND c.conrelid = %s::regclass""",
        [table],
    ).fetchall()
    return sorted((tuple(c), p, tuple(pc), ON_DELETE[d]) for c, p, pc, d in rows)


def test_each_owner_has_one_baseline_in_the_sqlite_owners_order() -> None:
    assert [m.owner for m in PG_OWNERS] == [m.owner for m in OWNERS]
    for owner in PG_OWNERS:
        assert [m.name for m in owner][:1] == [f"{owner.owner}.m001_baseline"]
    # then the lexical index's triggers and its statistics (retrieval/pg_lexical.py)
    assert [m.name for m in pg_schema.PG_MIGRATIONS][1:] == [
        "retrieval.m002_lexical_terms",
        "retrieval.m003_lexical_stats",
        "retrieval.m004_tables_and_page_labels",
        "retrieval.m005_table_headers_searched",
    ]
    lexical = pg_schema.LEXICAL_STATEMENTS + pg_schema.LEXICAL_STATS_STATEMENTS
    assert [s for s in lexical if "?" in s or "%" in s] == []
    assert pg_schema.STATEMENTS[0] == "CREATE EXTENSION IF NOT EXISTS vector"


def test_statements_hold_nothing_a_driver_reads_as_a_placeholder() -> None:
    # Run with parameters or through the ``?`` translation, they must reach PostgreSQL whole.
    for module in ("retrieval", "app.auth", "app.chat", "app.sources", "app.usage"):
        statements = __import__(f"{module}.pg_schema", fromlist=["STATEMENTS"]).STATEMENTS
        assert [s for s in statements if "?" in s or "%" in s] == [], module


def test_every_sqlite_table_is_in_postgresql_with_the_same_columns(lite: Any, pg: Any) -> None:
    tables = sqlite_tables(lite)
    assert pg_tables(pg) == set(tables) | PG_ONLY
    for table in tables:
        lite_columns = lite.execute(f"PRAGMA table_info('{table}')").fetchall()
        names = [c[1] for c in lite_columns]
        pg_columns = pg.execute(
            "SELECT column_name, udt_name, is_nullable = 'NO', column_default, is_identity"
            " FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s"
            " ORDER BY ordinal_position",
            [table],
        ).fetchall()
        assert [c[0] for c in pg_columns] == names, table
        sqlite_pk = tuple(c[1] for c in sorted(lite_columns, key=lambda c: c[5]) if c[5])
        for (_, name, kind, notnull, default, pk), (_, udt, pg_notnull, pg_def, identity) in zip(
            lite_columns, pg_columns, strict=True
        ):
            expected = PG_TYPE_EXCEPTIONS.get((table, name), SQLITE_TO_PG_TYPE[kind])
            assert udt == expected, (table, name)
            assert pg_notnull == bool(notnull or pk), (table, name)
            assert pg_default(pg_def) == default, (table, name)
            assert (identity == "YES") == (sqlite_pk == ("id",) and name == "id"), (table, name)
        pg_pk = pg.execute(
            "SELECT ARRAY(SELECT a.attname::text FROM unnest(i.indkey) WITH ORDINALITY k(n, o)"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n ORDER BY k.o)"
            " FROM pg_index i WHERE i.indrelid = %s::regclass AND i.indisprimary",
            [table],
        ).fetchone()
        assert (tuple(pg_pk[0]) if pg_pk else ()) == sqlite_pk, table


def test_keys_indexes_checks_and_triggers_match(lite: Any, pg: Any) -> None:
    for table in sqlite_tables(lite):
        assert pg_indexes(pg, table) == sqlite_indexes(lite, table), table
        assert pg_foreign_keys(pg, table) == sqlite_foreign_keys(lite, table), table
        sql = lite.execute("SELECT sql FROM sqlite_master WHERE name = ?", [table]).fetchone()[0]
        checks = pg.execute(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'c' AND conrelid = %s::regclass",
            [table],
        ).fetchone()[0]
        assert checks == len(re.findall(r"\bCHECK\b", sql, re.IGNORECASE)), table
        rows = lite.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall()
        assert pg.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall() == [
            tuple(row) for row in rows
        ], table
    named = lite.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    ).fetchall()
    pg_named = {row[0] for row in pg.execute("SELECT indexname FROM pg_indexes").fetchall()}
    assert {row[0] for row in named} - pg_named == set()
    triggers = lite.execute(
        "SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'"
        " AND name NOT LIKE 'chunks_fts%'"
    ).fetchall()
    pg_triggers = pg.execute(
        "SELECT tgname, tgrelid::regclass::text FROM pg_trigger WHERE NOT tgisinternal"
        " AND tgname NOT LIKE 'chunk_terms%'"  # the lexical index's, in place of chunks_fts's
    ).fetchall()
    assert set(pg_triggers) == {tuple(row) for row in triggers}


def test_a_deleted_collection_leaves_the_highest_id_deleted(pg: Any) -> None:
    pg.execute("INSERT INTO collections (id, name) VALUES (5, 'five'), (3, 'three')")
    pg.execute("DELETE FROM collections WHERE id = 5")
    assert pg.execute('SELECT "only", last FROM collection_ids_deleted').fetchall() == [(1, 5)]
    pg.execute("DELETE FROM collections WHERE id = 3")
    assert pg.execute("SELECT last FROM collection_ids_deleted").fetchall() == [(5,)]


def add_chunks(pg: Any, *texts: str) -> list[int]:
    collection = pg.execute(
        "INSERT INTO collections (name) VALUES (%s) RETURNING id", [uuid.uuid4().hex]
    ).fetchone()[0]
    document = pg.execute(
        "INSERT INTO documents (collection_id, content_hash, filename, stored_name, kind,"
        " size, title, status, created_at, updated_at)"
        " VALUES (%s, 'h', 'a.txt', 's', 'txt', 1, 'A', 'ready', 0, 0) RETURNING id",
        [collection],
    ).fetchone()[0]
    return [
        pg.execute(
            'INSERT INTO chunks (document_id, page, start, "end", text)'
            " VALUES (%s, 1, 0, 1, %s) RETURNING id",
            [document, text],
        ).fetchone()[0]
        for text in texts
    ]


def test_an_edit_of_a_passage_or_its_title_drops_its_cache_key(pg: Any) -> None:
    first, second = add_chunks(pg, "one", "two")
    pg.execute(
        "INSERT INTO chunk_text_keys (chunk_id, text_sha256) VALUES (%s, 'a'), (%s, 'b')",
        [first, second],
    )

    def keyed() -> list[int]:
        return [r[0] for r in pg.execute("SELECT chunk_id FROM chunk_text_keys ORDER BY 1")]

    pg.execute("UPDATE chunks SET text = 'uno' WHERE id = %s", [first])
    assert keyed() == [second]
    pg.execute("UPDATE documents SET status = 'failed', title = title")  # the same title
    assert keyed() == [second]
    pg.execute("UPDATE documents SET title = 'B'")
    assert keyed() == []


def test_names_of_users_and_groups_are_unique_whatever_their_case(pg: Any) -> None:
    user = "INSERT INTO users (name, role, password_hash, created_at) VALUES (%s, 'staff', 'x', 0)"
    group = "INSERT INTO groups (name, created_at) VALUES (%s, 0)"
    pg.execute(user, ["Ann"])
    pg.execute(group, ["Ops"])
    with pytest.raises(psycopg.errors.UniqueViolation):
        pg.execute(user, ["aNN"])
    with pytest.raises(psycopg.errors.UniqueViolation):
        pg.execute(group, ["OPS"])
    # Collections' names are case-sensitive, as in SQLite.
    pg.execute("INSERT INTO collections (name) VALUES ('Docs'), ('docs')")


def test_a_question_has_one_current_answer_and_any_number_of_versions(pg: Any) -> None:
    pg.execute("INSERT INTO conversations (id) VALUES (1)")
    question = pg.execute(
        "INSERT INTO messages (conversation_id, role, content, created_at)"
        " VALUES (1, 'user', 'q', 0) RETURNING id"
    ).fetchone()[0]
    answer = (
        "INSERT INTO messages (conversation_id, role, content, created_at, reply_to, superseded)"
        " VALUES (1, 'assistant', 'a', 0, %s, %s)"
    )
    pg.execute(answer, [question, 1])
    pg.execute(answer, [question, 1])
    pg.execute(answer, [question, 0])
    with pytest.raises(psycopg.errors.UniqueViolation):
        pg.execute(answer, [question, 0])


def test_vectors_of_any_dimension_are_stored_and_found_by_inner_product(pg: Any) -> None:
    east, north, small = add_chunks(pg, "east", "north", "small")
    pg.execute(
        "INSERT INTO embeddings (chunk_id, model_id, vector) VALUES"
        " (%s, 'm', '[1, 0, 0]'), (%s, 'm', '[0, 1, 0]'), (%s, 'other', '[1, 0]')",
        [east, north, small],
    )
    nearest = pg.execute(
        "SELECT chunk_id FROM embeddings WHERE model_id = 'm'"
        " ORDER BY vector <#> %s::vector LIMIT 1",
        ["[0.2, 0.9, 0.1]"],
    ).fetchone()[0]
    assert nearest == north
    pg.execute("DELETE FROM chunks WHERE id = %s", [north])
    assert pg.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 2
