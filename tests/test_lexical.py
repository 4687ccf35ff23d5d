"""BM25 over FTS5: hostile queries, and the index kept level on ingest, re-ingest, delete."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from retrieval.lexical import LexicalIndex, fts_query
from retrieval.migrations import MIGRATIONS, apply_migrations
from retrieval.types import DocumentStatus
from tests.retrieval_kit import Kit, make_kit

HANDBOOK = (
    b"# Travel policy\n\nEmployees may claim a daily meal allowance of 45 euros when "
    b"travelling abroad.\n\n# Security\n\nThe emergency exit code is XK-4471.\n"
)

HOSTILE = [
    "AND OR NEAR",
    'AND OR NEAR "',
    '"',
    '""""',
    "NOT",
    "*",
    "^",
    "(((",
    ")",
    "NEAR(a b, 3)",
    "title:secret",
    "-",
    "+",
    "{heading text}: x",
    "'; DROP TABLE chunks; --",
    "\x00",
    "?!…—",
    "",
    " \t\n",
]


def ingest(kit: Kit, data: bytes = HANDBOOK, name: str = "h.md") -> int:
    index, _ = kit.open_index()
    document, _ = kit.library.submit(data=data, filename=name, collection_id=kit.collection_id)
    kit.worker(index).ingest(document.id)
    return document.id


def fts_rows(kit: Kit) -> int:
    return int(kit.db.read().execute("SELECT count(*) FROM chunks_fts").fetchone()[0])


def test_query_words_are_quoted_and_operators_dropped() -> None:
    assert fts_query('meal "allowance" AND abroad*') == '"meal" OR "allowance" OR "abroad"'
    assert fts_query("What is THE exit code?") == '"exit" OR "code"'
    assert fts_query("near the river") == '"near" OR "river"'  # lower case is a word
    assert fts_query("Ελλάδα café") == '"ελλάδα" OR "café"'
    for text in HOSTILE:
        query = fts_query(text)
        assert query is None or query.count('"') % 2 == 0, (text, query)


@pytest.mark.parametrize("query", [*HOSTILE, "exit AND (code", 'code" OR "x', "a" * 5000])
def test_hostile_queries_never_raise(tmp_path: Path, query: str) -> None:
    kit = make_kit(tmp_path)
    ingest(kit)
    hits = LexicalIndex(kit.db).search(query, 5)
    assert isinstance(hits, list)
    if query in HOSTILE:
        assert hits == []


def test_bm25_finds_rare_words_best_first(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    ingest(kit)
    lexical = LexicalIndex(kit.db)
    [(chunk_id, score)] = lexical.search("XK-4471 exit", 5)
    hit = kit.store.chunk(chunk_id)
    assert hit is not None and "XK-4471" in hit.text and score > 0
    # Porter stemming: "allowances" finds "allowance".
    [(chunk_id, _)] = lexical.search("allowances", 5)
    assert "45 euros" in kit.store.chunk(chunk_id).text  # type: ignore[union-attr]
    assert lexical.search("xylophone quasar", 5) == []


def test_index_follows_ingest_reingest_and_delete(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    document_id = ingest(kit)
    chunks = kit.store.get_document(document_id).chunk_count  # type: ignore[union-attr]
    assert fts_rows(kit) == chunks >= 2
    # The title is indexed with each chunk (the first heading names the document).
    assert LexicalIndex(kit.db).search("policy euros", 1)
    # Re-ingest (as after an embedding model change): same rows, no duplicates.
    kit.store.set_status(document_id, DocumentStatus.QUEUED)
    index, _ = kit.open_index()
    kit.worker(index).ingest(document_id)
    assert fts_rows(kit) == chunks
    assert len(LexicalIndex(kit.db).search("XK-4471", 5)) == 1
    kit.library.delete(document_id)  # the chunks go by ON DELETE CASCADE
    assert fts_rows(kit) == 0
    assert LexicalIndex(kit.db).search("XK-4471", 5) == []


def test_documents_not_yet_indexed_are_not_found(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    document_id = ingest(kit)
    kit.store.set_status(document_id, DocumentStatus.EMBEDDING)
    assert LexicalIndex(kit.db).search("XK-4471", 5) == []


def test_collection_filter(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    ingest(kit)
    other = kit.store.ensure_collection("other")
    lexical = LexicalIndex(kit.db)
    assert lexical.search("XK-4471", 5, collection_ids={kit.collection_id})
    assert lexical.search("XK-4471", 5, collection_ids={other}) == []
    assert lexical.search("XK-4471", 5, collection_ids=set()) == []


def test_migration_indexes_chunks_stored_before_it(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db")
    db = sqlite_utils.Database(conn)
    before = [m for m in MIGRATIONS if m.name < "retrieval.m006"]
    apply_migrations(db, before)
    db.execute("INSERT INTO collections (name, created_at) VALUES ('default', 0)")
    db.execute(
        "INSERT INTO documents (collection_id, content_hash, filename, stored_name, kind, size,"
        " title, status, created_at, updated_at) VALUES (1, 'h', 'f.md', 's', 'markdown', 1,"
        " 'Old manual', 'indexed', 0, 0)"
    )
    db.execute(
        'INSERT INTO chunks (document_id, page, start, "end", text)'
        " VALUES (1, 1, 0, 9, 'turbine')"
    )
    conn.commit()
    apply_migrations(db)
    rows = db.execute("SELECT rowid, title FROM chunks_fts WHERE chunks_fts MATCH 'turbine'")
    assert rows.fetchall() == [(1, "Old manual")]
    db.execute("UPDATE documents SET title = 'New manual' WHERE id = 1")
    assert db.execute("SELECT title FROM chunks_fts").fetchall() == [("New manual",)]
