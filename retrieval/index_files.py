"""The files of a FAISS checkpoint: a manifest naming hash-named files, written atomically.

A checkpoint is one index file, or (for an index searched memory-mapped) that base file
plus a small file of the vectors added since and one of the base's ids deleted since. The
manifest names them all; replacing it is the one atomic switch, so a kill at any moment
leaves a loadable set. Files are never rewritten under their name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

INDEX_FILE = "chunks.faiss"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1
_STAGED_SUFFIX = ".tmp"  # of temporary files, named ``.<label>.<random>.tmp``

log = logging.getLogger(__name__)


class IndexUnusable(Exception):
    """The checkpoint on disk cannot be used as is; the message says why."""


@dataclass(frozen=True)
class Manifest:
    format: int
    count: int
    max_chunk_id: int
    model_id: str
    dimension: int
    sha256: str
    saved_at: float
    # The index file this manifest names (the base, when there are layers over it).
    # Manifests from before checkpoints got new names name the old file.
    file: str = INDEX_FILE
    # Layers over a memory-mapped base: the vectors added since (an exact index) and the
    # base's ids deleted since (.npy). Absent for an index held whole in memory.
    delta: str | None = None
    delta_sha256: str = ""
    tombstones: str | None = None
    tombstones_sha256: str = ""
    size: int = 0  # of the base file, in bytes (0 in manifests from before it was kept)

    def files(self) -> Iterator[tuple[str, str]]:
        """Each file this checkpoint is made of, with its SHA-256."""
        yield self.file, self.sha256
        if self.delta is not None:
            yield self.delta, self.delta_sha256
        if self.tombstones is not None:
            yield self.tombstones, self.tombstones_sha256


def publish(directory: Path, manifest: Manifest) -> None:
    """Make staged files the live checkpoint (one atomic rename), then drop older files."""
    write_atomically(directory / MANIFEST_FILE, json.dumps(asdict(manifest)).encode())
    for path in unnamed_files(directory, manifest):
        path.unlink(missing_ok=True)


def unnamed_files(directory: Path, manifest: Manifest) -> list[Path]:
    """Checkpoint files that ``manifest`` does not name: staged by a save or a reindex
    that never switched, or replaced by a switch whose clean-up did not run."""
    live = {name for name, _ in manifest.files()}
    return [path for path in directory.glob("chunks*") if path.name not in live]


def sweep_index_dir(directory: Path) -> list[Path]:
    """Remove what an interrupted checkpoint leaves in ``directory``; returns what went.

    Those are the temporary files of writes (``.chunks….tmp``, ``.manifest.json….tmp``)
    and, when the manifest is readable, the ``chunks*`` files it does not name. Without a
    readable manifest no ``chunks*`` file is touched (the rebuild's first checkpoint
    replaces them). For the process that owns the data directory, before it writes here.
    """
    if not directory.is_dir():
        return []
    leftovers = staged_leftovers(directory, r"chunks.*|" + re.escape(MANIFEST_FILE))
    with suppress(IndexUnusable):  # nothing is known to be unnamed
        leftovers += unnamed_files(directory, read_manifest(directory))
    return remove_leftovers(leftovers, "checkpoint")


def read_manifest(directory: Path) -> Manifest:
    try:
        data = json.loads((directory / MANIFEST_FILE).read_text())
        manifest = Manifest(**data)
    except FileNotFoundError:
        raise IndexUnusable("no checkpoint yet") from None
    except (ValueError, TypeError) as exc:
        raise IndexUnusable(f"manifest unreadable ({exc})") from exc
    if manifest.format != MANIFEST_FORMAT:
        raise IndexUnusable(f"manifest format {manifest.format} is not {MANIFEST_FORMAT}")
    for name, _ in manifest.files():
        if Path(name).name != name or not name.startswith("chunks"):
            raise IndexUnusable(f"manifest names an unexpected file {name!r}")
    return manifest


def verify(directory: Path, manifest: Manifest, *, hash_base: bool = True) -> None:
    """Raise :class:`IndexUnusable` unless every file is there with the recorded hash.

    Without ``hash_base`` the base file is only checked for its recorded size: a base that
    is to be memory-mapped is not read whole at start (files are written under a temporary
    name and renamed once complete, so a torn write cannot sit under the recorded name).
    """
    for name, sha256 in manifest.files():
        path = directory / name
        try:
            if name == manifest.file and not hash_base and manifest.size:
                intact = path.stat().st_size == manifest.size
            else:
                intact = file_sha256(path) == sha256
        except FileNotFoundError:
            raise IndexUnusable(f"index file {name} missing") from None
        if not intact:
            raise IndexUnusable(f"index file {name} does not match its manifest (torn write?)")


def index_file(directory: Path) -> Path:
    """The live (base) index file, as the manifest names it."""
    return directory / read_manifest(directory).file


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_named(directory: Path, stem: str, suffix: str, data: bytes) -> tuple[str, str]:
    """Write ``data`` atomically under a name made from its hash; returns (name, sha256)."""
    sha256 = hashlib.sha256(data).hexdigest()
    name = f"{stem}-{sha256[:16]}{suffix}"
    write_atomically(directory / name, data)
    return name, sha256


def write_index_named(directory: Path, stem: str, index: Any) -> tuple[str, str, int]:
    """Write a FAISS index straight to a file (no serialised copy in memory), atomically,
    under a name made from its hash; returns (name, sha256, size)."""
    import faiss

    with _staged(directory, stem) as tmp:
        faiss.write_index(index, str(tmp))
        with tmp.open("rb") as handle:
            os.fsync(handle.fileno())
        sha256 = file_sha256(tmp)
        name = f"{stem}-{sha256[:16]}.faiss"
        tmp.replace(directory / name)
    return name, sha256, (directory / name).stat().st_size


def write_atomically(path: Path, data: bytes) -> None:
    """Never leave a half-written file at ``path``, even on kill -9 or power loss.

    Each writer gets its own temporary file, so concurrent writers cannot interleave.
    """
    with _staged(path.parent, path.name) as tmp:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)


@contextmanager
def _staged(directory: Path, label: str) -> Iterator[Path]:
    """A temporary file in ``directory`` for the caller to fill, fsync and rename into
    place; removed if anything fails, and the directory fsynced after the rename.

    A kill leaves it behind: :func:`staged_leftovers` finds it by its name."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=f".{label}.", suffix=_STAGED_SUFFIX)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(directory)


def staged_leftovers(directory: Path, label: str) -> list[Path]:
    """The temporary files :func:`_staged` made in ``directory`` for labels matching the
    regular expression ``label`` (``.<label>.<random>.tmp``): left there by a kill."""
    pattern = re.compile(rf"\.(?:{label})\.[a-z0-9_]+{re.escape(_STAGED_SUFFIX)}")
    return [
        path
        for path in directory.iterdir()
        if pattern.fullmatch(path.name) and path.is_file() and not path.is_symlink()
    ]


def remove_leftovers(paths: list[Path], interrupted: str) -> list[Path]:
    """Remove ``paths`` (left by an interrupted ``interrupted``), logging each; returns
    the ones removed (a path already gone is skipped)."""
    removed = []
    for path in paths:
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        log.warning("removed %s, left by an interrupted %s (%d bytes)", path, interrupted, size)
        removed.append(path)
    return removed


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
