"""Neighbouring-chunk expansion: a short hit is widened over the chunks beside it.

A chunk can be a lone heading, a table row or the tail of a section: too little for the
model to answer from. A hit whose text is shorter than ``min_chars`` is widened over the
previous and next chunk *of the same page*, alternately (next first), one chunk per side
at most, until it is long enough. The hit keeps its ``chunk_id`` and score; ``start`` and
``end`` become the union of the joined chunks and ``text`` is exactly
``page_text[start:end]``, so a citation still points at real text of the cited page (the
viewer highlights the widened passage). Chunks never join across pages, which keeps the
page of a citation exact. A later hit whose chunk now lies inside an earlier widened hit
is dropped as a duplicate.
"""

from __future__ import annotations

from dataclasses import replace

from retrieval.store import DocumentStore
from retrieval.types import Hit


def expand_short_hits(store: DocumentStore, hits: list[Hit], min_chars: int) -> list[Hit]:
    """``hits`` with each one shorter than ``min_chars`` widened (0 = unchanged)."""
    if min_chars <= 0 or all(len(h.text) >= min_chars for h in hits):
        return hits
    out: list[Hit] = []
    covered: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for hit in hits:
        spans = covered.setdefault((hit.document_id, hit.page), [])
        if any(start <= hit.start and hit.end <= end for start, end in spans):
            continue  # already inside a widened hit shown above
        if len(hit.text) < min_chars:
            hit = _widen(store, hit, min_chars)
        spans.append((hit.start, hit.end))
        out.append(hit)
    return out


def _widen(store: DocumentStore, hit: Hit, min_chars: int) -> Hit:
    rows = list(
        store.db.read().query(
            'SELECT id, start, "end" FROM chunks WHERE document_id = ? AND page = ? '
            "ORDER BY start, id",
            [hit.document_id, hit.page],
        )
    )
    ids = [row["id"] for row in rows]
    page = store.page_text(hit.document_id, hit.page)
    if hit.chunk_id not in ids or page is None:
        return hit
    at = ids.index(hit.chunk_id)
    start, end = hit.start, hit.end
    for neighbour in (at + 1, at - 1):
        if end - start >= min_chars:
            break
        if 0 <= neighbour < len(rows):
            start = min(start, rows[neighbour]["start"])
            end = max(end, rows[neighbour]["end"])
    if (start, end) == (hit.start, hit.end):
        return hit
    return replace(hit, start=start, end=end, text=page[start:end])
