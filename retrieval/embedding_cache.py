"""Vectors by the text they embed: identical chunk texts are never embedded twice.

Keyed by SHA-256 of the exact embedded text (title and heading context included) and the
model id (migration m009), so re-ingesting a document, re-uploading it after a delete, or
uploading a near-duplicate reuses the vectors of every passage that did not change. A
model change misses the cache by construction.

Pruning (migration m012). A row that a live passage needs is always kept: the key of the
passage's embedding text, with the model of its stored vector or the model in use now
(so re-ingesting or re-indexing never re-embeds a live passage). Every other row is
*spare*: passages of deleted documents, edited passages, models used before a
``ragdesk reindex``. Spare rows are kept up to a byte budget, the most recently used
(looked up or stored) first, so a re-upload after a delete or a switch back to the
earlier model still finds its vectors. ``prune`` deletes in small transactions and is
meant for the ingest worker's thread: it is the only writer of passages, so none can
appear between working out what is needed and deleting.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from retrieval.db import Database
from retrieval.embedder import Embedder, Vectors
from retrieval.types import ChunkSpan

_LOOKUP_BATCH = 500  # keys per query, well under SQLite's variable limit
_KEY_BATCH = 500  # passages keyed per transaction
_DELETE_BATCH = 200  # rows per delete transaction: the writer lock is held ~15 ms
_PAUSE_S = 0.001  # between transactions: another thread's write (a chat turn) gets in
# A row's size: its vector and model id plus about 80 bytes of key, timestamps and header.
_ROW_BYTES = "(length(vector) + length(model_id) + 80)"


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# Each passage with what ``passage_text`` needs to rebuild its embedding text.
PASSAGES_SQL = """SELECT c.id, c.page, c.start, c."end", c.text, c.heading,
                         COALESCE(d.title, d.filename), c.table_context
                  FROM chunks c JOIN documents d ON d.id = c.document_id"""


def passage_text(row: Sequence[Any]) -> str:
    """The embedding text of a ``PASSAGES_SQL`` row."""
    return embedding_text(row[6], ChunkSpan(row[1], row[2], row[3], row[4], row[5], table=row[7]))


def embedding_text(title: str, chunk: ChunkSpan) -> str:
    """What is embedded (and hashed for this cache): the chunk with its document title and
    heading as context, and a table's rows under the table's caption and header."""
    context = " — ".join(part for part in (title, chunk.heading) if part)
    body = f"{chunk.table}\n{chunk.text}" if chunk.table else chunk.text
    return f"{context}\n{body}" if context else body


@dataclass(frozen=True)
class CacheUsage:
    rows: int
    bytes: int  # approximate: vectors, keys and per-row overhead
    spare_rows: int  # rows no live passage needs
    spare_bytes: int


@dataclass(frozen=True)
class PruneReport:
    evicted_rows: int
    evicted_bytes: int
    usage: CacheUsage  # after pruning
    seconds: float


class EmbeddingCache:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time):
        self.db = db
        self.clock = clock
        self.hits = 0
        self.misses = 0

    def embed(self, embedder: Embedder, texts: Sequence[str]) -> Vectors:
        """Vectors for ``texts`` in order; only texts not seen before reach the embedder."""
        keys = [text_key(text) for text in texts]
        found = self.lookup(keys, embedder.model_id, embedder.dimension)
        if found:
            self.touch(list(found), embedder.model_id)
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
        now = self.clock()
        with self.db.write() as db:
            db.conn.executemany(
                "INSERT INTO embedding_cache"
                " (text_sha256, model_id, vector, created_at, last_used) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (text_sha256, model_id) DO UPDATE SET vector = excluded.vector,"
                " created_at = excluded.created_at, last_used = excluded.last_used",
                (
                    (key, model_id, np.asarray(v, dtype=np.float32).tobytes(), now, now)
                    for key, v in vectors.items()
                ),
            )

    def touch(self, keys: Sequence[str], model_id: str) -> None:
        """Mark rows as just used: pruning evicts the least recently used first."""
        now = self.clock()
        with self.db.write() as db:
            db.conn.executemany(
                "UPDATE embedding_cache SET last_used = ? WHERE text_sha256 = ? AND model_id = ?",
                ((now, key, model_id) for key in keys),
            )

    # --- pruning ----------------------------------------------------------------------------
    def prune(self, max_spare_bytes: int, model_id: str) -> PruneReport:
        """Evict spare rows, least recently used first, until they fit ``max_spare_bytes``.

        ``model_id`` is the model in use now: its vectors of live passages are kept even
        where a passage has no stored vector yet (an ingestion a crash interrupted).
        """
        started = time.perf_counter()
        self.key_passages()
        spare = self._spare_rows(model_id)
        kept_bytes = 0
        evict: list[tuple[str, str]] = []
        evicted_bytes = 0
        for key, model, size in spare:  # most recently used first
            if not evict and kept_bytes + size <= max_spare_bytes:
                kept_bytes += size
            else:  # this one and every row used before it
                evict.append((key, model))
                evicted_bytes += size
        for start in range(0, len(evict), _DELETE_BATCH):
            with self.db.write() as db:
                db.conn.executemany(
                    "DELETE FROM embedding_cache WHERE text_sha256 = ? AND model_id = ?",
                    evict[start : start + _DELETE_BATCH],
                )
            time.sleep(_PAUSE_S)
        rows, size = self.size()
        usage = CacheUsage(rows, size, len(spare) - len(evict), kept_bytes)
        return PruneReport(len(evict), evicted_bytes, usage, time.perf_counter() - started)

    def size(self) -> tuple[int, int]:
        """Rows in the cache and their approximate size in bytes."""
        row = (
            self.db.read()
            .execute(f"SELECT COUNT(*), COALESCE(SUM({_ROW_BYTES}), 0) FROM embedding_cache")  # noqa: S608
            .fetchone()
        )
        return int(row[0]), int(row[1])

    def key_passages(self) -> int:
        """Record the cache key of each passage that has none yet; returns how many.

        Keys are dropped with their passage and on edits (m012 triggers), so this catches
        up with whatever changed since the last prune, reading only passages without one.
        """
        keyed = 0
        after = 0
        while True:
            rows = (
                self.db.read()
                .execute(
                    f"""{PASSAGES_SQL}
                       WHERE c.id > ? AND NOT EXISTS (
                           SELECT 1 FROM chunk_text_keys k WHERE k.chunk_id = c.id)
                       ORDER BY c.id LIMIT ?""",  # noqa: S608 - constant SQL only
                    [after, _KEY_BATCH],
                )
                .fetchall()
            )
            if not rows:
                return keyed
            keys = [(row[0], text_key(passage_text(row)), row[0]) for row in rows]
            with self.db.write() as db:  # a passage deleted meanwhile gets no key
                db.conn.executemany(
                    "INSERT INTO chunk_text_keys (chunk_id, text_sha256)"
                    " SELECT ?, ? WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?)"
                    " ON CONFLICT (chunk_id) DO UPDATE SET text_sha256 = excluded.text_sha256",
                    keys,
                )
            time.sleep(_PAUSE_S)
            keyed += len(rows)
            after = rows[-1][0]

    def _spare_rows(self, model_id: str) -> list[tuple[str, str, int]]:
        """(key, model, bytes) of every row no live passage needs, most recently used first."""
        return [
            (row[0], row[1], int(row[2]))
            for row in self.db.read().execute(
                f"""SELECT c.text_sha256, c.model_id, {_ROW_BYTES} FROM embedding_cache c
                    WHERE NOT EXISTS (
                        SELECT 1 FROM chunk_text_keys k WHERE k.text_sha256 = c.text_sha256
                        AND (c.model_id = ? OR EXISTS (
                            SELECT 1 FROM embeddings e
                            WHERE e.chunk_id = k.chunk_id AND e.model_id = c.model_id)))
                    ORDER BY c.last_used DESC, c.created_at DESC, c.text_sha256""",  # noqa: S608
                [model_id],
            )
        ]
