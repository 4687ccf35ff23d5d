"""Question in, ranked passages out: dense (FAISS), lexical (BM25) or both fused."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

import numpy as np

from retrieval.embedder import Embedder, Vectors, embed_one
from retrieval.fusion import diversify, mmr, reciprocal_rank_fusion
from retrieval.index import ScopedVectorIndex, VectorIndex
from retrieval.lexical import LexicalIndex, searchable_chunks
from retrieval.neighbours import expand_short_hits
from retrieval.pg_lexical import PgLexicalIndex
from retrieval.rerank import Reranker
from retrieval.store import DocumentStore
from retrieval.types import Hit

SearchMode = Literal["dense", "bm25", "hybrid"]


@dataclass(frozen=True)
class SearchConfig:
    mode: SearchMode = "hybrid"
    rrf_k: float = 60.0
    dense_weight: float = 1.0
    bm25_weight: float = 1.0
    max_per_document: int = 0  # 0 = no limit
    mmr_lambda: float = 1.0  # maximal marginal relevance: 1 = the ranking as it is
    candidates: int = 50  # taken from each retriever before fusion (at least 4 × k)
    expand_below_chars: int = 0  # widen hits shorter than this over their neighbours; 0 = off
    rerank_candidates: int = 20  # fused hits a reranker (when given) reorders


@dataclass(frozen=True)
class SearchTimings:
    embed_s: float
    search_s: float  # the vector index
    hydrate_s: float
    lexical_s: float = 0.0  # the FTS5 index


@dataclass(frozen=True)
class SearchResult:
    hits: list[Hit]
    timings: SearchTimings


class Retriever:
    """``min_score`` is a cosine threshold in every mode that embeds the question: in
    hybrid mode a passage found only by BM25 is still cited only if its own vector clears
    it, so an off-topic question gets no sources (and no model call) however many common
    words it shares with the documents. Fusion decides the order, not the relevance bar.
    In ``bm25`` mode there is no cosine and ``min_score`` does not apply."""

    def __init__(
        self,
        embedder: Embedder,
        index: VectorIndex,
        store: DocumentStore,
        config: SearchConfig | None = None,
        reranker: Reranker | None = None,
    ):
        self.reranker = reranker
        self.embedder = embedder
        self.index = index
        self.store = store
        self.config = config or SearchConfig()
        self.lexical: LexicalIndex | PgLexicalIndex = (
            PgLexicalIndex(store.db) if store.db.dialect == "postgresql" else LexicalIndex(store.db)
        )

    def search(
        self,
        query: str,
        k: int,
        *,
        min_score: float | None = None,
        collection_ids: Collection[int] | None = None,
    ) -> SearchResult:
        """The best ``k`` passages, from the given collections only when ``collection_ids``
        is not None (the filter applies inside both retrievers, before the top k)."""
        config = self.config
        pool = max(config.candidates, 4 * k)
        t0 = time.perf_counter()
        vector = embed_one(self.embedder, query) if config.mode != "bm25" else None
        t1 = time.perf_counter()
        dense: list[tuple[int, float]] = []
        if vector is not None:
            dense = self._dense(vector, pool, collection_ids)
        t2 = time.perf_counter()
        lexical: list[tuple[int, float]] = []
        if config.mode != "dense":
            lexical = self.lexical.search(query, pool, collection_ids=collection_ids)
        t3 = time.perf_counter()
        if config.mode == "dense":
            ranked = dense
        elif config.mode == "bm25":
            ranked = lexical
        else:
            ranked = reciprocal_rank_fusion(
                [(dense, config.dense_weight), (lexical, config.bm25_weight)], config.rrf_k
            )
        if vector is not None and min_score is not None:
            cosines = self._cosines(vector, dense, lexical)
            ranked = [(i, s) for i, s in ranked if cosines.get(i, -np.inf) >= min_score]
        if self.reranker is not None:
            depth = max(config.rerank_candidates, k)
            candidates = self.reranker.rerank(query, self.store.hits(ranked[:depth]))
            hits = self._spread(diversify(candidates, self._pool(k), config.max_per_document), k)
        else:
            hits = self._hydrate(ranked, k)
        hits = expand_short_hits(self.store, hits, config.expand_below_chars)
        t4 = time.perf_counter()
        return SearchResult(hits, SearchTimings(t1 - t0, t2 - t1, t4 - t3, t3 - t2))

    def _dense(
        self, vector: Vectors, pool: int, collection_ids: Collection[int] | None
    ) -> list[tuple[int, float]]:
        """Nearest ``pool`` vectors, from ``collection_ids`` only when given.

        A scoped search first over-fetches unfiltered and filters the few ids it got;
        only when too many of them lie outside the collections (a user who may read a
        small part of the library) does it list every allowed chunk for an id selector
        inside FAISS, which costs a scan of the chunks table. An index that filters in
        its own query (pgvector) is asked directly.
        """
        if isinstance(self.index, ScopedVectorIndex):
            return self.index.search_scoped(vector, pool, collection_ids)
        if collection_ids is None:
            return self.index.search(vector, pool)
        if not collection_ids:
            return []
        fetch = 2 * pool
        nearest = self.index.search(vector, fetch)
        allowed = searchable_chunks(self.store.db, [c for c, _ in nearest], collection_ids)
        kept = [(chunk_id, score) for chunk_id, score in nearest if chunk_id in allowed]
        if len(kept) >= pool or len(nearest) < fetch:
            return kept[:pool]
        return self.index.search(vector, pool, allowed=self.store.chunk_ids_in(collection_ids))

    def _hydrate(self, ranked: list[tuple[int, float]], k: int) -> list[Hit]:
        """The top ``k`` hits after the per-document cap and MMR, reading rows from SQLite
        a page at a time: most questions need the first page only, not every candidate."""
        page = max(4 * k, 16)
        pool = self._pool(k)
        hits: list[Hit] = []
        chosen: list[Hit] = []
        for start in range(0, len(ranked), page):
            hits += self.store.hits(ranked[start : start + page])
            chosen = diversify(hits, pool, self.config.max_per_document)
            if len(chosen) == pool:
                break
        return self._spread(chosen, k)

    def _pool(self, k: int) -> int:
        """Candidates MMR chooses ``k`` from (just ``k`` when it is off)."""
        return k if self.config.mmr_lambda >= 1.0 else 3 * k

    def _spread(self, hits: list[Hit], k: int) -> list[Hit]:
        """``k`` of ``hits`` by maximal marginal relevance over their stored vectors."""
        if self.config.mmr_lambda >= 1.0 or len(hits) <= 1:
            return hits[:k]
        ids = [hit.chunk_id for hit in hits]
        vectors = self.store.vectors_by_id(ids, self.embedder.model_id)
        return mmr(hits, vectors, k, self.config.mmr_lambda)

    def _cosines(
        self,
        vector: Vectors,
        dense: list[tuple[int, float]],
        lexical: list[tuple[int, float]],
    ) -> dict[int, float]:
        """Cosine of every candidate: FAISS gave the dense ones, stored vectors the rest."""
        cosines = dict(dense)
        missing = [chunk_id for chunk_id, _ in lexical if chunk_id not in cosines]
        if missing:
            stored = self.store.vectors_by_id(missing, self.embedder.model_id)
            query = np.asarray(vector, dtype=np.float32).reshape(-1)
            cosines.update({i: float(np.dot(query, v)) for i, v in stored.items()})
        return cosines
