"""Groups of users. A group is given collections (read, or read and write) as a user is;
its members may read and write what it may, on top of their own membership
(``Members.readable`` takes both). Admins manage groups through ``/api/groups``; single
sign-on also puts users into groups named by the provider's group claim, at each
sign-in (``source = 'oidc'``), and RAGDESK_OIDC_GROUP_COLLECTIONS gives groups
collections (``source = 'settings'``)."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from app.auth.users import NAME, AccountError
from retrieval.db import Database
from retrieval.sql import IntegrityError

MemberSource = Literal["local", "oidc"]
# Names ignore case: compared as lower() on both stores (PostgreSQL has no NOCASE column).
_BY_NAME = "SELECT * FROM groups WHERE lower(name) = lower(?)"


@dataclass(frozen=True)
class Group:
    id: int
    name: str
    created_at: float


@dataclass(frozen=True)
class GroupMember:
    user_id: int
    user_name: str
    source: str


@dataclass(frozen=True)
class GroupGrant:
    collection_id: int
    collection_name: str
    can_write: bool
    source: str


def _group(row: Any) -> Group:
    return Group(int(row["id"]), str(row["name"]), float(row["created_at"]))


class Groups:
    def __init__(self, db: Database):
        self.db = db

    def create(self, name: str) -> Group:
        if not NAME.fullmatch(name):
            raise AccountError("a group name is 1-64 letters, digits or . _ @ - characters")
        try:
            with self.db.write() as db:
                cursor = db.execute(
                    "INSERT INTO groups (name, created_at) VALUES (?, ?)", [name, time.time()]
                )
        except IntegrityError:
            raise AccountError(f"a group named {name!r} already exists") from None
        found = self.get(int(cursor.lastrowid or 0))
        assert found is not None
        return found

    def get(self, group_id: int) -> Group | None:
        row = self.db.read().execute("SELECT * FROM groups WHERE id = ?", [group_id]).fetchone()
        return _group(row) if row else None

    def by_name(self, name: str) -> Group | None:
        row = self.db.read().execute(_BY_NAME, [name]).fetchone()
        return _group(row) if row else None

    def delete(self, group_id: int) -> bool:
        """The group, its memberships and its collections go; False if there was none."""
        with self.db.write() as db:
            return db.execute("DELETE FROM groups WHERE id = ?", [group_id]).rowcount > 0

    def add_member(self, group_id: int, user_id: int, source: MemberSource = "local") -> None:
        """An admin's addition makes the row ``local``: sign-in no longer removes it."""
        with self.db.write() as db:
            db.execute(
                "INSERT INTO group_members (group_id, user_id, source) VALUES (?, ?, ?)"
                " ON CONFLICT (group_id, user_id) DO UPDATE SET source = excluded.source",
                [group_id, user_id, source],
            )

    def remove_member(self, group_id: int, user_id: int) -> bool:
        """Out of the group (until a sign-in's group claim names it again)."""
        with self.db.write() as db:
            sql = "DELETE FROM group_members WHERE group_id = ? AND user_id = ?"
            return db.execute(sql, [group_id, user_id]).rowcount > 0

    def members(self, group_id: int) -> list[GroupMember]:
        rows = self.db.read().execute(
            """SELECT m.user_id, u.name, m.source FROM group_members m
               JOIN users u ON u.id = m.user_id WHERE m.group_id = ?
               ORDER BY lower(u.name), u.name""",
            [group_id],
        )
        return [GroupMember(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def of_user(self, user_id: int) -> list[Group]:
        rows = self.db.read().execute(
            """SELECT g.* FROM groups g JOIN group_members m ON m.group_id = g.id
               WHERE m.user_id = ? ORDER BY lower(g.name), g.name""",
            [user_id],
        )
        return [_group(row) for row in rows]

    def grant(self, group_id: int, collection_id: int, *, can_write: bool = False) -> None:
        with self.db.write() as db:
            db.execute(
                "INSERT INTO group_collections (group_id, collection_id, can_write, source)"
                " VALUES (?, ?, ?, 'local') ON CONFLICT (group_id, collection_id)"
                " DO UPDATE SET can_write = excluded.can_write, source = 'local'",
                [group_id, collection_id, int(can_write)],
            )

    def revoke(self, group_id: int, collection_id: int) -> bool:
        with self.db.write() as db:
            sql = "DELETE FROM group_collections WHERE group_id = ? AND collection_id = ?"
            return db.execute(sql, [group_id, collection_id]).rowcount > 0

    def grants(self, group_id: int) -> list[GroupGrant]:
        rows = self.db.read().execute(
            """SELECT g.collection_id, c.name, g.can_write, g.source FROM group_collections g
               JOIN collections c ON c.id = g.collection_id WHERE g.group_id = ?
               ORDER BY c.name""",
            [group_id],
        )
        return [GroupGrant(int(r[0]), str(r[1]), bool(r[2]), str(r[3])) for r in rows]

    def sync_claimed(
        self,
        user_id: int,
        claimed: Collection[str],
        configured: Mapping[str, Mapping[int, bool]],
        mapped: Mapping[str, str] | None = None,
    ) -> None:
        """At a sign-in: the user's ``oidc`` memberships become exactly the ``configured``
        groups named in ``claimed``, and the local groups ``mapped`` from a claimed
        provider group; a claimed name that is neither joins nothing, even when a local
        group has that name (#30: a provider group named like a local one granted it).
        Each configured group (created when missing) gets exactly its configured
        collections (collection id -> may write) as its ``settings`` rows. Rows an admin
        made (``local``) are kept."""
        now = time.time()
        claims = {name.casefold() for name in claimed if NAME.fullmatch(name)}
        maps = {provider.casefold(): local.casefold() for provider, local in (mapped or {}).items()}
        wanted = {name.casefold() for name in configured if name.casefold() in claims}
        wanted |= {maps[name] for name in claims if name in maps}
        with self.db.write() as db:
            for name, collections in configured.items():
                db.execute(
                    "INSERT OR IGNORE INTO groups (name, created_at) VALUES (?, ?)", [name, now]
                )
                group_id = db.execute(_BY_NAME, [name]).fetchone()["id"]
                db.execute(
                    "DELETE FROM group_collections WHERE group_id = ? AND source = 'settings'",
                    [group_id],
                )
                db.conn.executemany(
                    "INSERT INTO group_collections (group_id, collection_id, can_write, source)"
                    # an admin's own grant of the same collection wins, and stays theirs
                    " VALUES (?, ?, ?, 'settings') ON CONFLICT (group_id, collection_id)"
                    " DO NOTHING",
                    [(group_id, c, int(w)) for c, w in sorted(collections.items())],
                )
            rows = db.execute("SELECT id, name FROM groups").fetchall()
            ids = [int(r[0]) for r in rows if str(r[1]).casefold() in wanted]
            db.execute("DELETE FROM group_members WHERE user_id = ? AND source = 'oidc'", [user_id])
            db.conn.executemany(
                "INSERT OR IGNORE INTO group_members (group_id, user_id, source)"
                " VALUES (?, ?, 'oidc')",
                [(group_id, user_id) for group_id in ids],
            )

    # Last: within the class body, ``list`` after this names the method.
    def list(self) -> list[Group]:
        rows = self.db.read().execute("SELECT * FROM groups ORDER BY lower(name), name").fetchall()
        return [_group(row) for row in rows]
