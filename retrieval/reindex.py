"""Blue/green re-embedding: a complete new index is built beside the live one, then switched.

Every passage of every indexed document is embedded with the given embedder (texts seen
before come from the embedding cache), a new FAISS index of the structure its size calls
for is written next to the live file, and only then does the switch happen: one SQLite
transaction replaces the stored vectors, and one rename of the manifest makes the new
file live. Until then the live index and SQLite are untouched, so an interruption at any
point leaves the old index serving; a rerun resumes from the cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.embedder import Embedder, Vectors
from retrieval.embedding_cache import PASSAGES_SQL, EmbeddingCache, passage_text
from retrieval.index import FaissIndex, IdArray
from retrieval.index_files import publish
from retrieval.index_types import IndexSpec, new_flat, new_ivf
from retrieval.store import DocumentStore
from retrieval.types import DocumentStatus

# (passages embedded or reused so far, total): called after each batch.
ReindexProgress = Callable[[int, int], None]


@dataclass(frozen=True)
class ReindexReport:
    chunks: int
    embedded: int  # passages that went through the embedder
    reused: int  # passages whose vectors came from the cache
    kind: str  # "flat" or "ivf"
    seconds: float


def passages(store: DocumentStore) -> tuple[IdArray, list[str]]:
    """Ids and embedding texts of every passage of an indexed document, in id order."""
    rows = (
        store.db.read()
        .execute(
            f"{PASSAGES_SQL} WHERE d.status = ? ORDER BY c.id",
            [DocumentStatus.INDEXED.value],
        )
        .fetchall()
    )
    ids = np.asarray([row[0] for row in rows], dtype=np.int64)
    texts = [passage_text(row) for row in rows]
    return ids, texts


def reindex(
    store: DocumentStore,
    embedder: Embedder,
    directory: Path,
    *,
    spec: IndexSpec | None = None,
    batch: int = 256,
    progress: ReindexProgress | None = None,
) -> tuple[FaissIndex, ReindexReport]:
    """Re-embed every passage and switch to a new index; returns it, live."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    spec = spec or IndexSpec()
    started = time.perf_counter()
    ids, texts = passages(store)
    cache = EmbeddingCache(store.db)
    vectors = np.zeros((len(ids), embedder.dimension), dtype=np.float32)
    for start in range(0, len(texts), batch):
        vectors[start : start + batch] = cache.embed(embedder, texts[start : start + batch])
        if progress is not None:
            progress(min(start + batch, len(texts)), len(texts))
    kind = spec.wanted(len(ids), "flat")
    raw = (
        new_ivf(embedder.dimension, vectors, len(ids))
        if kind == "ivf"
        else new_flat(embedder.dimension)
    )
    index = FaissIndex(embedder.dimension, embedder.model_id, _index=raw, spec=spec)
    index.add(ids, vectors)
    manifest = index.stage(directory)  # beside the live file; nothing switched yet
    _replace_vectors(store, ids, embedder.model_id, vectors)
    publish(directory, manifest)  # the switch
    report = ReindexReport(len(ids), cache.misses, cache.hits, kind, time.perf_counter() - started)
    return index, report


def _replace_vectors(store: DocumentStore, ids: IdArray, model_id: str, vectors: Vectors) -> None:
    """All stored vectors in one transaction (passages deleted meanwhile are skipped)."""
    with store.db.write() as db:
        db.conn.executemany(
            "INSERT OR REPLACE INTO embeddings (chunk_id, model_id, vector)"
            " SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?)",
            (
                (int(i), model_id, v.tobytes(), int(i))
                for i, v in zip(ids.tolist(), vectors, strict=True)
            ),
        )
