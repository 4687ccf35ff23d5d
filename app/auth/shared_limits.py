"""Rate limits kept in PostgreSQL, so that every front counts against one budget.

In memory (app/auth/ratelimit.py) each of N fronts behind a load balancer would allow the
whole budget, N times it in all. These classes have the same interfaces, keep their state
in the database (tables ``rate_buckets`` and ``rate_failures``, app/auth/pg_schema.py),
and take the time from ``time.time()``: wall clocks, which the fronts' hosts share (a
host whose clock runs behind never refills a bucket backwards).

- :class:`SharedTokenBuckets`: one statement per take (an upsert that refills, takes and
  says whether it took), on a pooled connection in autocommit: it locks the one bucket's
  row for that statement, never the write lock every other write waits on.
- :class:`SharedKeyFailures` and :class:`SharedLoginThrottle`: a row per failure, which
  expires with the window. ``begin``'s check-and-count is one write transaction, so
  parallel sign-in attempts through any fronts cannot all slip past the limit.
- Rows that no longer count (full buckets, expired failures) are deleted by each
  instance at most once every ``PRUNE_EVERY_S``.

When the database fails: the request rate and the wrong-key count let requests through
(logged, at most once a minute), since every request that needs the database is answered
503 by then anyway, and guessing keys needs the database to check them. The sign-in
throttle refuses instead: its failure is :class:`~retrieval.pg.StoreUnavailable`, which
the app answers with 503 and ``Retry-After``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from app.auth.ratelimit import Clock
from retrieval.db import Database
from retrieval.pg import StoreUnavailable
from retrieval.sql import Session

log = logging.getLogger(__name__)
PRUNE_EVERY_S = 60.0  # each instance deletes what no longer counts at most this often
WARN_EVERY_S = 60.0  # a limiter letting requests through says so at most this often
MAX_DELAY_S = 4.0

# The bucket's tokens now: what it held, plus what flowed in since (never more than the
# burst; nothing flows while ``now`` is behind the bucket's time, another host's clock).
_REFILLED = "MIN(:burst, rate_buckets.tokens + MAX(0.0, excluded.at - rate_buckets.at) * :rate)"
_TAKE = f"""INSERT INTO rate_buckets (scope, key, tokens, at, granted)
    VALUES (:scope, :key, :first_tokens, :now, :first_granted)
    ON CONFLICT (scope, key) DO UPDATE SET
        tokens = CASE WHEN {_REFILLED} >= 1.0 THEN {_REFILLED} - 1.0 ELSE {_REFILLED} END,
        granted = CASE WHEN {_REFILLED} >= 1.0 THEN 1 ELSE 0 END,
        at = MAX(rate_buckets.at, excluded.at)
    RETURNING tokens, granted"""  # noqa: S608 - built from the constant above
_PRUNE_BUCKETS = "DELETE FROM rate_buckets WHERE scope = ? AND at <= ?"
_ADD_FAILURE = "INSERT INTO rate_failures (scope, key, at, expires_at) VALUES (?, ?, ?, ?)"
_RECENT = (
    "SELECT key, COUNT(*) AS n, MIN(at) AS oldest FROM rate_failures"
    " WHERE scope = ? AND key IN (?, ?) AND at > ? GROUP BY key"
)
_PRUNE_FAILURES = "DELETE FROM rate_failures WHERE expires_at <= ?"
# Failures that could not be stopped by a limit: the database itself is failing.
_DATABASE_FAILURES = (StoreUnavailable, psycopg.Error)


class _Upkeep:
    """What every shared limiter does besides counting: prune now and then, and say (not
    on every request) that the database failed it."""

    def __init__(self, db: Database, scope: str, clock: Clock):
        self.db = db
        self.scope = scope
        self.clock = clock
        self._next_prune = 0.0
        self._next_warning = 0.0

    def _prune_due(self, now: float) -> bool:
        if now < self._next_prune:
            return False
        self._next_prune = now + PRUNE_EVERY_S
        return True

    def _prune_failures(self, now: float) -> None:
        if self._prune_due(now):
            self.db.read().execute(_PRUNE_FAILURES, [now])

    def _letting_through(self, exc: Exception) -> None:
        moment = time.monotonic()
        if moment >= self._next_warning:
            self._next_warning = moment + WARN_EVERY_S
            log.warning(
                "rate limit %r is not counted while the database fails (%s): requests go through",
                self.scope,
                exc,
            )


class SharedTokenBuckets(_Upkeep):
    """:class:`~app.auth.ratelimit.TokenBuckets` kept in the database, one budget for
    every front: ``rate_per_minute`` requests a minute on average, bursts up to ``burst``,
    per key of ``scope`` (one scope per limiter: API requests, sign-in starts)."""

    def __init__(
        self,
        db: Database,
        scope: str,
        rate_per_minute: float,
        burst: int,
        clock: Clock = time.time,
    ):
        super().__init__(db, scope, clock)
        self.rate = rate_per_minute / 60.0
        self.burst = float(burst)

    def take(self, key: str) -> float:
        """0.0 when the request may go ahead; otherwise seconds until it may (Retry-After).
        The database failing lets it go ahead."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        first = self.burst >= 1.0  # a bucket starts full: the first take is granted
        try:
            if self._prune_due(now):  # a bucket untouched for burst / rate is full: none
                self.db.read().execute(_PRUNE_BUCKETS, [self.scope, now - self.burst / self.rate])
            row = (
                self.db.read()
                .execute(
                    _TAKE,
                    {
                        "scope": self.scope,
                        "key": key,
                        "now": now,
                        "burst": self.burst,
                        "rate": self.rate,
                        "first_tokens": self.burst - 1.0 if first else self.burst,
                        "first_granted": 1 if first else 0,
                    },
                )
                .fetchone()
            )
        except _DATABASE_FAILURES as exc:
            self._letting_through(exc)
            return 0.0
        if row["granted"]:
            return 0.0
        return (1.0 - float(row["tokens"])) / self.rate


