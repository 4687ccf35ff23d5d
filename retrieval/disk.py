"""A full disk as one known condition: recognised in any error, told once, watched until
it clears.

Writes fail in many places when the data directory's disk fills (SQLite's "database or
disk is full", ``ENOSPC`` from a file write, a FAISS save). Each is already made atomic
(a transaction, a temp file and a rename), so nothing half-written survives; what this
module adds is that callers can tell the condition apart from a bug (the HTTP layer
answers 507), that it is logged once rather than on every retry, that caches give space
back when it happens, and that readiness and ``/metrics`` report it (without taking the
server out of rotation: reads still work on a full disk).
"""

from __future__ import annotations

import errno
import logging
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
SQLITE_FULL = 13
REMEMBER_S = 60.0  # a write that failed for space counts as "full" this long
# Free space grown this much since a failed write means room came back (files deleted, a
# volume grown), not the noise of other writers: the failure is forgotten at once.
ROOM_BACK_BYTES = 64 << 20


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a full disk or quota."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return True
        if isinstance(exc, sqlite3.Error) and (
            getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL
            or "database or disk is full" in str(exc)
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class DiskWatch:
    """Whether the data directory's disk is full: less than ``min_free_bytes`` free, or a
    write failed for space in the last minute. Logs the change of state, once each way."""

    def __init__(self, path: Path, min_free_bytes: int = 64 << 20):
        self.path = path
        self.min_free_bytes = min_free_bytes
        self._failed_at: float | None = None
        self._free_at_failure: int | None = None  # free bytes once caches gave some back
        self._told = False
        self._lock = threading.Lock()
        # Caches that give space back when a write of users' data fails for space: each
        # returns the bytes it freed (the KV disk cache: llm.engine.kv_disk.give_back_space).
        self.reclaimers: list[Callable[[], int]] = []

    def saw(self, exc: BaseException) -> bool:
        """Record ``exc`` if it is a full disk (returns whether it was); caches are asked
        to give space back, so the write can succeed when retried."""
        if not is_disk_full(exc):
            return False
        with self._lock:
            if not self._told:
                self._told = True
                log.error("the disk of %s is full: writes are refused until it has room", self.path)
        self.reclaim()
        free = self.free_bytes()  # after the caches gave back what they could
        with self._lock:
            self._failed_at, self._free_at_failure = time.monotonic(), free
        return True

    def reclaim(self) -> int:
        """Ask every cache to give space back; the bytes freed."""
        freed = 0
        for reclaimer in self.reclaimers:
            try:
                freed += reclaimer()
            except Exception:  # a cache that cannot free space must not fail the caller
                log.exception("a cache could not give disk space back")
        if freed:
            log.warning("caches gave %.1f MiB of disk space back", freed / 2**20)
        return freed

    def free_bytes(self) -> int | None:
        try:
            return shutil.disk_usage(self.path).free
        except OSError:
            return None

    @property
    def full(self) -> bool:
        """Measured each time it is asked (one statvfs): space freed shows at once."""
        free = self.free_bytes()
        low = free is not None and free < self.min_free_bytes
        is_full = low or self._failed_recently(free)
        with self._lock:
            if is_full and not self._told:
                self._told = True
                log.error("the disk of %s is nearly full: writes may fail", self.path)
            elif not is_full and self._told:
                self._told = False
                log.warning("the disk of %s has room again", self.path)
        return is_full

    def _failed_recently(self, free: int | None) -> bool:
        """A write that failed for space counts for ``REMEMBER_S`` (a quota, EDQUOT, shows
        in no statvfs, so free space alone cannot clear it), unless the disk has since
        gained ``ROOM_BACK_BYTES``: then space came back, and the failure is forgotten
        rather than reported for the rest of the minute."""
        with self._lock:
            failed_at, free_then = self._failed_at, self._free_at_failure
            if failed_at is None or time.monotonic() - failed_at >= REMEMBER_S:
                return False
            if free is not None and free_then is not None:
                regained = free - free_then >= ROOM_BACK_BYTES
            else:
                regained = False
            if regained:
                self._failed_at = None
                return False
            return True
