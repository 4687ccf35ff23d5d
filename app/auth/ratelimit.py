"""In-process rate limits: a token bucket per key or user, and a login throttle.

On SQLite one process owns the data directory and serves everything, so in-process state
is the whole truth; a restart forgets it, which errs on the side of letting people in.
On PostgreSQL several fronts share the database, and each would allow the whole budget:
there the same interfaces (the protocols below) are kept in the database instead
(app/auth/shared_limits.py); ``app.auth.service`` chooses by the store.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

Clock = Callable[[], float]


class RequestLimiter(Protocol):
    """A token bucket per key: :class:`TokenBuckets`, or the database's."""

    def take(self, key: str) -> float: ...


class FailureLimiter(Protocol):
    """Failures per key in a sliding window: :class:`KeyFailures`, or the database's."""

    def retry_after(self, address: str) -> int: ...

    def failed(self, address: str) -> None: ...


class LoginLimiter(Protocol):
    """Failed sign-ins per user and per address: :class:`LoginThrottle`, or the database's."""

    def begin(self, name: str, address: str) -> int: ...

    def retry_after(self, name: str, address: str) -> int: ...

    def delay(self, name: str, address: str) -> float: ...

    def failed(self, name: str, address: str) -> None: ...

    def succeeded(self, name: str, address: str | None = None) -> None: ...


class TokenBuckets:
    """``rate_per_minute`` requests a minute on average, bursts up to ``burst``."""

    def __init__(self, rate_per_minute: float, burst: int, clock: Clock = time.monotonic):
        self.rate = rate_per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """0.0 when the request may go ahead; otherwise seconds until it may (Retry-After)."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            if len(self._buckets) > 100_000:  # a full bucket is the same as no bucket
                self._buckets = {k: v for k, v in self._buckets.items() if v[0] < self.burst}
            return (1.0 - tokens) / self.rate


class KeyFailures:
    """Wrong or unknown API keys per client address, in a sliding window: past ``limit``
    the address may not try any key (429) until its oldest failure leaves the window, so
    keys cannot be guessed at request speed."""

    def __init__(self, limit: int, window_s: float, clock: Clock = time.monotonic):
        self.limit = limit
        self.window_s = window_s
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, address: str) -> int:
        """Seconds before ``address`` may present a key again (0: now)."""
        now = self.clock()
        with self._lock:
            times = _recent(self._failures, address, now, self.window_s)
            if len(times) < self.limit:
                return 0
            return max(1, math.ceil(times[0] + self.window_s - now))

    def failed(self, address: str) -> None:
        now = self.clock()
        with self._lock:
            self._failures.setdefault(address, deque()).append(now)
            if len(self._failures) > 100_000:  # forget addresses whose failures have expired
                for key in list(self._failures):
                    _recent(self._failures, key, now, self.window_s)


def _recent(
    failures: dict[str, deque[float]], key: str, now: float, window_s: float
) -> deque[float]:
    """The key's failures still in the window; a key left with none is forgotten, so the
    table does not grow with every name or address ever tried."""
    times = failures.get(key)
    if times is None:
        return deque()
    while times and times[0] <= now - window_s:
        times.popleft()
    if not times:
        del failures[key]
    return times


class LoginThrottle:
    """Failed logins per user name and per client address, in a sliding window.

    Each failure adds a growing delay before the answer; past the limit, attempts are
    refused (429) until the oldest failure leaves the window, whatever the password.
    """

    def __init__(
        self,
        *,
        per_user: int,
        per_address: int,
        window_s: float,
        clock: Clock = time.monotonic,
    ):
        self.limits = {"user": per_user, "addr": per_address}
        self.window_s = window_s
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _keys(self, name: str, address: str) -> list[tuple[str, int]]:
        return [
            (f"user:{name.lower()}", self.limits["user"]),
            (f"addr:{address}", self.limits["addr"]),
        ]

    def begin(self, name: str, address: str) -> int:
        """Check and count an attempt in one step, so parallel attempts cannot all slip
        past the limit while their passwords are being checked. Returns the seconds to
        wait (the attempt is refused and not counted), or 0: the attempt goes ahead and
        counts as a failure unless ``succeeded`` says otherwise."""
        now = self.clock()
        with self._lock:
            wait = self._wait(name, address, now)
            if wait == 0:
                for key, _ in self._keys(name, address):
                    self._failures.setdefault(key, deque()).append(now)
            return wait

    def retry_after(self, name: str, address: str) -> int:
        """Seconds to wait before another attempt is heard (0: go ahead)."""
        with self._lock:
            return self._wait(name, address, self.clock())

    def _wait(self, name: str, address: str, now: float) -> int:
        wait = 0.0
        for key, limit in self._keys(name, address):
            times = self._recent(key, now)
            if len(times) >= limit:
                wait = max(wait, times[0] + self.window_s - now)
        return math.ceil(wait)

    def delay(self, name: str, address: str) -> float:
        """Seconds to hold the answer to a failed attempt: 0.25 s, doubling, up to 4 s."""
        now = self.clock()
        with self._lock:
            count = max(len(self._recent(key, now)) for key, _ in self._keys(name, address))
        return min(4.0, 0.25 * 2 ** max(0, count - 1)) if count else 0.0

    def failed(self, name: str, address: str) -> None:
        now = self.clock()
        with self._lock:
            for key, _ in self._keys(name, address):
                self._failures.setdefault(key, deque()).append(now)

    def succeeded(self, name: str, address: str | None = None) -> None:
        """The user's failures are forgiven; the address's attempt (from ``begin``) was
        not a failure."""
        with self._lock:
            self._failures.pop(f"user:{name.lower()}", None)
            times = self._failures.get(f"addr:{address}") if address is not None else None
            if times:
                times.pop()
                if not times:
                    del self._failures[f"addr:{address}"]

    def _recent(self, key: str, now: float) -> deque[float]:
        return _recent(self._failures, key, now, self.window_s)
