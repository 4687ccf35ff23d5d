"""Blue/green re-embedding: a complete new index is built beside the live one, then switched.

Every passage of every indexed document is embedded with the given embedder (texts seen
before come from the embedding cache), a new FAISS index of the structure its size calls
for is written next to the live file, and only then does the switch happen: one SQLite
transaction replaces the stored vectors, and one rename of the manifest makes the new
file live. Until then the live index and SQLite are untouched, so an interruption at any
point leaves the old index serving; a rerun resumes from the cache.

On PostgreSQL the stored vectors are the index (pgvector, retrieval/pg_vectors.py): the
one transaction that replaces them is the switch, and no file is written.
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
from retrieval.pg_vectors import PgVectorIndex, open_pg_vector_index
from retrieval.store import DocumentStore
from retrieval.types import DocumentStatus

# (passages embedded or reused so far, total): called after each batch.
ReindexProgress = Callable[[int, int], None]


@dataclass(frozen=True)
class ReindexReport:
    chunks: int
    embedded: int  # passages that went through the embedder
    reused: int  # passages whose vectors came from the cache
    kind: str  # "flat" or "ivf"; on PostgreSQL, the pgvector index's kind
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
) -> tuple[FaissIndex | PgVectorIndex, ReindexReport]:
    """Re-embed every passage and switch to a new index; returns it, live (``directory``
    and ``spec`` are FAISS's: unused on PostgreSQL)."""
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
    if store.db.dialect == "postgresql":
        _replace_vectors(store, ids, embedder.model_id, vectors)  # the switch
        live = open_pg_vector_index(store, embedder.model_id, embedder.dimension)
        seconds = time.perf_counter() - started
        return live, ReindexReport(len(ids), cache.misses, cache.hits, live.kind, seconds)
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
            "INSERT INTO embeddings (chunk_id, model_id, vector)"
            " SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?)"
            " ON CONFLICT (chunk_id) DO UPDATE SET model_id = excluded.model_id,"
            " vector = excluded.vector",
            (
                (int(i), model_id, store.db.vector_param(v), int(i))
                for i, v in zip(ids.tolist(), vectors, strict=True)
            ),
        )
