"""FAISS vector index keyed by chunk id, with crash-safe checkpoints.

The index is a cache of the embeddings held in SQLite: a checkpoint that is missing,
torn, or made by another model is detected on load and the caller rebuilds it.

Small indexes live in memory whole. A checkpoint of ``IndexSpec.mmap_above_mb`` or more
is searched memory-mapped instead (retrieval/mapped_base.py), with the writes since
layered over it; checkpoints then write only those layers, until they are merged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from retrieval.embedder import Vectors
from retrieval.index_files import (
    MANIFEST_FORMAT,
    IndexUnusable,
    Manifest,
    file_sha256,
    publish,
    read_manifest,
    verify,
    write_index_named,
    write_named,
)
from retrieval.index_types import (
    IndexSpec,
    flat_contents,
    gpu_copy,
    kind_of,
    new_flat,
    search_params,
    stored_ids,
)
from retrieval.mapped_base import MappedBase, load_whole, read_tombstones

log = logging.getLogger(__name__)

IdArray = npt.NDArray[np.int64]
Hits = list[tuple[int, float]]
Journal = list[tuple[IdArray, Vectors | None]]  # writes to replay: (ids, vectors or None)


class VectorIndex(Protocol):
    def search(self, query: Vectors, k: int, *, allowed: IdArray | None = None) -> Hits: ...


@runtime_checkable
class ScopedVectorIndex(Protocol):
    """An index that filters by collection itself, before the top k, and holds only
    passages of indexed documents (pgvector: retrieval/pg_vectors.py)."""

    def search_scoped(
        self, query: Vectors, k: int, collection_ids: Collection[int] | None
    ) -> Hits: ...


class FaissIndex:
    """Inner-product search (vectors are unit length, so scores are cosines): exact, or IVF
    for large collections (retrieval/index_types.py); memory-mapped when large on disk."""

    def __init__(
        self,
        dimension: int,
        model_id: str,
        *,
        _index: Any = None,
        _base: MappedBase | None = None,
        spec: IndexSpec | None = None,
    ):
        import faiss  # heavy: imported on use

        self.dimension = dimension
        self.model_id = model_id
        self.spec = spec or IndexSpec()
        self._faiss = faiss
        # Every vector; or, over a mapped base, the ones added since (always exact).
        self._index = _index if _index is not None else new_flat(dimension)
        self._base = _base
        self._journal: Journal | None = None  # writes made while a new base is prepared
        self._gpu: Any = None  # a GPU copy for unfiltered searches, made on first use
        self._gpu_stale = True
        self._lock = threading.RLock()  # FAISS indexes are not safe for concurrent writes
        self._count = self._counted()  # readable without waiting for the lock
        self._save_lock = threading.Lock()  # checkpoint files are written as a set
        # A mapped base is hashed after it is loaded, in the background: True if it turned
        # out not to match its manifest (the ingest worker then rebuilds from SQLite).
        self.damaged = False

    @property
    def count(self) -> int:
        return self._count

    @property
    def kind(self) -> str:
        return kind_of(self._main)

    @property
    def mapped(self) -> bool:
        return self._base is not None

    @property
    def _main(self) -> Any:
        """The structure holding the bulk of the vectors."""
        return self._base.raw if self._base is not None else self._index

    def _counted(self) -> int:
        return int(self._index.ntotal) + (self._base.count if self._base is not None else 0)

    def take_over(self, other: FaissIndex) -> None:
        """Serve ``other``'s vectors from now on (a rebuilt structure), in place, so every
        holder of this object sees the switch at once."""
        with self._save_lock, self._lock:
            self._index, self._base = other._index, other._base
            self._count = self._counted()
            self._gpu_stale = True
            self.damaged = other.damaged

    def ids(self) -> IdArray:
        with self._lock:
            own = stored_ids(self._index)
            return own if self._base is None else np.concatenate([self._base.ids(), own])

    def add(self, ids: IdArray, vectors: Vectors) -> None:
        if len(ids) == 0:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(ids), self.dimension):
            raise ValueError(f"expected {len(ids)}×{self.dimension} vectors, got {vectors.shape}")
        ids = np.asarray(ids, dtype=np.int64)
        with self._lock:
            self._add(ids, vectors)
            if self._journal is not None:
                self._journal.append((ids, vectors))

    def remove(self, ids: IdArray) -> int:
        if len(ids) == 0:
            return 0
        ids = np.asarray(ids, dtype=np.int64)
        with self._lock:
            removed = self._remove(ids)
            if self._journal is not None:
                self._journal.append((ids, None))
            return removed

    def _add(self, ids: IdArray, vectors: Vectors) -> None:
        self._index.add_with_ids(vectors, ids)
        self._changed()

    def _remove(self, ids: IdArray) -> int:
        removed = int(self._index.remove_ids(self._faiss.IDSelectorArray(ids)))
        if self._base is not None:
            removed += self._base.bury(ids)
        self._changed()
        return removed

    def _changed(self) -> None:
        self._count = self._counted()
        self._gpu_stale = self._gpu_stale or self._base is None

    def search(self, query: Vectors, k: int, *, allowed: IdArray | None = None) -> Hits:
        """The ``k`` nearest, best first; only ids in ``allowed`` when it is given (the
        filter applies inside the search, so it still returns ``k`` when it can)."""
        query = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        if allowed is not None:
            if len(allowed) == 0:
                return []
            allowed = np.asarray(allowed, dtype=np.int64)
        with self._lock:  # params fit the index's type, which a take-over may change
            hits = []
            if self._base is not None and self._base.raw.ntotal:
                hits = self._search(self._base.raw, query, k, self._base.selector(allowed))
            if self._index.ntotal:
                selector = None if allowed is None else self._faiss.IDSelectorBatch(allowed)
                hits += self._search(self._index, query, k, selector)
        return hits if self._base is None else sorted(hits, key=lambda hit: -hit[1])[:k]

    def _search(self, index: Any, query: Vectors, k: int, selector: Any | None) -> Hits:
        # ``selector`` stays referenced until the search returns
        params = search_params(index, selector, self.spec.nprobe)
        searcher = self._searcher() if selector is None and index is self._main else index
        if searcher is not index:  # the GPU copy has its nprobe set already
            params = None
        scores, ids = searcher.search(query, k, params=params)
        if selector is not None and kind_of(index) == "ivf" and (ids[0] < 0).any():
            # Few allowed vectors in the probed lists: visit every list (still only the
            # allowed ids are scored), so a small collection gets its k hits.
            params = search_params(index, selector, index.nlist)
            scores, ids = index.search(query, k, params=params)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]

    def _searcher(self) -> Any:
        """The GPU copy when FAISS has GPUs (refreshed after writes), else the index. A
        mapped index is searched on the CPU: its tombstones filter every search, and the
        point of mapping is not to hold it in memory (GPU memory included)."""
        if not self.spec.use_gpu or self._base is not None:
            self._gpu = None
            return self._main
        if self._gpu_stale:
            self._gpu = gpu_copy(self._main, self.spec.nprobe)
            self._gpu_stale = False
        return self._gpu if self._gpu is not None else self._main

    def _hash_base_later(self, base: MappedBase) -> None:
        """Check a mapped base against its manifest's hash without holding up the start
        (reading it also brings it into the page cache for the first searches)."""

        def check() -> None:
            with contextlib.suppress(OSError):  # replaced by a newer checkpoint meanwhile
                self._sound(base)

        threading.Thread(target=check, name="ragdesk-index-hash", daemon=True).start()

    def _sound(self, base: MappedBase) -> bool:
        """Whether ``base`` matches its hash (hashing it unless known); marks this index
        damaged when it does not."""
        if base.verified:
            return True
        if file_sha256(base.path) == base.sha256:
            base.verified = True
            return True
        with self._lock:
            if self._base is base and not self.damaged:
                log.error("vector index file %s is damaged; rebuilding it from SQLite", base.path)
                self.damaged = True
        return False

    # --- checkpoints ------------------------------------------------------------------------

    def save(self, directory: Path) -> Manifest:
        """Checkpoint atomically: new files beside the live ones (temp file, fsync, rename),
        then the manifest that names them (the switch), then old files go.

        A large checkpoint is searched memory-mapped from then on; over a mapped base only
        the layers are written, until they grow past ``compact_ratio`` of it (or
        ``max_layer_vectors``) and are merged into a new base."""
        with self._save_lock:  # one save at a time, so an older snapshot never lands last
            base = self._base
            # A merge reads the base whole into the new file: never from a damaged one (the
            # ingest worker rebuilds that from SQLite; until then the layers are saved).
            if base is not None and not (self._due_for_merge(base) and self._sound(base)):
                manifest = self._stage_layers(directory, base)
                publish(directory, manifest)
                return manifest
            try:
                if base is None:
                    manifest, whole = self._stage_whole(directory)
                else:
                    manifest, whole = self._stage_merge(directory, base)
                publish(directory, manifest)
                if self.spec.maps(manifest.size):
                    path = directory / manifest.file
                    self._switch(MappedBase.open(path, manifest.sha256, verified=True))
                elif base is not None:  # merged below the threshold: held whole from now on
                    self._switch(whole)
            finally:
                with self._lock:
                    self._journal = None
        return manifest

    def _stage_whole(self, directory: Path) -> tuple[Manifest, Any]:
        """The in-memory index to a new file. When that file is to be mapped, the writes
        from the snapshot on are journalled for the switch."""
        with self._lock:
            blob = self._faiss.serialize_index(self._index).tobytes()
            count = int(self._index.ntotal)
            if self.spec.maps(len(blob)):
                self._journal = []
        return self._stage_blob(directory, blob, count=count), self._index

    def _stage_merge(self, directory: Path, base: MappedBase) -> tuple[Manifest, Any]:
        """The base read into memory with the layers applied, written straight to a new
        file: the index's size in memory once, for the time of the merge. The writes from
        the snapshot on are journalled for the switch."""
        with self._lock:  # the base never changes, so it is read outside the lock
            tombstones, (ids, vectors) = base.tombstones, flat_contents(self._index)
            self._journal = []
        whole = load_whole(directory / base.file, tombstones)
        whole.add_with_ids(vectors, ids)
        del vectors
        file, sha256, size = write_index_named(directory, "chunks", whole)
        return self._manifest(file, sha256, count=int(whole.ntotal), size=size), whole

    def _due_for_merge(self, base: MappedBase) -> bool:
        """Layers cost every search (the added vectors are searched exactly) and every
        checkpoint (written whole): merged past a share of the base or a fixed size."""
        layered = int(self._index.ntotal) + base.changes
        share = self.spec.compact_ratio * max(int(base.raw.ntotal), 1)
        return layered > min(share, self.spec.max_layer_vectors)

    def _switch(self, new: MappedBase | Any) -> None:
        """Serve a new mapped base (with an empty layer over it) or a whole in-memory
        index from now on, replaying the writes journalled since its snapshot."""
        with self._lock:
            journal, self._journal = self._journal or [], None
            if isinstance(new, MappedBase):
                self._base, self._index = new, new_flat(self.dimension)
            else:
                self._base, self._index = None, new
            self._gpu_stale = True
            for ids, vectors in journal:
                if vectors is None:
                    self._remove(ids)
                else:
                    self._add(ids, vectors)
            self._count = self._counted()

    def stage(self, directory: Path) -> Manifest:
        """Write this (unmapped) index to a new file in ``directory`` without making it the
        live one."""
        with self._lock:
            blob = self._faiss.serialize_index(self._index).tobytes()
            count = int(self._index.ntotal)
        return self._stage_blob(directory, blob, count=count)

    def _stage_blob(self, directory: Path, blob: bytes, *, count: int) -> Manifest:
        directory.mkdir(parents=True, exist_ok=True)
        file, sha256 = write_named(directory, "chunks", ".faiss", blob)
        return self._manifest(file, sha256, count=count, size=len(blob))

    def _stage_layers(self, directory: Path, base: MappedBase) -> Manifest:
        """Only what changed since the mapped base: the added vectors and the tombstones."""
        with self._lock:
            delta = None
            if self._index.ntotal:
                delta = self._faiss.serialize_index(self._index).tobytes()
            tombstones = base.tombstone_bytes() if base.changes else None
            count = self._count
        layers: dict[str, Any] = {}
        if delta is not None:
            layers["delta"], layers["delta_sha256"] = write_named(
                directory, "chunks-delta", ".faiss", delta
            )
        if tombstones is not None:
            layers["tombstones"], layers["tombstones_sha256"] = write_named(
                directory, "chunks-gone", ".npy", tombstones
            )
        return self._manifest(base.file, base.sha256, count=count, size=base.size, **layers)

    def _manifest(self, file: str, sha256: str, *, count: int, **layers: Any) -> Manifest:
        return Manifest(
            format=MANIFEST_FORMAT,
            count=count,
            max_chunk_id=self._max_id(),
            model_id=self.model_id,
            dimension=self.dimension,
            sha256=sha256,
            saved_at=time.time(),
            file=file,
            **layers,
        )

    def _max_id(self) -> int:
        """The highest id held, tombstoned or not (informational; no full id scan)."""
        with self._lock:
            own = stored_ids(self._index)
            top = [int(own.max())] if len(own) else []
            if self._base is not None and self._base.count:
                top.append(self._base.max_id)
            return max(top, default=0)

    @classmethod
    def load(
        cls, directory: Path, *, model_id: str, dimension: int, spec: IndexSpec | None = None
    ) -> FaissIndex:
        """Load a checkpoint, or raise :class:`IndexUnusable` saying why it cannot be used."""
        spec = spec or IndexSpec()
        manifest = read_manifest(directory)
        if manifest.model_id != model_id or manifest.dimension != dimension:
            made_by = f"{manifest.model_id} ({manifest.dimension}d)"
            raise IndexUnusable(f"made by {made_by}, not {model_id} ({dimension}d)")
        path = directory / manifest.file
        try:
            mapped = spec.maps(path.stat().st_size)
        except FileNotFoundError:
            raise IndexUnusable(f"index file {manifest.file} missing") from None
        verify(directory, manifest, hash_base=not mapped)
        import faiss

        tombstones = (
            read_tombstones(directory / manifest.tombstones) if manifest.tombstones else None
        )
        # Files are named by their hash and never rewritten, so this reads what was checked.
        try:
            delta = faiss.read_index(str(directory / manifest.delta)) if manifest.delta else None
            if mapped:
                base = MappedBase.open(path, manifest.sha256, tombstones)
                index = cls(dimension, model_id, _index=delta, _base=base, spec=spec)
                index._hash_base_later(base)
            else:  # held whole in memory: the layers, if any, are applied to it
                raw = load_whole(path, tombstones)
                if delta is not None:
                    raw.add_with_ids(*reversed(flat_contents(delta)))
                index = cls(dimension, model_id, _index=raw, spec=spec)
        except RuntimeError as exc:
            raise IndexUnusable(f"FAISS cannot read the index files ({exc})") from exc
        if index.count != manifest.count:
            raise IndexUnusable("vector count differs from the manifest")
        return index
