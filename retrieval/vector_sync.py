"""Open the FAISS checkpoint and bring it level with SQLite, rebuilding when it is unusable."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.index import FaissIndex, IndexUnusable
from retrieval.store import DocumentStore

log = logging.getLogger(__name__)

_BATCH = 4096


@dataclass(frozen=True)
class SyncReport:
    loaded_from_disk: bool
    reason: str | None
    added: int
    removed: int

    @property
    def changed(self) -> bool:
        return not self.loaded_from_disk or self.added > 0 or self.removed > 0


def open_index(
    directory: Path, store: DocumentStore, *, model_id: str, dimension: int
) -> tuple[FaissIndex, SyncReport]:
    """Load the checkpoint (or start empty), then add what SQLite has and drop what it lost."""
    reason = None
    try:
        index = FaissIndex.load(directory, model_id=model_id, dimension=dimension)
    except IndexUnusable as exc:
        reason = str(exc)
        log.warning("rebuilding the vector index from SQLite: %s", reason)
        index = FaissIndex(dimension, model_id)
    wanted = store.embedded_chunk_ids(model_id)
    present = index.ids()
    missing = np.setdiff1d(wanted, present, assume_unique=True)
    extra = np.setdiff1d(present, wanted, assume_unique=True)
    index.remove(extra)
    for start in range(0, len(missing), _BATCH):
        batch = missing[start : start + _BATCH]
        index.add(batch, store.vectors(batch, dimension))
    report = SyncReport(reason is None, reason, len(missing), len(extra))
    if report.changed:
        index.save(directory)
        log.info("vector index ready: %d vectors (%s)", index.count, report)
    return index, report
