"""Documents, pages, chunks and embeddings in the database (SQLite or PostgreSQL): the
source of truth."""

from __future__ import annotations

import json
import time
from collections import defaultdict, deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from retrieval.db import Database
from retrieval.display import shown
from retrieval.embedder import Vectors
from retrieval.index import IdArray
from retrieval.records import CollectionRecord, DocumentRecord
from retrieval.sql import Session, insert_row
from retrieval.types import (
    Box,
    ChunkSpan,
    DocumentKind,
    DocumentStatus,
    Hit,
    ParsedDocument,
    as_boxes,
)

DEFAULT_COLLECTION = "default"
# A new collection's id: past every id in use and every id ever deleted (the trigger of
# ``m022_collection_ids_never_reused`` keeps the highest), so no id names two collections.
NEXT_COLLECTION_ID = (
    "(SELECT MAX(COALESCE((SELECT MAX(id) FROM collections), 0),"
    " COALESCE((SELECT last FROM collection_ids_deleted), 0)) + 1)"
)


MAX_TITLE_CHARS = 500


def stored_title(title: str) -> str:
    """A document's title as stored, which is also the title its passages are embedded
    with (the embedding cache keys them by that text)."""
    return title[:MAX_TITLE_CHARS]


class DocumentGone(Exception):
    """The document was deleted while work on it was in flight."""


class LeaseLost(Exception):
    """Another process took the document over (this one's lease ran out): its work here
    must not be written."""


def _still_held(db: Session, document_id: int, holder: str | None) -> None:
    """Raise unless the document exists and, with a ``holder``, its lease is that one's
    (read inside the write transaction that follows, so no takeover slips in between)."""
    row = db.execute("SELECT claimed_by FROM documents WHERE id = ?", [document_id]).fetchone()
    if row is None:
        raise DocumentGone(document_id)
    if holder is not None and row[0] != holder:
        raise LeaseLost(document_id)


class CollectionGone(LookupError):
    """The collection an upload was for was deleted before its row was written."""


@dataclass(frozen=True)
class StoredChunks:
    """A document's passages as stored: their ids in order, and which of them it already
    held (ids kept from before: their vectors may still be in the index)."""

    ids: list[int]
    kept: frozenset[int]


_Held = dict[tuple[str | None, str], deque[int]]  # (heading, text) -> ids, oldest first


def _take(held: _Held, key: tuple[str | None, str]) -> int | None:
    ids = held.get(key)
    return ids.popleft() if ids else None


