"""How long a front waits on PostgreSQL: every bound derived from one setting,
``RAGDESK_DATABASE_TIMEOUT_S`` (``timeout_s`` here).

A server that refuses, errs or cancels a slow statement answers; one that is stopped
(SIGSTOP, a stalled primary) or cut off by a network that drops packets never does, and
a driver blocked on its socket waits for ever. So, besides the server's own
``statement_timeout`` and ``lock_timeout``:

- connecting gives up after ``connect_timeout`` (psycopg enforces it, over TCP or a Unix
  socket alike), and over TCP the kernel gives up a peer that stops acknowledging
  (``tcp_user_timeout``) or answering keepalives;
- every wait on a connection's socket ends once the server has been silent for
  ``timeout_s + CLIENT_GRACE_S`` (the grace lets the server's own cancellation arrive
  first): the connection is closed and :class:`ServerSilent` raised. It is silence that
  is bounded, not work: a long ``executemany`` whose results keep coming is never cut;
- :class:`Silence` remembers that the server stopped answering, so that for a while
  every other call fails at once instead of each waiting out the bound in its turn.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.abc import PQGen

CLIENT_GRACE_S = 0.5  # past the server's statement_timeout, for its cancellation to arrive
CONNECT_CAP_S = 10.0  # a connection that takes longer than this is not coming
SILENCE_HOLD_CAP_S = 5.0  # how long a silent server is taken as still silent, at most


class ServerSilent(psycopg.OperationalError):
    """The server sent nothing for longer than the bound: its connection is closed."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits on the server end after ``silence_s`` of silence
    (None: no bound, for work known to be long; see :func:`patient`)."""

    silence_s: float | None = None

    def wait(self, gen: PQGen[Any], *args: Any, **kwargs: Any) -> Any:
        if self.silence_s is None:
            return super().wait(gen, *args, **kwargs)
        return super().wait(self._watched(gen, self.silence_s), *args, **kwargs)

    def _watched(self, gen: PQGen[Any], silence_s: float) -> Generator[Any, Any, Any]:
        """``gen`` as the waiting function drives it, which resumes it at least every
        0.1 s with "nothing ready" (so Ctrl-C is heard): that is when silence is timed."""
        limit = time.monotonic() + silence_s
        try:
            state = next(gen)
            while True:
                ready = yield state
                now = time.monotonic()
                if ready:
                    limit = now + silence_s
                elif now >= limit:
                    self.pgconn.finish()  # mid-protocol: unusable; the pool drops it
                    raise ServerSilent(f"the server sent nothing for {silence_s:g} s")
                state = gen.send(ready)
        except StopIteration as stop:
            return stop.value


def connection_class(timeout_s: float) -> type[BoundedConnection]:
    """Connections that wait at most ``timeout_s`` (and the grace) on a silent server."""

    class Bounded(BoundedConnection):
        __qualname__ = "BoundedConnection"  # as the pool's log lines name it
        silence_s = silent_after(timeout_s)

    return Bounded


def silent_after(timeout_s: float) -> float:
    return timeout_s + CLIENT_GRACE_S


def connect_timeout(timeout_s: float) -> int:
    """Whole seconds, at least 2 (libpq's and psycopg's floor)."""
    return max(2, math.ceil(min(timeout_s, CONNECT_CAP_S)))


def connection_parameters(timeout_s: float) -> dict[str, Any]:
    """libpq parameters bounding a connection by ``timeout_s``. The TCP ones are ignored
    on a Unix socket, where the silence bound alone applies."""
    millis = max(1, int(timeout_s * 1000))
    probe_s = max(1, math.ceil(timeout_s / 3))
    return {
        "connect_timeout": connect_timeout(timeout_s),
        "options": f"-c statement_timeout={millis} -c lock_timeout={millis}",
        "keepalives": 1,
        "keepalives_idle": probe_s,
        "keepalives_interval": probe_s,
        "keepalives_count": 3,
        "tcp_user_timeout": millis,
    }


@contextmanager
def patient(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """No silence bound on ``conn`` for the block (a statement known to run for minutes,
    with ``statement_timeout`` lifted: an index build)."""
    if not isinstance(conn, BoundedConnection):
        yield
        return
    conn.silence_s, before = None, conn.silence_s
    try:
        yield
    finally:
        conn.silence_s = before


class Silence:
    """Whether the server was found silent lately: from then until ``hold_s`` later, or
    until it answers again (a check that got through), calls fail at once."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.hold_s = min(timeout_s, SILENCE_HOLD_CAP_S)
        self._lock = threading.Lock()
        self._until = 0.0

    def reason(self, where: str) -> str:
        return f"{where} is not answering (nothing within {self.timeout_s:g} s)"

    def heard(self) -> None:
        """The server answered: calls go to it again."""
        with self._lock:
            self._until = 0.0

    def met(self) -> None:
        """A call met the server silent."""
        with self._lock:
            self._until = time.monotonic() + self.hold_s

    @property
    def holding(self) -> bool:
        """Whether calls should fail at once now."""
        with self._lock:
            return time.monotonic() < self._until