class SharedKeyFailures(_Upkeep):
    """:class:`~app.auth.ratelimit.KeyFailures` kept in the database: wrong or unknown
    API keys per client address, counted by every front together. The database failing
    counts nothing and refuses no one (a key cannot be checked then either)."""

    def __init__(
        self,
        db: Database,
        limit: int,
        window_s: float,
        clock: Clock = time.time,
        *,
        scope: str = "key",
    ):
        super().__init__(db, scope, clock)
        self.limit = limit
        self.window_s = window_s

    def retry_after(self, address: str) -> int:
        """Seconds before ``address`` may present a key again (0: now)."""
        now = self.clock()
        try:
            self._prune_failures(now)
            row = (
                self.db.read()
                .execute(
                    "SELECT COUNT(*) AS n, MIN(at) AS oldest FROM rate_failures"
                    " WHERE scope = ? AND key = ? AND at > ?",
                    [self.scope, address, now - self.window_s],
                )
                .fetchone()
            )
        except _DATABASE_FAILURES as exc:
            self._letting_through(exc)
            return 0
        if int(row["n"]) < self.limit:
            return 0
        return max(1, math.ceil(float(row["oldest"]) + self.window_s - now))

    def failed(self, address: str) -> None:
        now = self.clock()
        try:
            self.db.read().execute(_ADD_FAILURE, [self.scope, address, now, now + self.window_s])
        except _DATABASE_FAILURES as exc:
            self._letting_through(exc)


