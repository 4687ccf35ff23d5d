"""Conversations shared read-only with users and groups: who a conversation is shared
with, what is shared with a user (directly or through a group) and every share for an
admin's look. Deciding who may open what is ``app.auth.sharing``'s; this is the table."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from retrieval.db import Database

ShareKind = Literal["user", "group"]
SHARE_KINDS: tuple[ShareKind, ...] = ("user", "group")

# A share with what a listing shows of it: the conversation's title and owner, and the
# user's or group's name.
_SELECT_SHARES = """SELECT s.id, s.conversation_id, c.title, c.updated_at, ou.name AS owner,
    CASE WHEN s.user_id IS NOT NULL THEN 'user' ELSE 'group' END AS kind,
    COALESCE(s.user_id, s.group_id) AS target_id, COALESCE(u.name, g.name) AS target_name,
    s.created_at
    FROM conversation_shares s JOIN conversations c ON c.id = s.conversation_id
    LEFT JOIN conversation_owners o ON o.conversation_id = s.conversation_id
    LEFT JOIN users ou ON ou.id = o.user_id
    LEFT JOIN users u ON u.id = s.user_id
    LEFT JOIN groups g ON g.id = s.group_id"""

# The shares that reach a user: to the user, or to a group the user is in.
_REACHING = """(s.user_id = :user
    OR s.group_id IN (SELECT group_id FROM group_members WHERE user_id = :user))"""


@dataclass(frozen=True)
class Share:
    id: int
    conversation_id: int
    title: str  # the conversation's
    owner: str | None  # its owner's name (None: from before accounts)
    kind: ShareKind
    target_id: int
    target_name: str
    created_at: float
    updated_at: float  # the conversation's last change


@dataclass(frozen=True)
class SharedConversation:
    """A conversation shared with a reader, once however many of its shares reach them."""

    conversation_id: int
    title: str
    owner: str | None
    via: tuple[str, ...]  # "you" for a share to the reader, else the groups' names
    shared_at: float  # the earliest share that reaches the reader
    updated_at: float


def _share(row: Any) -> Share:
    return Share(
        int(row["id"]),
        int(row["conversation_id"]),
        str(row["title"]),
        None if row["owner"] is None else str(row["owner"]),
        row["kind"],
        int(row["target_id"]),
        str(row["target_name"]),
        float(row["created_at"]),
        float(row["updated_at"]),
    )


def by_conversation(shares: Iterable[Share]) -> list[SharedConversation]:
    """Shares reaching one reader, one entry per conversation (first seen, first listed)."""
    found: dict[int, SharedConversation] = {}
    for s in shares:
        via = "you" if s.kind == "user" else s.target_name
        seen = found.get(s.conversation_id)
        if seen is None:
            found[s.conversation_id] = SharedConversation(
                s.conversation_id, s.title, s.owner, (via,), s.created_at, s.updated_at
            )
        elif via not in seen.via:
            found[s.conversation_id] = SharedConversation(
                seen.conversation_id,
                seen.title,
                seen.owner,
                (*seen.via, via),
                min(seen.shared_at, s.created_at),
                seen.updated_at,
            )
    return list(found.values())


class Shares:
    def __init__(self, db: Database):
        self.db = db

    def add(
        self, conversation_id: int, kind: ShareKind, target_id: int, shared_by: int | None
    ) -> tuple[Share, bool]:
        """Share the conversation with a user or a group; the share, and whether it is new
        (sharing again with the same one keeps the first share)."""
        column = "user_id" if kind == "user" else "group_id"
        with self.db.write() as db:
            cursor = db.execute(
                f"INSERT OR IGNORE INTO conversation_shares"  # noqa: S608 - a fixed column
                f" (conversation_id, {column}, shared_by, created_at) VALUES (?, ?, ?, ?)",
                [conversation_id, target_id, shared_by, time.time()],
            )
            row = db.execute(
                f"SELECT id FROM conversation_shares"  # noqa: S608 - a fixed column
                f" WHERE conversation_id = ? AND {column} = ?",
                [conversation_id, target_id],
            ).fetchone()
        share = self.get(int(row[0]))
        assert share is not None
        return share, cursor.rowcount > 0

    def get(self, share_id: int) -> Share | None:
        rows = self.db.read().execute(f"{_SELECT_SHARES} WHERE s.id = ?", [share_id]).fetchall()
        return _share(rows[0]) if rows else None

    def remove(self, share_id: int) -> bool:
        """Revoke one share; False if there was none."""
        with self.db.write() as db:
            return (
                db.execute("DELETE FROM conversation_shares WHERE id = ?", [share_id]).rowcount > 0
            )

    def of_conversation(self, conversation_id: int) -> list[Share]:
        """Who the conversation is shared with: users, then groups, by name."""
        rows = self.db.read().execute(
            f"{_SELECT_SHARES} WHERE s.conversation_id = ? ORDER BY kind DESC, target_name",
            [conversation_id],
        )
        return [_share(row) for row in rows]

    def with_user(self, user_id: int, limit: int = 200) -> list[SharedConversation]:
        """The conversations shared with the user (directly or through a group), most
        recently changed first; the user's own are left out (they are in the sidebar)."""
        rows = self.db.read().execute(
            f"{_SELECT_SHARES} WHERE {_REACHING} AND COALESCE(o.user_id, 0) <> :user"
            " ORDER BY c.updated_at DESC, s.id LIMIT :rows",
            {"user": user_id, "rows": limit * 8},
        )
        return by_conversation(_share(row) for row in rows)[:limit]

    def reaches(self, user_id: int, conversation_id: int) -> bool:
        """Whether a share of the conversation reaches the user."""
        row = (
            self.db.read()
            .execute(
                f"SELECT 1 FROM conversation_shares s WHERE {_REACHING}"  # noqa: S608
                " AND s.conversation_id = :conversation LIMIT 1",
                {"user": user_id, "conversation": conversation_id},
            )
            .fetchone()
        )
        return row is not None

    def by_owner(self, user_id: int, limit: int = 500) -> list[Share]:
        """Every share of the user's conversations (the "Shared by me" list)."""
        rows = self.db.read().execute(
            f"{_SELECT_SHARES} WHERE o.user_id = ?"
            " ORDER BY c.updated_at DESC, s.conversation_id, kind DESC, target_name LIMIT ?",
            [user_id, limit],
        )
        return [_share(row) for row in rows]

    def every(self, limit: int = 500) -> list[Share]:
        """Every share, newest first (an admin's overview)."""
        rows = self.db.read().execute(
            f"{_SELECT_SHARES} ORDER BY s.created_at DESC LIMIT ?", [limit]
        )
        return [_share(row) for row in rows]

    def owner_of(self, conversation_id: int) -> tuple[int, str] | None:
        """The conversation's owner (id, name); None for one from before accounts."""
        row = (
            self.db.read()
            .execute(
                "SELECT u.id, u.name FROM conversation_owners o JOIN users u ON u.id = o.user_id"
                " WHERE o.conversation_id = ?",
                [conversation_id],
            )
            .fetchone()
        )
        return (int(row[0]), str(row[1])) if row else None
