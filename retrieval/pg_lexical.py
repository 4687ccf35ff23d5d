"""Lexical search on PostgreSQL: BM25 as FTS5 scores it, over an inverted index in tables.

PostgreSQL has no FTS5, and its own ``ts_rank`` is not BM25. So each passage's terms —
its document's title, its heading and its text, the fields FTS5 indexes, cut into terms
the way FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer does (``ragdesk_tokens``
and ``ragdesk_term``, retrieval/pg_schema.py: split at whatever is not a letter or a
digit, lowercased, Latin accents removed, every token kept, stopwords too, Porter's
stemmer) — are kept in ``chunk_terms`` with their counts, and its length in tokens in
``chunk_lengths``, by triggers on ``chunks`` and ``documents`` (``m002``). A query scores
exactly what FTS5's ``bm25()`` computes::

    idf(t)   = ln((N - n(t) + 0.5) / (n(t) + 0.5)), or 1e-6 when that is not positive
    score(p) = Σ idf(t) · tf(t, p) · (k1 + 1) / (tf(t, p) + k1 · (1 - b + b · |p| / avg|p|))

with k1 = 1.2 and b = 0.75, N and avg|p| over every passage (as FTS5 counts its rows),
only passages of indexed documents ranked, and the collection filter applied before the
top k. The question's terms are the very words the SQLite store sends FTS5
(``retrieval.lexical.fts_query``: its words, lowercased, stopwords and repeats left out,
32 at most), each folded and stemmed in SQL as passages are. The sum runs over those
words, as FTS5's runs over the phrases of its query: two words with one stem ("runs
running") count that stem twice there, and so here. No query syntax is ever read from
the question.

Where the terms can still differ from FTS5's (Indic scripts, a database in the C locale,
a few stems) is told in retrieval/pg_schema.py; on bench.store_quality's corpora BM25
ranks every question's passages as FTS5 does.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import TYPE_CHECKING, cast

from retrieval.db import Database
from retrieval.lexical import fts_query
from retrieval.types import DocumentStatus

if TYPE_CHECKING:
    from retrieval.pg import PostgresDatabase

K1 = 1.2
B = 0.75
IDF_FLOOR = 1e-6  # FTS5's idf for a term in half the passages or more

# The query's words are folded and stemmed by the same SQL functions as the passages'
# (``_TERMS``; a front remembers each word's term), and sent as terms: with constants to
# look up, the planner reads each term's postings through the primary key rather than
# every passage's terms. N and the total length come from ``chunk_terms_stats``, rows
# its triggers keep level (m003), not a scan of ``chunk_lengths``.
_TERMS = "SELECT word, ragdesk_term(ragdesk_fold(word)) FROM unnest(%(words)s::text[]) AS word"

_SEARCH = """
WITH query AS (
    SELECT term, COUNT(*) AS words FROM unnest(%(terms)s::text[]) AS term GROUP BY term
),
postings AS MATERIALIZED (
    SELECT term, chunk_id, tf FROM chunk_terms WHERE term = ANY(%(terms)s::text[])
),
stats AS (
    SELECT SUM(passages)::float8 AS n, SUM(total)::float8 AS total FROM chunk_terms_stats
),
weights AS (
    SELECT q.term, q.words, ln((s.n - COUNT(*) + 0.5) / (COUNT(*) + 0.5)) AS idf
    FROM query q JOIN postings p ON p.term = q.term CROSS JOIN stats s
    GROUP BY q.term, q.words, s.n
)
SELECT p.chunk_id,
       SUM(
           w.words * CASE WHEN w.idf <= 0 THEN %(floor)s ELSE w.idf END
           * p.tf * (%(k1)s + 1)
           / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * l.length / (s.total / s.n)))
       ) AS score
FROM weights w
JOIN postings p ON p.term = w.term
JOIN chunk_lengths l ON l.chunk_id = p.chunk_id
JOIN chunks c ON c.id = p.chunk_id
JOIN documents d ON d.id = c.document_id
CROSS JOIN stats s
WHERE d.status = %(status)s {collections}
GROUP BY p.chunk_id
ORDER BY score DESC, p.chunk_id
LIMIT %(k)s
"""

# Words whose terms a front remembers: a stem never changes while the schema stands. Only
# words of ordinary length are kept (a question may hold a word of any length).
TERM_CACHE = 20_000
CACHED_WORD_CHARS = 64


def query_words(text: str) -> list[str]:
    """The words of ``text`` that the SQLite store's query OR-s together (``fts_query``'s,
    each a quoted run of letters and digits), in order."""
    match = fts_query(text)
    return [] if match is None else [word.strip('"') for word in match.split(" OR ")]


class PgLexicalIndex:
    """LexicalIndex's contract (retrieval/lexical.py) on the PostgreSQL store."""

    def __init__(self, db: Database):
        if db.dialect != "postgresql":
            raise ValueError("PgLexicalIndex needs the PostgreSQL store")
        self.db = cast("PostgresDatabase", db)
        self._terms: dict[str, str | None] = {}
        self._terms_lock = threading.Lock()

    def terms(self, words: list[str]) -> list[str]:
        """Each of ``words`` folded and stemmed as the passages' terms are, in order: by
        the database's own functions, once per word a front meets."""
        with self._terms_lock:
            known = {word: self._terms[word] for word in words if word in self._terms}
        missing = sorted(set(words) - known.keys())
        keep = {word for word in missing if len(word) <= CACHED_WORD_CHARS}
        if missing:
            with self.db.connection() as conn:
                rows = conn.execute(_TERMS, {"words": missing}).fetchall()
            fresh = {str(word): None if term is None else str(term) for word, term in rows}
            known.update(fresh)
            with self._terms_lock:
                if len(self._terms) + len(fresh) > TERM_CACHE:
                    self._terms.clear()
                self._terms.update((word, term) for word, term in fresh.items() if word in keep)
        return [term for term in (known.get(word) for word in words) if term]

    def search(
        self, query: str, k: int, *, collection_ids: Collection[int] | None = None
    ) -> list[tuple[int, float]]:
        """Up to ``k`` (chunk id, BM25 score) pairs, best first; higher scores are better.

        Only passages of indexed documents count, and only those in ``collection_ids``
        when it is given."""
        words = query_words(query)
        if k <= 0 or not words or (collection_ids is not None and not collection_ids):
            return []
        params: dict[str, object] = {
            "terms": self.terms(words),
            "floor": IDF_FLOOR,
            "k1": K1,
            "b": B,
            "status": DocumentStatus.INDEXED.value,
            "k": k,
        }
        collections = ""
        if collection_ids is not None:
            collections = "AND d.collection_id = ANY(%(collections)s)"
            params["collections"] = sorted({int(c) for c in collection_ids})
        with self.db.connection() as conn:
            rows = conn.execute(_SEARCH.format(collections=collections), params).fetchall()
        return [(int(row[0]), float(row[1])) for row in rows]
