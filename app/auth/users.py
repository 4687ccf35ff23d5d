"""User accounts. Names are unique and looked up ignoring case (``lower(name)``: the
PostgreSQL schema's unique index, SQLite's ``COLLATE NOCASE`` column)."""

from __future__ import annotations

import re
import time
from typing import Any

from app.auth.passwords import Passwords
from app.auth.principal import Role, User
from retrieval.db import Database
from retrieval.sql import IntegrityError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
MIN_PASSWORD_CHARS = 12
MAX_PASSWORD_CHARS = 1024  # argon2 takes anything; a megabyte password is a DoS, not a secret
# Names ignore case: compared as lower() on both stores (PostgreSQL has no NOCASE column).
_BY_NAME = "SELECT * FROM users WHERE lower(name) = lower(?)"


class AccountError(ValueError):
    """A user that cannot be created or changed as asked (bad name, taken, unknown)."""


def _user(row: Any) -> User:
    return User(int(row["id"]), str(row["name"]), row["role"], bool(row["disabled"]))


class Users:
    def __init__(self, db: Database, passwords: Passwords):
        self.db = db
        self.passwords = passwords

    def count(self) -> int:
        return int(self.db.read().execute("SELECT COUNT(*) FROM users").fetchone()[0])

    def create(self, name: str, password: str, role: Role = "staff") -> User:
        if not NAME.fullmatch(name):
            raise AccountError("a user name is 1-64 letters, digits or . _ @ - characters")
        if role not in ("admin", "staff"):
            raise AccountError("the role is admin or staff")
        if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
            raise AccountError(
                f"a password has {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters"
            )
        hashed = self.passwords.hash(password)
        try:
            with self.db.write() as db:
                cursor = db.execute(
                    "INSERT INTO users (name, role, password_hash, created_at) VALUES (?, ?, ?, ?)",
                    [name, role, hashed, time.time()],
                )
        except IntegrityError:
            raise AccountError(f"a user named {name!r} already exists") from None
        return User(int(cursor.lastrowid or 0), name, role)

    def get(self, user_id: int) -> User | None:
        row = self.db.read().execute("SELECT * FROM users WHERE id = ?", [user_id]).fetchone()
        return _user(row) if row else None

    def by_name(self, name: str) -> User | None:
        row = self.db.read().execute(_BY_NAME, [name]).fetchone()
        return _user(row) if row else None

    def list(self) -> list[User]:
        rows = self.db.read().execute("SELECT * FROM users ORDER BY lower(name), name").fetchall()
        return [_user(row) for row in rows]

    def authenticate(self, name: str, password: str) -> User | None:
        """The user, when the password is right and the account enabled (slow on purpose)."""
        if len(password) > MAX_PASSWORD_CHARS or len(name) > 64:
            return None
        row = self.db.read().execute(_BY_NAME, [name]).fetchone()
        # An account made by single sign-on has no password (''): verified like no account.
        stored = str(row["password_hash"]) if row and row["password_hash"] else None
        if not self.passwords.verify(stored, password) or row is None or row["disabled"]:
            return None
        if stored and self.passwords.needs_rehash(stored):
            self.set_password(int(row["id"]), password, end_sessions=False)
        return _user(row)

    def set_password(self, user_id: int, password: str, *, end_sessions: bool = True) -> None:
        """A new password; every session of the user ends (unless only rehashing)."""
        if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
            raise AccountError(
                f"a password has {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters"
            )
        hashed = self.passwords.hash(password)
        with self.db.write() as db:
            db.execute("UPDATE users SET password_hash = ? WHERE id = ?", [hashed, user_id])
            if end_sessions:
                db.execute("DELETE FROM sessions WHERE user_id = ?", [user_id])

    def set_role(self, user_id: int, role: Role) -> None:
        with self.db.write() as db:
            db.execute("UPDATE users SET role = ? WHERE id = ?", [role, user_id])

    def set_disabled(self, user_id: int, disabled: bool) -> None:
        """A disabled user's sessions and keys stop working at once."""
        with self.db.write() as db:
            db.execute("UPDATE users SET disabled = ? WHERE id = ?", [int(disabled), user_id])
            if disabled:
                db.execute("DELETE FROM sessions WHERE user_id = ?", [user_id])
