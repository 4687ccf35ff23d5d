"""Question in, ranked passages out."""

from __future__ import annotations

import time
from dataclasses import dataclass

from retrieval.embedder import Embedder, embed_one
from retrieval.index import VectorIndex
from retrieval.store import DocumentStore
from retrieval.types import Hit

# Ask FAISS for a few more than k: hits of documents deleted since are dropped.
_OVERFETCH = 2


@dataclass(frozen=True)
class SearchTimings:
    embed_s: float
    search_s: float
    hydrate_s: float


@dataclass(frozen=True)
class SearchResult:
    hits: list[Hit]
    timings: SearchTimings


class Retriever:
    def __init__(self, embedder: Embedder, index: VectorIndex, store: DocumentStore):
        self.embedder = embedder
        self.index = index
        self.store = store

    def search(self, query: str, k: int, *, min_score: float | None = None) -> SearchResult:
        t0 = time.perf_counter()
        vector = embed_one(self.embedder, query)
        t1 = time.perf_counter()
        scored = self.index.search(vector, k * _OVERFETCH)
        if min_score is not None:
            scored = [(chunk_id, score) for chunk_id, score in scored if score >= min_score]
        t2 = time.perf_counter()
        hits = self.store.hits(scored)[:k]
        t3 = time.perf_counter()
        return SearchResult(hits, SearchTimings(t1 - t0, t2 - t1, t3 - t2))
