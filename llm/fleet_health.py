"""The endpoints of a fleet (llm/fleet.py): their state, and the background check that takes
a failing one out and brings it back.

An endpoint is up until a request cannot reach it, its connection breaks, or a check fails;
then it is down and checked again after 1, 2, 4 … seconds (at most ``backoff_max_s``). A
passing check brings it back. A 503 with ``Retry-After`` only sets it aside for that long.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from llm.remote import Failure, RemoteBackend

log = logging.getLogger(__name__)

_FIRST_BACKOFF_S = 1.0
_PROBE_PATHS = ("/health/ready", "/v1/models")  # Ragdesk's readiness, else any OpenAI server


@dataclass
class Endpoint:
    """One server of a fleet. Changed under the fleet's lock."""

    url: str
    backend: RemoteBackend
    up: bool = True
    failures: int = 0  # consecutive: the exponent of the backoff
    next_check: float = 0.0  # time.monotonic() of the next health check
    busy_until: float = 0.0  # its own 503's Retry-After
    requests: int = 0
    errors: Counter[Failure] = field(default_factory=Counter)
    probe_path: str | None = None  # the first of _PROBE_PATHS it answers

    @property
    def outstanding(self) -> int:
        return self.backend.running

    def available(self, now: float) -> bool:
        full = self.outstanding >= self.backend.max_concurrent
        return self.up and now >= self.busy_until and not full

    def mark_down(self, now: float, backoff_max_s: float) -> None:
        if self.up:
            log.warning("fleet endpoint %s is down", self.url)
        self.up = False
        self.failures += 1
        self.next_check = now + min(backoff_max_s, _FIRST_BACKOFF_S * 2 ** (self.failures - 1))

    def mark_up(self, now: float, interval_s: float) -> None:
        if not self.up:
            log.warning("fleet endpoint %s is back", self.url)
        self.up, self.failures, self.next_check = True, 0, now + interval_s


def probe_root(url: str) -> str:
    root = url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class HealthChecker:
    """A daemon thread checking each endpoint when due (every ``interval_s`` while up, on
    its backoff while down), one after the other, each check at most ``timeout_s``."""

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        lock: threading.Lock,
        *,
        interval_s: float,
        backoff_max_s: float,
        headers: dict[str, str],
    ):
        self.endpoints, self._lock = endpoints, lock
        self.interval_s, self.backoff_max_s = interval_s, backoff_max_s
        timeout = httpx.Timeout(min(2.0, interval_s), connect=min(2.0, interval_s))
        self._client = httpx.Client(headers=headers, timeout=timeout)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._client.close()

    def check_due(self) -> float:
        """Check the endpoints that are due; returns how long until the next one is."""
        for endpoint in self.endpoints:
            if time.monotonic() >= endpoint.next_check and not self._stop.is_set():
                healthy = self._probe(endpoint)
                with self._lock:
                    now = time.monotonic()
                    if healthy:
                        endpoint.mark_up(now, self.interval_s)
                    elif endpoint.up or now >= endpoint.next_check:  # not marked meanwhile
                        endpoint.mark_down(now, self.backoff_max_s)
        soonest = min(e.next_check for e in self.endpoints)
        return max(0.05, min(self.interval_s, soonest - time.monotonic()))

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            try:
                wait = self.check_due()
            except Exception:  # the checker must outlive any surprise
                log.exception("fleet health check failed")
                wait = self.interval_s

    def _probe(self, endpoint: Endpoint) -> bool:
        root = probe_root(endpoint.url)
        for path in (endpoint.probe_path,) if endpoint.probe_path else _PROBE_PATHS:
            try:
                status = self._client.get(root + path).status_code
            except httpx.HTTPError:
                return False
            if status == 200:
                endpoint.probe_path = path
                return True
            if status not in (404, 405):  # an answer about health, not an unknown path
                return False
        return False