class DocumentStore:
    def __init__(self, db: Database):
        self.db = db

    # --- one-off flags ----------------------------------------------------------------------
    def has_flag(self, name: str) -> bool:
        rows = self.db.read().execute("SELECT 1 FROM flags WHERE name = ?", [name])
        return rows.fetchone() is not None

    def set_flag(self, name: str) -> None:
        with self.db.write() as db:
            db.execute(
                "INSERT OR IGNORE INTO flags (name, set_at) VALUES (?, ?)", [name, time.time()]
            )

    # --- collections ------------------------------------------------------------------------
    def ensure_collection(self, name: str = DEFAULT_COLLECTION) -> int:
        with self.db.write() as db:
            db.execute(
                "INSERT OR IGNORE INTO collections (id, name, created_at)"  # noqa: S608
                f" VALUES ({NEXT_COLLECTION_ID}, ?, ?)",
                [name, time.time()],
            )
            row = db.execute("SELECT id FROM collections WHERE name = ?", [name]).fetchone()
        return int(row[0])

    def collections(self) -> list[CollectionRecord]:
        """Every collection by name, in code point order (SQLite's, whatever collation a
        PostgreSQL server sorts text by)."""
        rows = self.db.read().query(
            """SELECT c.id, c.name, COUNT(d.id) AS document_count FROM collections c
               LEFT JOIN documents d ON d.collection_id = c.id GROUP BY c.id, c.name"""
        )
        return sorted((CollectionRecord(**row) for row in rows), key=lambda c: c.name)

    # --- documents --------------------------------------------------------------------------
    def add_document(
        self,
        *,
        collection_id: int,
        content_hash: str,
        filename: str,
        stored_name: str,
        kind: DocumentKind,
        size: int,
    ) -> tuple[DocumentRecord, bool]:
        """Insert a queued document; identical content in the collection returns the existing
        one instead, with ``created`` False."""
        now = time.time()
        with self.db.write() as db:
            found = db.execute("SELECT 1 FROM collections WHERE id = ?", [collection_id])
            if found.fetchone() is None:
                raise CollectionGone(collection_id)
            existing = db.execute(
                "SELECT id FROM documents WHERE collection_id = ? AND content_hash = ?",
                [collection_id, content_hash],
            ).fetchone()
            if existing is not None:
                document_id, created = int(existing[0]), False
            else:
                new_id = insert_row(
                    db,
                    "documents",
                    {
                        "collection_id": collection_id,
                        "content_hash": content_hash,
                        "filename": filename,
                        "stored_name": stored_name,
                        "kind": kind.value,
                        "size": size,
                        "status": DocumentStatus.QUEUED.value,
                        "created_at": now,
                        "updated_at": now,
                    },
                )
                document_id, created = new_id, True
        document = self.get_document(int(document_id))
        assert document is not None
        return document, created

    def get_document(self, document_id: int) -> DocumentRecord | None:
        rows = list(self.db.read().query("SELECT * FROM documents WHERE id = ?", [document_id]))
        return DocumentRecord.from_row(rows[0]) if rows else None

    def live_documents(self, document_ids: Collection[int]) -> set[int]:
        """Those of ``document_ids`` that still exist (not deleted)."""
        if not document_ids:
            return set()
        placeholders = ",".join("?" * len(document_ids))
        rows = self.db.read().execute(
            f"SELECT id FROM documents WHERE id IN ({placeholders})",  # noqa: S608
            list(document_ids),
        )
        return {int(row[0]) for row in rows}

    def list_documents(self, collection_id: int | None = None) -> list[DocumentRecord]:
        where, params = ("WHERE collection_id = ?", [collection_id]) if collection_id else ("", [])
        rows = self.db.read().query(f"SELECT * FROM documents {where} ORDER BY id DESC", params)  # noqa: S608
        return [DocumentRecord.from_row(row) for row in rows]

    def requeue_without_vectors(self, model_id: str) -> int:
        """Send indexed documents that lack vectors from ``model_id`` back to the queue.

        After the embedding model changes, every document is re-embedded with the new one
        instead of silently dropping out of search.
        """
        with self.db.write() as db:
            cursor = db.execute(
                """UPDATE documents SET status = ?, updated_at = ?
                   WHERE status = ? AND EXISTS (
                       SELECT 1 FROM chunks c
                       LEFT JOIN embeddings e ON e.chunk_id = c.id AND e.model_id = ?
                       WHERE c.document_id = documents.id AND e.chunk_id IS NULL)""",
                [DocumentStatus.QUEUED.value, time.time(), DocumentStatus.INDEXED.value, model_id],
            )
        return int(cursor.rowcount)

    def unfinished_documents(self) -> list[int]:
        terminal = (DocumentStatus.INDEXED.value, DocumentStatus.FAILED.value)
        rows = self.db.read().query(
            "SELECT id FROM documents WHERE status NOT IN (?, ?) ORDER BY id", terminal
        )
        return [int(row["id"]) for row in rows]

    def set_status(
        self,
        document_id: int,
        status: DocumentStatus,
        error: str | None = None,
        *,
        holder: str | None = None,
    ) -> None:
        """With a ``holder``, only while that ingestion lease holds the document
        (``LeaseLost`` otherwise): a replica whose lease was taken over marks nothing."""
        with self.db.write() as db:
            if holder is not None:
                _still_held(db, document_id, holder)
            cursor = db.execute(
                "UPDATE documents SET status = ?, error = ?, updated_at = ? WHERE id = ?",
                [status.value, error, time.time(), document_id],
            )
        if cursor.rowcount == 0:
            raise DocumentGone(document_id)

    def stored_name_in_use(self, stored_name: str) -> bool:
        rows = self.db.read().query(
            "SELECT 1 FROM documents WHERE stored_name = ? LIMIT 1", [stored_name]
        )
        return any(True for _ in rows)

    def stored_names(self) -> set[str]:
        """The stored file of every document (what the uploads directory must keep).

        Read on the writer connection: never an older snapshot than the last commit."""
        with self.db.write() as db:
            rows = db.execute("SELECT DISTINCT stored_name FROM documents").fetchall()
        return {str(row[0]) for row in rows}

    def delete_document(self, document_id: int) -> IdArray:
        """Delete the document and everything derived from it; returns its chunk ids."""
        with self.db.write() as db:
            ids = [
                r[0]
                for r in db.execute("SELECT id FROM chunks WHERE document_id = ?", [document_id])
            ]
            cursor = db.execute("DELETE FROM documents WHERE id = ?", [document_id])
        if cursor.rowcount == 0:
            raise DocumentGone(document_id)
        return np.asarray(ids, dtype=np.int64)

    # --- content ----------------------------------------------------------------------------
    def replace_content(
        self,
        document_id: int,
        parsed: ParsedDocument,
        chunks: Sequence[ChunkSpan],
        *,
        holder: str | None = None,
        lease_s: float | None = None,
    ) -> StoredChunks:
        """Store pages and chunks, in the order of ``chunks``.

        A passage is its document plus its content: one whose heading and text the
        document already holds keeps its id (and so every citation of it, and its vector),
        with its place updated; the rest are new, and passages no longer there go. So
        re-ingesting an unchanged file changes no passage id, and an interrupted run's
        passages are reused rather than duplicated. With a ``holder``, only while that
        ingestion lease holds the document (``LeaseLost`` otherwise), and the lease renewed
        for ``lease_s`` as the transaction commits: a large document's passages can take
        longer to store than a lease lasts, and the holder's own renewals wait behind this
        transaction's write lock, as another replica's claim does."""
        with self.db.write() as db:
            _still_held(db, document_id, holder)
            held: _Held = defaultdict(deque)
            for chunk_id, heading, text in db.execute(
                "SELECT id, heading, text FROM chunks WHERE document_id = ? ORDER BY id",
                [document_id],
            ):
                held[(heading, text)].append(int(chunk_id))
            kept = [_take(held, (c.heading, c.text)) for c in chunks]
            gone = [(chunk_id,) for ids in held.values() for chunk_id in ids]
            # Every write on ``db.conn``: sqlite-utils' ``execute`` commits a write that
            # opens SQLite's transaction itself, which would split this one in pieces.
            conn = db.conn
            conn.executemany("DELETE FROM chunks WHERE id = ?", gone)
            conn.execute("DELETE FROM pages WHERE document_id = ?", [document_id])
            # The title first: the full-text trigger copies it into each chunk's row (and
            # another trigger renews it in the rows of kept chunks).
            conn.execute(
                "UPDATE documents SET title = ?, page_count = ?, chunk_count = ?, updated_at = ?"
                " WHERE id = ?",
                [
                    stored_title(parsed.title),
                    len(parsed.pages),
                    len(chunks),
                    time.time(),
                    document_id,
                ],
            )
            conn.executemany(
                "INSERT INTO pages (document_id, number, text, label) VALUES (?, ?, ?, ?)",
                [(document_id, page.number, page.text, page.label) for page in parsed.pages],
            )
            ids: list[int] = []
            for chunk, chunk_id in zip(chunks, kept, strict=True):
                boxes = json.dumps(chunk.boxes) if chunk.boxes else None
                if chunk_id is not None:
                    conn.execute(
                        'UPDATE chunks SET page = ?, start = ?, "end" = ?, boxes = ?,'
                        " table_context = ? WHERE id = ?",
                        [chunk.page, chunk.start, chunk.end, boxes, chunk.table, chunk_id],
                    )
                    ids.append(chunk_id)
                    continue
                cursor = conn.execute(
                    'INSERT INTO chunks (document_id, page, start, "end", heading, text, boxes,'
                    " table_context) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        document_id,
                        chunk.page,
                        chunk.start,
                        chunk.end,
                        chunk.heading,
                        chunk.text,
                        boxes,
                        chunk.table,
                    ],
                )
                ids.append(int(cursor.lastrowid or 0))
            if holder is not None and lease_s is not None:
                conn.execute(
                    "UPDATE documents SET claimed_until = ? WHERE id = ? AND claimed_by = ?",
                    [time.time() + lease_s, document_id, holder],
                )
        return StoredChunks(ids, frozenset(i for i in kept if i is not None))

    def save_embeddings(
        self,
        document_id: int,
        chunk_ids: Sequence[int],
        model_id: str,
        vectors: Vectors,
        *,
        holder: str | None = None,
    ) -> None:
        """Store a document's vectors and mark it indexed, in one transaction (its note,
        what the parse left out, stays); with a ``holder``, only while that ingestion
        lease holds the document (``LeaseLost`` otherwise)."""
        rows = (
            (chunk_id, model_id, self.db.vector_param(vector))
            for chunk_id, vector in zip(chunk_ids, vectors, strict=True)
        )
        with self.db.write() as db:
            _still_held(db, document_id, holder)
            # On ``db.conn``, so the status and the vectors commit together (sqlite-utils'
            # ``execute`` would commit this first write alone: indexed, without vectors).
            cursor = db.conn.execute(
                "UPDATE documents SET status = ?, updated_at = ? WHERE id = ?",
                [DocumentStatus.INDEXED.value, time.time(), document_id],
            )
            if cursor.rowcount == 0:  # deleted while its vectors were computed
                raise DocumentGone(document_id)
            db.conn.executemany(
                "INSERT INTO embeddings (chunk_id, model_id, vector) VALUES (?, ?, ?)"
                " ON CONFLICT (chunk_id) DO UPDATE SET model_id = excluded.model_id,"
                " vector = excluded.vector",
                rows,
            )

    def embedded_chunk_ids(self, model_id: str) -> IdArray:
        """Chunks of indexed documents that have a vector from ``model_id``."""
        rows = self.db.read().execute(
            """SELECT e.chunk_id FROM embeddings e JOIN chunks c ON c.id = e.chunk_id
               JOIN documents d ON d.id = c.document_id
               WHERE e.model_id = ? AND d.status = ?""",
            [model_id, DocumentStatus.INDEXED.value],
        )
        return np.fromiter((row[0] for row in rows), dtype=np.int64)

    def chunk_ids_in(self, collection_ids: Collection[int]) -> IdArray:
        """Chunks of indexed documents in these collections: what a scoped search may return."""
        placeholders = ",".join("?" * len(collection_ids))
        rows = self.db.read().execute(
            f"""SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id
                WHERE d.status = ? AND d.collection_id IN ({placeholders})""",  # noqa: S608
            [DocumentStatus.INDEXED.value, *collection_ids],
        )
        return np.fromiter((row[0] for row in rows), dtype=np.int64)

    def vectors(self, chunk_ids: Iterable[int], dimension: int) -> Vectors:
        ids = [int(i) for i in chunk_ids]
        placeholders = ",".join("?" * len(ids))
        rows = self.db.read().execute(
            f"SELECT chunk_id, vector FROM embeddings WHERE chunk_id IN ({placeholders})",  # noqa: S608
            ids,
        )
        by_id = {row[0]: self.db.vector_value(row[1]) for row in rows}
        return np.stack([by_id[i] for i in ids]) if ids else np.zeros((0, dimension), np.float32)

    def vectors_by_id(self, chunk_ids: Sequence[int], model_id: str) -> dict[int, Vectors]:
        """Stored vectors of ``model_id`` for those chunks that have one."""
        placeholders = ",".join("?" * len(chunk_ids))
        rows = self.db.read().execute(
            f"SELECT chunk_id, vector FROM embeddings WHERE model_id = ?"  # noqa: S608
            f" AND chunk_id IN ({placeholders})",
            [model_id, *chunk_ids],
        )
        return {int(row[0]): self.db.vector_value(row[1]) for row in rows}

    def hits(self, scored: Sequence[tuple[int, float]]) -> list[Hit]:
        """Hydrate (chunk id, score) pairs, dropping chunks deleted meanwhile; keeps the order."""
        if not scored:
            return []
        placeholders = ",".join("?" * len(scored))
        rows = self.db.read().query(
            f"""SELECT c.id, c.document_id, c.page, c.start, c."end", c.text, c.boxes,
                       c.table_context, COALESCE(d.title, d.filename) AS title, p.label
                FROM chunks c JOIN documents d ON d.id = c.document_id
                LEFT JOIN pages p ON p.document_id = c.document_id AND p.number = c.page
                WHERE c.id IN ({placeholders})""",  # noqa: S608
            [chunk_id for chunk_id, _ in scored],
        )
        by_id = {row["id"]: row for row in rows}
        return [
            Hit(
                chunk_id=chunk_id,
                document_id=row["document_id"],
                title=shown(row["title"]),
                page=row["page"],
                start=row["start"],
                end=row["end"],
                text=row["text"],
                score=score,
                boxes=parse_boxes(row["boxes"]),
                table=row["table_context"],
                label=row["label"] or "",
            )
            for chunk_id, score in scored
            if (row := by_id.get(chunk_id)) is not None
        ]

    def labelled_page(self, document_id: int, page: int) -> tuple[str, str] | None:
        """A page's text and what people call it ("Slide 3", "Sheet Prices"; "Page n" by
        default), in one read; None for no such page."""
        rows = list(
            self.db.read().query(
                "SELECT text, label FROM pages WHERE document_id = ? AND number = ?",
                [document_id, page],
            )
        )
        if not rows:
            return None
        return str(rows[0]["text"]), str(rows[0]["label"]) or f"Page {page}"

    def page_text(self, document_id: int, page: int) -> str | None:
        rows = list(
            self.db.read().query(
                "SELECT text FROM pages WHERE document_id = ? AND number = ?", [document_id, page]
            )
        )
        return str(rows[0]["text"]) if rows else None

    def chunk(self, chunk_id: int) -> Hit | None:
        found = self.hits([(chunk_id, 1.0)])
        return found[0] if found else None


def parse_boxes(raw: str | None) -> tuple[Box, ...]:
    """A passage's stored boxes (none when NULL or not as written)."""
    if not raw:
        return ()
    try:
        return as_boxes(json.loads(raw))
    except (ValueError, TypeError, IndexError, KeyError):
        return ()
