"""Who owns a conversation. Conversations from before accounts have no owner: admins only."""

from __future__ import annotations

from app.auth.principal import Principal
from retrieval.db import Database


class Ownership:
    def __init__(self, db: Database):
        self.db = db

    def claim(self, conversation_id: int, user_id: int) -> None:
        """Give a new conversation its owner (only if it has none yet)."""
        with self.db.write() as db:
            db.execute(
                "INSERT OR IGNORE INTO conversation_owners (conversation_id, user_id)"
                " VALUES (?, ?)",
                [conversation_id, user_id],
            )

    def may_see(self, principal: Principal, conversation_id: int) -> bool:
        row = (
            self.db.read()
            .execute(
                "SELECT c.id, o.user_id FROM conversations c"
                " LEFT JOIN conversation_owners o ON o.conversation_id = c.id WHERE c.id = ?",
                [conversation_id],
            )
            .fetchone()
        )
        if row is None or principal.restricted:
            return False
        owner = row[1]
        return owner == principal.user.id or (owner is None and principal.is_admin)

    def visible_ids(self, principal: Principal) -> frozenset[int]:
        """Ids of the conversations ``principal`` may see (for filtering listings)."""
        if principal.restricted:
            return frozenset()
        sql = "SELECT conversation_id FROM conversation_owners WHERE user_id = ?"
        if principal.is_admin:
            sql = (
                "SELECT c.id FROM conversations c LEFT JOIN conversation_owners o"
                " ON o.conversation_id = c.id WHERE o.user_id = ? OR o.user_id IS NULL"
            )
        rows = self.db.read().execute(sql, [principal.user.id])
        return frozenset(int(r[0]) for r in rows)

    def message_conversation(self, message_id: int) -> int | None:
        row = (
            self.db.read()
            .execute("SELECT conversation_id FROM messages WHERE id = ?", [message_id])
            .fetchone()
        )
        return int(row[0]) if row else None
