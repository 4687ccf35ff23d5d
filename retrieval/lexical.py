"""Lexical search: BM25 over the FTS5 index of passages (migration m006).

The question is untrusted text, so it never reaches FTS5's query syntax as is: it is cut
into words, each word becomes a quoted string (a quoted string is never an operator), and
the words are OR-ed so that BM25 ranks passages by how many rare words they share.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from retrieval.db import Database
from retrieval.types import DocumentStatus

# Letters and digits only: quotes, parentheses, ``*``, ``^``, ``:``, ``-`` and ``+`` can
# never reach the query.
_WORD = re.compile(r"[^\W_]+")
MAX_TERMS = 32  # bounds the work of one query whatever is pasted into the box

# Words that match nearly every passage add cost, not signal (BM25's IDF makes them
# weightless anyway). ``and``/``or``/``not`` are also FTS5 operators in capitals.
_STOPWORDS = """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves"""
STOPWORDS = frozenset(_STOPWORDS.split())


def fts_query(text: str) -> str | None:
    """An FTS5 MATCH expression for free text, or None when no word is left to search."""
    terms: list[str] = []
    for word in _WORD.findall(text):
        term = word.lower()
        if word == "NEAR" or term in STOPWORDS or term in terms:
            continue
        terms.append(term)
        if len(terms) == MAX_TERMS:
            break
    return " OR ".join(f'"{term}"' for term in terms) if terms else None


class LexicalIndex:
    def __init__(self, db: Database):
        self.db = db

    def search(
        self, query: str, k: int, *, collection_ids: Collection[int] | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``k`` (chunk id, BM25 score) pairs, best first; higher scores are better.

        Only passages of indexed documents count (others are still being embedded), and
        only those in ``collection_ids`` when it is given.
        """
        match = fts_query(query)
        if match is None or k <= 0 or (collection_ids is not None and not collection_ids):
            return []
        # Fast path: rank in FTS5 alone, then filter the few ranked ids. The filtered top k
        # of an over-fetched ranking is the top k of the filtered ranking, so the joined
        # query (which must join every matching row before it can rank) is only needed
        # when too many of the best passages are filtered out.
        fetch = 2 * k
        ranked = [
            (int(row[0]), -float(row[1]))
            for row in self.db.read().execute(
                "SELECT rowid, bm25(chunks_fts) AS rank FROM chunks_fts"
                " WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?",
                [match, fetch],
            )
        ]
        allowed = searchable_chunks(self.db, [c for c, _ in ranked], collection_ids)
        kept = [(chunk_id, score) for chunk_id, score in ranked if chunk_id in allowed]
        if len(kept) >= k or len(ranked) < fetch:
            return kept[:k]
        return self._search_joined(match, k, collection_ids)

    def _search_joined(
        self, match: str, k: int, collection_ids: Collection[int] | None
    ) -> list[tuple[int, float]]:
        params: list[object] = [match, DocumentStatus.INDEXED.value]
        in_collections = ""
        if collection_ids is not None:
            in_collections = f"AND d.collection_id IN ({','.join('?' * len(collection_ids))})"
            params += [int(c) for c in collection_ids]
        rows = self.db.read().execute(
            f"""SELECT f.rowid, bm25(chunks_fts) AS rank FROM chunks_fts f
                JOIN chunks c ON c.id = f.rowid JOIN documents d ON d.id = c.document_id
                WHERE chunks_fts MATCH ? AND d.status = ? {in_collections}
                ORDER BY rank LIMIT ?""",  # noqa: S608 - only placeholders are interpolated
            [*params, k],
        )
        # SQLite's bm25() is negative, more negative is better.
        return [(int(row[0]), -float(row[1])) for row in rows]


def searchable_chunks(
    db: Database, chunk_ids: Collection[int], collection_ids: Collection[int] | None
) -> set[int]:
    """Those of ``chunk_ids`` whose document is indexed (and in ``collection_ids``)."""
    if not chunk_ids:
        return set()
    params: list[object] = [DocumentStatus.INDEXED.value, *(int(c) for c in chunk_ids)]
    in_collections = ""
    if collection_ids is not None:
        in_collections = f"AND d.collection_id IN ({','.join('?' * len(collection_ids))})"
        params += [int(c) for c in collection_ids]
    rows = db.read().execute(
        # CROSS JOIN keeps SQLite from starting at the documents' status index: the few
        # chunks named here are the place to start.
        f"""SELECT c.id FROM chunks c CROSS JOIN documents d ON d.id = c.document_id
            WHERE d.status = ? AND c.id IN ({",".join("?" * len(chunk_ids))})
            {in_collections}""",  # noqa: S608 - only placeholders are interpolated
        params,
    )
    return {int(row[0]) for row in rows}
