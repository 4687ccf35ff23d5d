"""The answer audit: which passages were shown to whom (user and key) for each answer."""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.auth.principal import Principal
from app.chat.records import Message
from retrieval.db import Database


@dataclass(frozen=True)
class ShownChunk:
    message_id: int
    chunk_id: int
    document_id: int
    user_id: int | None
    key_id: int | None
    shown_at: float


class Audit:
    def __init__(self, db: Database):
        self.db = db

    def record_answer(self, principal: Principal, answer: Message) -> int:
        """Record the passages shown for ``answer``: those listed with it and those it
        cites (an earlier turn's source cited again was shown again); returns how many."""
        shown = {c.chunk_id: c.document_id for c in answer.citations}
        if answer.context is not None:
            shown.update(
                (s.citation.chunk_id, s.citation.document_id) for s in answer.context.sources
            )
        now = time.time()
        user, key = principal.user.id, principal.key_id
        rows = [(answer.id, chunk, document, user, key, now) for chunk, document in shown.items()]
        with self.db.write() as db:
            db.conn.executemany(
                "INSERT OR IGNORE INTO answer_sources"
                " (message_id, chunk_id, document_id, user_id, key_id, shown_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)

    def record_request(
        self, principal: Principal, request_id: str, shown: list[tuple[int, int]]
    ) -> int:
        """Record the passages shown to the model for a grounded ``/v1`` answer (which is
        not stored as a message), under its response id: ``shown`` holds (chunk id, document
        id) pairs. Returns how many."""
        now = time.time()
        rows = [
            (request_id, chunk_id, document_id, principal.user.id, principal.key_id, now)
            for chunk_id, document_id in shown
        ]
        with self.db.write() as db:
            db.conn.executemany(
                "INSERT OR IGNORE INTO api_answer_sources"
                " (request_id, chunk_id, document_id, user_id, key_id, shown_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)

    def shown_by_request(self, request_id: str) -> list[tuple[int, int, int | None]]:
        """(chunk id, document id, user id) of what a ``/v1`` answer was shown."""
        rows = self.db.read().execute(
            "SELECT chunk_id, document_id, user_id FROM api_answer_sources WHERE request_id = ?",
            [request_id],
        )
        return [(int(r["chunk_id"]), int(r["document_id"]), r["user_id"]) for r in rows]

    def shown(self, *, user_id: int | None = None) -> list[ShownChunk]:
        where, params = ("WHERE user_id = ?", [user_id]) if user_id is not None else ("", [])
        rows = self.db.read().execute(
            f"SELECT * FROM answer_sources {where} ORDER BY shown_at, message_id",  # noqa: S608
            params,
        )
        return [
            ShownChunk(
                int(r["message_id"]), int(r["chunk_id"]), int(r["document_id"]),
                r["user_id"], r["key_id"], float(r["shown_at"]),
            )
            for r in rows
        ]  # fmt: skip
