"""Original uploaded files on disk, named by content hash, written durably."""

from __future__ import annotations

import hashlib
from pathlib import Path

from retrieval.index_files import fsync_directory, write_atomically


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