class SharedLoginThrottle(_Upkeep):
    """:class:`~app.auth.ratelimit.LoginThrottle` kept in the database: failed sign-ins
    per user name and per client address, counted by every front together. The database
    failing refuses the attempt: :class:`~retrieval.pg.StoreUnavailable` (503)."""

    def __init__(
        self,
        db: Database,
        *,
        per_user: int,
        per_address: int,
        window_s: float,
        clock: Clock = time.time,
        scope: str = "login",
    ):
        super().__init__(db, scope, clock)
        self.limits = {"user": per_user, "addr": per_address}
        self.window_s = window_s

    def _keys(self, name: str, address: str) -> list[tuple[str, int]]:
        return [
            (f"user:{name.lower()}", self.limits["user"]),
            (f"addr:{address}", self.limits["addr"]),
        ]

    def begin(self, name: str, address: str) -> int:
        """Check and count an attempt in one step (one transaction, under the write lock
        every front takes), so parallel attempts cannot all slip past the limit while
        their passwords are being checked. Returns the seconds to wait (the attempt is
        refused and not counted), or 0: the attempt goes ahead and counts as a failure
        unless ``succeeded`` says otherwise."""
        now = self.clock()
        with _refusing_on_failure():
            self._prune_failures(now)
            with self.db.write() as session:
                wait = self._wait(session, name, address, now)
                if wait == 0:
                    self._add(session, name, address, now)
        return wait

    def retry_after(self, name: str, address: str) -> int:
        """Seconds to wait before another attempt is heard (0: go ahead)."""
        now = self.clock()
        with _refusing_on_failure():
            self._prune_failures(now)
            return self._wait(self.db.read(), name, address, now)

    def delay(self, name: str, address: str) -> float:
        """Seconds to hold the answer to a failed attempt: 0.25 s, doubling, up to 4 s."""
        with _refusing_on_failure():
            counts = self._recent(self.db.read(), name, address, self.clock())
        count = max((n for n, _ in counts.values()), default=0)
        return min(MAX_DELAY_S, 0.25 * 2 ** max(0, count - 1)) if count else 0.0

    def failed(self, name: str, address: str) -> None:
        with _refusing_on_failure():
            self._add(self.db.read(), name, address, self.clock())

    def succeeded(self, name: str, address: str | None = None) -> None:
        """The user's failures are forgiven; the address's attempt (from ``begin``, its
        latest row) was not a failure."""
        user = f"user:{name.lower()}"
        with _refusing_on_failure():
            if address is None:
                self.db.read().execute(
                    "DELETE FROM rate_failures WHERE scope = ? AND key = ?", [self.scope, user]
                )
                return
            self.db.read().execute(
                "DELETE FROM rate_failures WHERE scope = ? AND (key = ? OR id = ("
                "SELECT MAX(id) FROM rate_failures WHERE scope = ? AND key = ?))",
                [self.scope, user, self.scope, f"addr:{address}"],
            )

    def _add(self, session: Session, name: str, address: str, now: float) -> None:
        (user, _), (addr, _) = self._keys(name, address)
        expires = now + self.window_s
        session.execute(
            "INSERT INTO rate_failures (scope, key, at, expires_at)"
            " VALUES (?, ?, ?, ?), (?, ?, ?, ?)",
            [self.scope, user, now, expires, self.scope, addr, now, expires],
        )

    def _recent(
        self, session: Session, name: str, address: str, now: float
    ) -> dict[str, tuple[int, float]]:
        """Failures in the window per key: (how many, the oldest's time)."""
        (user, _), (addr, _) = self._keys(name, address)
        rows = session.execute(_RECENT, [self.scope, user, addr, now - self.window_s])
        return {str(row["key"]): (int(row["n"]), float(row["oldest"])) for row in rows}

    def _wait(self, session: Session, name: str, address: str, now: float) -> int:
        recent = self._recent(session, name, address, now)
        wait = 0.0
        for key, limit in self._keys(name, address):
            count, oldest = recent.get(key, (0, now))
            if count >= limit:
                wait = max(wait, oldest + self.window_s - now)
        return math.ceil(wait)


@contextmanager
def _refusing_on_failure() -> Iterator[None]:
    """Any failure of the database as StoreUnavailable: the sign-in is answered 503."""
    try:
        yield
    except StoreUnavailable:
        raise
    except psycopg.Error as exc:
        raise StoreUnavailable(f"the sign-in throttle cannot be counted: {exc}") from exc
