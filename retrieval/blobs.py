"""Where uploaded originals live: what every store of them offers, and what they share.

A store keeps each original under its SHA-256 (``stored_name``), so two writers of the
same bytes write the same thing and both succeed. There are two: a directory
(``retrieval.uploads.UploadFiles``: the data directory's ``uploads/`` by default, or a
volume several servers mount) and an S3 bucket (``retrieval.s3_blobs.S3Originals``).

A store that several servers share is swept with care: another server may be between
writing an original and committing the row that names it, so only what has gone
unnamed for ``SWEEP_GRACE_S`` is removed (saving content that is already there refreshes
its age).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container, Iterator, Sequence
from pathlib import PurePath
from typing import Protocol

log = logging.getLogger(__name__)

# An original no row names is removed from a shared store only once it is this old: far
# longer than any upload takes between its file and its row.
SWEEP_GRACE_S = 3600.0
CHECK_EVERY_S = 5.0  # readiness asks a remote store at most this often
CHECK_SLOW_S = 10.0  # a check still running after this long counts as unreachable


class BlobsUnavailable(Exception):
    """The store of originals cannot be reached, refused, or answered too slowly; nothing
    was changed. The message says why, for logs and admins, with every secret blanked."""


def check_stored_name(stored_name: str) -> str:
    """``stored_name`` if it is a SHA-256 hex digest (never a path the user chose)."""
    if len(stored_name) != 64 or not all(c in "0123456789abcdef" for c in stored_name):
        raise ValueError("stored names are sha256 hex digests")
    return stored_name


class Originals(Protocol):
    """Uploaded originals by content hash. Every method may raise ``BlobsUnavailable``
    (a remote store); ``read`` raises ``FileNotFoundError`` for an original not there."""

    @property
    def where(self) -> str:
        """The store in words for logs (a path or ``s3://bucket/prefix``; no secret)."""
        ...

    def save(self, data: bytes) -> str:
        """Store the bytes durably (unless already there); returns their stored name."""
        ...

    def read(self, stored_name: str) -> bytes: ...

    def delete(self, stored_name: str) -> None:
        """Remove the original; one already gone is no error."""
        ...

    def exists(self, stored_name: str) -> bool: ...

    def names(self) -> Iterator[str]:
        """The stored name of every original held."""
        ...

    def sweep(self, in_use: Container[str]) -> Sequence[PurePath]:
        """Remove the originals no document names (``in_use``) and leftovers of
        interrupted writes; returns what went (each logged)."""
        ...

    def problem(self) -> str | None:
        """Why the store cannot be used now, or None; cheap (a cached check)."""
        ...


class Reachability:
    """Whether a store answers, for readiness: ``probe`` (raising when the store cannot be
    used) runs on a thread of its own at most every ``every_s``, so asking never waits on
    the network. A probe still running after ``slow_s`` counts as a failure, and a failed
    operation (``failed``) counts at once. The change of state is logged, once each way."""

    def __init__(
        self,
        where: str,
        probe: Callable[[], None],
        tell: Callable[[Exception], str],
        *,
        every_s: float | None = None,
        slow_s: float | None = None,
    ):
        self.where = where
        self._probe = probe
        self._tell = tell
        self.every_s = CHECK_EVERY_S if every_s is None else every_s
        self.slow_s = CHECK_SLOW_S if slow_s is None else slow_s
        self._problem: str | None = None
        self._checked_at: float | None = None
        self._running_since: float | None = None
        self._lock = threading.Lock()

    def problem(self) -> str | None:
        now = time.monotonic()
        with self._lock:
            if self._running_since is not None:
                if now - self._running_since > self.slow_s:
                    return f"{self.where} did not answer within {self.slow_s:.0f} s"
            elif self._checked_at is None or now - self._checked_at >= self.every_s:
                self._running_since = now
                threading.Thread(
                    target=self._check, name="ragdesk-blobs-check", daemon=True
                ).start()
            return self._problem

    def failed(self, reason: str) -> None:
        """An operation found the store unusable: tell readiness now."""
        with self._lock:
            self._checked_at = time.monotonic()
            self._set(reason)

    def _check(self) -> None:
        try:
            self._probe()
            reason = None
        except BlobsUnavailable as exc:  # told already, secrets blanked
            reason = str(exc)
        except Exception as exc:  # whatever the store says: it cannot be used
            reason = self._tell(exc)
        with self._lock:
            self._running_since = None
            self._checked_at = time.monotonic()
            self._set(reason)

    def _set(self, reason: str | None) -> None:
        if reason is not None and self._problem is None:
            log.error("uploaded originals at %s cannot be used: %s", self.where, reason)
        elif reason is None and self._problem is not None:
            log.warning("uploaded originals at %s can be used again", self.where)
        self._problem = reason
