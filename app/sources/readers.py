"""Listing and reading a source's files: a directory tree, or (app/sources/s3.py) a bucket.

A reader lists entries with a cheap ``version`` (no content read) so an unchanged file is
recognised without reading it, and reads one entry's bytes on demand. Entries it will not
read carry the reason (``refused``): symlinks out of the root, keys with ``..``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from retrieval.parsers import SUPPORTED_EXTENSIONS

OUT_OF_ROOT = "symlink out of the source root"
# A hard link cannot be told from the file it names: it may be one outside the root.
HARD_LINK = "hard-linked file (it may be a file outside the source root)"


class SourceUnavailable(Exception):
    """The source cannot be listed (unmounted, unreachable, refused): nothing is removed."""


class TooLarge(Exception):
    """A file over the upload limit."""


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the directory, or the object's key
    size: int = 0
    version: str = ""
    refused: str | None = None  # why it is not read: counted as skipped, as if absent
    error: str | None = None  # why it cannot be read now: failed, its document kept


class Reader(Protocol):
    def entries(self) -> Iterator[Entry]:
        """Every file of the source; raises ``SourceUnavailable`` when it cannot be listed."""
        ...

    def read(self, entry: Entry, max_bytes: int) -> bytes:
        """The file's bytes; ``TooLarge`` past ``max_bytes``, ``OSError`` when unreadable."""
        ...


def hidden(path: str) -> bool:
    """Dot files and folders (``.git``, editors' ``.swp``) are not documents."""
    return any(part.startswith(".") for part in PurePosixPath(path).parts)


def supported(path: str) -> bool:
    return PurePosixPath(path).suffix.lower() in SUPPORTED_EXTENSIONS


def unsafe_key(key: str) -> str | None:
    """Why a path or key is refused: ``..`` or ``.`` segments, absolute, control chars."""
    if key.startswith(("/", "\\")) or "\\" in key:
        return "absolute path or backslash in the name"
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        return "control character in the name"
    if any(part in ("..", ".") for part in key.split("/")):
        return "'..' or '.' in the path (path traversal)"
    return None


def within(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


class DirectoryReader:
    """A directory tree; symlinks are followed only while they stay inside the root."""

    def __init__(self, root: Path):
        self.root = root.resolve()

    def entries(self) -> Iterator[Entry]:
        if not self.root.is_dir():
            raise SourceUnavailable(f"{self.root} is not a directory (not mounted?)")
        for folder, dirs, files in os.walk(self.root, onerror=self._unlistable):
            kept = []
            for name in sorted(dirs):
                full = Path(folder) / name
                if name.startswith("."):
                    continue
                if full.is_symlink():
                    inside = within(full.resolve(), self.root)
                    reason = "symlinked folder (not followed)" if inside else OUT_OF_ROOT
                    yield Entry(self._relative(full), refused=reason)
                    continue
                kept.append(name)
            dirs[:] = kept
            for name in sorted(files):
                if not name.startswith("."):
                    yield self._entry(Path(folder) / name)

    def read(self, entry: Entry, max_bytes: int) -> bytes:
        real = (self.root / entry.path).resolve()
        if not within(real, self.root):
            raise OSError(OUT_OF_ROOT)
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as file:
            # What was opened, not what the name points to now: a swap after the check fails.
            opened = Path(f"/proc/self/fd/{fd}")
            if opened.exists() and not within(opened.resolve(), self.root):
                raise OSError(OUT_OF_ROOT)
            if os.fstat(fd).st_nlink > 1:  # what was opened, through a symlink or not
                raise OSError(HARD_LINK)
            data = file.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise TooLarge(f"larger than the upload limit ({max_bytes} bytes)")
        return data

    def _entry(self, full: Path) -> Entry:
        path = self._relative(full)
        if full.is_symlink() and not within(full.resolve(), self.root):
            return Entry(path, refused=OUT_OF_ROOT)
        try:
            info = full.stat()
        except OSError as exc:
            return Entry(path, error=f"cannot read: {exc.strerror or exc}")
        if not stat.S_ISREG(info.st_mode):
            return Entry(path, refused="not a regular file")
        if info.st_nlink > 1:  # a symlink to one included: stat() follows it
            return Entry(path, refused=HARD_LINK)
        version = f"{info.st_mtime_ns}:{info.st_ino}"
        return Entry(path, size=info.st_size, version=version)

    def _relative(self, full: Path) -> str:
        return full.relative_to(self.root).as_posix()

    def _unlistable(self, error: OSError) -> None:
        # Never skip a folder silently: its files would look deleted and leave search.
        raise SourceUnavailable(f"cannot list {error.filename}: {error.strerror or error}")
