"""The sources' tables in the database: sources, the files each sync saw, claims, runs."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from typing import Any

from app.sources.records import RunStatus, Source, SourceFile, SyncRun, Tally
from retrieval.db import Database
from retrieval.sql import IntegrityError, insert_row


class SourceExists(Exception):
    """A source of that name exists already."""


class SourceStore:
    def __init__(self, db: Database):
        self.db = db

    # --- sources ----------------------------------------------------------------------------
    def add(self, **values: Any) -> Source:
        try:
            with self.db.write() as db:
                row_id = insert_row(db, "sources", {**values, "created_at": time.time()})
        except IntegrityError as exc:  # a name taken, on either store
            raise SourceExists(values.get("name", "")) from exc
        source = self.get(int(row_id or 0))
        assert source is not None
        return source

    def get(self, source_id: int) -> Source | None:
        rows = list(self.db.read().query("SELECT * FROM sources WHERE id = ?", [source_id]))
        return Source.from_row(rows[0]) if rows else None

    def by_name(self, name: str) -> Source | None:
        rows = list(self.db.read().query("SELECT * FROM sources WHERE name = ?", [name]))
        return Source.from_row(rows[0]) if rows else None

    def all(self) -> list[Source]:
        return [
            Source.from_row(r) for r in self.db.read().query("SELECT * FROM sources ORDER BY id")
        ]

    def delete(self, source_id: int) -> list[int]:
        """Delete the source, its file rows and runs; returns the documents it linked."""
        with self.db.write() as db:
            ids = [
                int(r[0])
                for r in db.execute(
                    "SELECT DISTINCT document_id FROM source_files WHERE source_id = ?", [source_id]
                )
            ]
            db.execute("DELETE FROM sources WHERE id = ?", [source_id])
        return ids

    def due(self, now: float) -> list[Source]:
        """Sources with an interval whose last run started at least that long ago (or never)."""
        rows = self.db.read().query(
            """SELECT s.* FROM sources s
               LEFT JOIN (SELECT source_id, MAX(started_at) AS last FROM sync_runs
                          GROUP BY source_id) r ON r.source_id = s.id
               WHERE s.interval_s > 0 AND (r.last IS NULL OR r.last + s.interval_s <= ?)
               ORDER BY s.id""",
            [now],
        )
        return [Source.from_row(row) for row in rows]

    # --- files ------------------------------------------------------------------------------
    def files(self, source_id: int) -> dict[str, SourceFile]:
        rows = self.db.read().query(
            "SELECT * FROM source_files WHERE source_id = ? ORDER BY path", [source_id]
        )
        return {row["path"]: SourceFile.from_row(row) for row in rows}

    def file_count(self, source_id: int) -> int:
        row = (
            self.db.read()
            .execute("SELECT COUNT(*) FROM source_files WHERE source_id = ?", [source_id])
            .fetchone()
        )
        return int(row[0])

    def link(
        self,
        source_id: int,
        path: str,
        *,
        document_id: int,
        content_hash: str,
        size: int,
        version: str,
        now: float,
    ) -> None:
        """Record that ``path`` holds ``document_id``'s content (first seen kept on update)."""
        with self.db.write() as db:
            db.execute(
                """INSERT INTO source_files (source_id, path, document_id, content_hash, size,
                       version, first_seen_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (source_id, path) DO UPDATE SET document_id = excluded.document_id,
                       content_hash = excluded.content_hash, size = excluded.size,
                       version = excluded.version, last_seen_at = excluded.last_seen_at""",
                [source_id, path, document_id, content_hash, size, version, now, now],
            )

    def touch(self, source_id: int, seen: Iterable[tuple[str, int, str]], now: float) -> None:
        """Mark (path, size, version) as seen now, in one transaction."""
        with self.db.write() as db:
            db.conn.executemany(
                "UPDATE source_files SET last_seen_at = ?, size = ?, version = ?"
                " WHERE source_id = ? AND path = ?",
                ((now, size, version, source_id, path) for path, size, version in seen),
            )

    def unlink(self, source_id: int, path: str) -> None:
        with self.db.write() as db:
            db.execute(
                "DELETE FROM source_files WHERE source_id = ? AND path = ?", [source_id, path]
            )

    def linked(self, document_id: int) -> bool:
        row = (
            self.db.read()
            .execute("SELECT 1 FROM source_files WHERE document_id = ? LIMIT 1", [document_id])
            .fetchone()
        )
        return row is not None

    # --- claims -----------------------------------------------------------------------------
    def claim(self, collection_id: int, content_hash: str, source_id: int) -> None:
        """Claim content a sync is about to submit, unless the collection holds it already
        (then it came by hand, or another way, and stays whatever the sources do)."""
        with self.db.write() as db:
            db.execute(
                """INSERT OR IGNORE INTO sync_claims
                       (collection_id, content_hash, source_id, claimed_at)
                   SELECT ?, ?, ?, ? WHERE NOT EXISTS (
                       SELECT 1 FROM documents WHERE collection_id = ? AND content_hash = ?)""",
                [collection_id, content_hash, source_id, time.time(), collection_id, content_hash],
            )

    def claimed(self, collection_id: int, content_hash: str) -> bool:
        row = (
            self.db.read()
            .execute(
                "SELECT 1 FROM sync_claims WHERE collection_id = ? AND content_hash = ?",
                [collection_id, content_hash],
            )
            .fetchone()
        )
        return row is not None

    def drop_claim(self, collection_id: int, content_hash: str) -> None:
        with self.db.write() as db:
            db.execute(
                "DELETE FROM sync_claims WHERE collection_id = ? AND content_hash = ?",
                [collection_id, content_hash],
            )

    def drop_stale_claims(self) -> None:
        """Claims whose document never came (a crash between claim and submit)."""
        with self.db.write() as db:
            db.execute(
                """DELETE FROM sync_claims WHERE NOT EXISTS (
                       SELECT 1 FROM documents d WHERE d.collection_id = sync_claims.collection_id
                       AND d.content_hash = sync_claims.content_hash)"""
            )

    # --- runs -------------------------------------------------------------------------------
    def start_run(self, source_id: int, trigger: str) -> int:
        with self.db.write() as db:
            row = {
                "source_id": source_id,
                "trigger": trigger,
                "status": "running",
                "started_at": time.time(),
            }
            return insert_row(db, "sync_runs", row)

    def finish_run(
        self, run_id: int, status: RunStatus, tally: Tally, error: str | None = None
    ) -> None:
        with self.db.write() as db:
            db.execute(
                """UPDATE sync_runs SET status = ?, finished_at = ?, added = ?, changed = ?,
                       removed = ?, unchanged = ?, failed = ?, skipped = ?, error = ?,
                       problems = ? WHERE id = ?""",
                [
                    status,
                    time.time(),
                    tally.added,
                    tally.changed,
                    tally.removed,
                    tally.unchanged,
                    tally.failed,
                    tally.skipped,
                    error,
                    tally.problems_json(),
                    run_id,
                ],
            )

    def interrupt_running(self, source_ids: Collection[int] | None = None) -> int:
        """Runs a stopped process left as running (at start-up, before any new one): all,
        or those of ``source_ids`` (the sources no live front is syncing)."""
        if source_ids is not None and not source_ids:
            return 0
        only = (
            "" if source_ids is None else f" AND source_id IN ({', '.join('?' * len(source_ids))})"
        )
        with self.db.write() as db:
            cursor = db.execute(
                "UPDATE sync_runs SET status = 'interrupted', finished_at = ?"  # noqa: S608
                f" WHERE status = 'running'{only}",
                [time.time(), *(source_ids or ())],
            )
        return int(cursor.rowcount)

    def running_sources(self) -> list[int]:
        rows = self.db.read().execute(
            "SELECT DISTINCT source_id FROM sync_runs WHERE status = 'running'"
        )
        return [int(row[0]) for row in rows]

    def runs(self, source_id: int, limit: int = 50) -> list[SyncRun]:
        rows = self.db.read().query(
            "SELECT * FROM sync_runs WHERE source_id = ? ORDER BY id DESC LIMIT ?",
            [source_id, limit],
        )
        return [SyncRun.from_row(row) for row in rows]

    def run(self, run_id: int) -> SyncRun | None:
        rows = list(self.db.read().query("SELECT * FROM sync_runs WHERE id = ?", [run_id]))
        return SyncRun.from_row(rows[0]) if rows else None
