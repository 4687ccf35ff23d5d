"""FAISS vector index keyed by chunk id, with crash-safe checkpoints.

The index is a cache of the embeddings held in SQLite: a checkpoint that is missing,
torn, or made by another model is detected on load and the caller rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from retrieval.embedder import Vectors
from retrieval.index_types import IndexSpec, gpu_copy, kind_of, new_flat, search_params, stored_ids

IdArray = npt.NDArray[np.int64]

INDEX_FILE = "chunks.faiss"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1


class VectorIndex(Protocol):
    def search(
        self, query: Vectors, k: int, *, allowed: IdArray | None = None
    ) -> list[tuple[int, float]]: ...


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
    # The index file this manifest names. Each checkpoint writes a new file beside the
    # live one and then replaces the manifest, so the switch is one atomic rename and a
    # kill at any moment leaves a loadable pair. Manifests from before name the old file.
    file: str = INDEX_FILE


class FaissIndex:
    """Inner-product search (vectors are unit length, so scores are cosines): exact, or IVF
    for large collections (retrieval/index_types.py)."""

    def __init__(
        self, dimension: int, model_id: str, *, _index: Any = None, spec: IndexSpec | None = None
    ):
        import faiss  # heavy: imported on use

        self.dimension = dimension
        self.model_id = model_id
        self.spec = spec or IndexSpec()
        self._faiss = faiss
        self._index = _index if _index is not None else new_flat(dimension)
        self._gpu: Any = None  # a GPU copy for unfiltered searches, made on first use
        self._gpu_stale = True
        self._lock = threading.RLock()  # FAISS indexes are not safe for concurrent writes
        self._count = int(self._index.ntotal)  # readable without waiting for the lock
        self._save_lock = threading.Lock()  # index file and manifest are written as a pair

    @property
    def count(self) -> int:
        return self._count

    @property
    def kind(self) -> str:
        return kind_of(self._index)

    def take_over(self, other: FaissIndex) -> None:
        """Serve ``other``'s vectors from now on (a rebuilt structure), in place, so every
        holder of this object sees the switch at once."""
        with self._lock:
            self._index = other._index
            self._count = int(self._index.ntotal)
            self._gpu_stale = True

    def ids(self) -> IdArray:
        with self._lock:
            return stored_ids(self._index)

    def add(self, ids: IdArray, vectors: Vectors) -> None:
        if len(ids) == 0:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(ids), self.dimension):
            raise ValueError(f"expected {len(ids)}×{self.dimension} vectors, got {vectors.shape}")
        with self._lock:
            self._index.add_with_ids(vectors, np.asarray(ids, dtype=np.int64))
            self._count = int(self._index.ntotal)
            self._gpu_stale = True

    def remove(self, ids: IdArray) -> int:
        if len(ids) == 0:
            return 0
        with self._lock:
            selector = self._faiss.IDSelectorArray(np.asarray(ids, dtype=np.int64))
            removed = int(self._index.remove_ids(selector))
            self._count = int(self._index.ntotal)
            self._gpu_stale = True
            return removed

    def search(
        self, query: Vectors, k: int, *, allowed: IdArray | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` nearest, best first; only ids in ``allowed`` when it is given (the
        filter applies inside the search, so it still returns ``k`` when it can)."""
        query = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        selector = None
        if allowed is not None:
            if len(allowed) == 0:
                return []
            selector = self._faiss.IDSelectorBatch(np.asarray(allowed, dtype=np.int64))
        # ``selector`` stays referenced until the search returns
        with self._lock:  # params fit the index's type, which a take-over may change
            params = search_params(self._index, selector, self.spec.nprobe)
            if self._index.ntotal == 0:
                return []
            searcher = self._index if selector is not None else self._searcher()
            if searcher is not self._index:  # the GPU copy has its nprobe set already
                params = None
            scores, ids = searcher.search(query, k, params=params)
            if selector is not None and self.kind == "ivf" and (ids[0] < 0).any():
                # Few allowed vectors in the probed lists: visit every list (still only
                # the allowed ids are scored), so a small collection gets its k hits.
                params = search_params(self._index, selector, self._index.nlist)
                scores, ids = self._index.search(query, k, params=params)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]

    def _searcher(self) -> Any:
        """The GPU copy when FAISS has GPUs (refreshed after writes), else the index."""
        if not self.spec.use_gpu:
            return self._index
        if self._gpu_stale:
            self._gpu = gpu_copy(self._index, self.spec.nprobe)
            self._gpu_stale = False
        return self._gpu if self._gpu is not None else self._index

    def save(self, directory: Path) -> Manifest:
        """Checkpoint atomically: a new index file beside the live one (temp file, fsync,
        rename), then the manifest that names it (the switch), then old files go."""
        with self._save_lock:  # one save at a time, so an older snapshot never lands last
            manifest = self.stage(directory)
            publish(directory, manifest)
        return manifest

    def stage(self, directory: Path) -> Manifest:
        """Write this index to a new file in ``directory`` without making it the live one."""
        directory.mkdir(parents=True, exist_ok=True)
        with self._lock:
            blob = self._faiss.serialize_index(self._index).tobytes()
            ids = self.ids()
        sha256 = hashlib.sha256(blob).hexdigest()
        manifest = Manifest(
            format=MANIFEST_FORMAT,
            count=len(ids),
            max_chunk_id=int(ids.max()) if len(ids) else 0,
            model_id=self.model_id,
            dimension=self.dimension,
            sha256=sha256,
            saved_at=time.time(),
            file=f"chunks-{sha256[:16]}.faiss",
        )
        write_atomically(directory / manifest.file, blob)
        return manifest

    @classmethod
    def load(
        cls, directory: Path, *, model_id: str, dimension: int, spec: IndexSpec | None = None
    ) -> FaissIndex:
        """Load a checkpoint, or raise :class:`IndexUnusable` saying why it cannot be used."""
        manifest = read_manifest(directory)
        if manifest.model_id != model_id or manifest.dimension != dimension:
            made_by = f"{manifest.model_id} ({manifest.dimension}d)"
            raise IndexUnusable(f"made by {made_by}, not {model_id} ({dimension}d)")
        path = directory / manifest.file
        try:
            digest = file_sha256(path)
        except FileNotFoundError:
            raise IndexUnusable("index file missing") from None
        if digest != manifest.sha256:
            raise IndexUnusable("index file does not match its manifest (torn write?)")
        import faiss

        # Straight from the file: no second copy of a large index in memory. Files are
        # named by their hash and never rewritten, so this reads what was just checked.
        try:
            raw = faiss.read_index(str(path))
        except RuntimeError as exc:
            raise IndexUnusable(f"FAISS cannot read the index file ({exc})") from exc
        index = cls(dimension, model_id, _index=raw, spec=spec)
        if index.count != manifest.count:
            raise IndexUnusable("vector count differs from the manifest")
        return index


def publish(directory: Path, manifest: Manifest) -> None:
    """Make a staged index file the live one (one atomic rename), then drop older files."""
    write_atomically(directory / MANIFEST_FILE, json.dumps(asdict(manifest)).encode())
    for path in directory.glob("chunks*.faiss"):
        if path.name != manifest.file:
            path.unlink(missing_ok=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def index_file(directory: Path) -> Path:
    """The live index file, as the manifest names it."""
    return directory / read_manifest(directory).file


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
    if Path(manifest.file).name != manifest.file or not manifest.file.startswith("chunks"):
        raise IndexUnusable(f"manifest names an unexpected file {manifest.file!r}")
    return manifest


def write_atomically(path: Path, data: bytes) -> None:
    """Never leave a half-written file at ``path``, even on kill -9 or power loss.

    Each writer gets its own temporary file, so concurrent writers cannot interleave.
    """
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
