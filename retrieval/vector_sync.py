"""Open the FAISS checkpoint and bring it level with SQLite, rebuilding when it is unusable."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.index import FaissIndex, IdArray
from retrieval.index_files import IndexUnusable
from retrieval.index_types import IndexSpec, new_flat, new_ivf
from retrieval.pg_vectors import PgVectorIndex
from retrieval.store import DocumentStore

log = logging.getLogger(__name__)

_BATCH = 4096


@dataclass(frozen=True)
class SyncReport:
    loaded_from_disk: bool
    reason: str | None
    added: int
    removed: int
    rebuilt_as: str | None = None  # the structure changed (exact <-> IVF) on this open

    @property
    def changed(self) -> bool:
        changes = (self.added, self.removed)
        return not self.loaded_from_disk or any(changes) or self.rebuilt_as is not None


def open_index(
    directory: Path,
    store: DocumentStore,
    *,
    model_id: str,
    dimension: int,
    spec: IndexSpec | None = None,
    checkpoint: bool = True,
) -> tuple[FaissIndex, SyncReport]:
    """Load the checkpoint (or start empty), then add what SQLite has and drop what it lost;
    rebuild it as another structure when its size calls for one (``spec``). Without
    ``checkpoint`` nothing is written (a reader beside the process that owns the index)."""
    spec = spec or IndexSpec()
    reason = None
    try:
        index = FaissIndex.load(directory, model_id=model_id, dimension=dimension, spec=spec)
    except IndexUnusable as exc:
        reason = str(exc)
        log.warning("rebuilding the vector index from SQLite: %s", reason)
        index = FaissIndex(dimension, model_id, spec=spec)
    wanted = store.embedded_chunk_ids(model_id)
    kind = spec.wanted(len(wanted), index.kind)
    if kind != index.kind:
        log.info("building a %s vector index for %d vectors", kind, len(wanted))
        index = rebuild(store, wanted, model_id, dimension, spec, kind)
        report = SyncReport(reason is None, reason, 0, 0, rebuilt_as=kind)
        if checkpoint:
            index.save(directory)
        return index, report
    present = index.ids()
    missing = np.setdiff1d(wanted, present, assume_unique=True)
    extra = np.setdiff1d(present, wanted, assume_unique=True)
    index.remove(extra)
    for start in range(0, len(missing), _BATCH):
        batch = missing[start : start + _BATCH]
        index.add(batch, store.vectors(batch, dimension))
    report = SyncReport(reason is None, reason, len(missing), len(extra))
    if report.changed and checkpoint:
        index.save(directory)
        log.info("vector index ready: %d vectors (%s)", index.count, report)
    return index, report


def restructure_if_needed(index: FaissIndex | PgVectorIndex, store: DocumentStore) -> bool:
    """Rebuild ``index`` in place when its size now calls for the other structure (a
    collection grown past the IVF threshold while the server runs); True if it did.

    Runs on the ingestion thread, the only one that adds vectors; a delete that lands
    during the rebuild is caught by the second comparison with SQLite. A pgvector index
    is never rebuilt: PostgreSQL keeps its HNSW index level with the rows.
    """
    if isinstance(index, PgVectorIndex):
        return False
    kind = index.spec.wanted(index.count, index.kind)
    if kind == index.kind and not index.damaged:
        return False
    log.info("rebuilding the vector index as %s for %d vectors", kind, index.count)
    wanted = store.embedded_chunk_ids(index.model_id)
    index.take_over(rebuild(store, wanted, index.model_id, index.dimension, index.spec, kind))
    gone = np.setdiff1d(wanted, store.embedded_chunk_ids(index.model_id), assume_unique=True)
    index.remove(gone)
    return True


def rebuild(
    store: DocumentStore,
    ids: IdArray,
    model_id: str,
    dimension: int,
    spec: IndexSpec,
    kind: str,
) -> FaissIndex:
    """A new index of ``kind`` holding the vectors SQLite has for ``ids``."""
    if kind == "ivf":
        raw = new_ivf(dimension, store.vectors(_sample(ids), dimension), len(ids))
    else:
        raw = new_flat(dimension)
    index = FaissIndex(dimension, model_id, _index=raw, spec=spec)
    for start in range(0, len(ids), _BATCH):
        batch = ids[start : start + _BATCH]
        index.add(batch, store.vectors(batch, dimension))
    return index


def _sample(ids: IdArray, size: int = 200_000) -> IdArray:
    """Training vectors for IVF: all of them up to ``size``, else a fixed random sample."""
    if len(ids) <= size:
        return ids
    return np.sort(np.random.default_rng(0).choice(ids, size, replace=False))
