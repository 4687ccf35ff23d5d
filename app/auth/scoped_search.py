"""Search that can only return passages the current request's principal may read."""

from __future__ import annotations

from collections.abc import Collection

from app.auth.scope import readable_now
from retrieval.search import Retriever, SearchResult, SearchTimings


class ScopedRetriever(Retriever):
    """A ``Retriever`` whose every search (chat, /api/search, anything later) is limited to
    the collections the request may read: the ids go into FAISS and FTS5, before the top k.
    Outside a request it searches what it is asked to, like a plain ``Retriever``."""

    def search(
        self,
        query: str,
        k: int,
        *,
        min_score: float | None = None,
        collection_ids: Collection[int] | None = None,
    ) -> SearchResult:
        allowed = readable_now(collection_ids)
        if allowed is not None and not allowed:  # may read nothing: nothing to search
            return SearchResult([], SearchTimings(0.0, 0.0, 0.0))
        return super().search(query, k, min_score=min_score, collection_ids=allowed)
