"""Original uploaded files on disk, named by content hash, written durably."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container
from pathlib import Path

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
    """Files live under ``<dir>/<hash[:2]>/<hash>``: the user's filename never touches the disk."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, stored_name: str) -> Path:
        if len(stored_name) != 64 or not all(c in "0123456789abcdef" for c in stored_name):
            raise ValueError("stored names are sha256 hex digests")
        return self.directory / stored_name[:2] / stored_name

    def save(self, data: bytes) -> str:
        """Write the bytes (fsynced) unless identical content is already stored."""
        stored_name = content_hash(data)
        path = self.path(stored_name)
        if not path.exists():
            if not path.parent.exists():
                path.parent.mkdir()
                fsync_directory(self.directory)  # the new directory's entry must survive too
            write_atomically(path, data)
        return stored_name

    def read(self, stored_name: str) -> bytes:
        return self.path(stored_name).read_bytes()

    def delete(self, stored_name: str) -> None:
        self.path(stored_name).unlink(missing_ok=True)

    def sweep(self, in_use: Container[str]) -> list[Path]:
        """Remove what a kill can leave here; returns what went.

        Those are the temporary files of writes (``<xx>/.<hash>.<random>.tmp``) and the
        originals no document names (``in_use``: every ``stored_name`` in SQLite): an
        upload killed between its file and its row (never acknowledged), or a delete
        killed between its row and its file. Nothing else is touched. The caller holds
        whatever stops uploads and deletes meanwhile (``Library.sweep`` does).
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
        return remove_leftovers(sorted(leftovers), "upload or delete")
