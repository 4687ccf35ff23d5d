"""Dense search on PostgreSQL: pgvector over the ``embeddings`` rows themselves.

What FAISS is on SQLite (retrieval/index.py), these rows are here: the store writes them
in the transaction that marks a document indexed, so every front sees the same vectors
and there is nothing to add, remove, checkpoint or rebuild. Each model gets a partial
HNSW index over its rows, cast to its dimension (the column has none of its own), made
once when the model is first met. Vectors are unit length, so inner product is cosine;
pgvector's ``<#>`` is the *negative* inner product.

A search filtered by collection applies the filter inside the SQL, before the top k: the
HNSW scan with a raised ``hnsw.ef_search`` first, and when the filter leaves fewer than k
of its candidates (a user who may read only a small collection while the nearest vectors
all lie in others), an exact scan of what the filter lets through, so nobody gets fewer
passages than exist, nor one from a collection they may not read.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from retrieval.embedder import Vectors
from retrieval.index import Hits, IdArray
from retrieval.store import DocumentStore
from retrieval.types import DocumentStatus

if TYPE_CHECKING:
    import psycopg

    from retrieval.pg import PostgresDatabase

log = logging.getLogger(__name__)

HNSW_MAX_DIMENSION = 2000  # pgvector's HNSW indexes vectors up to this many dimensions
MAX_EF_SEARCH = 1000  # the highest hnsw.ef_search pgvector accepts
INDEX_RETRY_S = 600.0  # a build that failed (or another front's, unfinished) is tried again


def sql_literal(text: str) -> str:
    """``text`` as a PostgreSQL string literal, whatever ``standard_conforming_strings``
    says (an escape string: backslashes and quotes doubled)."""
    return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def hnsw_index_name(model_id: str, dimension: int) -> str:
    short = hashlib.sha256(model_id.encode()).hexdigest()[:12]
    return f"embeddings_hnsw_{short}_{dimension}"


class PgVectorIndex:
    """The vector index of one model when the store is PostgreSQL (FaissIndex's place)."""

    kind = "pgvector-hnsw"
    mapped = False
    damaged = False

    def __init__(self, db: PostgresDatabase, model_id: str, dimension: int):
        self.db = db
        self.model_id = model_id
        self.dimension = dimension
        self.index_name = hnsw_index_name(model_id, dimension)
        self._model = sql_literal(model_id)
        self._index_due = 0.0  # when to make sure of the HNSW index next (monotonic)
        self._building = threading.Lock()

    # --- what the ingest worker and the metrics call: the rows are the index -------------

    @property
    def count(self) -> int:
        row = self.db.read().execute(
            "SELECT COUNT(*) FROM embeddings WHERE model_id = ?", [self.model_id]
        )
        return int(row.fetchone()[0])

    def ids(self) -> IdArray:
        rows = self.db.read().execute(
            "SELECT chunk_id FROM embeddings WHERE model_id = ? ORDER BY chunk_id", [self.model_id]
        )
        return np.fromiter((int(row[0]) for row in rows), dtype=np.int64)

    def add(self, ids: IdArray, vectors: Vectors) -> None:
        """Nothing to do: the store wrote these vectors as embeddings rows."""

    def remove(self, ids: IdArray) -> int:
        """Nothing to do: deleting a passage deletes its row; nothing is held here."""
        return 0

    def save(self, directory: Path) -> None:
        """Nothing to checkpoint: PostgreSQL keeps the vectors and their index."""

    # --- the HNSW index ---------------------------------------------------------------------

    def ensure_index(self) -> bool:
        """Make this model's HNSW index unless it exists (built concurrently, so writes go
        on meanwhile; one left invalid by an interrupted build is made again). True when
        a usable index is there; without it searches scan exactly, which is only slower."""
        if not self._building.acquire(blocking=False):
            return False  # this process is at it already (searches scan exactly meanwhile)
        try:
            return self._ensure_index()
        finally:
            self._building.release()

    def _ensure_index(self) -> bool:
        self._index_due = math.inf
        if self.dimension > HNSW_MAX_DIMENSION:
            log.warning("%dd vectors are beyond HNSW: searches scan exactly", self.dimension)
            return False
        from retrieval.pg_bounds import patient  # psycopg: this module loads without it

        made = False
        try:
            # autocommit: CONCURRENTLY needs no transaction; the server is silent until the
            # build ends, which may take minutes: no bound on its silence either
            with self.db.connection() as conn, patient(conn):
                conn.execute("SET statement_timeout = 0")  # a large build takes minutes
                conn.execute("SET lock_timeout = 0")
                try:
                    made = self._build(conn)
                finally:
                    conn.execute("RESET statement_timeout")
                    conn.execute("RESET lock_timeout")
        except Exception:  # another front building it at the same time, a server hiccup
            log.exception("could not make the vector index %s", self.index_name)
        if not made:
            self._index_due = time.monotonic() + INDEX_RETRY_S
        return made

    def _build(self, conn: psycopg.Connection[Any]) -> bool:
        state = self._index_state(conn)
        if state == "valid":
            return True
        if state == "invalid":
            if self._being_built(conn):
                return False  # another front's build: searches scan exactly until it ends
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {self.index_name}")
        log.info("building the HNSW vector index %s for %s", self.index_name, self.model_id)
        conn.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {self.index_name} ON embeddings"
            f" USING hnsw ((vector::vector({self.dimension})) vector_ip_ops)"
            f" WHERE model_id = {self._model}"
        )
        return self._index_state(conn) == "valid"

    def _index_state(self, conn: psycopg.Connection[Any]) -> str | None:
        row = conn.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relname = %s AND c.relnamespace = current_schema()::regnamespace",
            [self.index_name],
        ).fetchone()
        return None if row is None else ("valid" if row[0] else "invalid")

    def _being_built(self, conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute(
            "SELECT 1 FROM pg_stat_progress_create_index p JOIN pg_class c"
            " ON c.oid = p.index_relid WHERE c.relname = %s",
            [self.index_name],
        ).fetchone()
        return row is not None

    # --- search -----------------------------------------------------------------------------

    def search(self, query: Vectors, k: int, *, allowed: IdArray | None = None) -> Hits:
        """The ``k`` nearest passages of indexed documents, best first, as (chunk id,
        cosine); only ids in ``allowed`` when it is given (FaissIndex's contract)."""
        if allowed is None:
            return self.search_scoped(query, k, None)
        if k <= 0 or len(allowed) == 0:
            return []
        ids = [int(i) for i in np.asarray(allowed, dtype=np.int64)]
        return self._nearest(query, k, "AND e.chunk_id = ANY(%s)", [ids], approximate=False)

    def search_scoped(self, query: Vectors, k: int, collection_ids: Collection[int] | None) -> Hits:
        """The ``k`` nearest passages of indexed documents in ``collection_ids`` (every
        collection when None), the filter applied before the top k."""
        if k <= 0 or (collection_ids is not None and not collection_ids):
            return []
        if collection_ids is None:
            return self._nearest(query, k, "", [], approximate=True)
        ids = sorted({int(c) for c in collection_ids})
        return self._nearest(query, k, "AND d.collection_id = ANY(%s)", [ids], approximate=True)

    def _nearest(
        self, query: Vectors, k: int, where: str, params: list[Any], *, approximate: bool
    ) -> Hits:
        vector = self.db.vector_param(query)
        if vector.shape != (self.dimension,):
            raise ValueError(f"expected a {self.dimension}d query, got {vector.shape}")
        if approximate and time.monotonic() >= self._index_due:
            self.ensure_index()
        args = [vector, DocumentStatus.INDEXED.value, *params, k]
        rows: list[Any] = []
        with self.db.read_transaction() as conn:
            # Planned for this k and these collections every time: a generic plan of a
            # statement psycopg has prepared may not take the index.
            conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            if approximate:
                ef_search = min(MAX_EF_SEARCH, max(100, 4 * k))
                conn.execute(f"SET LOCAL hnsw.ef_search = {ef_search}")
                rows = conn.execute(self.statement(where, approximate=True), args).fetchall()
            if len(rows) < k:
                # The filter left fewer than k of HNSW's candidates, or there is no index
                # to ask: an exact scan of what the filter lets through.
                rows = conn.execute(self.statement(where, approximate=False), args).fetchall()
        ranked = sorted(((int(r[0]), -float(r[1])) for r in rows), key=lambda hit: -hit[1])
        return ranked[:k]

    def statement(self, where: str = "", *, approximate: bool) -> str:
        """The nearest-passages query: parameters the query vector, the indexed status,
        those of ``where``, then k. Approximate, it orders by the HNSW index's expression
        (the vector cast to the dimension); exact, by one no index holds."""
        typed = f"vector({self.dimension})"
        distance = f"(e.vector::{typed}) <#> %s::{typed}" if approximate else "e.vector <#> %s"
        # The model as a literal, not a parameter, so the planner can match the partial
        # index's predicate in every plan; ``%`` doubled, psycopg reads it as a placeholder.
        model = self._model.replace("%", "%%")
        return (
            f"SELECT e.chunk_id, {distance} AS distance FROM embeddings e"  # noqa: S608
            " JOIN chunks c ON c.id = e.chunk_id JOIN documents d ON d.id = c.document_id"
            f" WHERE e.model_id = {model} AND d.status = %s {where}"
            f" ORDER BY distance{'' if approximate else ', e.chunk_id'} LIMIT %s"
        )


def open_pg_vector_index(store: DocumentStore, model_id: str, dimension: int) -> PgVectorIndex:
    """The vector index for ``model_id`` on a PostgreSQL store, its HNSW index made now
    (once per model; minutes for a large library, which meanwhile is searched exactly)."""
    if store.db.dialect != "postgresql":
        raise ValueError("a pgvector index needs the PostgreSQL store")
    index = PgVectorIndex(cast("PostgresDatabase", store.db), model_id, dimension)
    index.ensure_index()
    return index
