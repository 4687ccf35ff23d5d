"""One process at a time owns a data directory's index: the server, ``ragdesk ingest`` or
``ragdesk reindex``. Two of them would each checkpoint their own view of the FAISS index
over the other's (and a reindex switch would be overwritten by the server's next
checkpoint), so the second one is refused with a clear message instead.

The lock is ``flock`` on a file in the directory: the kernel drops it when the holder
exits, however it exits (``kill -9`` included), so a crash never leaves it stale.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".ragdesk.lock"


class DataDirBusy(RuntimeError):
    pass


@contextmanager
def exclusive(data_dir: Path, holder: str) -> Iterator[None]:
    """Hold ``data_dir`` for the block, or raise :class:`DataDirBusy` at once."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            raise DataDirBusy(f"{data_dir} is in use by {other}; stop it first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{holder} (pid {os.getpid()})".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
