"""The sharing audit: who shared a conversation with whom or revoked it, and which cited
passages each reader was shown in a shared conversation (a reader's view of an answer is
the owner's choice to show it, so it is recorded apart from the answer audit, whose rows
are the asker's)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from app.auth.principal import Principal
from app.chat.records import Message
from app.chat.redaction import is_hidden
from app.chat.shares import Share
from retrieval.db import Database

ShareAction = Literal["share", "revoke"]


@dataclass(frozen=True)
class ShareEvent:
    conversation_id: int
    actor_id: int | None
    key_id: int | None
    action: ShareAction
    target_kind: str
    target_id: int
    target_name: str
    at: float


class ShareAudit:
    def __init__(self, db: Database):
        self.db = db

    def record(self, principal: Principal, action: ShareAction, share: Share) -> None:
        with self.db.write() as db:
            db.execute(
                "INSERT INTO conversation_share_events (conversation_id, actor_id, key_id,"
                " action, target_kind, target_id, target_name, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    share.conversation_id,
                    principal.user.id,
                    principal.key_id,
                    action,
                    share.kind,
                    share.target_id,
                    share.target_name,
                    time.time(),
                ],
            )

    def events(self, conversation_id: int) -> list[ShareEvent]:
        rows = self.db.read().execute(
            "SELECT * FROM conversation_share_events WHERE conversation_id = ? ORDER BY at, id",
            [conversation_id],
        )
        return [
            ShareEvent(
                int(r["conversation_id"]), r["actor_id"], r["key_id"], r["action"],
                str(r["target_kind"]), int(r["target_id"]), str(r["target_name"]), float(r["at"]),
            )
            for r in rows
        ]  # fmt: skip

    def record_shown(self, principal: Principal, messages: Iterable[Message]) -> int:
        """Record the passages a reader was shown (the citations not hidden from them);
        the first showing of each to each reader is kept. Returns how many rows were offered."""
        now = time.time()
        rows = [
            (m.id, c.chunk_id, c.document_id, principal.user.id, principal.key_id, now)
            for m in messages
            for c in m.citations
            if not is_hidden(c)
        ]
        with self.db.write() as db:
            db.conn.executemany(
                "INSERT OR IGNORE INTO shared_answer_sources"
                " (message_id, chunk_id, document_id, user_id, key_id, shown_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)

    def shown(self, user_id: int) -> list[tuple[int, int, int]]:
        """(message id, chunk id, document id) of what shared conversations showed a user."""
        rows = self.db.read().execute(
            "SELECT message_id, chunk_id, document_id FROM shared_answer_sources"
            " WHERE user_id = ? ORDER BY shown_at, message_id, chunk_id",
            [user_id],
        )
        return [(int(r[0]), int(r[1]), int(r[2])) for r in rows]
