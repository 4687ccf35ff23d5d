"""API keys: ``rdk_<prefix>_<secret>``. Only the SHA-256 of the whole key is stored; the
public prefix finds the row and the hashes are compared in constant time.

The keys this process verified lately are remembered (their hash, never the key) for one
use only: probes and ``/metrics`` answer while the database does not, and a scraper's key
cannot be checked then (``verified_lately``). A key revoked here, or found wrong, is
forgotten at once; one revoked through another front is honoured there within
``REMEMBERED_S`` at worst, and only by those two read-only routes.
"""

from __future__ import annotations

import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from app.auth.passwords import token_hash
from app.auth.principal import Principal, User
from retrieval.db import Database

KEY_SHAPE = re.compile(r"rdk_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")
LAST_USED_EVERY_S = 60.0  # last-used time is written at most this often per key
_NO_KEY_HASH = "0" * 64  # compared against when the prefix names no key
REMEMBERED_S = 900.0  # how long a verified key stands in for the database's answer
REMEMBERED_MAX = 1000  # keys remembered at most (the oldest go first)


@dataclass(frozen=True)
class ApiKey:
    id: int
    user_id: int
    user_name: str
    name: str
    prefix: str
    read_only: bool
    collections: frozenset[int] | None  # None: every collection the user may read
    created_at: float
    last_used_at: float | None
    revoked_at: float | None

    @property
    def last_used(self) -> str:
        """When the key was last used (to the minute, server time), or 'never'."""
        if self.last_used_at is None:
            return "never"
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.last_used_at))

    @property
    def display(self) -> str:
        """How the key is shown after creation: its public prefix only."""
        return f"rdk_{self.prefix}_…"


class ApiKeys:
    def __init__(self, db: Database):
        self.db = db
        self._last_written: dict[int, float] = {}
        self._verified: dict[str, tuple[Principal, float]] = {}  # key hash -> who, when
        self._verified_lock = threading.Lock()

    def create(
        self,
        user: User,
        *,
        name: str = "",
        read_only: bool = False,
        collections: Collection[int] | None = None,
    ) -> tuple[str, ApiKey]:
        """A new key for ``user``; returns the key itself (shown once, never stored)."""
        prefix, now = secrets.token_hex(6), time.time()
        key = f"rdk_{prefix}_{secrets.token_urlsafe(32)}"
        with self.db.write() as db:
            cursor = db.execute(
                "INSERT INTO api_keys (user_id, name, prefix, key_hash, read_only, scoped,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    user.id,
                    name[:100],
                    prefix,
                    token_hash(key),
                    int(read_only),
                    int(collections is not None),
                    now,
                ],
            )
            key_id = int(cursor.lastrowid or 0)
            db.conn.executemany(
                "INSERT INTO api_key_collections (key_id, collection_id) VALUES (?, ?)",
                [(key_id, c) for c in sorted(set(collections or ()))],
            )
        found = self.get(key_id)
        assert found is not None
        return key, found

    def authenticate(self, key: str) -> Principal | None:
        match = KEY_SHAPE.fullmatch(key)
        if match is None:
            return None
        row = (
            self.db.read()
            .execute(
                """SELECT k.*, u.name AS user_name, u.role FROM api_keys k
                   JOIN users u ON u.id = k.user_id
                   WHERE k.prefix = ? AND k.revoked_at IS NULL AND u.disabled = 0""",
                [match.group(1)],
            )
            .fetchone()
        )
        # Hash and compare whether or not the prefix exists, so the time taken does not
        # tell a guesser which prefixes are real.
        expected = str(row["key_hash"]) if row is not None else _NO_KEY_HASH
        if not hmac.compare_digest(expected, token_hash(key)) or row is None:
            self._forget(lambda hashed, _: hashed == token_hash(key))
            return None
        api_key = self._key(row)
        user = User(api_key.user_id, api_key.user_name, row["role"])
        principal = Principal(
            user,
            key_id=api_key.id,
            read_only=api_key.read_only,
            key_collections=api_key.collections,
        )
        self._remember(token_hash(key), principal)
        return principal

    def verified_lately(self, key: str) -> Principal | None:
        """Who ``key`` was when this process last verified it, within ``REMEMBERED_S``
        (for routes that answer whatever the database does: see the module's notes)."""
        with self._verified_lock:
            found = self._verified.get(token_hash(key))
        if found is None or time.monotonic() - found[1] > REMEMBERED_S:
            return None
        return found[0]

    def _remember(self, hashed: str, principal: Principal) -> None:
        with self._verified_lock:
            self._verified.pop(hashed, None)  # re-inserted: the newest at the end
            self._verified[hashed] = (principal, time.monotonic())
            while len(self._verified) > REMEMBERED_MAX:
                del self._verified[next(iter(self._verified))]

    def _forget(self, which: Callable[[str, Principal], bool]) -> None:
        with self._verified_lock:
            for hashed in [h for h, (p, _) in self._verified.items() if which(h, p)]:
                del self._verified[hashed]

    def touch_due(self, key_id: int) -> bool:
        """Whether ``touch`` would write now (so callers skip the thread hop otherwise)."""
        return time.time() - self._last_written.get(key_id, 0.0) >= LAST_USED_EVERY_S

    def touch(self, key_id: int) -> None:
        """Record use (at most once a minute per key: a write per request would be costly)."""
        now = time.time()
        if not self.touch_due(key_id):
            return
        self._last_written[key_id] = now
        with self.db.write() as db:
            db.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", [now, key_id])

    def get(self, key_id: int) -> ApiKey | None:
        row = (
            self.db.read()
            .execute(
                "SELECT k.*, u.name AS user_name FROM api_keys k JOIN users u ON u.id = k.user_id"
                " WHERE k.id = ?",
                [key_id],
            )
            .fetchone()
        )
        return self._key(row) if row else None

    def list(self, user_id: int | None = None) -> list[ApiKey]:
        where, params = ("WHERE k.user_id = ?", [user_id]) if user_id is not None else ("", [])
        rows = (
            self.db.read()
            .execute(
                "SELECT k.*, u.name AS user_name FROM api_keys k"  # noqa: S608
                f" JOIN users u ON u.id = k.user_id {where} ORDER BY k.id",
                params,
            )
            .fetchall()
        )
        return [self._key(row) for row in rows]

    def revoke(self, key_id: int, user_id: int | None = None) -> bool:
        """Revoke a key (only the owner's when ``user_id`` is given); False if none was."""
        sql = "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
        params: list[Any] = [time.time(), key_id]
        if user_id is not None:
            sql, params = sql + " AND user_id = ?", [*params, user_id]
        self._forget(lambda _, principal: principal.key_id == key_id)
        with self.db.write() as db:
            return db.execute(sql, params).rowcount > 0

    def _key(self, row: Any) -> ApiKey:
        collections = None
        if row["scoped"]:
            found = self.db.read().execute(
                "SELECT collection_id FROM api_key_collections WHERE key_id = ?", [row["id"]]
            )
            collections = frozenset(int(r[0]) for r in found)
        return ApiKey(
            id=int(row["id"]),
            user_id=int(row["user_id"]),
            user_name=str(row["user_name"]),
            name=str(row["name"]),
            prefix=str(row["prefix"]),
            read_only=bool(row["read_only"]),
            collections=collections,
            created_at=float(row["created_at"]),
            last_used_at=row["last_used_at"],
            revoked_at=row["revoked_at"],
        )
