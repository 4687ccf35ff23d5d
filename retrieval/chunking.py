"""Structure-aware, token-bounded chunking with overlap.

A chunk never crosses a page, a heading starts a new chunk, paragraphs are packed
whole while they fit, and a paragraph too long for one chunk is split at sentences
(then words). Every chunk is an exact slice of its page text, so citations can point
at character offsets.

A table's rows (blocks with a ``table`` context, ``retrieval/parsers/tables.py``) are
passages of their own: a chunk holds rows of one table only, never prose beside them,
carries the table's caption and header as its ``table``, and leaves room for that header
in its token bound (it is embedded and shown with every passage of the table). A table's
passages do not overlap: a row is never cut, so it reads whole on its side of a cut, and
repeating rows would only embed them twice (a spreadsheet is mostly rows).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from retrieval.types import PAGE_BLOCK_SEPARATOR, ChunkSpan, ParsedPage

TokenCounter = Callable[[Sequence[str]], list[int]]
"""Token counts of several texts at once (batched: real tokenizers are faster that way)."""

_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    tokens: int
    is_heading: bool
    table: str | None = None


def chunk_page(
    page: ParsedPage,
    *,
    max_tokens: int,
    overlap_tokens: int,
    count_tokens: TokenCounter,
) -> list[ChunkSpan]:
    text = page.text
    bounds = _bounds(page, max_tokens, count_tokens)
    units = _units(page, text, bounds, count_tokens)
    return _pack(units, text, page.number, bounds, min(overlap_tokens, max_tokens // 2))


class _Bounds:
    """Tokens a passage may hold: ``max_tokens`` for prose, less for a table's rows,
    whose header is embedded and shown with every passage of the table (at least half)."""

    def __init__(self, max_tokens: int, header_tokens: dict[str, int]):
        self.max_tokens = max_tokens
        self._rows = {
            table: max(max_tokens // 2, max_tokens - tokens)
            for table, tokens in header_tokens.items()
        }

    def of(self, table: str | None) -> int:
        return self.max_tokens if table is None else self._rows[table]


def _bounds(page: ParsedPage, max_tokens: int, count_tokens: TokenCounter) -> _Bounds:
    tables = sorted({block.table for block in page.blocks if block.table})
    counts = count_tokens(tables) if tables else []
    return _Bounds(max_tokens, dict(zip(tables, counts, strict=True)))


def _units(page: ParsedPage, text: str, bounds: _Bounds, count_tokens: TokenCounter) -> list[_Unit]:
    spans: list[tuple[int, int]] = []
    offset = 0
    for block in page.blocks:
        spans.append((offset, offset + len(block.text)))
        offset += len(block.text) + len(PAGE_BLOCK_SEPARATOR)
    counts = count_tokens([text[start:end] for start, end in spans])
    units: list[_Unit] = []
    for block, (start, end), tokens in zip(page.blocks, spans, counts, strict=True):
        if block.table and block.is_heading:
            continue  # a table's header row: every passage of the table carries it
        unit = _Unit(start, end, tokens, block.is_heading, block.table)
        bound = bounds.of(block.table)
        units.extend([unit] if tokens <= bound else _split(unit, text, bound, count_tokens))
    return units


def _split(unit: _Unit, text: str, max_tokens: int, count_tokens: TokenCounter) -> list[_Unit]:
    """Split an oversize block at sentence ends, and oversize sentences into word windows."""
    pieces = _pieces(_SENTENCE_END, text, unit.start, unit.end, as_separators=True)
    counts = count_tokens([text[start:end] for start, end in pieces])
    result: list[_Unit] = []
    for (start, end), tokens in zip(pieces, counts, strict=True):
        if tokens <= max_tokens:
            result.append(_Unit(start, end, tokens, unit.is_heading, unit.table))
            continue
        words = _pieces(_WORD, text, start, end, as_separators=False)
        per_word = tokens / max(len(words), 1)
        window = max(1, int(max_tokens / per_word))
        for i in range(0, len(words), window):
            group = words[i : i + window]
            estimate = max(1, round(per_word * len(group)))
            result.append(_Unit(group[0][0], group[-1][1], estimate, unit.is_heading, unit.table))
    return result


def _pieces(
    pattern: re.Pattern[str], text: str, start: int, end: int, *, as_separators: bool
) -> list[tuple[int, int]]:
    if not as_separators:
        return [(m.start(), m.end()) for m in pattern.finditer(text, start, end)]
    pieces, cursor = [], start
    for match in pattern.finditer(text, start, end):
        if match.start() > cursor:
            pieces.append((cursor, match.start()))
        cursor = match.end()
    if cursor < end:
        pieces.append((cursor, end))
    return pieces


def _pack(
    units: list[_Unit], text: str, page: int, bounds: _Bounds, overlap: int
) -> list[ChunkSpan]:
    chunks: list[ChunkSpan] = []
    current: list[_Unit] = []
    heading: str | None = None
    chunk_heading: str | None = None

    def emit() -> None:
        chunks.append(
            ChunkSpan(
                page=page,
                start=current[0].start,
                end=current[-1].end,
                text=text[current[0].start : current[-1].end],
                heading=chunk_heading,
                table=current[-1].table,
            )
        )

    for unit in units:
        has_body = any(not u.is_heading for u in current)
        if current and unit.table != current[-1].table:  # a table starts or ends
            if has_body:
                emit()
            # A heading just before a table is its caption already: it stays out of it.
            current = []
        elif unit.is_heading and has_body:
            emit()
            current = []
        elif current and sum(u.tokens for u in current) + unit.tokens > bounds.of(unit.table):
            if has_body:
                emit()
            # A row is whole in every passage, so a table's passages need no overlap.
            tail = overlap if unit.table is None else 0
            current = _overlap_tail(current, tail, bounds.of(unit.table) - unit.tokens)
        if unit.is_heading:
            heading = text[unit.start : unit.end]
        if not current:
            chunk_heading = heading
        current.append(unit)
    if current:
        emit()
    return chunks


def _overlap_tail(units: list[_Unit], overlap: int, room: int) -> list[_Unit]:
    """The trailing units of the previous chunk that fit in the overlap budget."""
    tail: list[_Unit] = []
    total = 0
    for unit in reversed(units):
        if unit.is_heading or total + unit.tokens > min(overlap, room):
            break
        tail.insert(0, unit)
        total += unit.tokens
    return tail
