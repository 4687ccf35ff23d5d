"""Server-side browser sessions: the cookie holds a random token, the table its SHA-256."""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.auth.passwords import new_token, token_hash
from app.auth.principal import User
from retrieval.db import Database

COOKIE_NAME = "ragdesk_session"


@dataclass(frozen=True)
class Session:
    user: User
    csrf_token: str
    expires_at: float


class Sessions:
    def __init__(self, db: Database, lifetime_s: float):
        self.db = db
        self.lifetime_s = lifetime_s

    def create(self, user: User) -> tuple[str, Session]:
        """A new session for ``user``; returns the cookie value (never stored) and the session."""
        token, now = new_token(), time.time()
        session = Session(user, new_token(), now + self.lifetime_s)
        with self.db.write() as db:
            db.execute("DELETE FROM sessions WHERE expires_at < ?", [now])
            db.execute(
                "INSERT INTO sessions (token_hash, user_id, csrf_token, created_at, expires_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [token_hash(token), user.id, session.csrf_token, now, session.expires_at],
            )
        return token, session

    def get(self, token: str) -> Session | None:
        if not token or len(token) > 128:
            return None
        row = (
            self.db.read()
            .execute(
                """SELECT s.csrf_token, s.expires_at, u.id, u.name, u.role FROM sessions s
                   JOIN users u ON u.id = s.user_id
                   WHERE s.token_hash = ? AND s.expires_at > ? AND u.disabled = 0""",
                [token_hash(token), time.time()],
            )
            .fetchone()
        )
        if row is None:
            return None
        user = User(int(row["id"]), str(row["name"]), row["role"])
        return Session(user, str(row["csrf_token"]), float(row["expires_at"]))

    def delete(self, token: str) -> None:
        with self.db.write() as db:
            db.execute("DELETE FROM sessions WHERE token_hash = ?", [token_hash(token)])
