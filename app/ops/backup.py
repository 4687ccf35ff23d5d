"""``ragdesk backup DEST``: a consistent copy of a data directory, taken while the server
runs and ingests.

- Every SQLite file (``*.db``) through SQLite's online backup API, in one step: one read
  transaction, so one consistent snapshot, while the server keeps writing (WAL).
- The uploaded originals, copied before that snapshot and topped up after it with any the
  snapshot names that were not there yet: every document in the copy has its original.
  Originals no row names (uploaded after the snapshot) are swept by the server on start.
- The FAISS checkpoint the manifest names. Its files are hash-named and never rewritten,
  only replaced by a new checkpoint and then unlinked; each is opened first (an open file
  outlives its unlink), then copied and checked against the manifest's SHA-256, and the
  whole is retried if a newer checkpoint removed a file before it was opened. It may be
  older or newer than the SQLite snapshot: the server catches the index up from SQLite
  on start, as after any crash.
- ``backup-manifest.json`` last, written under a temporary name and renamed: every file
  with its size and SHA-256. A backup without it is by construction partial, and
  ``ragdesk restore`` refuses it.

Models (``models/``: re-assembled by ``ragdesk prepare``) and KV-cache states (``kv/``: a
cache) are not copied.

An installation on PostgreSQL (``RAGDESK_DATABASE_URL``) keeps its database, vectors
included, on the database server: the backup refuses, saying to take the database with
``pg_dump`` and where the originals are (``RAGDESK_BLOB_URL``) to copy them with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from retrieval.index_files import (
    MANIFEST_FILE,
    IndexUnusable,
    fsync_directory,
    read_manifest,
    write_atomically,
)

if TYPE_CHECKING:
    from app.config.settings import Settings

BACKUP_MANIFEST = "backup-manifest.json"
BACKUP_FORMAT = 1
INDEX_DIR, UPLOADS_DIR = "index", "uploads"
_INDEX_ATTEMPTS = 5
_STAGED = ".partial"  # suffix of a file being written; renamed once complete


class BackupError(Exception):
    """The backup could not be taken; the message says why."""


@dataclass(frozen=True)
class BackedUpFile:
    path: str  # relative to the backup's root, with "/"
    size: int
    sha256: str


@dataclass(frozen=True)
class BackupManifest:
    format: int
    created_at: float
    files: tuple[BackedUpFile, ...]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1).encode()


def take_backup(
    data_dir: Path,
    dest: Path,
    say: Callable[[str], None] = lambda _: None,
    *,
    settings: Settings | None = None,
) -> BackupManifest:
    """Copy ``data_dir`` to ``dest`` (absent or empty); the manifest is written last.
    ``settings``: the installation's (by default the environment's, for ``data_dir``);
    one on PostgreSQL is refused (``refuse_postgresql``)."""
    if settings is None:
        from app.config.settings import Settings

        where: dict[str, Any] = {"data_dir": data_dir}  # a flat keyword (app.config.settings)
        settings = Settings(**where)
    refuse_postgresql(settings)
    databases = sorted(data_dir.glob("*.db"))
    if not databases:
        raise BackupError(f"{data_dir} holds no database (*.db): is it a data directory?")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest} is not empty; back up into a new directory")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return _back_up_into(data_dir, databases, dest, say)
    except BaseException:  # interrupted (SIGTERM, Ctrl-C) or failed: no half-written file
        for staged in dest.rglob(f"*{_STAGED}"):
            staged.unlink(missing_ok=True)
        raise


def refuse_postgresql(settings: Settings) -> None:
    """A ``BackupError`` when the installation keeps its database in PostgreSQL: this
    backup copies SQLite files; PostgreSQL's own tools copy its database consistently.
    The message never shows the database URL (it holds a password)."""
    if settings.server.database_url is None:
        return
    blob_url = settings.server.blob_url
    originals = (
        f"the uploaded originals live in RAGDESK_BLOB_URL ({blob_url}): copy them with the"
        " tools of that store"
        if blob_url
        else f"the uploaded originals live in {settings.uploads_dir} (RAGDESK_BLOB_URL is"
        " unset): copy that directory"
    )
    raise BackupError(
        "this installation keeps its database in PostgreSQL (RAGDESK_DATABASE_URL), which"
        " ragdesk backup does not copy: back up the database with pg_dump (for instance"
        f" pg_dump --format=custom), and {originals}"
    )


def _back_up_into(
    data_dir: Path, databases: list[Path], dest: Path, say: Callable[[str], None]
) -> BackupManifest:
    files: list[BackedUpFile] = []
    uploads = _copy_uploads(data_dir / UPLOADS_DIR, dest, names=None)
    for database in databases:
        files.append(_snapshot_sqlite(database, dest))
        say(f"database {database.name}: {files[-1].size} bytes")
    named = _stored_names(dest / "ragdesk.db") if (dest / "ragdesk.db").exists() else set()
    missing = named - {Path(f.path).name for f in uploads}
    uploads += _copy_uploads(data_dir / UPLOADS_DIR, dest, names=missing)
    gone = missing - {Path(f.path).name for f in uploads}
    if gone:  # uploaded and deleted again while the backup ran
        say(f"warning: {len(gone)} originals were deleted while the backup ran")
    files += uploads
    say(f"uploads: {len(uploads)} originals")
    index = _copy_index(data_dir / INDEX_DIR, dest)
    say(f"vector index: {len(index)} files" if index else "vector index: none yet")
    files += index
    manifest = BackupManifest(BACKUP_FORMAT, time.time(), tuple(sorted(files, key=_path)))
    for directory in {dest, *(dest / Path(f.path).parent for f in files)}:
        fsync_directory(directory)
    write_atomically(dest / BACKUP_MANIFEST, manifest.to_json())  # last: the backup is whole
    return manifest


def _path(file: BackedUpFile) -> str:
    return file.path


def _snapshot_sqlite(source: Path, dest: Path) -> BackedUpFile:
    """The database as of one moment, however busy the server is."""
    staged = dest / f"{source.name}{_STAGED}"
    # mode=rw: never create a database that is not there.
    src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=rw", uri=True, timeout=30.0)
    try:
        src.execute("PRAGMA busy_timeout=30000")
        copy = sqlite3.connect(staged)
        try:
            src.backup(copy)  # all pages in one step: one read transaction, one snapshot
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            (check,) = copy.execute("PRAGMA quick_check").fetchone()
            if check != "ok":
                raise BackupError(f"the copy of {source.name} fails SQLite's check: {check}")
        finally:
            copy.close()
    finally:
        src.close()
    _fsync(staged)
    final = dest / source.name
    staged.replace(final)
    return _described(dest, final)


def _stored_names(database: Path) -> set[str]:
    uri = f"{database.resolve().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        return {row[0] for row in db.execute("SELECT DISTINCT stored_name FROM documents")}


def _copy_uploads(source: Path, dest: Path, names: set[str] | None) -> list[BackedUpFile]:
    """The originals (``<xx>/<sha256>``; all of them, or those in ``names``), each checked
    against its name, which is its SHA-256. One deleted meanwhile is skipped."""
    if names is None:
        found = sorted(p for p in source.glob("??/*") if len(p.name) == 64)
    else:
        found = [source / name[:2] / name for name in sorted(names)]
    copied = []
    for path in found:
        relative = f"{UPLOADS_DIR}/{path.parent.name}/{path.name}"
        try:
            with path.open("rb") as handle:
                copied_file = _copy_open(handle, dest, relative)
        except FileNotFoundError:
            continue
        if copied_file.sha256 != path.name:
            raise BackupError(f"the original {relative} does not match its name (damaged?)")
        copied.append(copied_file)
    return copied


def _copy_index(source: Path, dest: Path) -> list[BackedUpFile]:
    """The checkpoint the manifest names, each file matching the manifest's SHA-256."""
    for _ in range(_INDEX_ATTEMPTS):
        try:
            manifest = read_manifest(source)
        except IndexUnusable:  # none yet (or unreadable): the restored server rebuilds it
            return []
        try:
            with _opened(source, [name for name, _ in manifest.files()]) as handles:
                copied = []
                for (name, sha256), handle in zip(manifest.files(), handles, strict=True):
                    copied.append(_copy_open(handle, dest, f"{INDEX_DIR}/{name}"))
                    if copied[-1].sha256 != sha256:
                        raise BackupError(f"index file {name} does not match its manifest")
        except FileNotFoundError:
            continue  # a newer checkpoint replaced this one before its files were opened
        data = json.dumps(asdict(manifest)).encode()
        write_atomically(dest / INDEX_DIR / MANIFEST_FILE, data)
        return [*copied, _described(dest, dest / INDEX_DIR / MANIFEST_FILE)]
    raise BackupError("the vector index was checkpointed too often to copy; try again")


@contextlib.contextmanager
def _opened(directory: Path, names: list[str]) -> Iterator[list[BinaryIO]]:
    """Every file open before any is read: once open, a file's bytes stay readable even
    if a newer checkpoint unlinks it."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context((directory / name).open("rb")) for name in names]


def _copy_open(handle: BinaryIO, dest: Path, relative: str) -> BackedUpFile:
    """Copy an open file to ``dest/relative`` (staged, fsynced, renamed), hashing it."""
    target = dest / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(target.name + _STAGED)
    digest, size = hashlib.sha256(), 0
    with staged.open("wb") as out:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    staged.replace(target)
    return BackedUpFile(relative, size, digest.hexdigest())


def _described(root: Path, path: Path) -> BackedUpFile:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return BackedUpFile(path.relative_to(root).as_posix(), path.stat().st_size, digest.hexdigest())


def _fsync(path: Path) -> None:
    with path.open("rb") as handle:
        os.fsync(handle.fileno())
