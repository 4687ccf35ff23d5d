"""Whether the database answers, for readiness and ``/metrics``.

SQLite is a file in the data directory: it always answers. PostgreSQL is a server that
may be down, too slow or read-only (a failover in progress): ``/health/ready`` then says
503, so a load balancer stops sending this front requests it could only refuse.

The check (``PostgresDatabase.ping``) runs on a thread of its own at most every
``every_s``; readiness waits for it only ``wait_s`` and otherwise reports what the last
check found, so a probe never hangs on a server that does not answer. A check still
running after ``slow_s`` (the database's own bound, 5 s at most) counts as a failure;
a request that met the database unavailable (``failed``), or the store having found the
server silent (``silent``), tells the watch at once. Every reason comes from
``StoreUnavailable``, whose text shows the URL with its password blanked. The change of
state is logged once each way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from retrieval.db import Database

log = logging.getLogger(__name__)

CHECK_EVERY_S = 2.0  # how long a check's answer stands
CHECK_WAIT_S = 0.25  # how long readiness waits for a fresh check before using the last
CHECK_SLOW_S = 5.0  # a check still running after this long counts as unreachable


class DatabaseWatch:
    def __init__(
        self,
        ping: Callable[[], object] | None,
        where: str = "the database",
        *,
        blank: Callable[[str], str] = str,
        every_s: float = CHECK_EVERY_S,
        wait_s: float = CHECK_WAIT_S,
        slow_s: float = CHECK_SLOW_S,
        silent: Callable[[], str | None] = lambda: None,
    ):
        """``ping`` raises when the database cannot be used (None: nothing to watch);
        ``blank`` removes secrets from an error's text; ``silent`` says why the store
        refuses calls at once just now (a server found silent), or None."""
        self._ping, self.where, self._blank, self._silent = ping, where, blank, silent
        self.every_s, self.wait_s, self.slow_s = every_s, wait_s, slow_s
        self._lock = threading.Lock()
        self._problem: str | None = None
        self._checked_at: float | None = None
        self._running: threading.Event | None = None  # set when the running check ends
        self._running_since = 0.0

    @classmethod
    def of(cls, db: Database) -> DatabaseWatch:
        """The watch of ``db``: its ping on PostgreSQL; nothing to watch on SQLite."""
        if db.dialect == "postgresql":
            from retrieval.pg import PostgresDatabase, redacted  # psycopg: only on PostgreSQL

            if isinstance(db, PostgresDatabase):
                return cls(
                    db.ping,
                    f"the database at {db.shown_url}",
                    blank=redacted,
                    slow_s=min(CHECK_SLOW_S, db.timeout_s),
                    silent=db.silent,
                )
        return cls(None)

    @property
    def watched(self) -> bool:
        """Whether there is anything to watch (a database server, not a file)."""
        return self._ping is not None

    def problem(self, *, wait: bool = True) -> str | None:
        """Why the database cannot be used now, or None; a stale answer starts a check,
        awaited up to ``wait_s`` (not at all with ``wait=False``)."""
        if self._ping is None:
            return None
        now = time.monotonic()
        silent = self._silent()
        with self._lock:
            if silent is not None:  # until a check (which asks all the same) finds it back
                self._set(silent)
            running = self._running
            if running is not None:
                if now - self._running_since > self.slow_s:
                    self._set(f"{self.where} did not answer within {self.slow_s:g} s")
            elif self._checked_at is None or now - self._checked_at >= self.every_s:
                running = self._running = threading.Event()
                self._running_since = now
                threading.Thread(
                    target=self._check, args=(running,), name="ragdesk-db-check", daemon=True
                ).start()
        if running is not None and wait:
            running.wait(self.wait_s)
        with self._lock:
            return self._problem

    def failed(self, reason: str) -> None:
        """A request found the database unavailable (``reason``: StoreUnavailable's text,
        its password blanked): readiness says so now, until a check finds it back."""
        if self._ping is None:
            return
        with self._lock:
            self._checked_at = time.monotonic()
            self._set(self._blank(reason))

    def _check(self, done: threading.Event) -> None:
        assert self._ping is not None
        try:
            self._ping()
            reason = None
        except Exception as exc:  # StoreUnavailable, or whatever else stops a query
            reason = self._blank(str(exc)) or type(exc).__name__
        with self._lock:
            self._running = None
            self._checked_at = time.monotonic()
            self._set(reason)
        done.set()

    def _set(self, reason: str | None) -> None:
        if reason is not None and self._problem is None:
            log.error("the database cannot be used: %s", reason)
        elif reason is None and self._problem is not None:
            log.warning("%s answers again", self.where)
        self._problem = reason
