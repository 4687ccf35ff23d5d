"""``ragdesk restore SRC --data-dir NEW``: a backup made by ``ragdesk backup`` (see
app/ops/backup.py) into a new data directory, every file checked first.

Refused, with nothing written: a backup without its manifest (interrupted: the manifest is
written last), a file missing or not matching its size and SHA-256, a manifest naming a
path outside the backup, and a target directory that is not empty. The files are copied
into a temporary directory beside the target and checked there, and that is renamed to
the target only once all of them match: a restore that fails leaves no half-filled target.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from app.ops.backup import BACKUP_FORMAT, BACKUP_MANIFEST, BackedUpFile
from retrieval.index_files import fsync_directory


class RestoreRefused(Exception):
    """The backup or the target is not fit for a restore; the message says why."""


def read_backup(source: Path) -> list[BackedUpFile]:
    """The files a complete backup lists (nothing is checked against them yet)."""
    try:
        data = json.loads((source / BACKUP_MANIFEST).read_bytes())
    except FileNotFoundError:
        raise RestoreRefused(
            f"{source} is not a complete backup: it has no {BACKUP_MANIFEST} (the backup "
            "was interrupted, or this is not a backup)"
        ) from None
    except ValueError as exc:
        raise RestoreRefused(f"{source}/{BACKUP_MANIFEST} is unreadable: {exc}") from exc
    try:
        if data["format"] != BACKUP_FORMAT:
            raise RestoreRefused(f"backup format {data['format']} is not {BACKUP_FORMAT}")
        files = [BackedUpFile(**entry) for entry in data["files"]]
    except (KeyError, TypeError) as exc:
        raise RestoreRefused(f"{source}/{BACKUP_MANIFEST} is malformed: {exc!r}") from exc
    seen = set()
    for file in files:
        path = PurePosixPath(file.path)
        if path.is_absolute() or ".." in path.parts or not path.parts or file.path in seen:
            raise RestoreRefused(f"the manifest names an unexpected path {file.path!r}")
        seen.add(file.path)
    if not any(PurePosixPath(f.path).suffix == ".db" for f in files):
        raise RestoreRefused("the manifest lists no database")
    return files


def restore(source: Path, target: Path) -> int:
    """Check and copy the backup at ``source`` into ``target``; returns the file count."""
    files = read_backup(source)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RestoreRefused(f"{target} is not empty; restore into a new directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.restoring-"))
    try:
        for file in files:
            _copy_checked(source, staging, file)
        for directory in {staging, *(staging / Path(f.path).parent for f in files)}:
            fsync_directory(directory)
        if target.exists():
            target.rmdir()  # empty, checked above
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_directory(target.parent)
    return len(files)


def _copy_checked(source: Path, staging: Path, file: BackedUpFile) -> None:
    """Copy one file, hashing the bytes as they are read: a flipped bit in the backup, or
    a file cut short, is refused."""
    target = staging / file.path
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    try:
        with (source / file.path).open("rb") as handle, target.open("wb") as out:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    except FileNotFoundError:
        raise RestoreRefused(f"the backup is damaged: {file.path} is missing") from None
    if size != file.size or digest.hexdigest() != file.sha256:
        raise RestoreRefused(
            f"the backup is damaged: {file.path} does not match its manifest "
            f"({size} bytes, sha256 {digest.hexdigest()[:16]}…; expected {file.size} bytes, "
            f"{file.sha256[:16]}…)"
        )
