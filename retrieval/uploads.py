"""Original uploaded files on disk, named by content hash, written durably."""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Container, Iterator
from pathlib import Path

from retrieval.blobs import SWEEP_GRACE_S, Reachability, check_stored_name
from retrieval.index_files import (
    fsync_directory,
    remove_leftovers,
    staged_leftovers,
    write_atomically,
)

_HEX_DIR = re.compile(r"[0-9a-f]{2}")
_STORED_NAME = re.compile(r"[0-9a-f]{64}")


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class UploadFiles:
    """Files live under ``<dir>/<hash[:2]>/<hash>``: the user's filename never touches the disk.

    ``shared``: the directory is a volume several servers mount (``RAGDESK_BLOB_URL``).
    Each write is its own temporary file renamed into place, so servers writing the same
    content at once all succeed; the sweep then leaves alone what is younger than
    ``SWEEP_GRACE_S`` (another server's write in progress, or its row not yet committed),
    and saving content already there refreshes its age. Readiness checks the directory.
    """

    def __init__(self, directory: Path, *, shared: bool = False):
        self.directory = directory
        self.shared = shared
        directory.mkdir(parents=True, exist_ok=True)
        self._reachability = Reachability(str(directory), self._probe, str) if shared else None

    @property
    def where(self) -> str:
        return str(self.directory)

    def path(self, stored_name: str) -> Path:
        check_stored_name(stored_name)
        return self.directory / stored_name[:2] / stored_name

    def save(self, data: bytes) -> str:
        """Write the bytes (fsynced) unless identical content is already stored."""
        stored_name = content_hash(data)
        path = self.path(stored_name)
        if path.exists() and (not self.shared or _touched(path)):
            return stored_name
        if not path.parent.exists():
            path.parent.mkdir(exist_ok=True)  # another server may make it at the same time
            fsync_directory(self.directory)  # the new directory's entry must survive too
        write_atomically(path, data)
        return stored_name

    def read(self, stored_name: str) -> bytes:
        return self.path(stored_name).read_bytes()

    def delete(self, stored_name: str) -> None:
        self.path(stored_name).unlink(missing_ok=True)

    def exists(self, stored_name: str) -> bool:
        return self.path(stored_name).is_file()

    def names(self) -> Iterator[str]:
        for folder in sorted(self.directory.iterdir()):
            if _HEX_DIR.fullmatch(folder.name) and folder.is_dir():
                for path in sorted(folder.iterdir()):
                    if _STORED_NAME.fullmatch(path.name) and path.name.startswith(folder.name):
                        yield path.name

    def problem(self) -> str | None:
        """Why the directory cannot be used (a shared volume gone or read-only), or None."""
        return self._reachability.problem() if self._reachability is not None else None

    def sweep(self, in_use: Container[str]) -> list[Path]:
        """Remove what a kill can leave here; returns what went.

        Those are the temporary files of writes (``<xx>/.<hash>.<random>.tmp``) and the
        originals no document names (``in_use``: every ``stored_name`` in SQLite): an
        upload killed between its file and its row (never acknowledged), or a delete
        killed between its row and its file. Nothing else is touched. The caller holds
        whatever stops uploads and deletes meanwhile (``Library.sweep`` does); in a shared
        directory, only what is older than ``SWEEP_GRACE_S`` goes (other servers write).
        """
        leftovers: list[Path] = []
        for folder in sorted(self.directory.iterdir()):
            if not (_HEX_DIR.fullmatch(folder.name) and folder.is_dir()):
                continue
            leftovers += staged_leftovers(folder, _STORED_NAME.pattern)
            leftovers += [
                path
                for path in folder.iterdir()
                if _STORED_NAME.fullmatch(path.name)
                and path.name.startswith(folder.name)
                and path.name not in in_use
                and path.is_file()
            ]
        if self.shared:
            leftovers = [path for path in leftovers if _older_than(path, SWEEP_GRACE_S)]
        return remove_leftovers(sorted(leftovers), "upload or delete")

    def _probe(self) -> None:
        if not self.directory.is_dir():
            raise FileNotFoundError(f"{self.directory} is not there (is the volume mounted?)")
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise PermissionError(f"{self.directory} is not writable")


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except FileNotFoundError:
        return False


def _touched(path: Path) -> bool:
    """Refresh ``path``'s age (younger than the sweep's grace again, until the row that
    names it is committed); False when another server's sweep removed it just now."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True
