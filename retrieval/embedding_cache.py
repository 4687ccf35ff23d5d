"""Vectors by the text they embed: identical chunk texts are never embedded twice.

Keyed by SHA-256 of the exact embedded text (title and heading context included) and the
model id (migration m009), so re-ingesting a document, re-uploading it after a delete, or
uploading a near-duplicate reuses the vectors of every passage that did not change. A
model change misses the cache by construction.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

import numpy as np

from retrieval.db import Database
from retrieval.embedder import Embedder, Vectors

_LOOKUP_BATCH = 500  # keys per query, well under SQLite's variable limit


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class EmbeddingCache:
    def __init__(self, db: Database):
        self.db = db
        self.hits = 0
        self.misses = 0

    def embed(self, embedder: Embedder, texts: Sequence[str]) -> Vectors:
        """Vectors for ``texts`` in order; only texts not seen before reach the embedder."""
        keys = [text_key(text) for text in texts]
        found = self.lookup(keys, embedder.model_id, embedder.dimension)
        new: dict[str, str] = {}  # key -> text, each distinct missing text once
        for key, text in zip(keys, texts, strict=True):
            if key not in found:
                new.setdefault(key, text)
        self.hits += len(texts) - sum(1 for key in keys if key not in found)
        self.misses += len(new)
        if new:
            vectors = embedder.embed_batch(list(new.values()))
            fresh = dict(zip(new, vectors, strict=True))
            self.store(fresh, embedder.model_id)
            found.update(fresh)
        if not keys:
            return np.zeros((0, embedder.dimension), dtype=np.float32)
        return np.stack([found[key] for key in keys]).astype(np.float32, copy=False)

    def lookup(self, keys: Sequence[str], model_id: str, dimension: int) -> dict[str, Vectors]:
        found: dict[str, Vectors] = {}
        distinct = list(dict.fromkeys(keys))
        for start in range(0, len(distinct), _LOOKUP_BATCH):
            batch = distinct[start : start + _LOOKUP_BATCH]
            placeholders = ",".join("?" * len(batch))
            rows = self.db.read().execute(
                "SELECT text_sha256, vector FROM embedding_cache"  # noqa: S608 - placeholders only
                f" WHERE model_id = ? AND text_sha256 IN ({placeholders})",
                [model_id, *batch],
            )
            for key, blob in rows:
                vector = np.frombuffer(blob, dtype=np.float32)
                if len(vector) == dimension:  # anything else cannot be ours: embed again
                    found[key] = vector
        return found

    def store(self, vectors: dict[str, Vectors], model_id: str) -> None:
        now = time.time()
        with self.db.write() as db:
            db.conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache (text_sha256, model_id, vector, created_at)"
                " VALUES (?, ?, ?, ?)",
                (
                    (key, model_id, np.asarray(v, dtype=np.float32).tobytes(), now)
                    for key, v in vectors.items()
                ),
            )
