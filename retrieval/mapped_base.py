"""A large checkpoint searched straight from its memory-mapped file.

Loading a big index into memory costs its whole size in RAM and a full read at start.
Mapped, the operating system pages in only what searches touch (an IVF query touches the
lists it probes) and can drop those pages again under memory pressure.

A mapped index is read-only: FAISS aborts the process on any write to it. So the index
keeps it as a *base* and layers the changes over it (retrieval/index.py): new vectors go
to a small exact index in memory, and deleted base ids become *tombstones* that every
base search excludes. Checkpoints write those layers as small files; once they grow past
``IndexSpec.compact_ratio`` of the base, a checkpoint merges everything into a new base.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from retrieval.index_types import stored_ids

IdArray = npt.NDArray[np.int64]


class MappedBase:
    def __init__(
        self,
        raw: Any,
        path: Path,
        sha256: str,
        tombstones: IdArray | None = None,
        *,
        verified: bool = False,
    ):
        self.raw = raw
        self.path = path
        self.file = path.name
        self.sha256 = sha256
        self.size = path.stat().st_size
        # Whether the file is known to match ``sha256``: true when this process wrote it,
        # else once hashed (a merge reads it whole, so it must not copy damage forward).
        self.verified = verified
        self._held = np.sort(stored_ids(raw))
        self.tombstones = np.zeros(0, dtype=np.int64)
        self._exclusion: tuple[Any, Any] | None = None  # (IDSelectorNot, its inner selector)
        if tombstones is not None:
            self.bury(tombstones)

    @classmethod
    def open(
        cls,
        path: Path,
        sha256: str,
        tombstones: IdArray | None = None,
        *,
        verified: bool = False,
    ) -> MappedBase:
        import faiss

        raw = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC)
        return cls(raw, path, sha256, tombstones, verified=verified)

    @property
    def count(self) -> int:
        return int(self.raw.ntotal) - len(self.tombstones)

    @property
    def max_id(self) -> int:
        return int(self._held[-1]) if len(self._held) else 0

    @property
    def changes(self) -> int:
        return len(self.tombstones)

    def ids(self) -> IdArray:
        return np.setdiff1d(self._held, self.tombstones, assume_unique=True)

    def bury(self, ids: IdArray) -> int:
        """Tombstone the live base ids among ``ids``; returns how many there were."""
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        live = ids[_contains(self._held, ids) & ~_contains(self.tombstones, ids)]
        if len(live):
            self.tombstones = np.union1d(self.tombstones, live)
            self._exclusion = None
        return len(live)

    def selector(self, allowed: IdArray | None) -> Any | None:
        """What a base search must pass: the allowed ids that are not tombstones, or "not
        a tombstone", or nothing."""
        import faiss

        batch = None if allowed is None else faiss.IDSelectorBatch(allowed)
        if not len(self.tombstones):
            return batch
        if self._exclusion is None:
            inner = faiss.IDSelectorBatch(self.tombstones)
            self._exclusion = (faiss.IDSelectorNot(inner), inner)  # inner must stay alive
        if batch is None:
            return self._exclusion[0]
        both: Any = faiss.IDSelectorAnd(batch, self._exclusion[0])
        both.referenced_objects = [batch, self._exclusion]  # alive as long as ``both``
        return both

    def tombstone_bytes(self) -> bytes:
        import io

        buffer = io.BytesIO()
        np.save(buffer, self.tombstones, allow_pickle=False)
        return buffer.getvalue()


def read_tombstones(path: Path) -> IdArray:
    return np.asarray(np.load(path, allow_pickle=False), dtype=np.int64)


def load_whole(path: Path, tombstones: IdArray | None) -> Any:
    """The base file read into memory (writable), without its tombstoned ids."""
    import faiss

    raw = faiss.read_index(str(path))
    if tombstones is not None and len(tombstones):
        raw.remove_ids(faiss.IDSelectorBatch(np.asarray(tombstones, dtype=np.int64)))
    return raw


def _contains(sorted_ids: IdArray, ids: IdArray) -> npt.NDArray[np.bool_]:
    if not len(sorted_ids):
        return np.zeros(len(ids), dtype=bool)
    at = np.searchsorted(sorted_ids, ids).clip(max=len(sorted_ids) - 1)
    return np.asarray(sorted_ids[at] == ids)
