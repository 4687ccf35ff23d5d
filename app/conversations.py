"""Conversations and their messages, with the citations each answer used."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from retrieval.db import Database

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Citation:
    number: int
    chunk_id: int
    document_id: int
    title: str
    page: int
    start: int
    end: int
    snippet: str

    @property
    def url(self) -> str:
        return f"/documents/{self.document_id}/pages/{self.page}?chunk={self.chunk_id}#passage"


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: Role
    content: str
    citations: tuple[Citation, ...]
    created_at: float

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Message:
        citations = tuple(Citation(**c) for c in json.loads(row["citations"] or "[]"))
        return cls(
            id=row["id"],
            conversation_id=row["conversation_id"],
            role=row["role"],
            content=row["content"],
            citations=citations,
            created_at=row["created_at"],
        )


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    created_at: float
    updated_at: float


class Conversations:
    def __init__(self, db: Database):
        self.db = db

    def create(self, title: str) -> Conversation:
        now = time.time()
        title = " ".join(title.split())[:80] or "New conversation"
        with self.db.write() as db:
            table = db.table("conversations").insert(
                {"title": title, "created_at": now, "updated_at": now}
            )
        return Conversation(int(table.last_rowid or 0), title, now, now)

    def get(self, conversation_id: int) -> Conversation | None:
        rows = list(
            self.db.read().query("SELECT * FROM conversations WHERE id = ?", [conversation_id])
        )
        return Conversation(**rows[0]) if rows else None

    def recent(self, limit: int = 50) -> list[Conversation]:
        rows = self.db.read().query(
            "SELECT * FROM conversations ORDER BY updated_at DESC LIMIT ?", [limit]
        )
        return [Conversation(**row) for row in rows]

    def add_message(
        self,
        conversation_id: int,
        role: Role,
        content: str,
        citations: tuple[Citation, ...] = (),
    ) -> Message:
        now = time.time()
        payload = json.dumps([c.__dict__ for c in citations])
        with self.db.write() as db:
            cursor = db.execute(
                "INSERT INTO messages (conversation_id, role, content, citations, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [conversation_id, role, content, payload, now],
            )
            db.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = ?", [now, conversation_id]
            )
        return Message(int(cursor.lastrowid or 0), conversation_id, role, content, citations, now)

    def messages(self, conversation_id: int) -> list[Message]:
        rows = self.db.read().query(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", [conversation_id]
        )
        return [Message.from_row(row) for row in rows]

    def message(self, message_id: int) -> Message | None:
        rows = list(self.db.read().query("SELECT * FROM messages WHERE id = ?", [message_id]))
        return Message.from_row(rows[0]) if rows else None

    def reply_to(self, question: Message) -> Message | None:
        """The assistant message that answered ``question``, if there is one yet."""
        rows = list(
            self.db.read().query(
                "SELECT * FROM messages WHERE conversation_id = ? AND id > ? ORDER BY id LIMIT 1",
                [question.conversation_id, question.id],
            )
        )
        if rows and rows[0]["role"] == "assistant":
            return Message.from_row(rows[0])
        return None
