"""Collection membership, and what a principal may read and write.

Admins read and write every collection; staff the collections they are members of,
directly or through a group (``app.auth.groups``; writing needs ``can_write``). A key
narrows its user's access to its collections, and a read-only key writes nothing.
``None`` means "every collection", and only ever for an unscoped admin, so a search for
them skips the filter.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.auth.principal import Principal
from retrieval.db import Database

# A user's collections: direct membership, and membership through groups.
_READABLE = """SELECT collection_id FROM collection_members WHERE user_id = :user
    UNION SELECT g.collection_id FROM group_collections g
    JOIN group_members m ON m.group_id = g.group_id WHERE m.user_id = :user"""
_WRITABLE = """SELECT collection_id FROM collection_members WHERE user_id = :user AND can_write = 1
    UNION SELECT g.collection_id FROM group_collections g
    JOIN group_members m ON m.group_id = g.group_id WHERE m.user_id = :user AND g.can_write = 1"""


@dataclass(frozen=True)
class Member:
    collection_id: int
    user_id: int
    user_name: str
    can_write: bool


class Members:
    def __init__(self, db: Database):
        self.db = db

    def add(self, collection_id: int, user_id: int, *, can_write: bool = False) -> None:
        with self.db.write() as db:
            db.execute(
                "INSERT INTO collection_members (collection_id, user_id, can_write)"
                " VALUES (?, ?, ?) ON CONFLICT (collection_id, user_id)"
                " DO UPDATE SET can_write = excluded.can_write",
                [collection_id, user_id, int(can_write)],
            )

    def remove(self, collection_id: int, user_id: int) -> None:
        with self.db.write() as db:
            db.execute(
                "DELETE FROM collection_members WHERE collection_id = ? AND user_id = ?",
                [collection_id, user_id],
            )

    def of_collection(self, collection_id: int) -> list[Member]:
        rows = self.db.read().execute(
            """SELECT m.collection_id, m.user_id, u.name, m.can_write FROM collection_members m
               JOIN users u ON u.id = m.user_id WHERE m.collection_id = ?
               ORDER BY lower(u.name), u.name""",
            [collection_id],
        )
        return [Member(int(r[0]), int(r[1]), str(r[2]), bool(r[3])) for r in rows]

    def _all(self) -> frozenset[int]:
        rows = self.db.read().execute("SELECT id FROM collections")
        return frozenset(int(r[0]) for r in rows)

    def _of_user(self, user_id: int, *, writing: bool) -> frozenset[int]:
        """The user's own collections and those of every group the user is in."""
        rows = self.db.read().execute(_WRITABLE if writing else _READABLE, {"user": user_id})
        return frozenset(int(r[0]) for r in rows)

    def readable(self, principal: Principal) -> frozenset[int] | None:
        """Collections ``principal`` may read; None: all of them (an unscoped admin)."""
        scope = principal.key_collections
        if principal.is_admin:
            return scope
        own = self._of_user(principal.user.id, writing=False)
        return own if scope is None else own & scope

    def writable(self, principal: Principal) -> frozenset[int] | None:
        if principal.read_only:
            return frozenset()
        scope = principal.key_collections
        if principal.is_admin:
            return scope
        own = self._of_user(principal.user.id, writing=True)
        return own if scope is None else own & scope

    def can_read(self, principal: Principal, collection_id: int) -> bool:
        readable = self.readable(principal)
        return readable is None or collection_id in readable

    def can_write(self, principal: Principal, collection_id: int) -> bool:
        writable = self.writable(principal)
        return writable is None or collection_id in writable
