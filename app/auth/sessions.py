"""Server-side browser sessions: the cookie holds a random token, the table its SHA-256.

A session ends at ``expires_at`` (its absolute lifetime) or once unused for ``idle_s``.
Use is recorded in ``last_seen_at`` at most once a ``TOUCH_EVERY_S``: a write per request
would cost a transaction on the one writer, and the idle clock needs no better precision.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.auth.passwords import new_token, token_hash
from app.auth.principal import User
from retrieval.db import Database

COOKIE_NAME = "ragdesk_session"
TOUCH_EVERY_S = 60.0  # last use is written at most this often per session


@dataclass(frozen=True)
class Session:
    user: User
    csrf_token: str
    expires_at: float
    last_seen_at: float


class Sessions:
    def __init__(self, db: Database, lifetime_s: float, idle_s: float = 0.0):
        self.db = db
        self.lifetime_s = lifetime_s
        self.idle_s = idle_s  # 0: no idle timeout
        # Touching less often than a quarter of the idle time keeps its error small even
        # for short idle settings (a session used every minute must never look idle).
        self.touch_every_s = min(TOUCH_EVERY_S, idle_s / 4) if idle_s > 0 else TOUCH_EVERY_S

    def create(
        self, user: User, *, replacing: str | None = None, id_token: str | None = None
    ) -> tuple[str, Session]:
        """A new session for ``user``; returns the cookie value (never stored) and the session.

        ``replacing``: the cookie the browser signed in with, whose session ends now. The
        session id and its CSRF token are always new at sign-in, never carried over.
        ``id_token``: a single sign-on's ID token, the hint for the provider's logout."""
        token, now = new_token(), time.time()
        session = Session(user, new_token(), now + self.lifetime_s, now)
        with self.db.write() as db:
            db.execute("DELETE FROM sessions WHERE expires_at < ?", [now])
            if replacing:
                db.execute("DELETE FROM sessions WHERE token_hash = ?", [token_hash(replacing)])
            db.execute(
                "INSERT INTO sessions (token_hash, user_id, csrf_token, created_at, expires_at,"
                " last_seen_at, id_token) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    token_hash(token),
                    user.id,
                    session.csrf_token,
                    now,
                    session.expires_at,
                    now,
                    id_token,
                ],
            )
        return token, session

    def find(self, token: str) -> Session | None:
        """The stored session of an enabled user, whether or not it is still live."""
        if not token or len(token) > 128:
            return None
        row = (
            self.db.read()
            .execute(
                """SELECT s.csrf_token, s.expires_at, s.last_seen_at, u.id, u.name, u.role
                   FROM sessions s JOIN users u ON u.id = s.user_id
                   WHERE s.token_hash = ? AND u.disabled = 0""",
                [token_hash(token)],
            )
            .fetchone()
        )
        if row is None:
            return None
        user = User(int(row["id"]), str(row["name"]), row["role"])
        return Session(
            user, str(row["csrf_token"]), float(row["expires_at"]), float(row["last_seen_at"])
        )

    def live(self, session: Session, now: float | None = None) -> bool:
        """Within its lifetime and, with an idle timeout, used within it."""
        now = time.time() if now is None else now
        idle = self.idle_s > 0 and now - session.last_seen_at > self.idle_s
        return session.expires_at > now and not idle

    def get(self, token: str) -> Session | None:
        """The live session of ``token`` (read only: ending and touching are the guard's)."""
        session = self.find(token)
        return session if session is not None and self.live(session) else None

    def touch_due(self, session: Session, now: float | None = None) -> bool:
        """Whether ``touch`` would write now (so callers skip the thread hop otherwise)."""
        now = time.time() if now is None else now
        return now - session.last_seen_at >= self.touch_every_s

    def touch(self, token: str) -> None:
        """Record use now, unless it was recorded within ``touch_every_s`` (by a parallel
        request of the same page, say)."""
        now = time.time()
        with self.db.write() as db:
            db.execute(
                "UPDATE sessions SET last_seen_at = ? WHERE token_hash = ? AND last_seen_at <= ?",
                [now, token_hash(token), now - self.touch_every_s],
            )

    def id_token(self, token: str) -> str | None:
        """The ID token the session was signed in with (None: a local sign-in)."""
        row = (
            self.db.read()
            .execute("SELECT id_token FROM sessions WHERE token_hash = ?", [token_hash(token)])
            .fetchone()
        )
        return str(row[0]) if row is not None and row[0] else None

    def delete(self, token: str) -> None:
        with self.db.write() as db:
            db.execute("DELETE FROM sessions WHERE token_hash = ?", [token_hash(token)])
